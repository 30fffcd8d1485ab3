package objstore

import (
	"errors"
	"fmt"

	"github.com/dustin/go-humanize"

	"github.com/goray-dev/goray/internal/ids"
)

// Sentinel errors. Store methods wrap them in an *ObjectError naming the
// object, so test with errors.Is.
var (
	// ErrObjectExists: Create for an id that is already in the store
	// (including an object freed but still pinned by readers).
	ErrObjectExists = errors.New("object already exists")
	// ErrObjectNotFound: the object is not in the store.
	ErrObjectNotFound = errors.New("object not found")
	// ErrNotSealable: Seal of an object that is already sealed or that was
	// created by another client.
	ErrNotSealable = errors.New("object cannot be sealed")
	// ErrAlreadySealed: Abort of an object that is already sealed.
	ErrAlreadySealed = errors.New("object is already sealed")
	// ErrInvalidSize: Create with a negative data size.
	ErrInvalidSize = errors.New("invalid object size")
	// ErrClosed: the store or mapping has been closed.
	ErrClosed = errors.New("object store closed")
	// ErrStoreFull: the arena has no free block large enough. The concrete
	// error is a *StoreFullError.
	ErrStoreFull = errors.New("object store full")
)

// ObjectError is returned by Store methods that fail for one object. Err is
// one of the sentinel errors above.
type ObjectError struct {
	Op  string // "create", "seal", "abort"
	ID  ids.ObjectID
	Err error
}

// Error implements error.
func (e *ObjectError) Error() string {
	return fmt.Sprintf("objstore: %s object %s: %v", e.Op, e.ID, e.Err)
}

// Unwrap returns the sentinel error.
func (e *ObjectError) Unwrap() error { return e.Err }

// StoreFullError reports a Create that could not be satisfied: either the
// arena does not have Requested free bytes or, through fragmentation, no
// single free block (LargestFree) is big enough. errors.Is(err, ErrStoreFull)
// holds.
type StoreFullError struct {
	Requested   int64 // data size asked for
	Used        int64 // bytes allocated in the arena
	Capacity    int64 // arena size
	LargestFree int64 // largest contiguous free block
	ObjectID    ids.ObjectID
}

// Error implements error.
func (e *StoreFullError) Error() string {
	return fmt.Sprintf("object store full: cannot allocate %s for object %s (used %s of %s, largest free block %s)",
		humanize.IBytes(uint64(e.Requested)), e.ObjectID,
		humanize.IBytes(uint64(e.Used)), humanize.IBytes(uint64(e.Capacity)),
		humanize.IBytes(uint64(e.LargestFree)))
}

// Is reports whether target is ErrStoreFull.
func (e *StoreFullError) Is(target error) bool { return target == ErrStoreFull }

// StoreFull reports true; the raylet maps errors with this method to a
// RESOURCE_EXHAUSTED status without importing this package.
func (e *StoreFullError) StoreFull() bool { return true }
