// Put, Get and Wait: storing values (inline or in the node's store) and
// reading them back, wherever they live.

package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/objstore"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Value is an object's encoded value. Data may point into shared memory;
// call Release when done with it.
type Value struct {
	Format codec.Format
	Data   []byte
	// Tensors are set for FormatTransport values: received through the
	// object's transport.
	Tensors []transport.Tensor
	release func()
}

// Release unpins the value's shared memory (no-op for inline values).
func (v *Value) Release() {
	if v != nil && v.release != nil {
		v.release()
		v.release = nil
	}
}

// Put stores v and returns an owned handle.
func (cw *CoreWorker) Put(ctx context.Context, v any) (*Handle, error) {
	f, data, refs, actors, err := codec.EncodeNoting(v)
	if err != nil {
		return nil, err
	}
	if err := cw.actors.awaitAll(ctx, actors); err != nil {
		return nil, err
	}
	id := ids.ObjectIDFor(cw.idgen.Next(), 0)
	ret, err := cw.storeValue(ctx, id, cw.addr, f, data, true)
	if err != nil {
		return nil, err
	}
	ret.Nested = refsToPB(refs)
	cw.objects.newOwned(id, nil, 1)
	cw.objects.complete(id, ret, nil, false)
	return cw.wrapHandle(id, cw.addr), nil
}

// storeValue keeps small values inline and writes large ones into the
// node's shared-memory store. copyInline copies inline data the caller may
// still mutate.
func (cw *CoreWorker) storeValue(ctx context.Context, id ids.ObjectID, owner *pb.Address, f codec.Format, data []byte, copyInline bool) (*pb.ReturnObject, error) {
	size := int64(len(data))
	if size <= cw.inlineLimit || cw.store == nil {
		if copyInline && f == codec.FormatRaw {
			data = bytes.Clone(data)
		}
		if data == nil {
			data = []byte{}
		}
		return &pb.ReturnObject{ObjectId: id.Bytes(), Metadata: f.Meta(), Data: data, Size: size}, nil
	}
	cw.objects.flushFrees()
	rep, err := cw.raylet.CreateObject(ctx, &pb.CreateObjectRequest{ObjectId: id[:], DataSize: size, Metadata: f.Meta(), Owner: owner, CreatorId: cw.id[:]})
	if status.Code(err) == codes.AlreadyExists {
		return cw.existingCopy(ctx, id, owner, f, data)
	}
	if err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			return nil, &RemoteError{Kind: KindStoreFull, Type: "StoreFullError", Message: status.Convert(err).Message(), Function: "put"}
		}
		return nil, fmt.Errorf("goray: creating object %s in the store: %w", id, err)
	}
	return cw.fillAndSeal(ctx, id, rep.Offset, f, data)
}

// fillAndSeal copies data into object id, created at offset in this
// node's store, and seals it.
func (cw *CoreWorker) fillAndSeal(ctx context.Context, id ids.ObjectID, offset int64, f codec.Format, data []byte) (*pb.ReturnObject, error) {
	size := int64(len(data))
	dst, err := cw.store.Slice(offset, size)
	if err != nil {
		return nil, err
	}
	objstore.Copy(dst, data) // with every core, for a large object
	// Seal even if the caller's context ended during the copy: an unsealed
	// object would hold its memory until this process exits.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := cw.raylet.SealObject(sctx, &pb.SealObjectRequest{ObjectId: id[:], Release: true}); err != nil {
		return nil, fmt.Errorf("goray: sealing object %s: %w", id, err)
	}
	return &pb.ReturnObject{ObjectId: id.Bytes(), Metadata: f.Meta(), InStore: true, NodeId: cw.nodeID.Bytes(), Size: size}, nil
}

