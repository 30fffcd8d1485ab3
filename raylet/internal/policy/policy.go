// Package policy holds the raylet's scheduling policies, as in Ray: the
// default hybrid policy, spread and node affinity, and the choice of a node
// to pass a long-waiting request on to. The policies are pure functions of
// a snapshot of the cluster (this node's resources and the view of the
// other nodes); the caller owns the snapshot and any lock around it.
//
// A draining node (one that is about to be terminated) takes no new work:
// no policy picks a draining peer, but for a hard affinity to it (the
// request then waits there), and a draining node itself sends requests on
// to a node that fits, keeping only those nothing else can take.
package policy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// Scheduling policy constants, as in Ray's hybrid policy.
const (
	// SpreadThreshold is the utilization under which the local node keeps
	// a task rather than looking for a less loaded one.
	SpreadThreshold = 0.5
	// TopKFraction of the alive nodes (at least one) are the "least loaded"
	// candidates a task is spread among.
	TopKFraction = 0.2
)

// Node is a view of another node of the cluster. A Node is never changed
// once published: a refresh of the view makes new ones.
type Node struct {
	// ID is the node's id.
	ID ids.ID
	// Info is the node's record in the GCS.
	Info *gorayv1.NodeInfo
	// Total and Available are the node's capacity and what it had free
	// when last reported.
	Total, Available resources.Set
	// Alive is false once the GCS declared the node dead.
	Alive bool
	// Draining is set while the node drains before it is terminated: it
	// takes no new work.
	Draining bool
}

// schedulable reports whether new work may go to p: it is alive and not
// draining.
func (p *Node) schedulable() bool { return p.Alive && !p.Draining }

// Cluster is what a decision looks at: this node and the other nodes.
type Cluster struct {
	// Self is this node's id.
	Self ids.ID
	// Total and Available are this node's capacity and free resources.
	Total, Available resources.Set
	// Peers are the other nodes ordered by id.
	Peers []*Node
	// ByID finds a peer by id.
	ByID map[ids.ID]*Node
	// Draining is set while this node drains: it keeps a request only
	// when no other node can take it (or a hard affinity pins it here).
	Draining bool
}

// Decision is where a lease request goes.
type Decision struct {
	// Spill is the node to pass the request on to; nil means queue here.
	Spill *Node
	// Unschedulable, when set, fails the request with this reason.
	Unschedulable string
}

