package storage

import (
	"context"
	"io"
)

// Storage is a storage backend. Methods may be called concurrently, also
// for the same key. Every blocking call honours its context: when ctx ends
// the call returns promptly with an error matching ctx.Err().
type Storage interface {
	// Info reports the backend's name and where it stores objects. It must
	// be cheap.
	Info(ctx context.Context, req *InfoRequest) (*InfoResponse, error)
	// Write stores req.Size bytes read from req.Body under req.Key,
	// atomically: the object is visible only once Write returns nil, and a
	// failed, cancelled, short or long write leaves nothing readable under
	// the key (an existing object stays as it was). A Body with fewer or
	// more than Size bytes fails with ErrSizeMismatch.
	Write(ctx context.Context, req *WriteRequest) (*WriteResponse, error)
	// Read opens the range [Offset, Offset+Length) of the object under
	// req.Key (Length ToEnd: to its end). A missing key gives ErrNotFound and
	// a range that does not fit ErrInvalidRange, from Read itself. The caller
	// must close the returned Body; ctx governs reading it too.
	Read(ctx context.Context, req *ReadRequest) (*ReadResponse, error)
	// Delete removes the objects under req.Keys. Missing keys are not an
	// error.
	Delete(ctx context.Context, req *DeleteRequest) (*DeleteResponse, error)
	// List returns the objects whose keys start with req.Prefix (every
	// object for an empty prefix), sorted by key. Writes in progress are not
	// listed.
	List(ctx context.Context, req *ListRequest) (*ListResponse, error)
}

// ReaderInto is implemented by the clients NewClient returns: ReadInto has
// the plugin write a range of an object straight into shared memory the
// caller names, so the bytes do not travel back over the connection. Plugin
// authors do not implement it: the SDK's server answers it for every plugin
// from the plugin's Read.
type ReaderInto interface {
	ReadInto(ctx context.Context, req *ReadIntoRequest) (*ReadIntoResponse, error)
}

// ReadIntoRequest asks for Length bytes of the object under Key from Offset
// to be written at TargetOffset of TargetPath, which the plugin opens and
// maps read-write: /proc/<pid>/fd/<n> of the object store's arena memfd
// (the plugin runs as the same user). The SDK's server writes only into
// the object store's own memory: a target that is not a memfd named
// ArenaName (a regular file, a /dev/shm file, a device, ...) is refused
// with an error matching ErrPermission, and nothing is written.
type ReadIntoRequest struct {
	Key          string
	Offset       int64
	Length       int64
	TargetPath   string
	TargetOffset int64
}

// ArenaName is the name goray's object store gives its arena memfd
// (shown as "/memfd:goray-store (deleted)" in /proc/<pid>/fd): the only
// kind of target ReadInto writes into.
const ArenaName = "goray-store"

// ReadIntoResponse is ReadInto's answer (empty for now; it can grow).
type ReadIntoResponse struct{}

// ToEnd as a ReadRequest.Length reads to the end of the object.
const ToEnd = -1

// ChunkSize is the largest piece of an object one gRPC message carries.
const ChunkSize = 1 << 20

// InfoRequest asks for Info.
type InfoRequest struct{}

// InfoResponse describes a storage backend.
type InfoResponse struct {
	// Name is the backend's name ("fs", "s3").
	Name string
	// Location is the human-readable root objects are stored under
	// ("/var/spill", "s3://bucket/prefix"); it may be empty before the
	// plugin is configured.
	Location string
}

// WriteRequest stores an object.
type WriteRequest struct {
	// Key names the object (see ValidKey).
	Key string
	// Size is the object's exact length in bytes.
	Size int64
	// Body yields the object's bytes; nil is an empty body. Write reads it
	// on the calling goroutine, to its end (to check that it has no more
	// than Size bytes), and does not close it. A Read of Body that blocks
	// holds Write up, even past the end of its context: a Body fed by
	// something slow should itself give up when the context ends.
	Body io.Reader
}

// WriteResponse describes a stored object.
type WriteResponse struct {
	// URL names the stored file for humans and logs
	// ("file:///var/spill/k", "s3://bucket/prefix/k"). Read takes the key,
	// not the URL.
	URL string
}

// ReadRequest asks for a byte range of an object.
type ReadRequest struct {
	// Key names the object.
	Key string
	// Offset is where the range starts, in bytes from the object's start;
	// it may equal the object's size (for an empty range at the end).
	Offset int64
	// Length is the range's length in bytes, or ToEnd. Zero is an empty
	// range (of an object that must exist).
	Length int64
}

// ReadResponse carries the requested range.
type ReadResponse struct {
	// Body yields exactly Size bytes. The caller must close it; closing it
	// early abandons the rest of the range.
	Body io.ReadCloser
	// Size is the range's length in bytes.
	Size int64
}

// DeleteRequest removes objects.
type DeleteRequest struct {
	Keys []string
}

// DeleteResponse answers DeleteRequest.
type DeleteResponse struct{}

// ListRequest lists objects by key prefix.
type ListRequest struct {
	// Prefix selects the keys that start with it (a plain string prefix:
	// "s1/node-a" matches "s1/node-ab/x"); empty lists every object.
	Prefix string
}

// ListResponse holds the objects found, sorted by key.
type ListResponse struct {
	Objects []ObjectInfo
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key  string
	Size int64
}
