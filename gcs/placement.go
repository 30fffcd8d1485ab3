package gcs

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/gcs/internal/placement"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// Placement group limits.
const (
	// maxBundles is how many bundles one group may have.
	maxBundles = 1000
	// reserveTimeout bounds each prepare, commit and cancel call to a
	// raylet.
	reserveTimeout = 10 * time.Second
)

// BundleReserver reserves placement group bundles on a node's raylet: the
// GCS's side of the two-phase protocol (see the Raylet service's
// PrepareBundleResources). The GCS prepares, commits and sweeps
// (ReleaseUnused) from one goroutine, one group or node at a time; it
// cancels from that goroutine and from removals (a raylet that already
// cancelled a group, or was told it was removed, takes a cancel again as a
// no-op). Never with a lock held.
type BundleReserver interface {
	// Prepare holds bundles of group on node, all or none.
	Prepare(ctx context.Context, node *gorayv1.NodeInfo, group ids.ID, bundles []*gorayv1.Bundle) (*gorayv1.PrepareBundlesReply, error)
	// Commit turns prepared bundles into the group's resources.
	Commit(ctx context.Context, node *gorayv1.NodeInfo, group ids.ID, indexes []int32) (*gorayv1.CommitBundlesReply, error)
	// Cancel gives bundles back (nil indexes: every bundle of the group on
	// the node) and ends the work holding them, telling it reason.
	Cancel(ctx context.Context, node *gorayv1.NodeInfo, group ids.ID, indexes []int32, reason string) (*gorayv1.CancelReserveReply, error)
	// ReleaseUnused gives back every bundle the node holds, prepared or
	// committed, that inUse does not name, ending the work holding them
	// and telling it reason (a repeated call releases nothing more).
	ReleaseUnused(ctx context.Context, node *gorayv1.NodeInfo, inUse []*gorayv1.BundleRef, reason string) (*gorayv1.ReleaseUnusedBundlesReply, error)
}

// pgEntry is one placement group of the table.
type pgEntry struct {
	id       ids.ID
	info     *gorayv1.PlacementGroupInfo
	bundles  []resources.Set
	strategy placement.Strategy
	// changed is closed and replaced on every state change, for
	// GetPlacementGroup's wait_ready.
	changed chan struct{}
	// told are the nodes told of the group's removal (pgremove.go).
	told map[ids.ID]bool
}

// changedLocked wakes e's waiters and saves it; p.mu must be held.
func (p *placementGroups) changedLocked(e *pgEntry) {
	close(e.changed)
	e.changed = make(chan struct{})
	p.s.saveLocked(tableGroups, e.id.String(), e.info)
}

// placementGroups is the GCS's placement group manager: the group table
// and the scheduler that reserves groups on raylets in two phases. Its
// lock (mu) guards the table; it reads nodes from the Server and marks
// actors dead through it only with mu released. Groups are placed one at
// a time by run's goroutine, so two groups never hold parts of each other's
// resources: one is created, the other waits.
type placementGroups struct {
	s        *Server
	reserver BundleReserver
	log      hclog.Logger
	retry    time.Duration

	kick chan struct{} // capacity 1: schedule now

	mu     sync.Mutex
	groups map[ids.ID]*pgEntry
	order  []ids.ID
	byName map[nsName]ids.ID // live (not REMOVED) named groups
	// pending are cancels raylets have not taken yet (retried).
	pending []pendingCancel
	// sweeps are the nodes whose raylets are to be told which bundles the
	// table has placed on them (sweep.go), by node id: asked for when a
	// node registers again and when a restored GCS starts, retried with
	// backoff until taken.
	sweeps map[ids.ID]*pendingSweep
	// ended are the REMOVED groups still in the table, in the order they
	// were removed; dropped counts those dropped past the cap of the
	// history (history.go).
	ended   endedQueue
	dropped int64

	// waiters counts GetPlacementGroup calls blocked in wait_ready (for
	// tests).
	waiters atomic.Int64
}

func newPlacementGroups(s *Server, r BundleReserver, log hclog.Logger, retry time.Duration) *placementGroups {
	return &placementGroups{
		s: s, reserver: r, log: log.Named("placement"), retry: retry,
		kick:   make(chan struct{}, 1),
		groups: map[ids.ID]*pgEntry{},
		byName: map[nsName]ids.ID{},
		sweeps: map[ids.ID]*pendingSweep{},
	}
}

