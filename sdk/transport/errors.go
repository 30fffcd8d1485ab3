package transport

import (
	"context"
	"errors"
	"fmt"
)

// Errors every transport reports; match them with errors.Is. They keep
// their identity across the plugin boundary.
var (
	// ErrNotSupported means the transport does not do this (Send on a
	// one-sided transport, a device it cannot reach, a method an older plugin
	// lacks).
	ErrNotSupported = errors.New("not supported by this transport")
	// ErrAborted means the transfer was aborted (Abort was called for the
	// object).
	ErrAborted = errors.New("transfer aborted")
	// ErrBadMetadata means the request's metadata is invalid, corrupt, does
	// not match the object, or names an object the transport does not know
	// (never produced, or already garbage-collected).
	ErrBadMetadata = errors.New("bad transport metadata")
	// ErrTimeout means the transfer did not finish before its deadline. Errors
	// matching it also match context.DeadlineExceeded.
	ErrTimeout = errors.New("transfer timed out")
)

// TransferError names the object and the operation of a failed transport
// call. Transports may return plain errors; the plugin bridge wraps them.
type TransferError struct {
	ObjectID string
	// Op is the duty: "info", "actor_has_transport", "extract_metadata",
	// "communicator_metadata", "send", "receive", "garbage_collect", "abort".
	Op  string
	Err error
}

// Operation names used in TransferError.Op.
const (
	OpInfo                 = "info"
	OpActorHasTransport    = "actor_has_transport"
	OpExtractMetadata      = "extract_metadata"
	OpCommunicatorMetadata = "communicator_metadata"
	OpSend                 = "send"
	OpReceive              = "receive"
	OpGarbageCollect       = "garbage_collect"
	OpAbort                = "abort"
)

// Error implements error.
func (e *TransferError) Error() string {
	if e.ObjectID == "" {
		return fmt.Sprintf("transport %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("transport %s of object %s: %v", e.Op, e.ObjectID, e.Err)
}

// Unwrap returns the cause.
func (e *TransferError) Unwrap() error { return e.Err }

// Errorf returns a *TransferError for the object and operation whose cause
// is fmt.Errorf(format, args...); use %w with a sentinel error.
func Errorf(objectID, op, format string, args ...any) error {
	return &TransferError{ObjectID: objectID, Op: op, Err: fmt.Errorf(format, args...)}
}

// timeoutError matches both ErrTimeout and context.DeadlineExceeded.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string   { return e.msg }
func (e *timeoutError) Unwrap() []error { return []error{ErrTimeout, context.DeadlineExceeded} }

// ContextError explains why ctx is done: the abort error when it was
// cancelled by Aborts (its cause), an error matching ErrTimeout and
// context.DeadlineExceeded when its deadline passed, else ctx.Err(). It
// returns nil while ctx is live.
func ContextError(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrAborted):
		return cause
	case errors.Is(cause, context.DeadlineExceeded):
		return &timeoutError{msg: "transfer timed out: deadline exceeded"}
	case cause != nil:
		return cause
	}
	return ctx.Err()
}