// existingCopy is storeValue's result when object id exists already in
// this node's store: a task re-run to rebuild its lost result can land on
// a node where a copy of it lives (pulled by a reader before the result's
// node died). The raylet made that copy the primary one, owned by owner
// (objectManager.create); it is the result. A copy whose bytes differ (a
// task whose result is not deterministic) is kept all the same, with a
// warning: readers may have read it already. A copy still being written
// (a pull or a restore in flight) is waited for, until ctx ends.
func (cw *CoreWorker) existingCopy(ctx context.Context, id ids.ObjectID, owner *pb.Address, f codec.Format, data []byte) (*pb.ReturnObject, error) {
	back := newBackOff(time.Second)
	for {
		rep, err := cw.raylet.GetObjects(ctx, &pb.GetObjectsRequest{ObjectIds: [][]byte{id[:]}, ClientId: cw.id[:]})
		if err != nil {
			return nil, fmt.Errorf("goray: reading the existing copy of object %s: %w", id, err)
		}
		if len(rep.Objects) == 1 && rep.Objects[0].Found {
			so := rep.Objects[0]
			// Pinned, it can only be found by the create, which makes it
			// the primary copy owned by owner (it may have been sealed
			// after the first create found it unsealed).
			_, cerr := cw.raylet.CreateObject(ctx, &pb.CreateObjectRequest{ObjectId: id[:], DataSize: so.DataSize, Metadata: so.Metadata, Owner: owner, CreatorId: cw.id[:]})
			same := so.DataSize == int64(len(data))
			if same {
				if cur, err := cw.store.Slice(so.Offset, so.DataSize); err == nil {
					same = bytes.Equal(cur, data)
				}
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_, _ = cw.raylet.ReleaseObjects(rctx, &pb.ReleaseObjectsRequest{ObjectIds: [][]byte{id[:]}, ClientId: cw.id[:]})
			cancel()
			if status.Code(cerr) != codes.AlreadyExists {
				return nil, fmt.Errorf("goray: making the existing copy of object %s the result: %v", id, cerr)
			}
			if !same {
				cw.log.Warn("the result's object exists on this node with other bytes (the task is not deterministic); keeping the existing copy", "object", id, "existing_bytes", so.DataSize, "result_bytes", len(data))
			}
			meta := so.Metadata
			if len(meta) == 0 {
				meta = f.Meta()
			}
			return &pb.ReturnObject{ObjectId: id.Bytes(), Metadata: meta, InStore: true, NodeId: cw.nodeID.Bytes(), Size: so.DataSize}, nil
		}
		// Not sealed yet, or gone meanwhile: create it, or wait for it.
		rep2, err := cw.raylet.CreateObject(ctx, &pb.CreateObjectRequest{ObjectId: id[:], DataSize: int64(len(data)), Metadata: f.Meta(), Owner: owner, CreatorId: cw.id[:]})
		if err == nil {
			return cw.fillAndSeal(ctx, id, rep2.Offset, f, data)
		}
		if status.Code(err) != codes.AlreadyExists {
			return nil, fmt.Errorf("goray: creating object %s in the store: %w", id, err)
		}
		t := time.NewTimer(back.NextBackOff())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("goray: object %s exists unsealed in the store (a transfer in flight) and %w", id, ctx.Err())
		}
	}
}

// Get waits for the object and returns its value. Remote errors come back
// as errors.
func (cw *CoreWorker) Get(ctx context.Context, h *Handle) (*Value, error) {
	if h.Released() {
		return nil, &ObjectError{ObjectID: h.ID, Kind: ErrObjectFreed, Detail: "the reference was released"}
	}
	if ch, err := cw.objects.readyChan(h.ID); err == nil {
		select {
		case <-ch:
		default:
			// This task waits: lend its CPU to the node meanwhile.
			defer cw.blocked()()
		}
	}
	ret, err := cw.objects.wait(ctx, h.ID)
	if err != nil {
		return nil, err
	}
	runtime.KeepAlive(h)
	v, err := cw.materialize(ctx, ret, h.Owner)
	if err != nil {
		return nil, err
	}
	if v.Format == codec.FormatError {
		defer v.Release()
		return nil, decodeRemoteError(v.Data)
	}
	if v.Format == codec.FormatTransport {
		ts, err := cw.receiveTensors(ctx, v.Data)
		v.Release()
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The caller's own deadline ended the transfer: a Get timeout
				// (it still matches ErrTransferFailed through Unwrap).
				return nil, &GetTimeoutError{ObjectID: h.ID, Err: err}
			}
			return nil, err
		}
		v = &Value{Format: codec.FormatTransport, Tensors: ts}
	}
	return v, nil
}

// maxPullAttempts bounds how often materialize pulls a copy that keeps
// being evicted before it could pin it.
const maxPullAttempts = 8