func (p *placementGroups) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

var strategies = map[gorayv1.PlacementStrategy]placement.Strategy{
	gorayv1.PlacementStrategy_PLACEMENT_STRATEGY_PACK:          placement.Pack,
	gorayv1.PlacementStrategy_PLACEMENT_STRATEGY_SPREAD:        placement.Spread,
	gorayv1.PlacementStrategy_PLACEMENT_STRATEGY_STRICT_PACK:   placement.StrictPack,
	gorayv1.PlacementStrategy_PLACEMENT_STRATEGY_STRICT_SPREAD: placement.StrictSpread,
}

// CreatePlacementGroup adds a group in state PENDING and returns at once;
// the scheduler reserves it as soon as it fits. Creating the same id again
// is a no-op. A name held in the group's namespace by a group that is not
// REMOVED is refused with NameTakenError; a finished job cannot create
// groups (JobFinishedError).
func (s *Server) CreatePlacementGroup(ctx context.Context, req *gorayv1.CreatePlacementGroupRequest) (_ *gorayv1.CreatePlacementGroupReply, err error) {
	var d durable
	defer d.wait(ctx, &err) // after the unlock below: answer once the change is durable
	in := req.GetGroup()
	if in == nil {
		return nil, &InvalidArgumentError{Field: "group", Problem: "required"}
	}
	id, job, strategy, bundles, err := checkGroupInfo(in)
	if err != nil {
		return nil, err
	}
	n := len(bundles)
	if !job.IsNil() {
		s.mu.Lock()
		j, ok := s.jobs[job]
		finished := ok && j.GetState() == StateFinished
		s.mu.Unlock()
		if finished {
			return nil, &JobFinishedError{ID: job, Op: "create placement group"}
		}
	}
	info := &gorayv1.PlacementGroupInfo{
		PlacementGroupId: id.Bytes(),
		Name:             in.GetName(),
		Namespace:        in.GetNamespace(),
		JobId:            in.GetJobId(),
		Detached:         in.GetDetached(),
		Strategy:         in.GetStrategy(),
		State:            gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PENDING,
		PendingReason:    "waiting to be scheduled",
		CreateTimeMs:     s.nowMs(),
	}
	for i, b := range bundles {
		info.Bundles = append(info.Bundles, &gorayv1.Bundle{Index: int32(i), Resources: &gorayv1.Resources{Amounts: b.Clone()}})
	}
	p := s.pgs
	p.mu.Lock()
	if _, ok := p.groups[id]; ok {
		p.mu.Unlock()
		return &gorayv1.CreatePlacementGroupReply{}, nil
	}
	if name := info.GetName(); name != "" {
		key := groupName(info)
		if holder, ok := p.byName[key]; ok {
			p.mu.Unlock()
			return nil, &NameTakenError{Kind: "placement group", Name: name, Namespace: key.namespace, Holder: holder}
		}
		p.byName[key] = id
	}
	p.groups[id] = &pgEntry{id: id, info: info, bundles: bundles, strategy: strategy, changed: make(chan struct{})}
	p.order = append(p.order, id)
	s.saveLocked(tableGroups, id.String(), info)
	d = s.durableNow()
	p.mu.Unlock()
	p.log.Info("placement group created", "group", id.Short(), "name", info.GetName(), "strategy", strategy, "bundles", n)
	p.wake()
	return &gorayv1.CreatePlacementGroupReply{}, nil
}

