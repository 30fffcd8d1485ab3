package ray

import (
	"fmt"

	"github.com/goray-dev/goray/sdk/ray/internal/core"
)

// MaxTaskRetries lets an actor's method calls be retried up to n times
// (Ray's max_task_retries) when the actor's worker process or node fails
// while they are under way, or the connection to its worker breaks: the
// call runs again on the restarted actor (see MaxRestarts) instead of
// failing with ErrActorUnavailable. -1 means without limit; the default 0
// never (each call runs at most once). Retried calls keep their order:
// the calls under way when the worker failed go to the new instance, in
// the order they were made, before any call made after them.
//
// Retrying is at-least-once: a call may have run, in part or in full, on
// the failed instance before it runs again, so retry only methods whose
// effects may be repeated (MaxCallRetries(0) exempts a method). A call
// out of retries fails with an *ActorUnavailableError saying how many
// attempts ran. A killed actor (Kill), or one out of restarts, fails its
// pending calls at once with ErrActorDied, retried or not. A call
// cancelled with Cancel is not retried.
//
// It applies to the calls made through the handle the actor's creation
// returns, through every copy of it passed to tasks and actors, and
// through handles found with GetActor or GetIfExists (the GCS records
// it); MaxCallRetries gives a method or call another budget. Without MaxRestarts the
// actor does not restart, and a call under way when it fails has no
// instance to run again on: it fails with ErrActorDied.
func MaxTaskRetries(n int) Option { return func(c *callOptions) { c.maxTaskRetries = n } }

// MaxCallRetries sets the retry budget of an actor method's calls,
// replacing the handle's MaxTaskRetries (Ray's
// @ray.method(max_task_retries=n)): given to MethodN it applies to every
// call of the method, given to Options to the calls made through the copy
// it returns. -1 means without limit, 0 never: MaxCallRetries(0) keeps a
// method that must not run twice from being retried. A budget below -1
// fails the call with an error naming it.
func MaxCallRetries(n int) MethodOption { return func(m *methodBase) { m.retries = &n } }

// checkMaxTaskRetries checks a retry budget.
func checkMaxTaskRetries(n int) error {
	if n < -1 {
		return fmt.Errorf("%d retries: want -1 (without limit), 0 (never) or more", n)
	}
	return nil
}

// actorTaskRetries checks the task retry option of actor class name and
// sets it in o.
func (c callOptions) actorTaskRetries(name string, o *core.TaskOptions) error {
	if err := checkMaxTaskRetries(c.maxTaskRetries); err != nil {
		return fmt.Errorf("goray: %s: MaxTaskRetries(%d): %w", name, c.maxTaskRetries, err)
	}
	o.MaxTaskRetries = c.maxTaskRetries
	return nil
}

// withRetries returns the actor reference a call of m goes through: with
// m's retry budget (MaxCallRetries) when it has one.
func (m methodBase) withRetries(actor core.ActorRef) (core.ActorRef, error) {
	if m.retries == nil {
		return actor, nil
	}
	if err := checkMaxTaskRetries(*m.retries); err != nil {
		return actor, fmt.Errorf("goray: %s: MaxCallRetries(%d): %w", m.name, *m.retries, err)
	}
	actor.MaxTaskRetries = *m.retries
	return actor, nil
}
