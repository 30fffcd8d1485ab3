package raylet

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/raylet/internal/spill"
)

// ObjectStore is what the raylet needs from the node's shared-memory object
// store. Client ids are the worker or driver ids that hold pins.
//
// Errors returned by Create and Seal reach clients as gRPC status errors
// with the same message: an error with a method `StoreFull() bool` that
// returns true becomes codes.ResourceExhausted; one with `AlreadyExists()
// bool` returning true, or whose message says "already exists", becomes
// codes.AlreadyExists; anything else becomes codes.NotFound.
type ObjectStore interface {
	// Create allocates an unsealed object of dataSize bytes and returns its
	// offset in the arena.
	Create(id ids.ObjectID, dataSize int64, metadata []byte, client ids.ID) (offset int64, err error)
	// Seal makes an object immutable and visible; with release the
	// creator's pin is dropped.
	Seal(id ids.ObjectID, client ids.ID, release bool) error
	// Abort discards an unsealed object.
	Abort(id ids.ObjectID) error
	// GetEntries looks objects up, pinning the found ones for client.
	GetEntries(objs []ids.ObjectID, client ids.ID) []StoreEntry
	// Release drops client's pins on objs.
	Release(objs []ids.ObjectID, client ids.ID)
	// Free deletes objs (once unpinned).
	Free(objs []ids.ObjectID)
	// ReleaseClient drops every pin client holds.
	ReleaseClient(client ids.ID)
	// Usage reports the bytes and objects in use.
	Usage() StoreUsage
	// ListEntries lists every object, for introspection.
	ListEntries() []StoreEntry
	// SocketPath is the unix socket that hands out the arena's file
	// descriptor.
	SocketPath() string
	// Capacity is the arena size in bytes.
	Capacity() int64
	// Contains reports whether the object exists (sealed or not).
	Contains(id ids.ObjectID) bool
	// Data returns the arena bytes [offset, offset+size), for transfers
	// between nodes.
	Data(offset, size int64) []byte
}

// StoreEntry describes one object of the store (the spiller's view of an
// entry is the same type: see spill.Entry for its fields).
type StoreEntry = spill.Entry

// StoreUsage is the store's occupancy.
type StoreUsage struct {
	Used     int64
	Capacity int64
	Objects  int
}

// storeStatus converts a store error to a gRPC status error keeping its
// message.
func storeStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var full interface{ StoreFull() bool }
	if errors.As(err, &full) && full.StoreFull() {
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	var exists interface{ AlreadyExists() bool }
	if (errors.As(err, &exists) && exists.AlreadyExists()) || strings.Contains(err.Error(), "already exists") {
		return status.Error(codes.AlreadyExists, err.Error())
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.NotFound, err.Error())
}

func storeObject(e StoreEntry) *gorayv1.StoreObject {
	return &gorayv1.StoreObject{
		ObjectId: e.ID.Bytes(),
		Found:    e.Found,
		Offset:   e.Offset,
		DataSize: e.DataSize,
		Metadata: e.Metadata,
	}
}

func parseObjectIDs(bs [][]byte) ([]ids.ObjectID, error) {
	out := make([]ids.ObjectID, 0, len(bs))
	for _, b := range bs {
		o, err := ids.ObjectIDFromBytes(b)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		out = append(out, o)
	}
	return out, nil
}
