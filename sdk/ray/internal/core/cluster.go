package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Scheduling strategies of TaskOptions.Strategy.
const (
	// StrategyDefault is the hybrid policy: stay on the local (or the
	// argument-holding) node while it is not busy, else spread.
	StrategyDefault = iota
	// StrategySpread spreads tasks round-robin over the feasible nodes.
	StrategySpread
	// StrategyNodeAffinity runs on TaskOptions.AffinityNode (soft: or
	// elsewhere when that node is dead or cannot fit the task).
	StrategyNodeAffinity
)

// nodeDirectory caches the cluster's nodes (from the GCS) for finding other
// nodes' raylets.
type nodeDirectory struct {
	mu      sync.Mutex
	nodes   map[ids.ID]*pb.NodeInfo
	fetched time.Time
	// deaths holds, per node someone waits on (untilNodeDies), a channel
	// closed when the node is reported dead.
	deaths map[ids.ID]chan struct{}
}

// nodeInfo returns the GCS record of node id, refreshing the cache when the
// node is unknown (at most once a second).
func (cw *CoreWorker) nodeInfo(ctx context.Context, id ids.ID) (*pb.NodeInfo, error) {
	d := &cw.nodeDir
	d.mu.Lock()
	n := d.nodes[id]
	stale := time.Since(d.fetched) > time.Second
	d.mu.Unlock()
	if n != nil && n.GetState() != "DEAD" {
		return n, nil
	}
	if (n == nil || n.GetState() == "DEAD") && stale && cw.gcs != nil {
		rep, err := cw.gcs.GetAllNodes(ctx, &pb.GetAllNodesRequest{})
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		d.nodes = map[ids.ID]*pb.NodeInfo{}
		for _, v := range rep.GetNodes() {
			if nid, err := ids.FromBytes(v.GetInfo().GetNodeId()); err == nil {
				d.nodes[nid] = v.GetInfo()
			}
		}
		d.fetched = time.Now()
		n = d.nodes[id]
		d.mu.Unlock()
	}
	if n == nil {
		return nil, fmt.Errorf("node %s is not in the cluster", id.Short())
	}
	return n, nil
}

// markNodeDead records a NODE_DIED report in the cache, then ends what
// this process has on the node (afterNodeDeath, once the lock below is
// released: deferred first, it runs last).
func (cw *CoreWorker) markNodeDead(id ids.ID, reason string) {
	defer cw.afterNodeDeath(id, reason)
	d := &cw.nodeDir
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.nodes == nil {
		d.nodes = map[ids.ID]*pb.NodeInfo{}
	}
	n := d.nodes[id]
	if n == nil {
		n = &pb.NodeInfo{NodeId: id.Bytes()}
	} else {
		n = &pb.NodeInfo{NodeId: n.NodeId, RayletTcp: n.RayletTcp, NodeName: n.NodeName}
	}
	n.State, n.DeathReason = "DEAD", reason
	d.nodes[id] = n
	if ch := d.deaths[id]; ch != nil {
		close(ch)
		delete(d.deaths, id)
	}
}

