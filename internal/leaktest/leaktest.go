// Package leaktest checks that a test leaves no goroutine behind.
package leaktest

import (
	"runtime"
	"testing"
	"time"
)

// Goroutines fails t if goroutines started during the test are still
// running once its cleanups ran (polled for up to 5 s: exiting goroutines
// need a moment), printing every goroutine's stack. Call it first in the
// test, so that its cleanup runs last.
func Goroutines(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutine leak: %d before, %d after\n%s", before, n, buf)
				return
			}
			<-time.After(5 * time.Millisecond) // polling interval
		}
	})
}
