package gcs

import (
	"context"
	"fmt"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

type nodeEntry struct {
	info          *gorayv1.NodeInfo
	available     *gorayv1.Resources
	storeUsed     int64
	storeCapacity int64
	pending       []*gorayv1.PendingDemand
	spill         *gorayv1.SpillStats
	memory        *gorayv1.MemoryMonitorStats // the node's memory monitor
	lastHeartbeat time.Time
	// fromStorage: the node is known only from the storage (this GCS read
	// it back and the node has not registered with it since). Nothing
	// dials it, views leave it out while it is alive (and carry none of
	// its addresses once dead), and its heartbeats are refused until its
	// own registration replaces the stored record (restore.go).
	fromStorage bool
	// draining: the node drains before it is terminated (its heartbeats
	// say so; DrainNode sets it at once). Not stored: heartbeats restore it.
	draining bool
	// groups are the placement group resources committed on the node,
	// part of its total besides its own (info.total).
	groups resources.Set
	// holding is what a placement group being reserved holds on the node
	// (prepared, not yet committed everywhere). Views add it back to the
	// available resources, so that no one sees a group's reservation
	// while it is partial; placement itself uses the true figures.
	holding resources.Set
	// pubAvailable is available as last published to versioned views,
	// at pubAt; loadDrift: available moved since, less than the
	// threshold (nodeversions.go).
	pubAvailable *gorayv1.Resources
	pubAt        time.Time
	loadDrift    bool
	// pubView is the view versioned refreshes get, as of its last change
	// (nil: not built since; see publishedLocked). Never changed once
	// built: replies share it.
	pubView *gorayv1.NodeView
}

// totalLocked is the node's total: its own resources and the placement
// group resources committed on it. s.mu must be held.
func (n *nodeEntry) totalLocked() *gorayv1.Resources {
	if len(n.groups) == 0 {
		return n.info.GetTotal()
	}
	t := &gorayv1.Resources{Amounts: make(map[string]int64, len(n.info.GetTotal().GetAmounts())+len(n.groups))}
	for k, v := range n.info.GetTotal().GetAmounts() {
		t.Amounts[k] = v
	}
	for k, v := range n.groups {
		t.Amounts[k] += v
	}
	return t
}

// viewLocked returns a copy of the node's view; s.mu must be held.
func (n *nodeEntry) viewLocked() *gorayv1.NodeView {
	info := cloneMsg(n.info)
	if len(n.groups) > 0 {
		info.Total = n.totalLocked()
	}
	if n.fromStorage {
		stripAddresses(info)
	}
	v := &gorayv1.NodeView{
		Info:            info,
		StoreUsed:       n.storeUsed,
		StoreCapacity:   n.storeCapacity,
		LastHeartbeatMs: n.lastHeartbeat.UnixMilli(),
		Draining:        n.draining,
	}
	if n.available != nil {
		v.Available = n.availableViewLocked()
	}
	if n.spill != nil {
		v.Spill = cloneMsg(n.spill)
	}
	if n.memory != nil {
		v.Memory = cloneMsg(n.memory)
	}
	for _, p := range n.pending {
		v.Pending = append(v.Pending, cloneMsg(p))
	}
	return v
}

// availableViewLocked returns a copy of the node's available resources as
// views show them: with what a placement group being reserved holds on it
// added back. n.available must not be nil; s.mu must be held.
func (n *nodeEntry) availableViewLocked() *gorayv1.Resources {
	a := cloneMsg(n.available)
	if len(n.holding) > 0 {
		tot := n.totalLocked().GetAmounts()
		if a.Amounts == nil {
			a.Amounts = map[string]int64{}
		}
		for k, h := range n.holding {
			a.Amounts[k] = min(a.Amounts[k]+h, tot[k])
		}
	}
	return a
}

// RegisterNode adds the node in state ALIVE with the server's start time; its
// available resources start equal to its total. Registering an ALIVE node
// again only refreshes its heartbeat time; registering a DEAD node's id fails
// with NodeDeadError. What the node says about itself is validated first
// (resources, labels, addresses, lengths; see checkNodeInfo), refused with
// InvalidArgumentError naming the field.
//
// A node that registers with the cluster id (it registers again: this GCS
// restarted, or lost touch with it), or that says it holds placement group
// bundles (a GCS that died before its answer to the node's first
// registration reached it may have prepared some there), gets its bundles
// swept: the placement group manager tells its raylet, soon and without
// this call waiting, which bundles the table has placed there, and the
// raylet gives back every other one (sweep.go).
func (s *Server) RegisterNode(ctx context.Context, req *gorayv1.RegisterNodeRequest) (_ *gorayv1.RegisterNodeReply, err error) {
	var d durable
	defer d.wait(ctx, &err) // after the unlocks below: answer once the change is durable
	// sweepWhy says why the node's bundles are swept ("": they are not).
	sweepWhy := ""
	defer func() { // after the unlock below: the manager's lock is never taken under s.mu
		if sweepWhy != "" && err == nil {
			s.pgs.requestSweep(ids.MustFromBytes(req.GetNode().GetNodeId()), sweepWhy)
		}
	}()
	if req.GetNode() == nil {
		return nil, &InvalidArgumentError{Field: "node", Problem: "required"}
	}
	id, err := parseID("node.node_id", req.GetNode().GetNodeId())
	if err != nil {
		return nil, err
	}
	if err := checkNodeInfo(req.GetNode()); err != nil {
		s.log.Warn("node registration refused", "node", id.Short(), "error", err)
		return nil, err
	}
	if c := req.GetClusterId(); c != "" && c != s.clusterID {
		return nil, &OtherClusterError{Node: id, Cluster: c, Want: s.clusterID}
	}
	switch {
	case req.GetClusterId() != "":
		sweepWhy = sweepReregistered
	case req.GetHoldsBundles():
		sweepWhy = sweepHoldsBundles
	}
	reply := &gorayv1.RegisterNodeReply{HeartbeatPeriodMs: s.period.Milliseconds(), ClusterId: s.clusterID}
	now := s.now()

	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.nodes[id]; ok {
		if n.info.GetState() == StateDead {
			return nil, &NodeDeadError{ID: id, Reason: n.info.GetDeathReason()}
		}
		n.lastHeartbeat = now
		if n.fromStorage {
			// The node proved it holds the token: what it says of itself
			// replaces what the storage said.
			info := cloneMsg(req.GetNode())
			info.State = StateAlive
			info.StartTimeMs = n.info.GetStartTimeMs()
			info.EndTimeMs = 0
			info.DeathReason = ""
			n.info = info
			n.fromStorage = false
			n.available = nil // (its heartbeats bring what is free)
			if info.GetTotal() != nil {
				n.available = cloneMsg(info.GetTotal())
			}
			s.nodeChangedLocked(id, n)
			s.saveLocked(tableNodes, id.String(), info)
			d = s.durableNow()
			s.log.Info("node registered again after the GCS restarted: its registration replaces the stored record", "node", id.Short(), "name", info.GetNodeName(), "head", info.GetIsHead())
			s.publishLocked(Event{Kind: EventNodeAdded, Node: info})
		}
		return reply, nil
	}
	info := cloneMsg(req.GetNode())
	info.State = StateAlive
	info.StartTimeMs = now.UnixMilli()
	info.EndTimeMs = 0
	info.DeathReason = ""
	n := &nodeEntry{info: info, lastHeartbeat: now}
	if info.GetTotal() != nil {
		n.available = cloneMsg(info.GetTotal())
	}
	s.nodes[id] = n
	s.nodeOrder = append(s.nodeOrder, id)
	s.nodeChangedLocked(id, n)
	s.saveLocked(tableNodes, id.String(), info)
	d = s.durableNow()
	s.log.Info("node registered", "node", id.Short(), "name", info.GetNodeName(), "head", info.GetIsHead())
	s.publishLocked(Event{Kind: EventNodeAdded, Node: info})
	return reply, nil
}

// UnregisterNode marks the node DEAD with the given reason (default
// "unregistered"): its actors fail as on any node death (they die, or
// restart). Unregistering a dead node is a no-op.
func (s *Server) UnregisterNode(ctx context.Context, req *gorayv1.UnregisterNodeRequest) (_ *gorayv1.UnregisterNodeReply, err error) {
	var d durable
	defer d.wait(ctx, &err) // after the unlock below: answer once the change is durable
	id, err := parseID("node_id", req.GetNodeId())
	if err != nil {
		return nil, err
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "unregistered"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.pruneHistoryLocked() // before the unlock, after the loops (history.go)
	n, ok := s.nodes[id]
	if !ok {
		return nil, &NotFoundError{Kind: "node", ID: id}
	}
	s.markNodeDeadLocked(id, n, reason)
	d = s.durableNow()
	return &gorayv1.UnregisterNodeReply{}, nil
}

// ReportHeartbeat records the node's load, liveness and whether it
// drains. A node already
// declared dead gets Dead=true and must shut down; an unknown node gets
// NotFoundError. A heartbeat with invalid figures (available above the
// node's total, negative counts; see checkHeartbeat) is refused with
// InvalidArgumentError and recorded nowhere, not even as a sign of life.
func (s *Server) ReportHeartbeat(_ context.Context, req *gorayv1.HeartbeatRequest) (*gorayv1.HeartbeatReply, error) {
	id, err := parseID("node_id", req.GetNodeId())
	if err != nil {
		return nil, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[id]
	if !ok {
		return nil, &NotFoundError{Kind: "node", ID: id}
	}
	if n.info.GetState() == StateDead {
		return &gorayv1.HeartbeatReply{Dead: true}, nil
	}
	if n.fromStorage {
		// (NotFound: the raylet registers again, bringing its own info.)
		return nil, &NodeUnverifiedError{ID: id, Op: "heartbeat"}
	}
	if err := checkHeartbeat(req, n.totalLocked()); err != nil {
		return nil, err
	}
	n.lastHeartbeat = now
	n.available = nil
	if req.GetAvailable() != nil {
		n.available = cloneMsg(req.GetAvailable())
	}
	n.spill = nil
	if req.GetSpill() != nil {
		n.spill = cloneMsg(req.GetSpill())
	}
	n.memory = nil
	if req.GetMemory() != nil {
		n.memory = cloneMsg(req.GetMemory())
	}
	n.storeUsed = req.GetStoreUsed()
	n.storeCapacity = req.GetStoreCapacity()
	drained := n.draining != req.GetDraining()
	n.draining = req.GetDraining()
	n.pending = n.pending[:0]
	for _, p := range req.GetPending() {
		n.pending = append(n.pending, cloneMsg(p))
	}
	if drained {
		s.nodeChangedLocked(id, n)
	} else {
		s.availableChangedLocked(id, n)
	}
	return &gorayv1.HeartbeatReply{}, nil
}

// GetAllNodes returns every node, alive and dead, with its latest view;
// a request with the epoch and version of the caller's last reply gets
// only the nodes changed since, when the GCS can tell (NodesSince).
func (s *Server) GetAllNodes(_ context.Context, req *gorayv1.GetAllNodesRequest) (*gorayv1.GetAllNodesReply, error) {
	return s.NodesSince(req.GetSinceEpoch(), req.GetSinceVersion()), nil
}

// checkHealth declares dead every alive node whose last heartbeat is more
// than FailureThreshold periods old, or twice that while the GCS itself is
// behind reading heartbeats (health.go).
func (s *Server) checkHealth() {
	limit := time.Duration(s.threshold) * s.period
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.pruneHistoryLocked() // before the unlock, after the loops (history.go)

	now := s.now() // after the lock: waiting for it is the GCS's lateness, not the nodes'
	silences := make([]time.Duration, 0, len(s.nodeOrder))
	for _, id := range s.nodeOrder {
		if n := s.nodes[id]; n.info.GetState() != StateDead {
			silences = append(silences, now.Sub(n.lastHeartbeat))
		}
	}
	grace := healthGrace(silences, s.period, limit)
	s.noteGraceLocked(grace)
	for _, id := range s.nodeOrder {
		n := s.nodes[id]
		if n.info.GetState() == StateDead {
			continue
		}
		if since := now.Sub(n.lastHeartbeat); since > limit+grace {
			reason := fmt.Sprintf("missed %d health checks (last seen %.1fs ago)", s.threshold, since.Seconds())
			s.markNodeDeadLocked(id, n, reason)
			continue
		}
		s.republishLoadLocked(id, n, now)
	}
}

// markNodeDeadLocked marks n DEAD and fails every actor on it (it dies, or
// restarts: see actorFailedLocked); s.mu must be held. It does nothing if n
// is already dead.
func (s *Server) markNodeDeadLocked(id ids.ID, n *nodeEntry, reason string) {
	if n.info.GetState() == StateDead {
		return
	}
	n.info.State = StateDead
	n.info.EndTimeMs = s.nowMs()
	n.info.DeathReason = reason
	s.hist.nodes.push(id)
	s.nodeChangedLocked(id, n)
	s.saveLocked(tableNodes, id.String(), n.info)
	s.log.Warn("node dead", "node", id.Short(), "name", n.info.GetNodeName(), "reason", reason)
	ev := n.info
	if n.fromStorage {
		// Subscribers get no address the storage alone vouches for.
		ev = cloneMsg(n.info)
		stripAddresses(ev)
	}
	s.publishLocked(Event{Kind: EventNodeDead, Node: ev})

	// A job whose driver ran there ended with it, even when the report of
	// its end never reached the GCS (it was down then).
	for _, jid := range s.jobOrder {
		j := s.jobs[jid]
		if j.GetState() != StateFinished && string(j.GetDriverNodeId()) == string(id.Bytes()) {
			s.finishJobLocked(jid, j, fmt.Sprintf("its driver's node %s died: %s", id.Short(), reason))
		}
	}

	actorReason := fmt.Sprintf("node %s died: %s", id.Short(), reason)
	for _, aid := range s.actorSeq {
		a := s.actors[aid]
		ownerNode, _ := ids.FromBytes(a.info.GetOwner().GetNodeId())
		switch {
		case ownerNode == id:
			// Its owner died with the node: it dies wherever it runs.
			s.markActorDeadLocked(a, fmt.Sprintf("its owner's node %s died: %s", id.Short(), reason))
		case a.node() == id:
			s.actorFailedLocked(a, actorReason, "", false)
		}
	}
}