// checkGroupInfo validates what CreatePlacementGroup is told of a group
// (and what a GCS reads back from its storage): its ids, strategy, name
// and bundles. It returns the group's and its job's ids, the strategy and
// each bundle's resources.
func checkGroupInfo(in *gorayv1.PlacementGroupInfo) (id, job ids.ID, strategy placement.Strategy, bundles []resources.Set, err error) {
	fail := func(err error) (ids.ID, ids.ID, placement.Strategy, []resources.Set, error) {
		return ids.Nil, ids.Nil, 0, nil, err
	}
	if id, err = parseID("group.placement_group_id", in.GetPlacementGroupId()); err != nil {
		return fail(err)
	}
	if job, err = parseOptionalID("group.job_id", in.GetJobId()); err != nil {
		return fail(err)
	}
	strategy, ok := strategies[in.GetStrategy()]
	if !ok {
		return fail(&InvalidArgumentError{Field: "group.strategy", Problem: fmt.Sprintf("unknown strategy %v", in.GetStrategy())})
	}
	if len(in.GetName()) > maxNodeString {
		return fail(&InvalidArgumentError{Field: "group.name", Problem: fmt.Sprintf("%d bytes long, more than %d", len(in.GetName()), maxNodeString)})
	}
	if err := checkActorNamespace("group.namespace", in.GetNamespace()); err != nil {
		return fail(err)
	}
	n := len(in.GetBundles())
	if n == 0 || n > maxBundles {
		return fail(&InvalidArgumentError{Field: "group.bundles", Problem: fmt.Sprintf("%d bundles; a group has 1 to %d", n, maxBundles)})
	}
	bundles = make([]resources.Set, n)
	for i, b := range in.GetBundles() {
		field := fmt.Sprintf("group.bundles[%d]", i)
		if err := checkResources(field+".resources", b.GetResources()); err != nil {
			return fail(err)
		}
		set := resources.Set{}
		for k, v := range b.GetResources().GetAmounts() {
			if v > 0 {
				set[k] = v
			}
			if resources.IsGroupName(k) {
				return fail(&InvalidArgumentError{Field: field + ".resources", Problem: fmt.Sprintf("%q is a placement group resource; a bundle asks for node resources", k)})
			}
		}
		if len(set) == 0 {
			return fail(&InvalidArgumentError{Field: field, Problem: "a bundle must ask for some resource"})
		}
		bundles[i] = set
	}
	return id, job, strategy, bundles, nil
}

// RemovePlacementGroup removes a group: every bundle is given back, and
// the group's actors and the tasks running in it end. Removing a removed
// group is a no-op; an unknown id is NotFoundError.
func (s *Server) RemovePlacementGroup(ctx context.Context, req *gorayv1.RemovePlacementGroupRequest) (_ *gorayv1.RemovePlacementGroupReply, err error) {
	var d durable
	defer d.wait(ctx, &err) // after the unlock below: answer once the change is durable
	id, err := parseID("placement_group_id", req.GetPlacementGroupId())
	if err != nil {
		return nil, err
	}
	if err := s.pgs.remove(ctx, id, "removed by its owner"); err != nil {
		return nil, err
	}
	d = s.durableNow()
	return &gorayv1.RemovePlacementGroupReply{}, nil
}

// GetPlacementGroup returns a group by id or, when the id is empty, by
// namespace and name (a group that is not REMOVED). With wait_ready it blocks until the
// group is CREATED or REMOVED, or the call's context ends.
func (s *Server) GetPlacementGroup(ctx context.Context, req *gorayv1.GetPlacementGroupRequest) (*gorayv1.GetPlacementGroupReply, error) {
	id, err := parseOptionalID("placement_group_id", req.GetPlacementGroupId())
	if err != nil {
		return nil, err
	}
	name, ns := req.GetName(), req.GetNamespace()
	if id.IsNil() && name == "" {
		return nil, &InvalidArgumentError{Field: "placement_group_id", Problem: "placement_group_id or name is required"}
	}
	if err := checkActorNamespace("namespace", ns); err != nil {
		return nil, err
	}
	p := s.pgs
	for {
		p.mu.Lock()
		e := p.lookupLocked(id, nsName{ns, name})
		if e == nil {
			p.mu.Unlock()
			return nil, &NotFoundError{Kind: "placement group", ID: id, Name: name, Namespace: ns}
		}
		st := e.info.GetState()
		done := st == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_CREATED || st == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED
		if !req.GetWaitReady() || done {
			info := cloneMsg(e.info)
			p.mu.Unlock()
			return &gorayv1.GetPlacementGroupReply{Group: info}, nil
		}
		id = e.id // keep waiting on this group even if the name is reused
		ch := e.changed
		p.mu.Unlock()
		p.waiters.Add(1)
		select {
		case <-ch:
			p.waiters.Add(-1)
		case <-ctx.Done():
			p.waiters.Add(-1)
			return nil, &waitError{what: "placement group %s to be ready", id: id, err: ctx.Err()}
		}
	}
}

