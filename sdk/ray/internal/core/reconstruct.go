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

// Lineage reconstruction (as in Ray): the owner of an object whose primary
// copy was lost with its node first looks for a live copy (one a reader
// pulled to another node: copies.go), and only when there is none re-runs
// the normal task that made it — the owner keeps every task's record (its
// lineage) while the task's result is referenced — within the task's
// MaxRetries. Arguments the task took by reference must still exist.

// recoverLost makes an owned object whose primary copy's node died readable
// again: restored by this node's raylet from the copy the dead node spilled
// to shared storage, else from a live copy on another node, else rebuilt by
// re-running its task. It returns the object's current record; objects that
// are not lost, or not owned here, come back unchanged.
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

// rebuilt makes object id, lost with node, readable again from a live
// copy, else by reconstructing it, and returns its new record; objects this
// process does not own stay lost.
func (cw *CoreWorker) rebuilt(ctx context.Context, id ids.ObjectID, node ids.ID, lost error) (*pb.ReturnObject, error) {
	if !cw.objects.owns(id) {
		return nil, lost
	}
	ok, cerr := cw.fromLiveCopy(ctx, id, node)
	if ok {
		return cw.objects.result(id)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if cerr != nil {
		lost = &ObjectError{ObjectID: id, Kind: ErrObjectLost, Detail: fmt.Sprintf("%s; no live copy: %v", lostDetail(lost), cerr)}
	}
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
	if !rec.crashRetriesLeft() {
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

// A task whose by-reference argument was lost with its node (the node died
// between the argument's resolution and the executor's pull) fails at the
// executor with KindObjectLost: the executor only borrows the argument and
// cannot rebuild it. Its owner, when it is this process, makes the argument
// readable again (a live copy, else lineage: rebuilt) and sends the task
// again, as Ray's owner reconstructs a dependency its task waits for. The
// attempt is not counted against MaxRetries; maxArgRebuilds bounds how
// often one task goes round.

// maxArgRebuilds bounds how often one task is sent again because an
// argument of it was lost.
const maxArgRebuilds = 3

// argLostReply reports whether rep fails its task because the executor
// could not read a by-reference argument whose node died.
func argLostReply(rep *pb.TaskReply) bool {
	if !rep.GetSystemError() || rep.GetRet() == nil || codec.FormatOf(rep.GetRet().GetMetadata()) != codec.FormatError {
		return false
	}
	var re *RemoteError
	return errors.As(decodeRemoteError(rep.GetRet().GetData()), &re) && re.Kind == KindObjectLost
}

// argRebuildLocked reports whether rec, whose attempt failed for a lost
// argument (argLostReply), is to have its arguments rebuilt and be sent
// again (rebuildArgs) instead of failing; s.mu is held.
func (s *submitter) argRebuildLocked(rec *taskRecord) bool {
	if rec.argRebuilds >= maxArgRebuilds || rec.cancelled || s.closed || rec.stream != nil {
		return false
	}
	rec.argRebuilds++
	rec.state = statePendingArgs
	return true
}

// rebuildArgs makes the lost by-reference arguments of rec that this
// process owns readable again and queues rec again; when none of them was
// lost (the lost argument is another process's) the task fails with rep,
// the executor's reply, as it would have.
func (cw *CoreWorker) rebuildArgs(rec *taskRecord, rep *pb.TaskReply, errType, errMsg string) {
	s := cw.submitter
	s.mu.Lock()
	spec := proto.Clone(rec.spec).(*pb.TaskSpec)
	s.mu.Unlock()
	rebuilt := 0
	for i, a := range spec.Args {
		if !a.GetByRef() || a.GetRef() == nil {
			continue
		}
		id, err := ids.ObjectIDFromBytes(a.Ref.GetObjectId())
		if err != nil || !cw.objects.owns(id) {
			continue
		}
		node, err := ids.FromBytes(a.GetNodeId())
		if err != nil || node.IsNil() || !cw.nodeDeadNow(rec.ctx, node) {
			continue
		}
		ret, err := cw.objects.result(id)
		if err == nil && ret != nil && string(ret.GetNodeId()) == string(node.Bytes()) {
			_, reason := cw.nodeDead(node)
			ret, err = cw.rebuilt(rec.ctx, id, node, &ObjectError{ObjectID: id, Kind: ErrObjectLost,
				Detail: fmt.Sprintf("its node %s died (%s) before task %s read it", node.Short(), reason, spec.Function)})
		}
		if err != nil {
			cw.log.Warn("an argument of a task was lost with its node and could not be made readable again", "task", spec.Function, "argument", i, "object", id, "error", err)
			s.fail(rec, fmt.Errorf("argument %d: %w", i, err))
			return
		}
		if ret != nil && ret.GetInStore() {
			a.NodeId = ret.NodeId
		}
		rebuilt++
	}
	if rebuilt == 0 {
		s.mu.Lock()
		rec.errType, rec.errMsg = errType, errMsg
		s.finishLocked(rec, stateFailed)
		s.mu.Unlock()
		cw.completeReply(rec, rep)
		cw.objects.removeSubmitted(rec.deps)
		return
	}
	cw.log.Warn("an argument of a task was lost with its node; sending the task again", "task", spec.Function, "arguments", rebuilt)
	s.mu.Lock()
	rec.spec = spec
	rec.argNode, rec.argBytes = ids.Nil, nil
	s.mu.Unlock()
	s.enqueue(rec)
}
