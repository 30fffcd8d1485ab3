package ray

import "github.com/goray-dev/goray/sdk/ray/internal/core"

// Error categories, for errors.Is. Each typed error below matches one.
var (
	// ErrTaskFailed matches every error raised by user code in a task.
	ErrTaskFailed = core.ErrTaskFailed
	// ErrPanic matches a task or method that panicked.
	ErrPanic = core.ErrPanic
	// ErrWorkerCrashed matches a task whose worker died on every attempt.
	ErrWorkerCrashed = core.ErrWorkerCrashed
	// ErrActorDied matches calls on a dead actor.
	ErrActorDied = core.ErrActorDied
	// ErrActorUnavailable matches a call that was under way when its
	// actor's worker failed, while the actor restarts (MaxRestarts), or
	// when the connection to its worker broke; it may have run. With
	// MaxTaskRetries such a call is retried, and fails so only once its
	// retries ran out.
	ErrActorUnavailable = core.ErrActorUnavailable
	// ErrObjectFreed matches reads of an object whose references are gone.
	ErrObjectFreed = core.ErrObjectFreed
	// ErrObjectUnknown matches reads of an object its owner does not know.
	ErrObjectUnknown = core.ErrObjectUnknown
	// ErrOwnerDied matches reads of an object whose owner process died.
	ErrOwnerDied = core.ErrOwnerDied
	// ErrObjectLost matches reads of an object whose every copy was on
	// nodes that died.
	ErrObjectLost = core.ErrObjectLost
	// ErrUnschedulable matches tasks and actors that can never be
	// scheduled (a hard NodeAffinity to a dead node or one that can never
	// fit them); see *UnschedulableError.
	ErrUnschedulable = core.ErrUnschedulable
	// ErrGetTimeout matches a Get whose context deadline passed.
	ErrGetTimeout = core.ErrGetTimeout
	// ErrFunctionNotFound matches a call the worker binary cannot run.
	ErrFunctionNotFound = core.ErrFunctionNotFound
	// ErrArgType matches arguments that do not decode into the parameter
	// types.
	ErrArgType = core.ErrArgType
	// ErrStoreFull matches a put that does not fit in the object store.
	ErrStoreFull = core.ErrStoreFull
	// ErrNotInitialized is returned when Init has not been called.
	ErrNotInitialized = core.ErrNotInitialized
	// ErrShutdown is returned after Shutdown.
	ErrShutdown = core.ErrShutdown
	// ErrActorNotFound matches GetActor of a name no live actor holds
	// (a killed or dead actor's name is free at once).
	ErrActorNotFound = core.ErrActorNotFound
	// ErrActorNameTaken matches creating an actor with a Name that a live
	// actor holds; see *ActorNameTakenError.
	ErrActorNameTaken = core.ErrActorNameTaken
	// ErrTaskCancelled matches a task whose submit context was cancelled
	// before it was sent to a worker (a task's context ending because the
	// task returned is no cancellation), or that Cancel stopped.
	ErrTaskCancelled = core.ErrTaskCancelled
	// ErrNotCancellable matches a Cancel that cannot apply: the reference
	// is not the result of a task or actor call (a Put), or Force was
	// asked for an actor call.
	ErrNotCancellable = core.ErrNotCancellable
	// ErrTransferFailed matches a tensor transfer that failed or timed out.
	ErrTransferFailed = core.ErrTransferFailed
	// ErrPlacementGroupRemoved matches a task or actor (or a Wait) whose
	// placement group was removed; see *PlacementGroupRemovedError.
	ErrPlacementGroupRemoved = core.ErrPlacementGroupRemoved
)

// PlacementGroupRemovedError says a task or actor could not run, or a Wait
// ended, because its placement group was removed.
type PlacementGroupRemovedError = core.PlacementGroupRemovedError

// TransferError says a tensor transfer failed; it unwraps to the
// transport's error (transport.ErrTimeout, transport.ErrAborted, ...).
type TransferError = core.TransferError

// TaskError is an error from a remote task or method: the original
// message, the Go type of the error or panic value, the remote stack for
// panics, and where it ran. It also describes system failures reported by
// the worker (Kind says which).
type TaskError = core.RemoteError

// WorkerCrashedError says a task's worker died on every attempt.
type WorkerCrashedError = core.WorkerCrashedError

// ActorDiedError says an actor is dead and why.
type ActorDiedError = core.ActorDiedError

// ActorNameTakenError says an actor could not be created because a live
// actor (Holder) already holds its Name. New returns it; a handle from
// Remote reports it from Ready and every call. It matches
// ErrActorNameTaken and, since the handle's actor never existed,
// ErrActorDied.
type ActorNameTakenError = core.ActorNameTakenError

// ActorUnavailableError says a call was under way when its actor's worker
// failed and the actor restarts, or when the connection to its worker
// broke; the call may have run. It is the error of a call without retries
// (MaxTaskRetries, MaxCallRetries) or out of them: Attempts says how many
// attempts ran.
type ActorUnavailableError = core.ActorUnavailableError

// ObjectError says an object cannot be read (freed, unknown, owner died).
type ObjectError = core.ObjectError

// GetTimeoutError says a Get ran out of time; it unwraps to the context
// error.
type GetTimeoutError = core.GetTimeoutError

// UnschedulableError says a task or actor can never be scheduled: a hard
// NodeAffinity names a dead node or one that can never fit it. It matches
// ErrUnschedulable.
type UnschedulableError = core.UnschedulableError