// ListPlacementGroups returns every group, removed ones too, in creation
// order.
func (s *Server) ListPlacementGroups(context.Context, *gorayv1.ListPlacementGroupsRequest) (*gorayv1.ListPlacementGroupsReply, error) {
	return &gorayv1.ListPlacementGroupsReply{Groups: s.PlacementGroups()}, nil
}

// PlacementGroups returns a snapshot of every group in creation order.
func (s *Server) PlacementGroups() []*gorayv1.PlacementGroupInfo {
	p := s.pgs
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*gorayv1.PlacementGroupInfo, 0, len(p.order))
	for _, id := range p.order {
		out = append(out, cloneMsg(p.groups[id].info))
	}
	return out
}

// lookupLocked finds a group by id, or by name when id is nil.
func (p *placementGroups) lookupLocked(id ids.ID, name nsName) *pgEntry {
	if id.IsNil() {
		id = p.byName[name]
	}
	return p.groups[id]
}

// groupName is a named group's key in byName.
func groupName(info *gorayv1.PlacementGroupInfo) nsName {
	return nsName{info.GetNamespace(), info.GetName()}
}

// run places pending groups whenever something may have changed (a group
// was created, a node joined or died, a job finished) and every retry
// period (resources are freed without events), until ctx ends. Between
// placements it sweeps the nodes that came back (sweep.go: every alive
// node of a restored table at start, and each node that registers again)
// and retries the cancels raylets have not taken.
func (p *placementGroups) run(ctx context.Context) {
	events, unsubscribe := p.s.Subscribe()
	defer unsubscribe()
	// The GCS that stored the table may have died during a reservation:
	// every node it left alive is swept when it registers again, which it
	// must before this GCS dials it (restore.go), and which its heartbeats
	// being refused makes it do (RegisterNode asks for the sweep).
	t := time.NewTicker(p.retry)
	defer t.Stop()
	due := time.NewTimer(0) // the next sweep's retry
	defer due.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-t.C:
		case <-due.C:
		case ev := <-events:
			p.handle(ctx, ev)
		}
		p.retrySweeps(ctx)
		p.retryCancels(ctx)
		p.sweepRemovedDemand(ctx)
		p.schedule(ctx)
		if d, ok := p.nextSweep(); ok {
			due.Reset(d)
		} else {
			due.Stop()
		}
	}
}

// handle reacts to a table change.
func (p *placementGroups) handle(ctx context.Context, ev Event) {
	switch ev.Kind {
	case EventNodeDead:
		p.nodeDied(ids.MustFromBytes(ev.Node.GetNodeId()))
		if f, ok := p.reserver.(interface{ Forget(*gorayv1.NodeInfo) }); ok {
			f.Forget(ev.Node)
		}
	case EventJobFinished:
		job := ids.MustFromBytes(ev.Job.GetJobId())
		p.mu.Lock()
		var ended []ids.ID
		for _, id := range p.order {
			e := p.groups[id]
			if !e.info.GetDetached() && ids.MustFromBytes(e.info.GetJobId()) == job && e.info.GetState() != gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED {
				ended = append(ended, id)
			}
		}
		p.mu.Unlock()
		for _, id := range ended {
			if err := p.remove(ctx, id, "its job finished"); err != nil {
				p.log.Warn("removing a finished job's placement group", "group", id.Short(), "error", err)
			}
		}
	}
}

// nodeDied puts the bundles the dead node held back to be placed: their
// groups go RESCHEDULING. A sweep of the node waiting is dropped.
func (p *placementGroups) nodeDied(node ids.ID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sweeps, node)
	for _, id := range p.order {
		e := p.groups[id]
		if e.info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED {
			continue
		}
		lost := 0
		for _, b := range e.info.GetBundles() {
			if len(b.GetNodeId()) > 0 && ids.MustFromBytes(b.GetNodeId()) == node {
				b.NodeId = nil
				lost++
			}
		}
		if lost == 0 {
			continue
		}
		if e.info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_CREATED {
			e.info.State = gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_RESCHEDULING
			e.info.Reschedules++
		}
		e.info.PendingReason = fmt.Sprintf("node %s holding %d of its bundles died", node.Short(), lost)
		p.log.Warn("placement group lost bundles", "group", id.Short(), "node", node.Short(), "bundles", lost)
		p.changedLocked(e)
	}
	p.wake()
}

