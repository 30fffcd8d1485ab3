// Handles: this process's references to objects, counted by the object
// table and released explicitly or by the garbage collector.

package core

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Handle is one reference to an object held by this process. The runtime
// counts handles; a handle released explicitly or collected by the garbage
// collector drops its count, and the object is freed cluster-wide once no
// handle, task or borrower references it.
type Handle struct {
	ID    ids.ObjectID
	Owner *pb.Address
	st    *handleState
}

type handleState struct {
	released atomic.Bool
	t        *objectTable
	id       ids.ObjectID
}

func (s *handleState) release() {
	if s.released.CompareAndSwap(false, true) {
		s.t.removeLocal(s.id)
	}
}

// NewHandle creates a handle for an object owned by owner (nil: this
// process) and counts it.
func (cw *CoreWorker) NewHandle(id ids.ObjectID, owner *pb.Address) *Handle {
	if owner == nil {
		owner = cw.addr
	}
	cw.objects.addLocal(id, owner)
	return cw.wrapHandle(id, owner)
}

// wrapHandle creates a handle for a count already taken.
func (cw *CoreWorker) wrapHandle(id ids.ObjectID, owner *pb.Address) *Handle {
	st := &handleState{t: cw.objects, id: id}
	h := &Handle{ID: id, Owner: owner, st: st}
	runtime.AddCleanup(h, func(s *handleState) { s.release() }, st)
	return h
}

// Release drops the handle's reference now instead of at garbage collection.
// Using the handle afterwards fails with ErrObjectFreed.
func (h *Handle) Release() {
	if h != nil && h.st != nil {
		h.st.release()
	}
}

// Released reports whether Release was called.
func (h *Handle) Released() bool { return h == nil || h.st == nil || h.st.released.Load() }

// Info returns the reference as a codec.RefInfo.
func (h *Handle) Info() codec.RefInfo { return codec.RefInfo{ID: h.ID, Owner: h.Owner} }

// ------------------------------------------------------------ put and get

// FlushBorrows registers this process as a borrower of every reference it
// received since the last flush (sdk Get calls it after decoding).
func (cw *CoreWorker) FlushBorrows(ctx context.Context) { cw.objects.flushBorrows(ctx) }

// FailedHandle returns an owned handle whose object failed with err.
func (cw *CoreWorker) FailedHandle(err error) *Handle {
	id := ids.ObjectIDFor(cw.idgen.Next(), 0)
	cw.objects.newOwned(id, nil, 1)
	var re *RemoteError
	if errors.As(err, &re) {
		cw.objects.complete(id, errorReturn(id, re), nil, false)
	} else {
		cw.objects.complete(id, nil, err, false)
	}
	return cw.wrapHandle(id, cw.addr)
}
