package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Where an owned object's store copies may be, so that its free reaches
// those nodes only (not every node of the cluster): its primary copy's
// node (ret.NodeId), this process's node (where its own reads pull to),
// and the node of every process that registered as its borrower. Another
// process can hold a copy only by pulling one while it borrows the object,
// and materialize sends its borrower registration (which names its node)
// before it pulls; a node, once recorded, stays recorded until the free,
// even after its process stopped borrowing, because the copy outlives the
// borrow. See "Ownership" in docs/architecture.md.

// pendingFree is a store object to free and the other nodes that may hold
// a copy of it.
type pendingFree struct {
	id    ids.ObjectID
	nodes []ids.ID
}

// addCopyNodeLocked records that node may hold a copy of o; t.mu is held.
func (o *object) addCopyNodeLocked(node []byte) {
	id, err := ids.FromBytes(node)
	if err != nil || id.IsNil() {
		return
	}
	for _, n := range o.copies {
		if n == id {
			return
		}
	}
	o.copies = append(o.copies, id)
}

// addCopyNode records that node may hold a copy of owned object id.
func (t *objectTable) addCopyNode(id ids.ObjectID, node ids.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.objs[id]; o != nil && o.owned {
		o.addCopyNodeLocked(node.Bytes())
	}
}

// queueFreeLocked queues the free of store object id, whose record is ret
// and whose copies may be on nodes besides its primary copy's; t.mu is
// held.
func (t *objectTable) queueFreeLocked(id ids.ObjectID, ret *pb.ReturnObject, nodes []ids.ID) {
	if primary, err := ids.FromBytes(ret.GetNodeId()); err == nil && !primary.IsNil() && !containsID(nodes, primary) {
		nodes = append(nodes, primary)
	}
	t.frees = append(t.frees, pendingFree{id: id, nodes: nodes})
}

func containsID(xs []ids.ID, x ids.ID) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// sendFrees asks the local raylet to free objects here and on the nodes
// that may hold a copy (ObjectCopies). A raylet that does not serve it
// (a test's fake) gets the old broadcast free.
func (t *objectTable) sendFrees(ctx context.Context, frees []pendingFree) error {
	if t.cw.rayletCC != nil {
		req := &pb.FreeObjectCopiesRequest{Objects: make([]*pb.ObjectCopyNodes, 0, len(frees))}
		for _, f := range frees {
			o := &pb.ObjectCopyNodes{ObjectId: f.id.Bytes()}
			for _, n := range f.nodes {
				if n != t.cw.nodeID {
					o.NodeIds = append(o.NodeIds, n.Bytes())
				}
			}
			req.Objects = append(req.Objects, o)
		}
		_, err := pb.NewObjectCopiesClient(t.cw.rayletCC).FreeObjectCopies(ctx, req)
		if status.Code(err) != codes.Unimplemented {
			return err
		}
	}
	req := &pb.FreeObjectsRequest{Broadcast: true}
	for _, f := range frees {
		req.ObjectIds = append(req.ObjectIds, f.id.Bytes())
	}
	_, err := t.cw.raylet.FreeObjects(ctx, req)
	return err
}

// maxNoted bounds the objects noteCopy remembers having told owners of.
const maxNoted = 4096

// noteCopy makes sure the owner of borrowed object id has recorded this
// process's node as one that may hold a copy, before the copy is pulled
// here. A registered borrow names the node already; a queued one is sent
// now; a process that holds no entry (a task's executor reading a
// by-reference argument, which the submitter keeps alive) registers and
// unregisters in one UpdateBorrowers, which the owner applies in that
// order: the node stays recorded, no borrow does. Objects noted are
// remembered (a bounded set), so that tasks reading one argument here
// tell its owner once.
func (t *objectTable) noteCopy(ctx context.Context, id ids.ObjectID, owner *pb.Address) {
	t.mu.Lock()
	o := t.objs[id]
	switch {
	case o != nil && o.registered:
		t.mu.Unlock()
		return
	case o != nil:
		t.mu.Unlock()
		t.flushBorrows(ctx)
		return
	}
	_, done := t.noted[id]
	t.mu.Unlock()
	if done || owner == nil {
		return
	}
	// Under borrowMu, re-checked: a registration queued meanwhile is sent
	// after this note, so the note's removal never undoes it.
	t.borrowMu.Lock()
	defer t.borrowMu.Unlock()
	t.mu.Lock()
	o = t.objs[id]
	t.mu.Unlock()
	if o != nil {
		return // borrowed meanwhile: its registration names the node
	}
	t.sendBorrowers(ctx, owner, t.cw.addr, []ids.ObjectID{id}, []ids.ObjectID{id})
	t.mu.Lock()
	if t.noted == nil || len(t.noted) >= maxNoted {
		t.noted = map[ids.ObjectID]struct{}{}
	}
	t.noted[id] = struct{}{}
	t.mu.Unlock()
}

