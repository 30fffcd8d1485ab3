package waitfor_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}

// Fatalf records the message and stops the caller, as testing.T's does.
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f)
}

// TestCond: Cond returns once the condition holds, and fails naming what
// it waited for when the deadline passes first.
func TestCond(t *testing.T) {
	calls := 0
	waitfor.Cond(t, 10*time.Second, "the third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Errorf("cond called %d times, want 3 (it held on the third)", calls)
	}

	f := &fakeT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != f {
				panic(r)
			}
		}()
		waitfor.Cond(f, 20*time.Millisecond, "a state that never comes", func() bool { return false })
	}()
	if !strings.Contains(f.failed, "a state that never comes") {
		t.Errorf("the failure %q does not name what it waited for", f.failed)
	}
}