// Utilization is the highest used fraction among the resources in kinds
// (all of total's when kinds is empty): Ray's "critical resource
// utilization", restricted to what the task asks for.
func Utilization(total, available resources.Set, kinds resources.Set) float64 {
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

// Decide decides where a request for res with strategy st goes; spilled
// is how often the request was already passed on. spreadNext is the
// round-robin cursor of the spread policy, advanced when it is used.
func Decide(c *Cluster, res resources.Set, st *gorayv1.SchedulingStrategy, spilled int32, spreadNext *int) Decision {
	localFeasible := c.Total.Fits(res)
	switch st.GetKind() {
	case gorayv1.SchedulingStrategy_NODE_AFFINITY:
		target, err := ids.FromBytes(st.GetNodeId())
		if err != nil {
			return Decision{Unschedulable: fmt.Sprintf("node affinity: invalid node id: %v", err)}
		}
		if target == c.Self {
			if localFeasible && (!c.Draining || !st.GetSoft()) {
				return Decision{} // hard: waits here while the node drains
			}
			if !st.GetSoft() {
				return Decision{Unschedulable: fmt.Sprintf("node affinity: node %s can never fit %s (it has %s)", target.Short(), res, c.Total)}
			}
			return hybrid(c, res, 0)
		}
		p := c.ByID[target]
		switch {
		case p != nil && p.Alive && p.Total.Fits(res) && (!p.Draining || !st.GetSoft()):
			return Decision{Spill: p}
		case st.GetSoft():
			return hybrid(c, res, spilled)
		case p == nil:
			return Decision{Unschedulable: fmt.Sprintf("node affinity: no node %s in the cluster", target.Short())}
		case !p.Alive:
			return Decision{Unschedulable: fmt.Sprintf("node affinity: node %s is dead (%s)", target.Short(), p.Info.GetDeathReason())}
		default:
			return Decision{Unschedulable: fmt.Sprintf("node affinity: node %s can never fit %s (it has %s)", target.Short(), res, p.Total)}
		}
	case gorayv1.SchedulingStrategy_SPREAD:
		if spilled > 0 && localFeasible && !c.Draining {
			return Decision{}
		}
		return spread(c, res, spreadNext)
	default:
		return hybrid(c, res, spilled)
	}
}

// hybrid is the default policy: stay local while the local node is
// feasible and under SpreadThreshold utilization; else pick at random among
// the top-k least loaded nodes that have the resources free now; else wait
// on a feasible node (here first). A request that was already spilled back
// stays here when this node can run it at all. Draining nodes (this one
// included) are never picked; a request only a draining node here could
// run waits here.
func hybrid(c *Cluster, res resources.Set, spilled int32) Decision {
	localFeasible := c.Total.Fits(res) && !c.Draining
	if localFeasible && (spilled > 0 || (c.Available.Fits(res) && Utilization(c.Total, c.Available, res) < SpreadThreshold)) {
		return Decision{}
	}
	type cand struct {
		p    *Node // nil: this node
		util float64
	}
	var avail []cand
	if localFeasible && c.Available.Fits(res) {
		avail = append(avail, cand{nil, Utilization(c.Total, c.Available, res)})
	}
	var feasible []*Node
	for _, p := range c.Peers {
		if !p.schedulable() || !p.Total.Fits(res) {
			continue
		}
		feasible = append(feasible, p)
		if p.Available.Fits(res) {
			avail = append(avail, cand{p, Utilization(p.Total, p.Available, res)})
		}
	}
	if len(avail) > 0 {
		sort.SliceStable(avail, func(i, j int) bool { return avail[i].util < avail[j].util })
		k := max(1, int(TopKFraction*float64(aliveNodes(c))))
		k = min(k, len(avail))
		return Decision{Spill: avail[rand.IntN(k)].p}
	}
	if localFeasible || len(feasible) == 0 {
		// Wait here: busy but feasible, or infeasible everywhere (pending
		// demand, until a node that fits joins; or, on a draining node,
		// until the drain is cancelled or another node can take it).
		return Decision{}
	}
	// Only other nodes can ever run it: wait on the least loaded one.
	best := feasible[0]
	for _, p := range feasible[1:] {
		if Utilization(p.Total, p.Available, res) < Utilization(best.Total, best.Available, res) {
			best = p
		}
	}
	return Decision{Spill: best}
}

// spread picks the feasible nodes round-robin, preferring those with the
// resources free now; draining nodes are skipped.
func spread(c *Cluster, res resources.Set, next *int) Decision {
	type cand struct{ p *Node }
	var free, feasible []cand
	if c.Total.Fits(res) && !c.Draining {
		feasible = append(feasible, cand{nil})
		if c.Available.Fits(res) {
			free = append(free, cand{nil})
		}
	}
	for _, p := range c.Peers {
		if !p.schedulable() || !p.Total.Fits(res) {
			continue
		}
		feasible = append(feasible, cand{p})
		if p.Available.Fits(res) {
			free = append(free, cand{p})
		}
	}
	pool := free
	if len(pool) == 0 {
		pool = feasible
	}
	if len(pool) == 0 {
		return Decision{} // pending demand (or only this draining node fits)
	}
	id := func(p *Node) []byte {
		if p == nil {
			return c.Self[:]
		}
		return p.ID[:]
	}
	// Order by node id so that every raylet walks the nodes alike.
	sort.Slice(pool, func(i, j int) bool { return bytes.Compare(id(pool[i].p), id(pool[j].p)) < 0 })
	pick := pool[*next%len(pool)]
	*next++
	return Decision{Spill: pick.p}
}

// aliveNodes counts the nodes that take work (alive, not draining), this
// one included unless it drains.
func aliveNodes(c *Cluster) int {
	n := 1
	if c.Draining {
		n = 0
	}
	for _, p := range c.Peers {
		if p.schedulable() {
			n++
		}
	}
	return n
}

// LeastLoadedFree returns the alive, not draining peer with the resources
// free now whose utilization for res is lowest, or nil.
func LeastLoadedFree(peers []*Node, res resources.Set) *Node {
	var target *Node
	for _, p := range peers {
		if p.schedulable() && p.Available.Fits(res) && (target == nil ||
			Utilization(p.Total, p.Available, res) < Utilization(target.Total, target.Available, res)) {
			target = p
		}
	}
	return target
}

// SortByID orders nodes by id, as Cluster.Peers must be.
func SortByID(nodes []*Node) {
	sort.Slice(nodes, func(i, j int) bool { return bytes.Compare(nodes[i].ID[:], nodes[j].ID[:]) < 0 })
}
