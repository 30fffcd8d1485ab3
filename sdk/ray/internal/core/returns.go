// Several return values (Ray's num_returns): a task or method returning n
// values makes n objects, ObjectIDFor(task, 1..n), each owned, freed and
// rebuilt on its own.

package core

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// MaxReturns bounds the values one task may return.
const MaxReturns = 64

// Results is what the invoker of a function with several return values
// returns: one value per return, in order.
type Results []any

// numReturns is how many objects spec's task returns (at least one).
func numReturns(spec *pb.TaskSpec) int { return max(int(spec.GetNumReturns()), 1) }

// returnIDs returns the object ids of the returns of task spec.
func returnIDs(spec *pb.TaskSpec) []ids.ObjectID {
	tid := ids.MustFromBytes(spec.TaskId)
	out := make([]ids.ObjectID, numReturns(spec))
	for i := range out {
		out[i] = ids.ObjectIDFor(tid, uint32(i+1))
	}
	return out
}

// ownReturns creates the owned, pending objects of rec's returns, each
// with one handle: the first's, and the others' (nil for one return).
func (cw *CoreWorker) ownReturns(rec *taskRecord) (*Handle, []*Handle) {
	cw.objects.newOwned(rec.retID, rec, 1)
	first := cw.wrapHandle(rec.retID, cw.addr)
	if numReturns(rec.spec) == 1 {
		return first, nil
	}
	rest := returnIDs(rec.spec)[1:]
	more := make([]*Handle, len(rest))
	for i, id := range rest {
		cw.objects.newOwned(id, rec, 1)
		more[i] = cw.wrapHandle(id, cw.addr)
	}
	return first, more
}

// completeReturns records the values of rec's returns from its final reply
// (ret the first, more the others) or from a failure: an error object in
// ret, or sysErr, fails every return. A reply that lacks returns fails
// those it lacks.
func (cw *CoreWorker) completeReturns(rec *taskRecord, ret *pb.ReturnObject, more []*pb.ReturnObject, sysErr error, nestedRegistered bool) {
	cw.objects.complete(rec.retID, ret, sysErr, nestedRegistered)
	if numReturns(rec.spec) == 1 {
		return
	}
	rest := returnIDs(rec.spec)[1:]
	failed := sysErr != nil || ret == nil || codec.FormatOf(ret.Metadata) == codec.FormatError
	for i, id := range rest {
		switch {
		case i < len(more) && !failed:
			cw.objects.complete(id, more[i], nil, nestedRegistered)
		case failed && ret != nil:
			cw.objects.complete(id, &pb.ReturnObject{ObjectId: id.Bytes(), Metadata: ret.Metadata, Data: ret.Data, Size: ret.Size}, sysErr, false)
		case failed:
			cw.objects.complete(id, nil, sysErr, false)
		default:
			re := &RemoteError{Function: rec.spec.Function, TaskID: ids.MustFromBytes(rec.spec.TaskId).String(), Kind: KindArgType, Type: "ReturnCountError",
				Message: fmt.Sprintf("the worker sent %d of %d return values", len(more)+1, len(rest)+1)}
			cw.objects.complete(id, errorReturn(id, re), nil, false)
		}
	}
}

// encodeReturns encodes a successful result for its return objects: one
// value, or a Results of spec's num_returns values.
func (e *executor) encodeReturns(ctx context.Context, spec *pb.TaskSpec, result any) (*pb.ReturnObject, []*pb.ReturnObject, error) {
	if numReturns(spec) == 1 {
		id, _ := ids.ObjectIDFromBytes(spec.ReturnId)
		ret, err := e.encodeReturn(ctx, spec, id, result)
		return ret, nil, err
	}
	rets := returnIDs(spec)
	vals, ok := result.(Results)
	if !ok || len(vals) != len(rets) {
		return nil, nil, fmt.Errorf("goray: %s must return %d values, returned %T", spec.Function, len(rets), result)
	}
	out := make([]*pb.ReturnObject, len(rets))
	for i, id := range rets {
		ret, err := e.encodeReturn(ctx, spec, id, vals[i])
		if err != nil {
			e.cw.objects.freeStored(out[:i])
			return nil, nil, fmt.Errorf("return value %d: %w", i+1, err)
		}
		out[i] = ret
	}
	return out[0], out[1:], nil
}

// encodeReturn encodes one return value as object id: inline when small,
// else in this node's store. References inside it are lent to the caller.
func (e *executor) encodeReturn(ctx context.Context, spec *pb.TaskSpec, id ids.ObjectID, v any) (*pb.ReturnObject, error) {
	f, data, refs, actors, err := codec.EncodeNoting(v)
	if err != nil {
		return nil, err
	}
	// A returned handle of an actor this task created reaches the caller
	// once the actor is registered.
	if err := e.cw.actors.awaitAll(ctx, actors); err != nil {
		return nil, err
	}
	e.lendToCaller(ctx, spec.Owner, refs)
	ret, err := e.cw.storeValue(ctx, id, spec.Owner, f, data, true)
	if err != nil {
		return nil, err
	}
	ret.Nested = refsToPB(refs)
	return ret, nil
}

// freeStored frees the store copies among rets, values made for a reply
// that is not sent.
func (t *objectTable) freeStored(rets []*pb.ReturnObject) {
	t.mu.Lock()
	n := len(t.frees)
	for _, r := range rets {
		if r.GetInStore() {
			if id, err := ids.ObjectIDFromBytes(r.ObjectId); err == nil {
				t.queueFreeLocked(id, r, nil)
			}
		}
	}
	added := len(t.frees) > n
	t.mu.Unlock()
	if added {
		t.signal()
	}
}
