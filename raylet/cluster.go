package raylet

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// Scheduling policy constants, as in Ray's hybrid policy.
const (
	// spreadThreshold is the utilization under which the local node keeps
	// a task rather than looking for a less loaded one.
	spreadThreshold = 0.5
	// topKFraction of the alive nodes (at least one) are the "least loaded"
	// candidates a task is spread among.
	topKFraction = 0.2
	// maxReportPeriod bounds how stale the GCS's (and so every raylet's)
	// view of this node's resources gets.
	maxReportPeriod = 500 * time.Millisecond
	// respillAfter is how long a request waits locally before the raylet
	// looks for another node that could run it now.
	respillAfter = 200 * time.Millisecond
)

// peerNode is this raylet's view of another node, refreshed from the GCS.
type peerNode struct {
	id        ids.ID
	info      *gorayv1.NodeInfo
	total     resources.Set
	available resources.Set
	alive     bool
}

// decision is where a lease request goes.
type decision struct {
	// spill is the node to pass the request on to; nil means queue here.
	spill *peerNode
	// unschedulable, when set, fails the request with this reason.
	unschedulable string
}

// utilization is the highest used fraction among the resources in kinds
// (all of total's when kinds is empty): Ray's "critical resource
// utilization", restricted to what the task asks for.
func utilization(total, available resources.Set, kinds resources.Set) float64 {
	u := 0.0
	consider := func(name string) {
		t := total[name]
		if t <= 0 {
			return
		}
		used := float64(t-available[name]) / float64(t)
		if used > u {
			u = used
		}
	}
	if len(kinds) == 0 {
		for name := range total {
			consider(name)
		}
	} else {
		for name := range kinds {
			consider(name)
		}
	}
	return u
}

// scheduleLocked decides where a request goes. r.mu must be held.
func (r *Raylet) scheduleLocked(res resources.Set, st *gorayv1.SchedulingStrategy, spilled int32) decision {
	localFeasible := r.cfg.Resources.Fits(res)
	switch st.GetKind() {
	case gorayv1.SchedulingStrategy_NODE_AFFINITY:
		target, err := ids.FromBytes(st.GetNodeId())
		if err != nil {
			return decision{unschedulable: fmt.Sprintf("node affinity: invalid node id: %v", err)}
		}
		if target == r.cfg.NodeID {
			if localFeasible {
				return decision{}
			}
			if !st.GetSoft() {
				return decision{unschedulable: fmt.Sprintf("node affinity: node %s can never fit %s (it has %s)", target.Short(), res, r.cfg.Resources)}
			}
			return r.hybridLocked(res, 0)
		}
		p := r.peers[target]
		switch {
		case p != nil && p.alive && p.total.Fits(res):
			return decision{spill: p}
		case st.GetSoft():
			return r.hybridLocked(res, spilled)
		case p == nil:
			return decision{unschedulable: fmt.Sprintf("node affinity: no node %s in the cluster", target.Short())}
		case !p.alive:
			return decision{unschedulable: fmt.Sprintf("node affinity: node %s is dead (%s)", target.Short(), p.info.GetDeathReason())}
		default:
			return decision{unschedulable: fmt.Sprintf("node affinity: node %s can never fit %s (it has %s)", target.Short(), res, p.total)}
		}
	case gorayv1.SchedulingStrategy_SPREAD:
		if spilled > 0 && localFeasible {
			return decision{}
		}
		return r.spreadLocked(res)
	default:
		return r.hybridLocked(res, spilled)
	}
}

