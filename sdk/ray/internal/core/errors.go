package core

import (
	"errors"
	"fmt"

	"github.com/goray-dev/goray/internal/ids"
)

// Sentinel errors. Every typed error below matches one of these with
// errors.Is, so callers can test the category without errors.As.
var (
	ErrTaskFailed    = errors.New("task failed")
	ErrPanic         = errors.New("task panicked")
	ErrWorkerCrashed = errors.New("worker crashed")
	ErrActorDied     = errors.New("actor died")
	// ErrActorUnavailable: the call was under way when the actor's worker
	// failed and the actor restarts (MaxRestarts), or when the connection
	// to its worker broke.
	ErrActorUnavailable = errors.New("actor unavailable")
	ErrObjectFreed      = errors.New("object freed")
	ErrObjectUnknown    = errors.New("object unknown")
	ErrOwnerDied        = errors.New("owner died")
	ErrGetTimeout       = errors.New("get timed out")
	ErrFunctionNotFound = errors.New("function not registered")
	ErrArgType          = errors.New("argument type mismatch")
	ErrStoreFull        = errors.New("object store full")
	ErrNotInitialized   = errors.New("goray is not initialized")
	ErrShutdown         = errors.New("goray is shut down")
	ErrActorNotFound    = errors.New("actor not found")
	ErrTaskCancelled    = errors.New("task cancelled")
	ErrObjectLost       = errors.New("object lost")
	ErrUnschedulable    = errors.New("task unschedulable")
	// ErrPlacementGroupRemoved: the placement group a task or actor was
	// placed in was removed.
	ErrPlacementGroupRemoved = errors.New("placement group removed")

	// ErrActorNameTaken: an actor was created with a name a live actor
	// holds.
	ErrActorNameTaken = errors.New("actor name taken")
)

// RemoteError is an error raised by user code in a task or actor method. It
// keeps the remote message, the Go type of the original error and the remote
// stack. It also travels as an object value (format "error"), so every Get of
// the task's result returns it.
type RemoteError struct {
	// Function is the registered name of the function or method.
	Function string `msgpack:"f"`
	// TaskID is the hex id of the failed task.
	TaskID string `msgpack:"t"`
	// Type is the Go type of the original error ("*errors.errorString") or
	// of the panic value.
	Type string `msgpack:"y"`
	// Message is the original error's message.
	Message string `msgpack:"m"`
	// Stack is the remote goroutine's stack for panics, empty otherwise.
	Stack string `msgpack:"s"`
	// Panic is set when the user code panicked.
	Panic bool `msgpack:"p"`
	// Kind says which system error this is when the failure was not in user
	// code (see Kind* constants); empty for user errors.
	Kind string `msgpack:"k"`
	// Node and Pid say where the task ran.
	Node string `msgpack:"n"`
	Pid  int    `msgpack:"i"`
}

// System error kinds carried in RemoteError.Kind.
const (
	KindFunctionNotFound = "function_not_found"
	KindArgType          = "arg_type"
	KindWorkerCrashed    = "worker_crashed"
	KindActorDied        = "actor_died"
	KindOwnerDied        = "owner_died"
	KindStoreFull        = "store_full"
	KindObjectFreed      = "object_freed"
	KindObjectUnknown    = "object_unknown"
	KindGetTimeout       = "get_timeout"
	KindCancelled        = "cancelled"
	KindObjectLost       = "object_lost"
	KindUnschedulable    = "unschedulable"
	KindGroupRemoved     = "placement_group_removed"
)

