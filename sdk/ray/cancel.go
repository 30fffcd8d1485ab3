package ray

import (
	"context"
	"fmt"
)

// CancelOption configures Cancel.
type CancelOption func(*cancelOptions)

type cancelOptions struct{ force bool }

// Force makes Cancel of a running task stop its worker process instead of
// asking the task to stop (for tasks that do not watch their context). The
// worker's other work is lost with it; the task is not retried. Not for
// actor calls: kill the actor instead.
func Force() CancelOption { return func(o *cancelOptions) { o.force = true } }

// Cancel asks the task or actor call whose result r is to stop, as Ray's
// ray.cancel does. r may be borrowed (for example returned by the task
// that submitted the call): its owner is then asked to cancel it.
//
//   - Not started yet (waiting for its arguments, a worker, or its turn on
//     the actor): it never runs, and Get returns an error matching
//     ErrTaskCancelled.
//   - Running: the context the task was given is cancelled. A task that
//     gives up (returns an error, such as ctx.Err()) has a result matching
//     ErrTaskCancelled; a task that finishes anyway keeps its value. With
//     Force, its worker process is stopped and Get returns ErrTaskCancelled.
//   - Finished: nothing happens.
//
// A cancelled task is never retried. Calls the cancelled task submitted
// with its context (or one derived from it) that have not been sent to a
// worker yet are cancelled too, whether or not their refs escaped; those
// already running go on (cancel them by their refs). A task that returns
// normally cancels nothing it submitted. Cancel returns once the request is
// delivered, not when the task has stopped: Get the result to wait for
// that.
func Cancel[T any](ctx context.Context, r Ref[T], opts ...CancelOption) error {
	cw, err := current()
	if err != nil {
		return err
	}
	if r.h == nil {
		return fmt.Errorf("goray: Cancel of a zero Ref: %w", ErrNotCancellable)
	}
	var o cancelOptions
	for _, opt := range opts {
		opt(&o)
	}
	return cw.CancelRef(ctx, r.h, o.force)
}
