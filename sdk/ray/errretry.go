package ray

import "github.com/goray-dev/goray/sdk/ray/internal/core"

// RetryErrors retries a task whose function returns an error or panics,
// as a task whose worker dies is retried (Ray's retry_exceptions=True):
// it runs again, within MaxRetries (default 3; the same budget worker
// failures draw on), and the caller gets the last attempt's result. With
// match functions only an error one of them returns true for is retried
// (Ray's retry_exceptions=[types]); each gets the error as the caller
// would (its Type is the Go type of the error the function returned, its
// Message the error's text, Panic set for a panic) and runs in the
// caller's process. Without RetryErrors an error the function returns is
// final, as in Ray by default.
//
// Retrying is at-least-once: the failed attempt ran in full, so retry
// only functions whose effects may be repeated. Each attempt is recorded
// FAILED in `goray list tasks` and the next one queued. A generator task
// (RemoteStream) is not retried, nor a task cancelled with Cancel. It
// applies to tasks; give an actor's methods RetryMethodErrors (an actor
// created with it fails with an error saying so).
func RetryErrors(match ...func(*TaskError) bool) Option {
	f := errorMatcher(match)
	return func(c *callOptions) { c.retryErrors = f }
}

// RetryMethodErrors retries an actor method's calls whose method returns
// an error or panics (Ray's @ray.method(retry_exceptions=...)), within
// the calls' retry budget: the handle's MaxTaskRetries or the method's
// MaxCallRetries (without one, a call is not retried). match works as in
// RetryErrors. A retried call goes to the head of the actor's calls not
// sent yet: calls made after it that were already sent may run before
// its next attempt (Ray does not order retried actor tasks either).
func RetryMethodErrors(match ...func(*TaskError) bool) MethodOption {
	f := errorMatcher(match)
	return func(m *methodBase) { m.retryErrors = f }
}

// errorMatcher returns the predicate of RetryErrors(match...): every
// error without match functions, else an error one of them matches.
func errorMatcher(match []func(*TaskError) bool) func(*core.RemoteError) bool {
	match = append([]func(*TaskError) bool(nil), match...)
	return func(e *core.RemoteError) bool {
		if len(match) == 0 {
			return true
		}
		for _, m := range match {
			if m != nil && m(e) {
				return true
			}
		}
		return false
	}
}