// kindOf classifies an error by the sentinel it matches, so the category
// survives the trip to another process.
func kindOf(err error) string {
	var re *RemoteError
	if errors.As(err, &re) && re.Kind != "" {
		return re.Kind
	}
	for _, k := range []struct {
		sentinel error
		kind     string
	}{
		{ErrWorkerCrashed, KindWorkerCrashed}, {ErrActorDied, KindActorDied}, {ErrOwnerDied, KindOwnerDied},
		{ErrObjectFreed, KindObjectFreed}, {ErrObjectUnknown, KindObjectUnknown}, {ErrGetTimeout, KindGetTimeout},
		{ErrStoreFull, KindStoreFull}, {ErrTaskCancelled, KindCancelled}, {ErrFunctionNotFound, KindFunctionNotFound},
		{ErrArgType, KindArgType}, {ErrTransferFailed, KindTransfer}, {ErrObjectLost, KindObjectLost},
		{ErrUnschedulable, KindUnschedulable}, {ErrPlacementGroupRemoved, KindGroupRemoved},
		{ErrOutOfMemory, KindOutOfMemory}, {ErrUnknownConcurrencyGroup, KindUnknownGroup},
	} {
		if errors.Is(err, k.sentinel) {
			return k.kind
		}
	}
	return ""
}

func (e *RemoteError) Error() string {
	if e.Kind == KindCancelled {
		return fmt.Sprintf("task %s %s", e.Function, e.Message)
	}
	what := "task " + e.Function
	if e.Panic {
		s := fmt.Sprintf("%s panicked: %s", what, e.Message)
		if e.Stack != "" {
			s += "\n\nremote stack (pid " + fmt.Sprint(e.Pid) + "):\n" + e.Stack
		}
		return s
	}
	return fmt.Sprintf("%s failed: %s", what, e.Message)
}

// Is lets errors.Is match the category.
func (e *RemoteError) Is(target error) bool {
	switch target {
	case ErrTaskFailed:
		return true
	case ErrPanic:
		return e.Panic
	case ErrFunctionNotFound:
		return e.Kind == KindFunctionNotFound
	case ErrArgType:
		return e.Kind == KindArgType
	case ErrWorkerCrashed:
		return e.Kind == KindWorkerCrashed
	case ErrActorDied:
		return e.Kind == KindActorDied
	case ErrOwnerDied:
		return e.Kind == KindOwnerDied
	case ErrStoreFull:
		return e.Kind == KindStoreFull
	case ErrObjectFreed:
		return e.Kind == KindObjectFreed
	case ErrObjectUnknown:
		return e.Kind == KindObjectUnknown
	case ErrGetTimeout:
		return e.Kind == KindGetTimeout
	case ErrTaskCancelled:
		return e.Kind == KindCancelled
	case ErrTransferFailed:
		return e.Kind == KindTransfer
	case ErrOutOfMemory:
		return e.Kind == KindOutOfMemory
	case ErrUnknownConcurrencyGroup:
		return e.Kind == KindUnknownGroup
	}
	return false
}

// As lets errors.As find the typed system errors in an error that crossed a
// process boundary (only the message and category travel).
func (e *RemoteError) As(target any) bool {
	switch t := target.(type) {
	case **WorkerCrashedError:
		if e.Kind == KindWorkerCrashed {
			*t = &WorkerCrashedError{Function: e.Function, Reason: e.Message}
			return true
		}
	case **ActorDiedError:
		if e.Kind == KindActorDied {
			*t = &ActorDiedError{Reason: e.Message}
			return true
		}
	case **ObjectError:
		kinds := map[string]error{KindObjectFreed: ErrObjectFreed, KindObjectUnknown: ErrObjectUnknown, KindOwnerDied: ErrOwnerDied, KindObjectLost: ErrObjectLost}
		if k, ok := kinds[e.Kind]; ok {
			*t = &ObjectError{Kind: k, Detail: e.Message}
			return true
		}
	case **PlacementGroupRemovedError:
		if e.Kind == KindGroupRemoved {
			*t = &PlacementGroupRemovedError{Function: e.Function, Reason: e.Message}
			return true
		}
	case **UnschedulableError:
		if e.Kind == KindUnschedulable {
			*t = &UnschedulableError{Function: e.Function, Reason: e.Message}
			return true
		}
	case **GetTimeoutError:
		if e.Kind == KindGetTimeout {
			*t = &GetTimeoutError{Err: errors.New(e.Message)}
			return true
		}
	case **OutOfMemoryError:
		if e.Kind == KindOutOfMemory {
			*t = &OutOfMemoryError{Function: e.Function, Reason: e.Message}
			return true
		}
	case **UnknownConcurrencyGroupError:
		if e.Kind == KindUnknownGroup {
			*t = &UnknownConcurrencyGroupError{Method: e.Function, Detail: e.Message}
			return true
		}
	}
	return false
}

