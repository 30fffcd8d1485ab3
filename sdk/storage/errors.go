package storage

import (
	"errors"
	"fmt"
)

// Errors every storage backend reports; match them with errors.Is. They keep
// their identity across the plugin boundary.
var (
	// ErrNotFound means no object is stored under the key.
	ErrNotFound = errors.New("object not found")
	// ErrBadKey means a key (or a List prefix) breaks the rules of ValidKey.
	ErrBadKey = errors.New("bad storage key")
	// ErrUnavailable means the backend is down, unreachable, too slow or not
	// configured yet. The runtime retries such calls with backoff.
	ErrUnavailable = errors.New("storage backend unavailable")
	// ErrPermission means the backend refused access: wrong credentials, a
	// denied request, a directory the plugin may not write.
	ErrPermission = errors.New("storage access denied")
	// ErrSizeMismatch means a Write's Body yielded fewer or more bytes than
	// its Size (or Size was negative).
	ErrSizeMismatch = errors.New("object size mismatch")
	// ErrInvalidRange means a Read's range does not fit inside the object.
	ErrInvalidRange = errors.New("invalid byte range")
	// ErrNotSupported means the plugin predates a method (ReadInto): the
	// caller falls back to the streaming Read.
	ErrNotSupported = errors.New("not supported by this storage plugin")
)

// Operation names used in StorageError.Op.
const (
	OpInfo   = "info"
	OpWrite  = "write"
	OpRead   = "read"
	OpDelete = "delete"
	OpList   = "list"
	// OpReadInto is ReaderInto.ReadInto.
	OpReadInto = "read into"
)

// StorageError names the operation and the key of a failed storage call.
// Implementations may return plain errors; the plugin bridge wraps them.
type StorageError struct {
	// Op is the operation: OpInfo, OpWrite, OpRead, OpDelete or OpList.
	Op string
	// Key is the object's key (a List's prefix), empty when none applies.
	Key string
	// Err is the cause.
	Err error
}

// Error implements error.
func (e *StorageError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("storage %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("storage %s of %q: %v", e.Op, e.Key, e.Err)
}

// Unwrap returns the cause.
func (e *StorageError) Unwrap() error { return e.Err }

// Errorf returns a *StorageError for the operation and key whose cause is
// fmt.Errorf(format, args...); use %w with a sentinel error.
func Errorf(op, key, format string, args ...any) error {
	return &StorageError{Op: op, Key: key, Err: fmt.Errorf(format, args...)}
}

// wrap returns err as a *StorageError for op and key, unless it already is
// one.
func wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var se *StorageError
	if errors.As(err, &se) {
		return err
	}
	return &StorageError{Op: op, Key: key, Err: err}
}
