package ray_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goray-dev/goray/sdk/ray"
)

// TransientError is an error a task returns that is worth retrying.
type TransientError struct{ Attempt int }

func (e *TransientError) Error() string {
	return fmt.Sprintf("transient failure in attempt %d", e.Attempt)
}

// failUntil returns a *TransientError in attempts before ok, then the
// attempt that succeeded.
func failUntil(ctx context.Context, ok int) (int, error) {
	tc, _ := ray.CurrentTask(ctx)
	if tc.Attempt < ok {
		return 0, &TransientError{Attempt: tc.Attempt}
	}
	return tc.Attempt, nil
}

// panicUntil panics in attempts before ok, then returns the attempt.
func panicUntil(ctx context.Context, ok int) (int, error) {
	tc, _ := ray.CurrentTask(ctx)
	if tc.Attempt < ok {
		panic(fmt.Sprintf("panic in attempt %d", tc.Attempt))
	}
	return tc.Attempt, nil
}

// Flaky is an actor whose Call fails until it has been called more than
// ok times (its state survives the failures: the same instance runs the
// retries).
type Flaky struct{ calls int }

// NewFlaky makes a Flaky.
func NewFlaky(context.Context) (*Flaky, error) { return &Flaky{}, nil }

// Call fails with a *TransientError until its ok+1st call, which returns
// the number of calls.
func (f *Flaky) Call(_ context.Context, ok int) (int, error) {
	f.calls++
	if f.calls <= ok {
		return 0, &TransientError{Attempt: f.calls - 1}
	}
	return f.calls, nil
}

var (
	FailUntil  = ray.Task1(failUntil)
	PanicUntil = ray.Task1(panicUntil)
	FlakyActor = ray.Actor0(NewFlaky)
	// FlakyCall retries the calls of Call that fail (within the handle's
	// MaxTaskRetries); FlakyCallOnce does not.
	FlakyCall     = ray.Method1((*Flaky).Call, ray.RetryMethodErrors())
	FlakyCallOnce = ray.Method1((*Flaky).Call)
)

// isTransient matches the errors failUntil and Flaky.Call return.
func isTransient(e *ray.TaskError) bool { return e.Type == "*ray_test.TransientError" }

// TestRetryErrors ports test_task_retry's retry_exceptions cases: a task
// whose function returns an error (or panics) runs again with
// RetryErrors, within MaxRetries, and the caller gets the last attempt's
// result; match functions choose the errors retried; without RetryErrors
// an error is final, as in Ray by default.
func TestRetryErrors(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		ref  ray.Ref[int]
		want int    // the attempt that returned; -1: an error
		err  string // what the error says
	}{
		{"not asked: the error is final", FailUntil.Remote(ctx, ray.V(1)), -1, "transient failure in attempt 0"},
		{"retried until it works", FailUntil.Options(ray.RetryErrors()).Remote(ctx, ray.V(2)), 2, ""},
		{"within MaxRetries: the last attempt's error", FailUntil.Options(ray.RetryErrors(), ray.MaxRetries(1)).Remote(ctx, ray.V(3)), -1, "transient failure in attempt 1"},
		{"MaxRetries 0: never", FailUntil.Options(ray.RetryErrors(), ray.MaxRetries(0)).Remote(ctx, ray.V(1)), -1, "transient failure in attempt 0"},
		{"a panic is retried", PanicUntil.Options(ray.RetryErrors()).Remote(ctx, ray.V(1)), 1, ""},
		{"a matched error is retried", FailUntil.Options(ray.RetryErrors(isTransient)).Remote(ctx, ray.V(1)), 1, ""},
		{"an error no match takes is final", PanicUntil.Options(ray.RetryErrors(isTransient)).Remote(ctx, ray.V(1)), -1, "panic in attempt 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.ref.Get(ctx)
			if tc.want < 0 {
				var te *ray.TaskError
				if !errors.As(err, &te) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %d, %v; want a task error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want the result of attempt %d", got, err, tc.want)
			}
		})
	}
}

// TestRetryMethodErrors: an actor method with RetryMethodErrors runs again
// on the same instance when it returns an error, within the handle's
// MaxTaskRetries; without a budget, or without RetryMethodErrors, the
// error is final; RetryErrors given to an actor says to use
// RetryMethodErrors.
func TestRetryMethodErrors(t *testing.T) {
	ctx := testCtx(t)
	a := FlakyActor.Options(ray.MaxTaskRetries(3)).Remote(ctx)
	if n, err := FlakyCall.On(a).Remote(ctx, ray.V(2)).Get(ctx); err != nil || n != 3 {
		t.Fatalf("a call failing twice, retried: %d, %v; want 3 calls", n, err)
	}
	if _, err := FlakyCallOnce.On(a).Remote(ctx, ray.V(10)).Get(ctx); err == nil || !strings.Contains(err.Error(), "transient failure in attempt 3") {
		t.Fatalf("a method without RetryMethodErrors: %v; want its first error", err)
	}
	b := FlakyActor.Remote(ctx) // MaxTaskRetries 0
	if _, err := FlakyCall.On(b).Remote(ctx, ray.V(1)).Get(ctx); err == nil || !strings.Contains(err.Error(), "transient failure in attempt 0") {
		t.Fatalf("a handle without MaxTaskRetries: %v; want the first error", err)
	}
	c := FlakyActor.Options(ray.RetryErrors()).Remote(ctx)
	if err := c.Ready(ctx); err == nil || !strings.Contains(err.Error(), "RetryMethodErrors") {
		t.Fatalf("an actor created with RetryErrors: %v; want an error pointing to RetryMethodErrors", err)
	}
}
