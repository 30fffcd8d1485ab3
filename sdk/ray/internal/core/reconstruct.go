package core

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Lineage reconstruction (as in Ray): the owner of an object whose only
// copy was lost with its node re-runs the normal task that made it — the
// owner keeps every task's record (its lineage) while the task's result is
// referenced — within the task's MaxRetries. Arguments the task took by
// reference must still exist.

// recoverLost makes an owned object whose primary copy's node died readable
// again: restored by this node's raylet from the copy the dead node spilled
// to shared storage, else rebuilt by re-running its task. It returns the
// object's current record; objects that are not lost, or not owned here,
// come back unchanged.
func (cw *CoreWorker) recoverLost(ctx context.Context, id ids.ObjectID, ret *pb.ReturnObject) (*pb.ReturnObject, error) {
	if ret == nil || !ret.InStore {
		return ret, nil
	}
	node, err := ids.FromBytes(ret.NodeId)
	if err != nil || node.IsNil() || node == cw.nodeID || !cw.objects.owns(id) {
		return ret, nil
	}
	if dead, _ := cw.nodeDead(node); !dead {
		return ret, nil
	}
	err = cw.pullObject(ctx, id, node, cw.addr) // records the new location
	if err == nil {
		return cw.objects.result(id)
	}
	if !errors.Is(err, ErrObjectLost) {
		return nil, err
	}
	return cw.rebuilt(ctx, id, node, err)
}

// rebuilt reconstructs object id, lost with node, and returns its new
// record; objects this process does not own stay lost.
func (cw *CoreWorker) rebuilt(ctx context.Context, id ids.ObjectID, node ids.ID, lost error) (*pb.ReturnObject, error) {
	if err := cw.reconstruct(ctx, id, node, lost); err != nil {
		return nil, err
	}
	return cw.objects.result(id)
}

// reconstruct re-runs the task that made owned object id, whose copy on
// node was lost (lost says how), and waits for the new copy. Concurrent
// callers share one re-run; a caller that finds the object already rebuilt
// (no longer on node) returns at once. It returns lost, with the reason,
// when the object cannot be rebuilt.
func (cw *CoreWorker) reconstruct(ctx context.Context, id ids.ObjectID, node ids.ID, lost error) error {
	t := cw.objects
	t.mu.Lock()
	o := t.objs[id]
	if o == nil || !o.owned || o.task == nil || o.task.spec.Kind != pb.TaskKind_TASK_KIND_NORMAL {
		t.mu.Unlock()
		return lost
	}
	rec := o.task
	start := false
	if o.done {
		if o.ret == nil || string(o.ret.NodeId) != string(node.Bytes()) {
			t.mu.Unlock()
			return nil // rebuilt (or restored) meanwhile
		}
		if o.ret != nil && len(o.ret.Nested) > 0 {
			t.mu.Unlock()
			return lost // its value holds references: not rebuilt (their counts would double)
		}
		o.done, o.ret, o.err = false, nil, nil
		o.ready = make(chan struct{})
		start = true
	}
	ch := o.ready
	t.mu.Unlock()
	if start {
		cw.log.Warn("object lost with its node; re-running the task that made it", "object", id, "task", rec.spec.Function, "node", node.Short())
		if err := cw.submitter.resubmit(rec); err != nil {
			cw.submitter.fail(rec, &ObjectError{ObjectID: id, Kind: ErrObjectLost,
				Detail: fmt.Sprintf("%s; it cannot be rebuilt: %v", lostDetail(lost), err)})
		}
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return ctx.Err()
	case <-cw.closed:
		return ErrShutdown
	}
	ret, err := t.result(id)
	if err == nil && ret != nil && codec.FormatOf(ret.Metadata) == codec.FormatError {
		err = decodeRemoteError(ret.Data)
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrObjectLost) {
		return err
	}
	// The object stays lost, with the reason the re-run failed, for every
	// later reader too.
	lostErr := &ObjectError{ObjectID: id, Kind: ErrObjectLost,
		Detail: fmt.Sprintf("%s; re-running its task failed: %v", lostDetail(lost), err)}
	t.mu.Lock()
	if o := t.objs[id]; o != nil && o.done {
		o.ret, o.err = nil, lostErr
	}
	t.mu.Unlock()
	return lostErr
}

func lostDetail(err error) string {
	if oe, ok := err.(*ObjectError); ok && oe.Detail != "" {
		return oe.Detail
	}
	return err.Error()
}

// resubmit queues a finished task again (to rebuild its lost result) as its
// next attempt, holding its reference arguments until it finishes.
func (s *submitter) resubmit(rec *taskRecord) error {
	s.mu.Lock()
	if int(rec.spec.Attempt) >= int(rec.spec.MaxRetries) {
		s.mu.Unlock()
		return fmt.Errorf("task %s has no retries left (MaxRetries %d)", rec.spec.Function, rec.spec.MaxRetries)
	}
	rec.spec = proto.Clone(rec.spec).(*pb.TaskSpec)
	rec.spec.Attempt++
	rec.ctx, rec.cancel = context.WithCancel(s.cw.ctx)
	rec.cancelled = false
	rec.state = statePendingLease
	rec.errMsg = ""
	s.mu.Unlock()
	if missing := s.cw.objects.addSubmittedIfPresent(rec.deps); missing != nil {
		// The caller fails the task, which releases what was counted.
		return fmt.Errorf("its argument %s is gone", missing)
	}
	s.enqueue(rec)
	return nil
}
