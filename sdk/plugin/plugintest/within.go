package plugintest

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// ErrHung is matched by what Within returns for a call that did not
// return in time.
var ErrHung = errors.New("hung")

// Within runs fn and fails the test if it does not return within d (the
// conformance suites' check that a call honours its context or returns
// promptly). It returns fn's error, or one matching ErrHung that names
// what when fn is still running; fn's goroutine is left to finish.
func Within(t testing.TB, d time.Duration, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		t.Errorf("%s did not return within %v", what, d)
		return fmt.Errorf("%w: %s: still running after %v", ErrHung, what, d)
	}
}