// cancelledError is the result of a task whose submit context ended before
// it was sent to a worker.
func cancelledError(function string, cause error) *RemoteError {
	return &RemoteError{Function: function, Kind: KindCancelled, Type: "TaskCancelledError",
		Message: "cancelled before it ran: " + cause.Error()}
}

// WorkerCrashedError says the worker running a task died (its process exited
// or its connection broke) more times than the task may be retried.
type WorkerCrashedError struct {
	Function string
	TaskID   ids.ID
	Attempts int
	Reason   string
}

func (e *WorkerCrashedError) Error() string {
	return fmt.Sprintf("task %s (%s): worker crashed on all %d attempts; last: %s", e.Function, e.TaskID.Short(), e.Attempts, e.Reason)
}

// Is matches ErrWorkerCrashed.
func (e *WorkerCrashedError) Is(target error) bool { return target == ErrWorkerCrashed }

// ActorDiedError says an actor is dead: its process exited, it was killed,
// its constructor failed, or its job ended.
type ActorDiedError struct {
	ActorID ids.ID
	Name    string
	Reason  string
	// Cause is the error that kept the actor from being created, when it
	// was one of the owner's (such as a *BundleTooSmallError); nil else.
	Cause error
	// Attempts is how many attempts of the failed call ran before the
	// actor died, when the call had been retried (MaxTaskRetries); 0
	// otherwise.
	Attempts int
}

// Unwrap returns Cause.
func (e *ActorDiedError) Unwrap() error { return e.Cause }

func (e *ActorDiedError) Error() string {
	n := e.ActorID.Short()
	if e.Name != "" {
		n = fmt.Sprintf("%q (%s)", e.Name, n)
	}
	if e.Attempts > 0 {
		return fmt.Sprintf("actor %s died after %s of the call: %s", n, attempts(e.Attempts), e.Reason)
	}
	return fmt.Sprintf("actor %s died: %s", n, e.Reason)
}

// Is matches ErrActorDied.
func (e *ActorDiedError) Is(target error) bool { return target == ErrActorDied }

// ActorNameTakenError says an actor could not be created because a live
// actor already holds its name (Ray raises ValueError at creation). It
// matches ErrActorNameTaken and, as its handle's actor never existed,
// ErrActorDied.
type ActorNameTakenError struct {
	// Name is the name asked for.
	Name string
	// ActorID is the id the new actor would have had (its handle's).
	ActorID ids.ID
	// Holder is the live actor holding the name (ids.Nil if not known).
	Holder ids.ID
	// HolderClass is the holder's class ("" if not known).
	HolderClass string
	// Namespace is the namespace of the name ("" if not known).
	Namespace string
}

func (e *ActorNameTakenError) Error() string {
	holder := "a live actor"
	if !e.Holder.IsNil() {
		holder = "actor " + e.Holder.String()
		if e.HolderClass != "" {
			holder += " (" + e.HolderClass + ")"
		}
	}
	if e.Namespace != "" {
		return fmt.Sprintf("actor name %q in namespace %q is already taken by %s", e.Name, e.Namespace, holder)
	}
	return fmt.Sprintf("actor name %q is already taken by %s", e.Name, holder)
}

// Is matches ErrActorNameTaken and ErrActorDied.
func (e *ActorNameTakenError) Is(target error) bool {
	return target == ErrActorNameTaken || target == ErrActorDied
}

