// Package waitfor lets a test wait for a state instead of sleeping: it
// polls a condition until it holds, and fails the test, naming what it
// waited for, when a deadline passes first.
package waitfor

import (
	"testing"
	"time"
)

// MaxInterval bounds the pause between two checks of a condition. The
// pause starts at a millisecond and doubles up to it, so that a state that
// comes soon is seen soon, and a condition that is costly to check (a scan
// of /proc) is not checked hundreds of times a second for long.
const MaxInterval = 20 * time.Millisecond

// Generous is the deadline for a wait on a state that a correct run
// reaches: a wait returns as soon as its state holds, so a long deadline
// costs nothing when the test passes, and a short one fails a correct run
// on a busy machine (CI runs the suite on 2 cores beside other work).
const Generous = 2 * time.Minute

// Cond calls cond until it returns true. When d passes first, it fails t
// with "timed out after d waiting for what".
func Cond(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(pause) // the polling interval, not synchronisation
		pause = min(2*pause, MaxInterval)
	}
}