// remove marks a group REMOVED and gives its bundles back.
func (p *placementGroups) remove(ctx context.Context, id ids.ID, reason string) error {
	p.mu.Lock()
	e, ok := p.groups[id]
	if !ok {
		p.mu.Unlock()
		return &NotFoundError{Kind: "placement group", ID: id}
	}
	if e.info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED {
		p.mu.Unlock()
		return nil
	}
	e.info.State = gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED
	e.info.RemoveTimeMs = p.s.nowMs()
	e.info.RemovalReason = reason
	e.info.PendingReason = ""
	if key := groupName(e.info); key.name != "" && p.byName[key] == id {
		delete(p.byName, key)
	}
	holding := map[ids.ID]bool{}
	for _, b := range e.info.GetBundles() {
		if len(b.GetNodeId()) > 0 {
			holding[ids.MustFromBytes(b.GetNodeId())] = true
		}
		b.NodeId = nil
	}
	p.changedLocked(e)
	p.ended.push(id)
	p.pruneLocked() // (history.go)
	p.mu.Unlock()

	p.log.Info("placement group removed", "group", id.Short(), "reason", reason)
	why := fmt.Sprintf("placement group %s was removed (%s)", id.Short(), reason)
	p.s.groupRemoved(id, why)
	// The nodes holding its bundles hear of it, and those with requests
	// queued for it fail them (pgremove.go).
	p.cancelGroupOn(ctx, id, p.s.removalTargets(id, holding), why)
	// What it held is free: groups waiting for it get their turn now.
	p.wake()
	return nil
}

// cancelOn tells each of nodes that group is gone: each gives back the
// group's bundles it holds (prepared or committed), ends the work holding
// them and fails requests queued for the group.
func (p *placementGroups) cancelOn(ctx context.Context, group ids.ID, nodes []*gorayv1.NodeInfo, reason string) {
	for _, n := range nodes {
		p.cancel(ctx, pendingCancel{node: n, group: group, reason: reason})
	}
}

// pendingCancel is a cancel a raylet has not taken yet: idx nil cancels
// the whole group there (it was removed); else those bundles (with their
// shapes, to take them off the node's total).
type pendingCancel struct {
	node    *gorayv1.NodeInfo
	group   ids.ID
	idx     []int32
	bundles []resources.Set
	reason  string
}

// cancel asks the node's raylet to give bundles back. Only once it did do
// the bundles' resources leave the node's total in the GCS's view (the
// raylet still reports them until then, and a heartbeat above the total
// would be refused); a cancel that fails is kept and retried (retryCancels)
// until it succeeds or the node dies. It does not follow ctx's
// cancellation, only its values: a caller giving up must not leave a
// raylet holding what the GCS forgot.
func (p *placementGroups) cancel(ctx context.Context, c pendingCancel) bool {
	if p.reserver == nil {
		return true
	}
	nid := ids.MustFromBytes(c.node.GetNodeId())
	if p.s.knownOnlyFromStorage(nid) {
		// Not dialled until it registers again (restore.go): kept for
		// then (retryCancels; its registration's sweep would release the
		// bundles too).
		p.mu.Lock()
		p.pending = append(p.pending, c)
		p.mu.Unlock()
		return false
	}
	cctx, done := context.WithTimeout(context.WithoutCancel(ctx), reserveTimeout)
	rep, err := p.reserver.Cancel(cctx, c.node, c.group, c.idx, c.reason)
	done()
	if err != nil {
		p.log.Warn("a raylet did not take a placement group's cancel; retrying", "group", c.group.Short(), "node", nid.Short(), "error", err)
		p.mu.Lock()
		p.pending = append(p.pending, c)
		p.mu.Unlock()
		return false
	}
	p.s.setAvailable(nid, rep.GetAvailable())
	if c.idx == nil {
		p.s.dropGroupResources(nid, c.group)
	} else {
		p.s.dropBundleResources(nid, c.group, c.idx, c.bundles)
	}
	return true
}

// retryCancels tries the cancels raylets have not taken yet again; those
// of dead nodes are dropped (a dead node holds nothing).
func (p *placementGroups) retryCancels(ctx context.Context) {
	p.mu.Lock()
	todo := p.pending
	p.pending = nil
	p.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	alive := map[ids.ID]bool{}
	for _, n := range p.s.aliveNodes() {
		alive[ids.MustFromBytes(n.GetNodeId())] = true
	}
	reachable := p.s.reachableNodes()
	for _, c := range todo {
		nid := ids.MustFromBytes(c.node.GetNodeId())
		if !alive[nid] {
			continue
		}
		if info := reachable[nid]; info != nil {
			c.node = info // as the node registered last
		}
		p.cancel(ctx, c)
	}
}

