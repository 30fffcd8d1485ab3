package raylet

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// TensorPoolConfig hands the raylet the node's pool of freed tensor
// segments (shmem.Pool; the node makes it before its plugins start, so
// that they share it).
type TensorPoolConfig struct {
	// Pool is the node's pool; nil: none (every freed segment is unlinked).
	Pool *shmem.Pool
	// MaxMemory bounds the bytes the pool keeps.
	MaxMemory int64
	// IdleTimeout is how long a segment may stay in the pool unused.
	IdleTimeout time.Duration
}

// tensorPool keeps the node's segment pool within its bounds (the worker
// pool names it in every worker's environment, EnvShmPool): every
// tick it unlinks the segments idle longer than the timeout, then the
// oldest beyond the memory bound; the memory monitor empties it before it
// kills a worker. It also zeroes the segments freed into the pool as they
// arrive (shmem.Scrubber, woken by the directory's events), so that a new
// tensor's zero fill is done here, on another core, instead of in the
// producer's call.
type tensorPool struct {
	cfg TensorPoolConfig
	log hclog.Logger
	// zeroedOnEvent counts the segments zeroed by rounds a pool event
	// woke (the others were zeroed at a tick).
	zeroedOnEvent atomic.Int64
}

// scrubRound bounds the bytes one wake-up of the scrubber zeroes before it
// looks at its other duties again.
const scrubRound = 1 << 30

// scrubMaps bounds the mappings the scrubber keeps for reuse.
const scrubMaps = 64

func newTensorPool(cfg TensorPoolConfig, log hclog.Logger) *tensorPool {
	return &tensorPool{cfg: cfg, log: log}
}

// run trims and scrubs the pool until ctx ends or closing closes.
func (t *tensorPool) run(ctx context.Context, closing <-chan struct{}) {
	if t.cfg.Pool == nil {
		return
	}
	every := min(max(t.cfg.IdleTimeout/4, 10*time.Millisecond), time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	scrubber := shmem.NewScrubber(t.cfg.Pool, scrubMaps)
	defer scrubber.Close()
	// Without events (no inotify), the tick scrubs: later, never wrong.
	var events <-chan fsnotify.Event
	if w, err := fsnotify.NewWatcher(); err != nil {
		t.log.Warn("watching the tensor segment pool failed; freed segments are zeroed at each tick only", "error", err)
	} else {
		defer w.Close()
		if err := w.Add(t.cfg.Pool.Dir()); err != nil {
			t.log.Warn("watching the tensor segment pool failed; freed segments are zeroed at each tick only", "dir", t.cfg.Pool.Dir(), "error", err)
		} else {
			events = w.Events
			go func() { // errors are rare (queue overflow); the tick covers them
				for err := range w.Errors {
					t.log.Debug("tensor segment pool watch", "error", err)
				}
			}()
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-closing:
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if !ev.Has(fsnotify.Create) || strings.HasSuffix(ev.Name, shmem.ZeroedSuffix) {
				continue // removals, the scrubber's own renames
			}
			drainEvents(events) // one round for a burst of frees
			t.zeroedOnEvent.Add(int64(t.scrub(ctx, scrubber)))
		case <-tick.C:
			t.trim(t.cfg.IdleTimeout, t.cfg.MaxMemory)
			t.scrub(ctx, scrubber)
		}
	}
}

// drainEvents takes the events already queued.
func drainEvents(events <-chan fsnotify.Event) {
	for {
		select {
		case _, ok := <-events:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// scrub zeroes what was freed into the pool, at most scrubRound bytes,
// and returns how many segments it zeroed.
func (t *tensorPool) scrub(ctx context.Context, s *shmem.Scrubber) int {
	n, bytes, err := s.Scrub(ctx, scrubRound)
	if err != nil {
		t.log.Warn("zeroing freed tensor segments", "error", err)
	}
	if n > 0 {
		t.log.Trace("tensor segments zeroed", "segments", n, "bytes", bytes)
	}
	return n
}

// release empties the pool (the node is short of memory) and returns the
// bytes it gave back.
func (t *tensorPool) release() int64 {
	if t.cfg.Pool == nil {
		return 0
	}
	return t.trim(0, 0)
}

func (t *tensorPool) trim(idle time.Duration, maxBytes int64) int64 {
	n, bytes, err := t.cfg.Pool.Trim(idle, maxBytes)
	if err != nil {
		t.log.Warn("trimming the tensor segment pool", "error", err)
	}
	if n > 0 {
		t.log.Debug("tensor segment pool trimmed", "segments", n, "bytes", bytes)
	}
	return bytes
}