// hybridLocked is the default policy: stay local while the local node is
// feasible and under spreadThreshold utilization; else pick at random among
// the top-k least loaded nodes that have the resources free now; else wait
// on a feasible node (here first). A request that was already spilled back
// stays here when this node can run it at all.
func (r *Raylet) hybridLocked(res resources.Set, spilled int32) decision {
	localFeasible := r.cfg.Resources.Fits(res)
	if localFeasible && (spilled > 0 || (r.available.Fits(res) && utilization(r.cfg.Resources, r.available, res) < spreadThreshold)) {
		return decision{}
	}
	type cand struct {
		p    *peerNode // nil: this node
		util float64
	}
	var avail []cand
	if localFeasible && r.available.Fits(res) {
		avail = append(avail, cand{nil, utilization(r.cfg.Resources, r.available, res)})
	}
	var feasible []*peerNode
	for _, p := range r.peerList() {
		if !p.alive || !p.total.Fits(res) {
			continue
		}
		feasible = append(feasible, p)
		if p.available.Fits(res) {
			avail = append(avail, cand{p, utilization(p.total, p.available, res)})
		}
	}
	if len(avail) > 0 {
		sort.SliceStable(avail, func(i, j int) bool { return avail[i].util < avail[j].util })
		k := max(1, int(topKFraction*float64(r.aliveNodesLocked())))
		k = min(k, len(avail))
		c := avail[rand.IntN(k)]
		return decision{spill: c.p}
	}
	if localFeasible || len(feasible) == 0 {
		// Wait here: busy but feasible, or infeasible everywhere (pending
		// demand, until a node that fits joins).
		return decision{}
	}
	// Only other nodes can ever run it: wait on the least loaded one.
	best := feasible[0]
	for _, p := range feasible[1:] {
		if utilization(p.total, p.available, res) < utilization(best.total, best.available, res) {
			best = p
		}
	}
	return decision{spill: best}
}

// spreadLocked picks the feasible nodes round-robin, preferring those with
// the resources free now.
func (r *Raylet) spreadLocked(res resources.Set) decision {
	type cand struct{ p *peerNode }
	var free, feasible []cand
	if r.cfg.Resources.Fits(res) {
		feasible = append(feasible, cand{nil})
		if r.available.Fits(res) {
			free = append(free, cand{nil})
		}
	}
	for _, p := range r.peerList() {
		if !p.alive || !p.total.Fits(res) {
			continue
		}
		feasible = append(feasible, cand{p})
		if p.available.Fits(res) {
			free = append(free, cand{p})
		}
	}
	pool := free
	if len(pool) == 0 {
		pool = feasible
	}
	if len(pool) == 0 {
		return decision{} // pending demand
	}
	// Order by node id so that every raylet walks the nodes alike.
	sort.Slice(pool, func(i, j int) bool { return bytes.Compare(candID(r, pool[i].p), candID(r, pool[j].p)) < 0 })
	c := pool[r.spreadNext%len(pool)]
	r.spreadNext++
	return decision{spill: c.p}
}

func candID(r *Raylet, p *peerNode) []byte {
	if p == nil {
		return r.cfg.NodeID[:]
	}
	return p.id[:]
}

// peerList returns the known other nodes ordered by id.
func (r *Raylet) peerList() []*peerNode {
	out := make([]*peerNode, 0, len(r.peers))
	for _, p := range r.peers {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].id[:], out[j].id[:]) < 0 })
	return out
}

// aliveNodesLocked counts alive nodes, this one included.
func (r *Raylet) aliveNodesLocked() int {
	n := 1
	for _, p := range r.peers {
		if p.alive {
			n++
		}
	}
	return n
}

// syncCluster refreshes the view of the other nodes from the GCS. Newly dead
// nodes are handled (their objects' owners, local sessions told), new ones
// logged, and requests waiting here are passed on to nodes that can run
// them now.
func (r *Raylet) syncCluster(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, gcsTimeout)
	defer cancel()
	rep, err := r.cfg.GCS.GetAllNodes(ctx, &gorayv1.GetAllNodesRequest{})
	if err != nil {
		r.log.Debug("refreshing the cluster view failed", "error", err)
		return
	}
	var died []ids.ID
	r.mu.Lock()
	for _, v := range rep.GetNodes() {
		id, err := ids.FromBytes(v.GetInfo().GetNodeId())
		if err != nil || id == r.cfg.NodeID {
			continue
		}
		total, _ := resourcesFromProto(v.GetInfo().GetTotal())
		avail, _ := resourcesFromProto(v.GetAvailable())
		alive := v.GetInfo().GetState() == "ALIVE"
		p := r.peers[id]
		if p == nil {
			p = &peerNode{id: id}
			r.peers[id] = p
			if alive {
				r.log.Info("node joined the cluster", "node_id", id, "name", v.GetInfo().GetNodeName(), "resources", total.String())
			}
		} else if p.alive && !alive {
			died = append(died, id)
		}
		p.info, p.total, p.available, p.alive = v.GetInfo(), total, avail, alive
	}
	for _, id := range died {
		r.nodeDiedLocked(id)
	}
	r.respillLocked(time.Now())
	r.mu.Unlock()
	if len(died) > 0 {
		r.freeObjectsOfDeadNodes(died)
	}
	r.syncJobs(ctx)
}