// ActorUnavailableError says a call was under way when the actor's worker
// failed and the actor restarts, or when the connection to its (live)
// worker broke (as Ray's ActorUnavailableError): the call may or may not
// have run. It is retried when the actor's MaxTaskRetries allows
// (taskretry.go); this error is what the last attempt got. Calls made
// afterwards go to the restarted actor, or over a new connection.
type ActorUnavailableError struct {
	ActorID ids.ID
	Name    string
	Reason  string
	// Attempts is how many attempts of the call ran (1 without retries);
	// 0 when not known.
	Attempts int
	// Cause, when set, is what failed the actor's worker: an
	// *OutOfMemoryError when its node's memory monitor killed it.
	Cause error
}

func (e *ActorUnavailableError) Error() string {
	n := e.ActorID.Short()
	if e.Name != "" {
		n = fmt.Sprintf("%q (%s)", e.Name, n)
	}
	if e.Attempts > 1 {
		return fmt.Sprintf("actor %s unavailable; the call was under way and may have run (%s ran, no retry left): %s", n, attempts(e.Attempts), e.Reason)
	}
	return fmt.Sprintf("actor %s unavailable; the call was under way and may have run: %s", n, e.Reason)
}

// Is matches ErrActorUnavailable.
func (e *ActorUnavailableError) Is(target error) bool { return target == ErrActorUnavailable }

// Unwrap returns Cause.
func (e *ActorUnavailableError) Unwrap() error { return e.Cause }

// UnschedulableError says a task or actor can never be scheduled: a hard
// node affinity names a dead node or one that can never fit it.
type UnschedulableError struct {
	Function string
	Reason   string
}

func (e *UnschedulableError) Error() string {
	return fmt.Sprintf("%s cannot be scheduled: %s", e.Function, e.Reason)
}

// Is matches ErrUnschedulable.
func (e *UnschedulableError) Is(target error) bool { return target == ErrUnschedulable }

// PlacementGroupRemovedError says a task or actor cannot run because the
// placement group it was placed in was removed (by its owner, or with its
// job).
type PlacementGroupRemovedError struct {
	// Function is the task's or actor's registered name ("" for a Wait
	// on the group).
	Function string
	// Reason says which group was removed and why.
	Reason string
}

func (e *PlacementGroupRemovedError) Error() string {
	if e.Function == "" {
		return e.Reason
	}
	return fmt.Sprintf("%s cannot run: %s", e.Function, e.Reason)
}

// Is matches ErrPlacementGroupRemoved.
func (e *PlacementGroupRemovedError) Is(target error) bool { return target == ErrPlacementGroupRemoved }

// ObjectError says an object cannot be read: it was freed (its last reference
// released), its owner does not know it, its owner died, or every copy was
// on nodes that died (lost; reconstruction is not implemented yet).
type ObjectError struct {
	ObjectID ids.ObjectID
	// Kind is ErrObjectFreed, ErrObjectUnknown, ErrOwnerDied or
	// ErrObjectLost.
	Kind   error
	Detail string
}

func (e *ObjectError) Error() string {
	s := fmt.Sprintf("object %s: %v", e.ObjectID, e.Kind)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is matches the error's kind.
func (e *ObjectError) Is(target error) bool { return target == e.Kind }

// GetTimeoutError says a Get or Wait ran out of time before the object was
// ready. It unwraps to the context error.
type GetTimeoutError struct {
	ObjectID ids.ObjectID
	Err      error
}

func (e *GetTimeoutError) Error() string {
	return fmt.Sprintf("get of object %s timed out: %v", e.ObjectID, e.Err)
}

// Is matches ErrGetTimeout.
func (e *GetTimeoutError) Is(target error) bool { return target == ErrGetTimeout }

// Unwrap returns the context error.
func (e *GetTimeoutError) Unwrap() error { return e.Err }