// copyNodes returns the nodes besides lost that may hold a copy of owned
// object id and are not known to be dead: this node first (a copy here
// needs no transfer), then the others recorded.
func (cw *CoreWorker) copyNodes(id ids.ObjectID, lost ids.ID) []ids.ID {
	t := cw.objects
	t.mu.Lock()
	var recorded []ids.ID
	if o := t.objs[id]; o != nil && o.owned {
		recorded = append(recorded, o.copies...)
	}
	t.mu.Unlock()
	out := []ids.ID{cw.nodeID}
	for _, n := range recorded {
		if n == lost || n == cw.nodeID {
			continue
		}
		if dead, _ := cw.nodeDead(n); !dead {
			out = append(out, n)
		}
	}
	return out
}

// fromLiveCopy makes owned object id, whose copy on node lost is gone (or
// out of reach), readable again from a live copy on another node, as Ray's
// object directory would before re-running the task: a copy in this
// node's store, else one pulled from a node recorded as holding a copy
// (in memory, or spilled there, which that node restores to serve it).
// The copy here becomes the object's primary copy (claim) and the owner
// records this node as its location. It reports whether a copy was found;
// the error says why each candidate failed.
func (cw *CoreWorker) fromLiveCopy(ctx context.Context, id ids.ObjectID, lost ids.ID) (bool, error) {
	var errs []error
	for _, n := range cw.copyNodes(id, lost) {
		if n != cw.nodeID {
			nctx, stop := cw.untilNodeDies(ctx, n)
			err := cw.pullOnce(nctx, id, n, cw.addr)
			stop()
			if err != nil {
				if ctx.Err() != nil {
					return false, ctx.Err()
				}
				errs = append(errs, fmt.Errorf("node %s: %w", n.Short(), err))
				continue
			}
		}
		ok, err := cw.claim(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.Short(), err))
			continue
		}
		if !ok {
			continue // no copy here (this node), or evicted meanwhile
		}
		cw.objects.relocate(id, lost, cw.nodeID)
		// A node that is only unreachable may come back with its copy:
		// the free must reach it too.
		cw.objects.addCopyNode(id, lost)
		cw.log.Info("object's node is gone; a live copy is its primary copy now", "object", id, "lost_node", lost.Short(), "copy_node", n.Short(), "now_on", cw.nodeID.Short())
		return true, nil
	}
	return false, errors.Join(errs...)
}

// claim makes the sealed copy of owned object id in this node's store its
// primary copy, owned by this process: the raylet keeps it (spilling
// rather than evicting it). The copy is pinned meanwhile, so the create
// that claims it can only find it there. It reports whether there was a
// copy.
func (cw *CoreWorker) claim(ctx context.Context, id ids.ObjectID) (bool, error) {
	rep, err := cw.raylet.GetObjects(ctx, &pb.GetObjectsRequest{ObjectIds: [][]byte{id[:]}, ClientId: cw.id[:]})
	if err != nil {
		return false, fmt.Errorf("reading object %s from the store: %w", id, err)
	}
	if len(rep.Objects) != 1 || !rep.Objects[0].Found {
		return false, nil
	}
	so := rep.Objects[0]
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = cw.raylet.ReleaseObjects(rctx, &pb.ReleaseObjectsRequest{ObjectIds: [][]byte{id[:]}, ClientId: cw.id[:]})
	}()
	// The raylet adopts an existing sealed copy as the creator's result
	// (raylet objectManager.create): AlreadyExists is the expected answer.
	_, err = cw.raylet.CreateObject(ctx, &pb.CreateObjectRequest{ObjectId: id[:], DataSize: so.DataSize, Metadata: so.Metadata, Owner: cw.addr, CreatorId: cw.id[:]})
	if status.Code(err) != codes.AlreadyExists {
		return false, fmt.Errorf("claiming the copy of object %s here: %v", id, err)
	}
	return true, nil
}