// nodeDiedLocked tells this node's drivers and workers that a node died.
func (r *Raylet) nodeDiedLocked(id ids.ID) {
	p := r.peers[id]
	r.log.Warn("node died", "node_id", id, "reason", p.info.GetDeathReason())
	cmd := func() *gorayv1.RayletCommand { // one message per stream
		return &gorayv1.RayletCommand{Kind: gorayv1.RayletCommand_NODE_DIED, NodeId: id.Bytes(), Reason: p.info.GetDeathReason()}
	}
	for _, j := range r.jobs {
		if j.ready && !j.finished && j.out != nil {
			j.out.push(cmd())
		}
	}
	for _, w := range r.workers {
		if w.registered() && !w.killing {
			w.out.push(cmd())
		}
	}
}

// freeObjectsOfDeadNodes frees the objects here whose owners ran on the
// dead nodes: nobody can read or free them any more.
func (r *Raylet) freeObjectsOfDeadNodes(nodes []ids.ID) {
	r.mu.Lock()
	var frees []ids.ObjectID
	for o, owner := range r.ownerNodes {
		if slices.Contains(nodes, owner) {
			frees = append(frees, o)
		}
	}
	for _, o := range frees {
		r.forgetObjectLocked(o)
	}
	r.mu.Unlock()
	if len(frees) > 0 {
		r.freeObjects(frees)
		r.log.Info("freed objects owned on dead nodes", "objects", len(frees))
	}
}

// respillLocked passes requests that have waited here for respillAfter and
// cannot be granted now on to a node that has the resources free, and fails
// hard node affinities whose node died.
func (r *Raylet) respillLocked(now time.Time) {
	if len(r.peers) == 0 {
		return
	}
	r.takeQueuedLocked(func(p *pendingLease) bool {
		if now.Sub(p.queued) < respillAfter || r.available.Fits(p.res) && r.cfg.Resources.Fits(p.res) {
			return false
		}
		st := p.strategy
		if st.GetKind() == gorayv1.SchedulingStrategy_NODE_AFFINITY && !st.GetSoft() {
			return false // pinned here
		}
		var target *peerNode
		for _, peer := range r.peerList() {
			if peer.alive && peer.available.Fits(p.res) && (target == nil ||
				utilization(peer.total, peer.available, p.res) < utilization(target.total, target.available, p.res)) {
				target = peer
			}
		}
		if target == nil {
			return false
		}
		p.spill = target
		close(p.ready)
		return true
	})
}

// peerConn returns a cached connection to another node's raylet.
func (r *Raylet) peerConn(addr string) (gorayv1.RayletClient, error) {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if c, ok := r.conns[addr]; ok {
		return gorayv1.NewRayletClient(c), nil
	}
	c, err := grpc.NewClient(addr, dialOptions(addr, r.cfg.Auth)...)
	if err != nil {
		return nil, err
	}
	r.conns[addr] = c
	return gorayv1.NewRayletClient(c), nil
}

// peerClient returns a client for the raylet of node id, if it is known
// and alive.
func (r *Raylet) peerClient(id ids.ID) (gorayv1.RayletClient, *gorayv1.NodeInfo, error) {
	r.mu.Lock()
	p := r.peers[id]
	r.mu.Unlock()
	if p == nil && r.cfg.GCS != nil {
		// Joined since the last refresh, perhaps.
		r.syncCluster(context.Background())
		r.mu.Lock()
		p = r.peers[id]
		r.mu.Unlock()
	}
	if p == nil {
		return nil, nil, fmt.Errorf("node %s is not in the cluster", id.Short())
	}
	if !p.alive {
		return nil, p.info, &NodeDeadError{Node: id, Reason: p.info.GetDeathReason()}
	}
	if p.info.GetRayletTcp() == "" {
		return nil, p.info, fmt.Errorf("node %s has no raylet address", id.Short())
	}
	c, err := r.peerConn(p.info.GetRayletTcp())
	return c, p.info, err
}

// closePeerConns closes the connections to other raylets.
func (r *Raylet) closePeerConns() {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	for k, c := range r.conns {
		_ = c.Close()
		delete(r.conns, k)
	}
	for c := range r.dataConns {
		_ = c.Close()
	}
}