// untilNodeDies returns a context derived from ctx that also ends when
// node id is reported dead (NODE_DIED from the raylet): a request to a
// node that stopped answering without closing its connections (frozen,
// cut off) must not wait for ever.
func (cw *CoreWorker) untilNodeDies(ctx context.Context, id ids.ID) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	d := &cw.nodeDir
	d.mu.Lock()
	if n := d.nodes[id]; n != nil && n.GetState() == "DEAD" {
		d.mu.Unlock()
		cancel()
		return ctx, cancel
	}
	if d.deaths == nil {
		d.deaths = map[ids.ID]chan struct{}{}
	}
	died := d.deaths[id]
	if died == nil {
		died = make(chan struct{})
		d.deaths[id] = died
	}
	d.mu.Unlock()
	go func() {
		select {
		case <-died:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// nodeDead reports whether the node is known to be dead.
func (cw *CoreWorker) nodeDead(id ids.ID) (bool, string) {
	d := &cw.nodeDir
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := d.nodes[id]; n != nil && n.GetState() == "DEAD" {
		return true, n.GetDeathReason()
	}
	return false, ""
}

// nodeDeadNow reports whether the node is dead, asking the GCS when it is
// not known to be: another process may have learned the death first. A
// node the GCS does not list (a dead node dropped from its history) counts
// as dead for the caller.
func (cw *CoreWorker) nodeDeadNow(ctx context.Context, id ids.ID) bool {
	if dead, _ := cw.nodeDead(id); dead || cw.gcs == nil {
		return dead
	}
	rep, err := cw.gcs.GetAllNodes(ctx, &pb.GetAllNodesRequest{})
	if err != nil {
		return false
	}
	for _, n := range rep.GetNodes() {
		if info := n.GetInfo(); string(info.GetNodeId()) == string(id.Bytes()) {
			if info.GetState() != "DEAD" {
				return false
			}
			cw.markNodeDead(id, info.GetDeathReason())
			return true
		}
	}
	// Not recorded as dead here: a GCS restarted without its storage
	// lists no node until they register again.
	return true
}

// rayletOf returns a client for the raylet of node id: the local one for
// this node, else one over TCP.
func (cw *CoreWorker) rayletOf(ctx context.Context, id ids.ID) (pb.RayletClient, error) {
	if id.IsNil() || id == cw.nodeID {
		return cw.raylet, nil
	}
	n, err := cw.nodeInfo(ctx, id)
	if err != nil {
		return nil, err
	}
	if n.GetState() == "DEAD" {
		return nil, fmt.Errorf("node %s is dead (%s)", id.Short(), n.GetDeathReason())
	}
	return cw.rayletAt(id, n.GetRayletTcp())
}

// rayletAt returns a client for the raylet of node id at addr (host:port).
func (cw *CoreWorker) rayletAt(id ids.ID, addr string) (pb.RayletClient, error) {
	if id == cw.nodeID {
		return cw.raylet, nil
	}
	if addr == "" {
		return nil, fmt.Errorf("node %s has no raylet address", id.Short())
	}
	c, err := cw.conn(&pb.Address{TcpAddr: addr, NodeId: id.Bytes()})
	if err != nil {
		return nil, err
	}
	return pb.NewRayletClient(c), nil
}

// strategyProto turns task options into the lease request's strategy.
func strategyProto(o TaskOptions) *pb.SchedulingStrategy {
	switch o.Strategy {
	case StrategySpread:
		return &pb.SchedulingStrategy{Kind: pb.SchedulingStrategy_SPREAD}
	case StrategyNodeAffinity:
		return &pb.SchedulingStrategy{Kind: pb.SchedulingStrategy_NODE_AFFINITY, NodeId: o.AffinityNode.Bytes(), Soft: o.AffinitySoft}
	}
	return nil
}

func strategyKey(st *pb.SchedulingStrategy) string {
	if st == nil {
		return ""
	}
	return fmt.Sprintf("|%d:%x:%t", st.Kind, st.NodeId, st.Soft)
}

// grantedLease is a lease and the raylet that granted it (where it must be
// returned).
type grantedLease struct {
	reply  *pb.LeaseReply
	raylet pb.RayletClient
	node   ids.ID
}

// leaseWorker asks for a worker lease, starting at the raylet of node
// prefer (this node's when nil or unknown) and following spillbacks to
// other nodes. When ctx ends the request is withdrawn from the raylet that
// holds it (a lease granted meanwhile is handed back). A raylet that cannot
// be reached (its node died), or whose node is reported dead while it
// holds the request (a frozen node answers nothing), sends the request back
// to the local raylet, after a short backoff, until ctx ends.
func (cw *CoreWorker) leaseWorker(ctx context.Context, req *pb.LeaseRequest, prefer ids.ID) (*grantedLease, error) {
	node := cw.nodeID
	cli := cw.raylet
	if !prefer.IsNil() && prefer != cw.nodeID {
		if c, err := cw.rayletOf(ctx, prefer); err == nil {
			node, cli = prefer, c
		}
	}
	back := newBackOff(time.Second)
	for hops := 0; ; hops++ {
		rctx, stop := ctx, context.CancelFunc(func() {})
		if node != cw.nodeID {
			rctx, stop = cw.untilNodeDies(ctx, node)
		}
		rep, err := cli.RequestWorkerLease(rctx, req)
		died := ctx.Err() == nil && rctx.Err() != nil
		stop()
		if err != nil {
			if ctx.Err() != nil {
				cw.cancelLeaseAt(cli, req.RequestId)
				return nil, ctx.Err()
			}
			if node != cw.nodeID && (status.Code(err) == codes.Unavailable || died) {
				cw.log.Debug("raylet unreachable or its node dead; asking the local raylet again", "node", node.Short(), "error", err)
				t := time.NewTimer(back.NextBackOff())
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return nil, ctx.Err()
				}
				node, cli = cw.nodeID, cw.raylet
				req.SpillbackCount = 0
				continue
			}
			return nil, err
		}
		if rep.GetPlacementGroupRemoved() {
			return nil, &PlacementGroupRemovedError{Function: req.GetFunction(), Reason: rep.GetUnschedulable()}
		}
		if rep.GetUnschedulable() != "" {
			return nil, &UnschedulableError{Function: req.GetFunction(), Reason: rep.GetUnschedulable()}
		}
		if len(rep.GetSpillbackNodeId()) > 0 {
			next, err := ids.FromBytes(rep.GetSpillbackNodeId())
			if err != nil {
				return nil, fmt.Errorf("goray: bad spillback node: %w", err)
			}
			c, err := cw.rayletAt(next, rep.GetSpillbackRaylet())
			if err != nil {
				return nil, err
			}
			node, cli = next, c
			req.SpillbackCount++
			continue
		}
		return &grantedLease{reply: rep, raylet: cli, node: node}, nil
	}
}

// cancelLeaseAt makes sure a withdrawn lease request holds nothing at the
// raylet cli: a lease granted for it whose reply never arrived is returned.
func (cw *CoreWorker) cancelLeaseAt(cli pb.RayletClient, requestID []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.CancelWorkerLease(ctx, &pb.CancelLeaseRequest{RequestId: requestID}); err != nil {
		cw.log.Debug("cancelling lease request failed", "error", err)
	}
}

// pullObject makes a copy of an object held by another node in the local
// store. When that node died, the local raylet restores the copy it spilled
// to shared storage, if any (the object's primary copy is then on this
// node, which its owner, when it is this process, records).
//
// A transfer that fails while the node is not known to be dead (a refused
// connection, a handshake timeout: the node may be slow, frozen or cut
// off, and come back) is no loss: it is tried again, with backoff, until
// it succeeds, ctx ends or the node is reported dead (NODE_DIED from this
// node's raylet, or the raylet's pull finds it dead in the GCS); the owner
// also tries the other nodes that may hold a copy (copies.go) meanwhile.
// Only a dead node's copy, or one its live node does not hold, is
// ErrObjectLost, saying why.
func (cw *CoreWorker) pullObject(ctx context.Context, id ids.ObjectID, node ids.ID, owner *pb.Address) error {
	if dead, _ := cw.nodeDead(node); dead {
		return cw.pullFromDead(ctx, id, node, owner, "")
	}
	dctx, stop := cw.untilNodeDies(ctx, node)
	defer stop()
	back := newBackOff(pullRetryMax)
	for tries := 1; ; tries++ {
		err := cw.pullOnce(dctx, id, node, owner)
		if err == nil {
			if dead, _ := cw.nodeDead(node); dead {
				return cw.takeOver(ctx, id, node, owner)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("goray: pulling object %s from node %s: %w (%v)", id, node.Short(), ctx.Err(), err)
		}
		if dctx.Err() != nil {
			// Reported dead during the pull.
			return cw.pullFromDead(ctx, id, node, owner, "")
		}
		var again *pullRetryError
		if !errors.As(err, &again) {
			return err
		}
		if tries%5 == 0 && cw.nodeDeadNow(ctx, node) {
			// The GCS says so (this process was not told, or the node
			// is not even in its history any more).
			return cw.pullFromDead(ctx, id, node, owner, "the GCS lists it dead, or not at all")
		}
		if tries == 1 || tries%10 == 0 {
			cw.log.Warn("pulling an object failed; its node is not reported dead, so trying again", "object", id, "node", node.Short(), "tries", tries, "error", again.err)
		}
		if cw.isSelf(owner) && cw.objects.owns(id) {
			if ok, _ := cw.fromLiveCopy(ctx, id, node); ok {
				return nil
			}
		}
		t := time.NewTimer(back.NextBackOff())
		select {
		case <-t.C:
		case <-dctx.Done():
			t.Stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
}

// pullFromDead pulls object id from node, which is dead (why, when this
// process was not told the reason), once: the raylet restores the copy
// the node spilled to shared storage, or finds none (ErrObjectLost).
func (cw *CoreWorker) pullFromDead(ctx context.Context, id ids.ObjectID, node ids.ID, owner *pb.Address, why string) error {
	if err := cw.pullOnce(ctx, id, node, owner); err != nil {
		var again *pullRetryError
		if errors.As(err, &again) {
			if why == "" {
				why = again.Error()
			}
			return cw.lostWithNode(id, node, why)
		}
		return err
	}
	return cw.takeOver(ctx, id, node, owner)
}

// takeOver makes the copy of object id just pulled into this node's store,
// whose primary copy died with node, the primary copy when this process
// owns the object: the raylet then keeps it (spilling, never evicting it)
// and later readers pull it from here. A copy that was only pulled stays a
// secondary one the store may evict (the raylet's pull returns at once when
// the store holds any copy), so relocating without claiming it lost the
// object to the next eviction while retries remained. A copy evicted before
// it could be claimed is lost with its node: the owner re-runs its task.
func (cw *CoreWorker) takeOver(ctx context.Context, id ids.ObjectID, node ids.ID, owner *pb.Address) error {
	if !cw.isSelf(owner) || !cw.objects.owns(id) {
		return nil
	}
	ok, err := cw.claim(ctx, id)
	if err != nil {
		return err
	}
	if !ok {
		return cw.lostWithNode(id, node, "its copy here was evicted before it could be kept")
	}
	cw.objects.relocate(id, node, cw.nodeID)
	return nil
}

// pullRetryMax bounds the wait between tries of a pull from a node that
// is unreachable but not reported dead.
const pullRetryMax = 2 * time.Second

// pullRetryError is a pull that failed while its node is not known to be
// dead: worth trying again.
type pullRetryError struct{ err error }

func (e *pullRetryError) Error() string { return e.err.Error() }
func (e *pullRetryError) Unwrap() error { return e.err }

// pullOnce asks the local raylet once to pull object id from node. A
// failure worth trying again is a *pullRetryError; a copy that is gone is
// ErrObjectLost.
func (cw *CoreWorker) pullOnce(ctx context.Context, id ids.ObjectID, node ids.ID, owner *pb.Address) error {
	_, err := cw.raylet.PullObject(ctx, &pb.PullObjectRequest{ObjectId: id[:], NodeId: node.Bytes(), Owner: owner})
	if err == nil || ctx.Err() != nil {
		return err
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.FailedPrecondition: // the raylet found the node dead
		return cw.lostWithNode(id, node, st.Message())
	case codes.NotFound:
		if dead, _ := cw.nodeDead(node); dead {
			return cw.lostWithNode(id, node, "")
		}
		return &ObjectError{ObjectID: id, Kind: ErrObjectLost, Detail: fmt.Sprintf("node %s does not hold it: %s", node.Short(), st.Message())}
	case codes.Unavailable:
		if dead, _ := cw.nodeDead(node); dead {
			return cw.lostWithNode(id, node, "")
		}
		return &pullRetryError{err: fmt.Errorf("goray: pulling object %s from node %s: %w", id, node.Short(), err)}
	}
	return fmt.Errorf("goray: pulling object %s from node %s: %w", id, node.Short(), err)
}

// lostWithNode is the ErrObjectLost of object id, whose copy died with
// node (detail, when the node's death reason is not known here).
func (cw *CoreWorker) lostWithNode(id ids.ObjectID, node ids.ID, detail string) error {
	if dead, reason := cw.nodeDead(node); dead {
		detail = reason
	}
	if detail == "" {
		detail = "reported dead"
	}
	return &ObjectError{ObjectID: id, Kind: ErrObjectLost, Detail: fmt.Sprintf("its node %s died (%s)", node.Short(), detail)}
}