// schedule tries to place every PENDING and RESCHEDULING group, oldest
// first. A group that does not fit records why and waits; younger groups
// still get their turn.
func (p *placementGroups) schedule(ctx context.Context) {
	p.mu.Lock()
	var todo []ids.ID
	for _, id := range p.order {
		switch p.groups[id].info.GetState() {
		case gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PENDING, gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_RESCHEDULING:
			todo = append(todo, id)
		}
	}
	p.mu.Unlock()
	for _, id := range todo {
		if ctx.Err() != nil {
			return
		}
		p.place(ctx, id)
	}
}

// place reserves one group: choose nodes, prepare on each, commit on each.
func (p *placementGroups) place(ctx context.Context, id ids.ID) {
	p.mu.Lock()
	e := p.groups[id]
	st := e.info.GetState()
	if st != gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PENDING && st != gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_RESCHEDULING {
		p.mu.Unlock()
		return
	}
	fixed := map[int]string{}
	for _, b := range e.info.GetBundles() {
		if len(b.GetNodeId()) > 0 {
			fixed[int(b.GetIndex())] = ids.MustFromBytes(b.GetNodeId()).String()
		}
	}
	bundles, strategy := e.bundles, e.strategy
	p.mu.Unlock()

	nodes, infos := p.s.placementNodes()
	if p.reserver == nil {
		p.setPending(id, "this GCS cannot reach raylets to reserve bundles", false)
		return
	}
	out, err := placement.Place(strategy, bundles, nodes, fixed)
	if err != nil {
		nf, _ := err.(*placement.NoFitError)
		p.setPending(id, err.Error(), nf != nil && nf.Infeasible)
		return
	}
	// The bundles to reserve now, by node.
	want := map[string][]*gorayv1.Bundle{}
	for i, nid := range out {
		if _, ok := fixed[i]; ok {
			continue
		}
		want[nid] = append(want[nid], &gorayv1.Bundle{Index: int32(i), Resources: &gorayv1.Resources{Amounts: bundles[i]}})
	}
	if st == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PENDING {
		p.setState(id, gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PREPARED)
	}
	nodeIDs := make([]string, 0, len(want))
	nodeID := map[string]ids.ID{}
	for nid := range want {
		nodeIDs = append(nodeIDs, nid)
		nodeID[nid] = ids.MustFromBytes(infos[nid].GetNodeId())
	}
	sort.Strings(nodeIDs)
	// Phase 1: hold the bundles on every node, all or none.
	var prepared []string
	fail := func(reason string) {
		for _, nid := range prepared {
			idx := make([]int32, 0, len(want[nid]))
			for _, b := range want[nid] {
				idx = append(idx, b.GetIndex())
			}
			p.cancel(ctx, pendingCancel{node: infos[nid], group: id, idx: idx, bundles: bundles, reason: "placement failed: " + reason})
		}
		p.s.releaseHolds(nodeID)
		p.revert(id, st, reason)
	}
	for _, nid := range nodeIDs {
		cctx, cancel := context.WithTimeout(ctx, reserveTimeout)
		rep, err := p.reserver.Prepare(cctx, infos[nid], id, want[nid])
		cancel()
		switch {
		case err != nil:
			// The prepare may have been carried out all the same (a
			// timeout, a lost reply): cancel there too (a no-op otherwise).
			prepared = append(prepared, nid)
			fail(fmt.Sprintf("preparing on node %s: %v", nodeID[nid].Short(), err))
			return
		case !rep.GetSuccess():
			p.s.setAvailable(nodeID[nid], rep.GetAvailable())
			fail(fmt.Sprintf("node %s: %s", nodeID[nid].Short(), rep.GetReason()))
			return
		}
		held := resources.Set{}
		for _, b := range want[nid] {
			held.Add(bundles[b.GetIndex()])
		}
		p.s.hold(nodeID[nid], rep.GetAvailable(), held)
		prepared = append(prepared, nid)
	}
	// Phase 2: the group's resources appear on the nodes' totals first, so
	// that a heartbeat showing them available is never refused.
	for _, nid := range nodeIDs {
		for _, b := range want[nid] {
			p.s.addGroupResources(nodeID[nid], resources.BundleResources(bundles[b.GetIndex()], id.String(), int(b.GetIndex())))
		}
	}
	for _, nid := range nodeIDs {
		idx := make([]int32, 0, len(want[nid]))
		for _, b := range want[nid] {
			idx = append(idx, b.GetIndex())
		}
		cctx, cancel := context.WithTimeout(ctx, reserveTimeout)
		rep, err := p.reserver.Commit(cctx, infos[nid], id, idx)
		cancel()
		if err != nil {
			fail(fmt.Sprintf("committing on node %s: %v", nodeID[nid].Short(), err))
			return
		}
		p.s.setAvailable(nodeID[nid], rep.GetAvailable())
	}
	// Every node committed: the group's reservation is whole, and views
	// show it from now on.
	p.s.releaseHolds(nodeID)
	alive := map[ids.ID]bool{}
	for _, n := range p.s.aliveNodes() {
		alive[ids.MustFromBytes(n.GetNodeId())] = true
	}
	p.mu.Lock()
	if e.info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED {
		// Removed while being placed: what was just reserved goes back.
		p.mu.Unlock()
		var ns []*gorayv1.NodeInfo
		for _, nid := range nodeIDs {
			ns = append(ns, infos[nid])
		}
		p.cancelOn(ctx, id, ns, "placement group "+id.Short()+" was removed")
		return
	}
	for _, nid := range nodeIDs {
		for _, b := range want[nid] {
			e.info.Bundles[b.GetIndex()].NodeId = infos[nid].GetNodeId()
		}
	}
	// A node may have died while the group was being placed: its bundles
	// (reserved just now, or kept from before) are lost again.
	missing := 0
	for _, b := range e.info.GetBundles() {
		if len(b.GetNodeId()) == 0 || !alive[ids.MustFromBytes(b.GetNodeId())] {
			b.NodeId = nil
			missing++
		}
	}
	if missing > 0 {
		e.info.State = st
		e.info.PendingReason = fmt.Sprintf("%d bundles were on nodes that died while the group was being placed", missing)
		p.changedLocked(e)
		p.mu.Unlock()
		p.wake()
		return
	}
	e.info.State = gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_CREATED
	e.info.PendingReason = ""
	e.info.Infeasible = false
	e.info.ReadyTimeMs = p.s.nowMs()
	p.changedLocked(e)
	p.mu.Unlock()
	p.log.Info("placement group created on its nodes", "group", id.Short(), "nodes", len(nodeIDs))
}

