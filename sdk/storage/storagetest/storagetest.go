package storagetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/storage"
)

// Factory returns the storage under test for one subtest. It is called once
// per subtest with that subtest's t and registers its own cleanup with
// t.Cleanup. It may return the same backend every time: the suite puts
// every key under a fresh prefix and deletes what it wrote.
type Factory func(t *testing.T) storage.Storage

// DefaultLargeSize is the size of the suite's largest object: over 2 GiB,
// so that offsets and sizes that do not fit in 32 bits are exercised, and
// not a multiple of any chunk or part size.
const DefaultLargeSize = 2<<30 + 3

// Options tune the suite. Zero fields take their defaults; new settings
// are new fields, so callers keep compiling.
type Options struct {
	// LargeSize is the size of the multi-GiB round trip (default
	// DefaultLargeSize). The data is generated and checked as it streams,
	// never held in memory.
	LargeSize int64
	// Concurrency is how many writes and reads the concurrency test runs at
	// once (default 16).
	Concurrency int
	// Timeout bounds every call of the suite except the large round trip
	// (default 1 minute), so a hanging storage fails instead of wedging the
	// test binary.
	Timeout time.Duration
	// LargeTimeout bounds the large round trip (default 10 minutes).
	LargeTimeout time.Duration
	// CheckNoLeftovers, if set, reports what the storage left behind that it
	// should not have: temporary files, incomplete multipart uploads. It is
	// called with the subtest's t (the one the Factory got) after each
	// subtest, and after each failed write, until it returns nil; the suite
	// fails the subtest if it still returns an error a few seconds later (a
	// plugin may still be cleaning up after a write whose client went away).
	CheckNoLeftovers func(t *testing.T) error
	// Break, if set, makes the backend the Factory returned for t fail (for
	// a local disk: remove its directory; for S3: stop the server). The
	// "Broken" subtest then checks that calls return errors promptly
	// instead of hanging. Break restores the backend with t.Cleanup if
	// later subtests need it.
	Break func(t *testing.T)
	// BrokenTimeout is the deadline of each call on a broken backend
	// (default 20 s); such calls must return by then.
	BrokenTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.LargeSize == 0 {
		o.LargeSize = DefaultLargeSize
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.LargeTimeout <= 0 {
		o.LargeTimeout = 10 * time.Minute
	}
	if o.BrokenTimeout <= 0 {
		o.BrokenTimeout = 20 * time.Second
	}
	return o
}

// Run runs the conformance suite against the storage made by f, tuned by o
// (Options{} for the defaults).
func Run(t *testing.T, f Factory, o Options) {
	o = o.withDefaults()
	tests := []struct {
		name string
		fn   func(*env)
	}{
		{"Info", testInfo},
		{"RoundTrip", testRoundTrip},
		{"Large", testLarge},
		{"FusedRanges", testFusedRanges},
		{"NotFound", testNotFound},
		{"Atomic", testAtomic},
		{"Overwrite", testOverwrite},
		{"Delete", testDelete},
		{"List", testList},
		{"BadKeys", testBadKeys},
		{"UnusualKeys", testUnusualKeys},
		{"Concurrent", testConcurrent},
		{"BodyFails", testBodyFails},
		{"Cancel", testCancel},
		{"Deadline", testDeadline},
		{"SizeMismatch", testSizeMismatch},
		{"ReadInto", testReadInto},
		{"Broken", testBroken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "Broken" && o.Break == nil {
				t.Log("no Options.Break given: the broken-backend checks do not run")
				return
			}
			s := f(t)
			if s == nil {
				t.Fatal("factory returned a nil storage")
			}
			e := &env{t: t, topT: t, s: s, o: o, prefix: "storagetest-" + randHex(4) + "/" + strings.ToLower(tc.name) + "/", keys: &keySet{}}
			t.Cleanup(e.cleanup)
			tc.fn(e)
		})
	}
}

// env is one subtest's world.
type env struct {
	t      *testing.T
	topT   *testing.T // the t the factory got (for CheckNoLeftovers, Break)
	s      storage.Storage
	o      Options
	prefix string
	keys   *keySet
	broken bool
}

type keySet struct {
	mu   sync.Mutex
	keys []string
}

// with returns the env for a nested subtest.
func (e *env) with(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

func (e *env) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), e.o.Timeout)
}

// key returns a fresh key under the subtest's prefix and schedules its
// deletion.
func (e *env) key(name string) string {
	k := e.prefix + name
	e.keys.mu.Lock()
	e.keys.keys = append(e.keys.keys, k)
	e.keys.mu.Unlock()
	return k
}

func (e *env) cleanup() {
	ctx, cancel := e.ctx()
	defer cancel()
	e.keys.mu.Lock()
	keys := e.keys.keys
	e.keys.keys = nil
	e.keys.mu.Unlock()
	if len(keys) > 0 {
		// After Break the backend may stay down: deleting is best effort.
		if _, err := e.s.Delete(ctx, &storage.DeleteRequest{Keys: keys}); err != nil && !e.broken {
			e.t.Errorf("cleanup: Delete: %v", err)
		}
	}
	e.noLeftovers("at the end of the subtest")
}

// noLeftovers polls Options.CheckNoLeftovers until it is satisfied.
func (e *env) noLeftovers(when string) {
	e.t.Helper()
	if e.o.CheckNoLeftovers == nil || e.broken {
		return
	}
	deadline := time.Now().Add(leftoverWait)
	for {
		err := e.o.CheckNoLeftovers(e.topT)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Errorf("leftovers %s (still there after %v): %v", when, leftoverWait, err)
			return
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// leftoverWait is how long a plugin may take to clean up after a write
// whose client went away.
const leftoverWait = 5 * time.Second

// promptly bounds how long a call may take to return once its context has
// ended.
const promptly = 5 * time.Second

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// wantErr checks that err matches target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got no error, want one matching %v", what, target)
		return
	}
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %q, want one matching %v", what, err, target)
	}
}
