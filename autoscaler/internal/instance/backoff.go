package instance

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Default failure backoff.
const (
	// DefaultBackoffInitial is the delay after a node type's first failure.
	DefaultBackoffInitial = 10 * time.Second
	// DefaultBackoffMax caps the delay.
	DefaultBackoffMax = 5 * time.Minute
	// backoffMultiplier is how much each further failure multiplies it.
	backoffMultiplier = 2
)

// Backoff holds launches of node types whose instances keep failing
// (AllocationFailed, InstallFailed): after a failure the type may not
// launch for a delay that doubles with each consecutive failure, from
// Initial up to Max, and resets when one of its instances succeeds
// (joins the cluster). Failures reported while the type is already backing
// off belong to the attempt that started it (several instances of one
// launch failing together) and do not lengthen the delay. The delays are
// exact (no jitter): one autoscaler per cluster retries, so there is no
// herd to spread. The zero Backoff is not usable; call NewBackoff.
type Backoff struct {
	initial, max time.Duration
	types        map[string]*typeBackoff
}

// typeBackoff is one node type's failures.
type typeBackoff struct {
	b        *backoff.ExponentialBackOff
	failures int
	until    time.Time
}

// NewBackoff returns a Backoff whose delay starts at initial and is capped
// at maxDelay (0 or less: the defaults).
func NewBackoff(initial, maxDelay time.Duration) *Backoff {
	if initial <= 0 {
		initial = DefaultBackoffInitial
	}
	if maxDelay <= 0 {
		maxDelay = DefaultBackoffMax
	}
	return &Backoff{initial: initial, max: max(maxDelay, initial), types: map[string]*typeBackoff{}}
}

// Allow reports whether nodeType may launch at now.
func (b *Backoff) Allow(nodeType string, now time.Time) bool {
	t, ok := b.types[nodeType]
	return !ok || !now.Before(t.until)
}

// Failed records a failure of an instance of nodeType at now: unless the
// type is already backing off, it may not launch again before now plus
// the next delay.
func (b *Backoff) Failed(nodeType string, now time.Time) {
	t, ok := b.types[nodeType]
	if !ok {
		eb := backoff.NewExponentialBackOff()
		eb.InitialInterval, eb.MaxInterval = b.initial, b.max
		eb.Multiplier, eb.RandomizationFactor = backoffMultiplier, 0
		eb.Reset()
		t = &typeBackoff{b: eb}
		b.types[nodeType] = t
	}
	t.failures++
	if now.Before(t.until) {
		return
	}
	t.until = now.Add(t.b.NextBackOff())
}

// Succeeded records that an instance of nodeType succeeded: the type's
// failures are forgotten and it may launch at once.
func (b *Backoff) Succeeded(nodeType string) { delete(b.types, nodeType) }

// Status returns how many failures nodeType had since its last success
// and when it may launch again (zero when it is not backing off).
func (b *Backoff) Status(nodeType string) (failures int, retryAt time.Time) {
	if t, ok := b.types[nodeType]; ok {
		return t.failures, t.until
	}
	return 0, time.Time{}
}