// setPending records why a group waits.
func (p *placementGroups) setPending(id ids.ID, reason string, infeasible bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.groups[id]
	if e.info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED {
		return
	}
	if e.info.GetPendingReason() != reason || e.info.GetInfeasible() != infeasible {
		e.info.PendingReason = reason
		e.info.Infeasible = infeasible
		p.changedLocked(e)
	}
}

func (p *placementGroups) setState(id ids.ID, st gorayv1.PlacementGroupState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.groups[id]
	if e.info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED {
		return
	}
	e.info.State = st
	p.changedLocked(e)
}

// revert puts a group whose reservation failed back to the state it was
// placed from, with the reason.
func (p *placementGroups) revert(id ids.ID, st gorayv1.PlacementGroupState, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.groups[id]
	if e.info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED {
		return
	}
	e.info.State = st
	e.info.PendingReason = reason
	p.changedLocked(e)
	p.log.Debug("placement group reservation failed; will retry", "group", id.Short(), "reason", reason)
}

// ---------------------------------------------------------------- nodes

// placementNodes returns the alive nodes that do not drain as placement
// sees them (their own resources, not the groups' on them), and their
// infos by hex id.
func (s *Server) placementNodes() ([]placement.Node, map[string]*gorayv1.NodeInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []placement.Node
	infos := map[string]*gorayv1.NodeInfo{}
	for _, id := range s.nodeOrder {
		n := s.nodes[id]
		if !s.nodeReachableLocked(n) || n.draining {
			continue
		}
		total := resources.Set(n.info.GetTotal().GetAmounts()).Clone()
		avail := resources.Set{}
		for k, v := range n.available.GetAmounts() {
			if !resources.IsGroupName(k) {
				avail[k] = v
			}
		}
		out = append(out, placement.Node{ID: id.String(), Total: total, Available: avail})
		infos[id.String()] = cloneMsg(n.info)
	}
	return out, infos
}

