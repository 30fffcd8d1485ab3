package plugin

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// ErrorKind is one row of a kind SDK's error table: a class of errors that
// keeps its identity across the plugin boundary.
type ErrorKind struct {
	// Name is the kind's name on the wire (the ErrorInfo detail's kind),
	// e.g. "not_found". It never changes once released.
	Name string
	// Errors are what the kind stands for. On the plugin side an error
	// matching any of them (errors.Is) is of this kind; on the host side an
	// error of this kind matches all of them.
	Errors []error
	// Code is the gRPC status code an error of this kind is sent with.
	Code codes.Code
	// AlsoCodes are further status codes that, arriving without an
	// ErrorInfo detail (an older plugin, a failure on the way), are read
	// back as this kind. Code itself always is, unless an earlier row of
	// the table has the same code.
	AlsoCodes []codes.Code
}

// ErrorTable maps a kind SDK's errors to gRPC status codes and wire names
// and back. Order matters: an error is of the first kind it matches, and a
// bare status code is read as the first kind that has it.
type ErrorTable []ErrorKind

// Of returns the kind of err: the first row one of whose Errors err
// matches. ok is false when none does (a plain error: codes.Unknown).
func (t ErrorTable) Of(err error) (k ErrorKind, ok bool) {
	for _, k := range t {
		for _, e := range k.Errors {
			if errors.Is(err, e) {
				return k, true
			}
		}
	}
	return ErrorKind{}, false
}

// Classify returns the wire name and the status code of err: the kind's,
// or "" and codes.Unknown for an error of no kind.
func (t ErrorTable) Classify(err error) (name string, code codes.Code) {
	if k, ok := t.Of(err); ok {
		return k.Name, k.Code
	}
	return "", codes.Unknown
}

// Named returns the row whose Name is name.
func (t ErrorTable) Named(name string) (ErrorKind, bool) {
	for _, k := range t {
		if k.Name == name {
			return k, true
		}
	}
	return ErrorKind{}, false
}

// ForCode returns the kind a status code without an ErrorInfo detail is
// read as: the first row whose Code is c, else the first whose AlsoCodes
// has c.
func (t ErrorTable) ForCode(c codes.Code) (ErrorKind, bool) {
	for _, k := range t {
		if k.Code == c {
			return k, true
		}
	}
	for _, k := range t {
		for _, a := range k.AlsoCodes {
			if a == c {
				return k, true
			}
		}
	}
	return ErrorKind{}, false
}

// Kinds returns the wire names of every kind err matches, in table order:
// the first is its kind (Of), the others are sent along so that the
// caller's error matches them too.
func (t ErrorTable) Kinds(err error) []string {
	var names []string
	for _, k := range t {
		for _, e := range k.Errors {
			if errors.Is(err, e) {
				names = append(names, k.Name)
				break
			}
		}
	}
	return names
}

// Remote returns an error that crossed the plugin boundary: its message is
// msg and it matches (errors.Is) every error of the named kinds, then every
// error in also. Names the table does not know add nothing; Kind is the
// first name the table knows.
func (t ErrorTable) Remote(msg string, names []string, also ...error) *RemoteError {
	re := &RemoteError{Msg: msg}
	for _, n := range names {
		if k, ok := t.Named(n); ok {
			if re.Kind == "" {
				re.Kind = k.Name
			}
			re.errs = append(re.errs, k.Errors...)
		}
	}
	re.errs = append(re.errs, also...)
	return re
}

// RemoteError is an error a plugin returned, rebuilt on the caller's side
// by ErrorTable.Remote: it carries the plugin's message and matches the
// errors of its kind with errors.Is.
type RemoteError struct {
	// Kind is the kind's wire name; empty for an error of no known kind.
	Kind string
	// Msg is the plugin's message.
	Msg  string
	errs []error
}

// Error implements error.
func (e *RemoteError) Error() string { return e.Msg }

// Unwrap returns the errors of the kind, for errors.Is and errors.As.
func (e *RemoteError) Unwrap() []error { return e.errs }

// StatusError returns a gRPC status error with code, message msg and detail
// (the kind's ErrorInfo message; nil: none). A detail that cannot be
// attached is left out: the code still carries the kind.
func StatusError(code codes.Code, msg string, detail protoadapt.MessageV2) error {
	st := status.New(code, msg)
	if detail != nil {
		if withInfo, err := st.WithDetails(protoadapt.MessageV1Of(detail)); err == nil {
			st = withInfo
		}
	}
	return st.Err()
}

// DetailOf returns the first detail of st that is a T (the kind's
// ErrorInfo message), as sent by StatusError.
func DetailOf[T any](st *status.Status) (T, bool) {
	for _, d := range st.Details() {
		if v, ok := d.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// LostConnection rewrites the status of a call that failed with
// codes.Canceled while the caller's ctx is still alive: the connection to
// the plugin was lost (it died and the host is restarting it), which is
// codes.Unavailable. Other errors are returned as they are.
func LostConnection(ctx context.Context, st *status.Status) *status.Status {
	if st.Code() == codes.Canceled && ctx.Err() == nil {
		return status.New(codes.Unavailable, "the plugin connection was lost: "+st.Message())
	}
	return st
}

// Recover turns a panic of a plugin's implementation into a codes.Internal
// status error in *err, naming what panicked (what, e.g. `storage read of
// "k"`) with the stack, so the plugin keeps serving. Defer it in every
// server method:
//
//	defer plugin.Recover(&err, "storage read of %q", key)
func Recover(err *error, format string, args ...any) {
	if r := recover(); r != nil {
		*err = status.Errorf(codes.Internal, "%s panicked: %v\n%s", fmt.Sprintf(format, args...), r, debug.Stack())
	}
}