// materialize turns a return record into readable bytes. An object in
// another node's store is first pulled into this node's (owner is the
// object's owner, whose death frees the copy).
func (cw *CoreWorker) materialize(ctx context.Context, ret *pb.ReturnObject, owner *pb.Address) (*Value, error) {
	f := codec.FormatOf(ret.Metadata)
	if !ret.InStore {
		return &Value{Format: f, Data: ret.Data}, nil
	}
	id, _ := ids.ObjectIDFromBytes(ret.ObjectId)
	node, err := ids.FromBytes(ret.NodeId)
	remote := err == nil && !node.IsNil() && node != cw.nodeID
	var so *pb.StoreObject
	// A pulled copy may be evicted (the node needed room) between the pull
	// and the read, which pins it: pull it again, a few times (a store under
	// heavy pressure on a loaded machine can lose it more than twice).
	if remote && !cw.isSelf(owner) {
		// The owner learns this node before a copy lands here, so that
		// its free reaches the copy (copies.go).
		cw.objects.noteCopy(ctx, id, owner)
	}
	for attempt := 0; ; attempt++ {
		if remote {
			if err := cw.pullObject(ctx, id, node, owner); err != nil {
				if !errors.Is(err, ErrObjectLost) {
					return nil, err
				}
				// Its node died with the only copy: its owner rebuilds it
				// (lineage reconstruction); for others it stays lost.
				fresh, rerr := cw.rebuilt(ctx, id, node, err)
				if rerr != nil {
					return nil, rerr
				}
				return cw.materialize(ctx, fresh, owner)
			}
		}
		rep, err := cw.raylet.GetObjects(ctx, &pb.GetObjectsRequest{ObjectIds: [][]byte{id[:]}, ClientId: cw.id[:]})
		if err != nil {
			return nil, fmt.Errorf("goray: reading object %s from the store: %w", id, err)
		}
		if len(rep.Objects) == 1 && rep.Objects[0].Found {
			so = rep.Objects[0]
			break
		}
		if !remote || attempt == maxPullAttempts-1 {
			return nil, &ObjectError{ObjectID: id, Kind: ErrObjectFreed, Detail: "not in the node's object store"}
		}
	}
	if len(so.Metadata) > 0 {
		f = codec.FormatOf(so.Metadata)
	}
	data, err := cw.store.Slice(so.Offset, so.DataSize)
	if err != nil {
		return nil, err
	}
	return &Value{Format: f, Data: data, release: func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = cw.raylet.ReleaseObjects(ctx, &pb.ReleaseObjectsRequest{ObjectIds: [][]byte{id[:]}, ClientId: cw.id[:]})
	}}, nil
}

// Wait returns the indexes, in order, of at most n handles that are ready,
// waiting until n are or ctx ends (a ctx deadline is not an error for
// Wait; a ctx already done when it is called makes it look once). As
// Ray's wait, it never returns more than n: of the handles ready at once,
// the first n in hs are taken.
func (cw *CoreWorker) Wait(ctx context.Context, hs []*Handle, n int) ([]int, error) {
	chans := make([]<-chan struct{}, len(hs))
	for i, h := range hs {
		ch, err := cw.ReadyChan(h)
		if err != nil {
			return nil, err
		}
		chans[i] = ch
	}
	defer runtime.KeepAlive(hs)
	return cw.WaitChans(ctx, chans, n)
}

// ReadyChan returns a channel closed once h's object is ready (its value
// or its error is known).
func (cw *CoreWorker) ReadyChan(h *Handle) (<-chan struct{}, error) {
	if h.Released() {
		return nil, &ObjectError{ObjectID: h.ID, Kind: ErrObjectFreed, Detail: "the reference was released"}
	}
	return cw.objects.readyChan(h.ID)
}

// WaitChans is Wait of things that are ready once their channel is
// closed (objects, a stream's next item, a placement group's creation):
// the indexes, in order, of at most n of chans closed, waiting until n
// are or ctx ends.
func (cw *CoreWorker) WaitChans(ctx context.Context, chans []<-chan struct{}, n int) ([]int, error) {
	if n > len(chans) {
		n = len(chans)
	}
	isReady := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ready := make([]bool, len(chans))
	count := 0
	for i, ch := range chans {
		if isReady(ch) {
			ready[i] = true
			count++
		}
	}
	if count < n && ctx.Err() == nil {
		defer cw.blocked()()
		// Slow path: one goroutine per pending object reports readiness.
		done := make(chan struct{})
		defer close(done)
		notify := make(chan int, len(chans))
		for i, ch := range chans {
			if !ready[i] {
				go func(i int, ch <-chan struct{}) {
					select {
					case <-ch:
						notify <- i
					case <-done:
					}
				}(i, ch)
			}
		}
	loop:
		for count < n {
			select {
			case i := <-notify:
				ready[i] = true
				count++
			case <-ctx.Done():
				break loop
			case <-cw.closed:
				return nil, ErrShutdown
			}
		}
	}
	out := make([]int, 0, min(count, n))
	for i, r := range ready {
		if r && len(out) < n {
			out = append(out, i)
		}
	}
	return out, nil
}

func encodeRemoteError(e *RemoteError) []byte {
	b, err := msgpack.Marshal(e)
	if err != nil {
		b, _ = msgpack.Marshal(&RemoteError{Message: e.Message})
	}
	return b
}

func decodeRemoteError(b []byte) error {
	var e RemoteError
	if err := codec.Unmarshal(b, &e); err != nil {
		return fmt.Errorf("goray: undecodable remote error: %w", err)
	}
	return &e
}

// errorReturn encodes err as an error object.
func errorReturn(id ids.ObjectID, e *RemoteError) *pb.ReturnObject {
	d := encodeRemoteError(e)
	return &pb.ReturnObject{ObjectId: id.Bytes(), Metadata: codec.FormatError.Meta(), Data: d, Size: int64(len(d))}
}