// knownOnlyFromStorage reports whether node id is known only from the
// storage (restore.go): not to be dialled.
func (s *Server) knownOnlyFromStorage(id ids.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[id]
	return n != nil && n.fromStorage
}

// aliveNodes returns the infos of the alive nodes, those known only from
// the storage included: what liveness needs, never whom to dial
// (reachableNodes).
func (s *Server) aliveNodes() []*gorayv1.NodeInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*gorayv1.NodeInfo
	for _, id := range s.nodeOrder {
		if n := s.nodes[id]; n.info.GetState() == StateAlive {
			out = append(out, cloneMsg(n.info))
		}
	}
	return out
}

// setAvailable records a node's available resources as its raylet
// reported them in a reservation reply (fresher than its last heartbeat).
func (s *Server) setAvailable(id ids.ID, avail *gorayv1.Resources) {
	if avail == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.nodes[id]; n != nil && n.info.GetState() == StateAlive {
		n.available = cloneMsg(avail)
		s.availableChangedLocked(id, n)
	}
}

// hold records a node's available resources after a prepare, and what the
// prepare holds there (see nodeEntry.holding).
func (s *Server) hold(id ids.ID, avail *gorayv1.Resources, held resources.Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[id]
	if n == nil {
		return
	}
	if avail != nil && n.info.GetState() == StateAlive {
		n.available = cloneMsg(avail)
	}
	if n.holding == nil {
		n.holding = resources.Set{}
	}
	n.holding.Add(held)
	s.nodeChangedLocked(id, n)
}

// releaseHolds forgets what a reservation held on nodes.
func (s *Server) releaseHolds(nodes map[string]ids.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range nodes {
		if n := s.nodes[id]; n != nil && n.holding != nil {
			n.holding = nil
			s.nodeChangedLocked(id, n)
		}
	}
}

// addGroupResources adds committed bundle resources to a node's total.
func (s *Server) addGroupResources(id ids.ID, add resources.Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[id]
	if n == nil {
		return
	}
	if n.groups == nil {
		n.groups = resources.Set{}
	}
	n.groups.Add(add)
	s.nodeChangedLocked(id, n)
}

// dropBundleResources takes bundles idx of group off a node's total.
func (s *Server) dropBundleResources(id ids.ID, group ids.ID, idx []int32, bundles []resources.Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[id]
	if n == nil || n.groups == nil {
		return
	}
	for _, i := range idx {
		sub := resources.BundleResources(bundles[i], group.String(), int(i))
		for k, v := range sub {
			if n.groups[k] -= v; n.groups[k] <= 0 {
				delete(n.groups, k)
			}
		}
	}
	s.nodeChangedLocked(id, n)
}

// dropGroupResources takes every resource of group off a node's total.
func (s *Server) dropGroupResources(node ids.ID, group ids.ID) {
	suffix := "_" + group.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	if n == nil {
		return
	}
	dropped := false
	for k := range n.groups {
		if strings.HasSuffix(k, suffix) {
			delete(n.groups, k)
			dropped = true
		}
	}
	if dropped {
		s.nodeChangedLocked(node, n)
	}
}

// DeathCauseOutOfMemory is ActorInfo.death_cause of an actor whose worker
// the node's memory monitor killed (it died of it, or restarts from it).
const DeathCauseOutOfMemory = "out_of_memory"

// DeathCauseGroupRemoved is ActorInfo.death_cause of an actor ended by
// the removal of its placement group.
const DeathCauseGroupRemoved = "placement_group_removed"

// groupRemoved ends the actors of a removed group.
func (s *Server) groupRemoved(group ids.ID, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.pruneHistoryLocked() // before the unlock, after the loops (history.go)
	for _, aid := range s.actorSeq {
		a := s.actors[aid]
		if pg := a.info.GetPlacementGroupId(); len(pg) > 0 && ids.MustFromBytes(pg) == group && a.info.GetState() != gorayv1.ActorState_ACTOR_STATE_DEAD {
			a.info.DeathCause = DeathCauseGroupRemoved
			s.markActorDeadLocked(a, reason)
		}
	}
}
