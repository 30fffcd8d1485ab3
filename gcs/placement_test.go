package gcs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// fakeRaylets models the raylets' side of the reservation protocol: each
// node's available resources, and the bundles held (prepared or
// committed) per group. It checks what a raylet checks: a prepare holds
// all or nothing.
type fakeRaylets struct {
	mu        sync.Mutex
	available map[ids.ID]resources.Set
	held      map[ids.ID]map[ids.ID]map[int32]resources.Set // node -> group -> index -> bundle
	committed map[ids.ID]map[ids.ID]map[int32]bool
	cancels   map[ids.ID]int // group -> Cancel calls
	cancelsOn map[ids.ID]int // node -> Cancel calls
	// cancelFails makes that many Cancel calls fail first.
	cancelFails int
	// releaseFails makes that many ReleaseUnused calls fail first;
	// releases counts the calls (failed and gated ones too) by node.
	releaseFails int
	releases     map[ids.ID]int
	// releaseGate, when set, holds ReleaseUnused calls until closed.
	releaseGate chan struct{}
	failOn      map[ids.ID]bool
	failed      int // prepares failed by failOn
	// gate, when set for a node, holds its prepares until closed.
	gate map[ids.ID]chan struct{}
}

func newFakeRaylets() *fakeRaylets {
	return &fakeRaylets{
		available: map[ids.ID]resources.Set{},
		held:      map[ids.ID]map[ids.ID]map[int32]resources.Set{},
		committed: map[ids.ID]map[ids.ID]map[int32]bool{},
		cancels:   map[ids.ID]int{},
		cancelsOn: map[ids.ID]int{},
		releases:  map[ids.ID]int{},
		failOn:    map[ids.ID]bool{},
		gate:      map[ids.ID]chan struct{}{},
	}
}

func (f *fakeRaylets) addNode(id ids.ID, cpus float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.available[id] = resources.Set{"CPU": int64(cpus * resources.Unit)}
}

func (f *fakeRaylets) availPB(node ids.ID) *gorayv1.Resources {
	return &gorayv1.Resources{Amounts: f.available[node].Clone()}
}

func (f *fakeRaylets) Prepare(ctx context.Context, n *gorayv1.NodeInfo, g ids.ID, bundles []*gorayv1.Bundle) (*gorayv1.PrepareBundlesReply, error) {
	node := ids.MustFromBytes(n.GetNodeId())
	f.mu.Lock()
	gate := f.gate[node]
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOn[node] {
		f.failed++
		return nil, errors.New("connection refused")
	}
	// As a raylet: a bundle already held (prepared or committed) is not
	// held twice.
	sum := resources.Set{}
	var fresh []*gorayv1.Bundle
	for _, b := range bundles {
		if _, ok := f.held[node][g][b.GetIndex()]; ok {
			continue
		}
		fresh = append(fresh, b)
		sum.Add(b.GetResources().GetAmounts())
	}
	if !f.available[node].Fits(sum) {
		return &gorayv1.PrepareBundlesReply{Success: false, Reason: "not enough free", Available: f.availPB(node)}, nil
	}
	f.available[node].Sub(sum)
	if f.held[node] == nil {
		f.held[node] = map[ids.ID]map[int32]resources.Set{}
	}
	if f.held[node][g] == nil {
		f.held[node][g] = map[int32]resources.Set{}
	}
	for _, b := range fresh {
		f.held[node][g][b.GetIndex()] = b.GetResources().GetAmounts()
	}
	return &gorayv1.PrepareBundlesReply{Success: true, Available: f.availPB(node)}, nil
}

func (f *fakeRaylets) Commit(_ context.Context, n *gorayv1.NodeInfo, g ids.ID, idx []int32) (*gorayv1.CommitBundlesReply, error) {
	node := ids.MustFromBytes(n.GetNodeId())
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.committed[node] == nil {
		f.committed[node] = map[ids.ID]map[int32]bool{}
	}
	if f.committed[node][g] == nil {
		f.committed[node][g] = map[int32]bool{}
	}
	for _, i := range idx {
		if _, ok := f.held[node][g][i]; !ok {
			return nil, fmt.Errorf("commit of bundle %d that is not prepared", i)
		}
		f.committed[node][g][i] = true
	}
	return &gorayv1.CommitBundlesReply{Available: f.availPB(node)}, nil
}

func (f *fakeRaylets) Cancel(_ context.Context, n *gorayv1.NodeInfo, g ids.ID, idx []int32, _ string) (*gorayv1.CancelReserveReply, error) {
	node := ids.MustFromBytes(n.GetNodeId())
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels[g]++
	f.cancelsOn[node]++
	if f.cancelFails > 0 {
		f.cancelFails--
		return nil, errors.New("connection reset")
	}
	for i, b := range f.held[node][g] {
		if idx != nil && !contains(idx, i) {
			continue
		}
		f.available[node].Add(b)
		delete(f.held[node][g], i)
		delete(f.committed[node][g], i)
	}
	return &gorayv1.CancelReserveReply{Available: f.availPB(node)}, nil
}

// ReleaseUnused gives back every bundle the node holds that inUse does
// not name, as a raylet does.
func (f *fakeRaylets) ReleaseUnused(ctx context.Context, n *gorayv1.NodeInfo, inUse []*gorayv1.BundleRef, _ string) (*gorayv1.ReleaseUnusedBundlesReply, error) {
	node := ids.MustFromBytes(n.GetNodeId())
	f.mu.Lock()
	f.releases[node]++
	gate := f.releaseGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.releaseFails > 0 {
		f.releaseFails--
		return nil, errors.New("connection refused")
	}
	keep := map[ids.ID]map[int32]bool{}
	for _, b := range inUse {
		g := ids.MustFromBytes(b.GetPlacementGroupId())
		if keep[g] == nil {
			keep[g] = map[int32]bool{}
		}
		keep[g][b.GetIndex()] = true
	}
	rep := &gorayv1.ReleaseUnusedBundlesReply{}
	for g, bundles := range f.held[node] {
		for i, b := range bundles {
			if keep[g][i] {
				continue
			}
			f.available[node].Add(b)
			delete(bundles, i)
			delete(f.committed[node][g], i)
			rep.Released = append(rep.Released, &gorayv1.BundleRef{PlacementGroupId: g.Bytes(), Index: i})
		}
	}
	rep.Available = f.availPB(node)
	return rep, nil
}

// heldOn returns the bundles held on node by group: index -> committed.
func (f *fakeRaylets) heldOn(node ids.ID) map[ids.ID]map[int32]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[ids.ID]map[int32]bool{}
	for g, bundles := range f.held[node] {
		for i := range bundles {
			if out[g] == nil {
				out[g] = map[int32]bool{}
			}
			out[g][i] = f.committed[node][g][i]
		}
	}
	return out
}

func contains(xs []int32, x int32) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// heldBy counts the bundles of group held anywhere.
func (f *fakeRaylets) heldBy(g ids.ID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, groups := range f.held {
		n += len(groups[g])
	}
	return n
}

// pgCluster is a GCS with nodes whose raylets are a fakeRaylets.
type pgCluster struct {
	s      *Server
	c      gorayv1.GcsClient
	f      *fakeRaylets
	cancel context.CancelFunc
}

func startPGCluster(t *testing.T, nodeCPUs ...float64) (*pgCluster, []ids.ID) {
	t.Helper()
	f := newFakeRaylets()
	s, c := startServer(t, Options{Reserver: f})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	pc := &pgCluster{s: s, c: c, f: f, cancel: cancel}
	var nodes []ids.ID
	for i, cpus := range nodeCPUs {
		nodes = append(nodes, pc.addNode(t, fmt.Sprintf("n%d", i), cpus))
	}
	return pc, nodes
}

func (pc *pgCluster) addNode(t *testing.T, name string, cpus float64) ids.ID {
	t.Helper()
	id := newID()
	pc.f.addNode(id, cpus)
	info := nodeInfo(id, name)
	info.Total = &gorayv1.Resources{Amounts: map[string]int64{"CPU": int64(cpus * resources.Unit)}}
	_, err := pc.c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: info})
	mustOK(t, err)
	return id
}

func bundlesOf(cpus ...float64) []*gorayv1.Bundle {
	var out []*gorayv1.Bundle
	for i, c := range cpus {
		out = append(out, &gorayv1.Bundle{Index: int32(i), Resources: &gorayv1.Resources{Amounts: map[string]int64{"CPU": int64(c * resources.Unit)}}})
	}
	return out
}

func (pc *pgCluster) create(t *testing.T, name string, strategy gorayv1.PlacementStrategy, job ids.ID, detached bool, cpus ...float64) ids.ID {
	t.Helper()
	id := newID()
	_, err := pc.c.CreatePlacementGroup(ctxT(t), &gorayv1.CreatePlacementGroupRequest{Group: &gorayv1.PlacementGroupInfo{
		PlacementGroupId: id.Bytes(), Name: name, JobId: job.Bytes(), Detached: detached, Strategy: strategy, Bundles: bundlesOf(cpus...),
	}})
	mustOK(t, err)
	return id
}

func (pc *pgCluster) get(t *testing.T, id ids.ID) *gorayv1.PlacementGroupInfo {
	t.Helper()
	r, err := pc.c.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{PlacementGroupId: id.Bytes()})
	mustOK(t, err)
	return r.GetGroup()
}

func (pc *pgCluster) waitState(t *testing.T, id ids.ID, st gorayv1.PlacementGroupState) *gorayv1.PlacementGroupInfo {
	t.Helper()
	var g *gorayv1.PlacementGroupInfo
	waitFor(t, fmt.Sprintf("group %s %v", id.Short(), st), func() bool {
		g = pc.get(t, id)
		return g.GetState() == st
	})
	return g
}

const (
	pack         = gorayv1.PlacementStrategy_PLACEMENT_STRATEGY_PACK
	strictPack   = gorayv1.PlacementStrategy_PLACEMENT_STRATEGY_STRICT_PACK
	strictSpread = gorayv1.PlacementStrategy_PLACEMENT_STRATEGY_STRICT_SPREAD
	stCreated    = gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_CREATED
	stPending    = gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PENDING
	stRemoved    = gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED
)

func TestPlacementGroupCreatedAndWaitReady(t *testing.T) {
	pc, nodes := startPGCluster(t, 4, 4)
	id := pc.create(t, "gang", strictSpread, newID(), false, 1, 1)
	r, err := pc.c.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{Name: "gang", WaitReady: true})
	mustOK(t, err)
	g := r.GetGroup()
	if g.GetState() != stCreated || ids.MustFromBytes(g.GetPlacementGroupId()) != id {
		t.Fatalf("wait_ready returned %v", g)
	}
	on := map[ids.ID]bool{}
	for _, b := range g.GetBundles() {
		on[ids.MustFromBytes(b.GetNodeId())] = true
	}
	if len(on) != 2 {
		t.Fatalf("STRICT_SPREAD bundles on %d nodes, want 2: %v", len(on), g.GetBundles())
	}
	// The group's resources are part of the nodes' totals, so their
	// heartbeats showing them available are accepted.
	for _, n := range nodes {
		tot := nodeView(t, pc.c, n).GetInfo().GetTotal().GetAmounts()
		if got := tot[resources.GroupName("CPU", id.String(), -1)]; got != resources.Unit {
			t.Errorf("node %s total CPU_group = %d, want %d", n.Short(), got, resources.Unit)
		}
	}
}

func TestPlacementGroupWaitsAndIsFlaggedInfeasible(t *testing.T) {
	pc, _ := startPGCluster(t, 4, 4)
	big := pc.create(t, "", strictPack, newID(), false, 3, 3)
	waitFor(t, "infeasible flag", func() bool { return pc.get(t, big).GetInfeasible() })
	if g := pc.get(t, big); g.GetState() != stPending || g.GetPendingReason() == "" {
		t.Fatalf("infeasible group = %v, want PENDING with a reason", g)
	}
	// Three STRICT_SPREAD bundles on two nodes wait, not infeasible, and
	// are created when a third node joins.
	spread := pc.create(t, "", strictSpread, newID(), false, 1, 1, 1)
	waitFor(t, "pending reason", func() bool { return pc.get(t, spread).GetPendingReason() != "waiting to be scheduled" })
	if g := pc.get(t, spread); g.GetState() != stPending || g.GetInfeasible() {
		t.Fatalf("spread group = %v, want PENDING and feasible", g)
	}
	pc.addNode(t, "n2", 4)
	pc.waitState(t, spread, stCreated)
	if g := pc.get(t, big); g.GetState() != stPending {
		t.Fatalf("infeasible group became %v", g.GetState())
	}
}

func TestPlacementGroupsRacingNeverHoldParts(t *testing.T) {
	pc, _ := startPGCluster(t, 2, 2)
	a := pc.create(t, "", pack, newID(), false, 2, 2)
	b := pc.create(t, "", pack, newID(), false, 2, 2)
	var created, waiting ids.ID
	waitFor(t, "one group created", func() bool {
		ga, gb := pc.get(t, a), pc.get(t, b)
		switch {
		case ga.GetState() == stCreated:
			created, waiting = a, b
		case gb.GetState() == stCreated:
			created, waiting = b, a
		default:
			return false
		}
		return true
	})
	if n := pc.f.heldBy(waiting); n != 0 {
		t.Fatalf("the waiting group holds %d bundles", n)
	}
	if n := pc.f.heldBy(created); n != 2 {
		t.Fatalf("the created group holds %d bundles, want 2", n)
	}
	_, err := pc.c.RemovePlacementGroup(ctxT(t), &gorayv1.RemovePlacementGroupRequest{PlacementGroupId: created.Bytes()})
	mustOK(t, err)
	pc.waitState(t, waiting, stCreated)
	waitFor(t, "the removed group's bundles returned", func() bool { return pc.f.heldBy(created) == 0 })
}

func TestPlacementGroupFailedPrepareReleasesTheOthers(t *testing.T) {
	pc, nodes := startPGCluster(t, 4, 4)
	pc.f.mu.Lock()
	pc.f.failOn[nodes[1]] = true
	pc.f.mu.Unlock()
	id := pc.create(t, "", strictSpread, newID(), false, 1, 1)
	// The group's bundles are prepared node by node; whichever order,
	// after a failure the other node's hold is given back (a group that
	// kept it would hold a part forever and this would time out).
	waitFor(t, "failed prepares with nothing held", func() bool {
		pc.f.mu.Lock()
		failed := pc.f.failed
		pc.f.mu.Unlock()
		return failed >= 2 && pc.f.heldBy(id) == 0
	})
	if g := pc.get(t, id); g.GetState() != stPending {
		t.Fatalf("state = %v, want PENDING", g.GetState())
	}
	pc.f.mu.Lock()
	pc.f.failOn[nodes[1]] = false
	pc.f.mu.Unlock()
	pc.waitState(t, id, stCreated)
}

func TestPlacementGroupRescheduledAfterNodeDeath(t *testing.T) {
	pc, nodes := startPGCluster(t, 4, 4)
	id := pc.create(t, "", strictSpread, newID(), false, 1, 1)
	pc.waitState(t, id, stCreated)
	_, err := pc.c.UnregisterNode(ctxT(t), &gorayv1.UnregisterNodeRequest{NodeId: nodes[0].Bytes(), Reason: "killed"})
	mustOK(t, err)
	waitFor(t, "RESCHEDULING", func() bool {
		return pc.get(t, id).GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_RESCHEDULING
	})
	third := pc.addNode(t, "n2", 4)
	g := pc.waitState(t, id, stCreated)
	if g.GetReschedules() != 1 {
		t.Errorf("reschedules = %d, want 1", g.GetReschedules())
	}
	on := map[ids.ID]bool{}
	for _, b := range g.GetBundles() {
		on[ids.MustFromBytes(b.GetNodeId())] = true
	}
	if !on[nodes[1]] || !on[third] || on[nodes[0]] {
		t.Fatalf("bundles on %v; want the surviving node and the new one", g.GetBundles())
	}
}

func TestPlacementGroupRemoveEndsActorsAndJobEndRemovesGroups(t *testing.T) {
	pc, _ := startPGCluster(t, 4)
	job := newID()
	_, err := pc.c.AddJob(ctxT(t), &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: job.Bytes(), BinaryPath: "/bin/x", BinarySha256: fmt.Sprintf("%064x", 1)}})
	mustOK(t, err)
	id := pc.create(t, "named", pack, job, false, 1)
	detached := pc.create(t, "kept", pack, job, true, 1)
	pc.waitState(t, id, stCreated)
	pc.waitState(t, detached, stCreated)
	actor := newID()
	a := actorOn(actor, job, newID(), newID(), "")
	a.PlacementGroupId = id.Bytes()
	registerActor(t, pc.c, a)

	_, err = pc.c.CreatePlacementGroup(ctxT(t), &gorayv1.CreatePlacementGroupRequest{Group: &gorayv1.PlacementGroupInfo{
		PlacementGroupId: newID().Bytes(), Name: "named", Bundles: bundlesOf(1)}})
	wantCode(t, err, codes.AlreadyExists, `placement group name "named" is already taken`)

	_, err = pc.c.MarkJobFinished(ctxT(t), &gorayv1.MarkJobFinishedRequest{JobId: job.Bytes()})
	mustOK(t, err)
	g := pc.waitState(t, id, stRemoved)
	if g.GetRemovalReason() != "its job finished" {
		t.Errorf("removal reason = %q", g.GetRemovalReason())
	}
	// The nodes are told in the background (in parallel): wait for it.
	waitFor(t, "the removed group's bundles returned", func() bool { return pc.f.heldBy(id) == 0 })
	if got := getActor(t, pc.c, actor); got.GetState() != gorayv1.ActorState_ACTOR_STATE_DEAD {
		t.Errorf("actor in the removed group is %v, want DEAD", got.GetState())
	}
	if st := pc.get(t, detached).GetState(); st != stCreated {
		t.Errorf("detached group is %v after its job finished, want CREATED", st)
	}
	// A removed group's name is free; the detached one is found by name.
	r, err := pc.c.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{Name: "kept"})
	mustOK(t, err)
	if ids.MustFromBytes(r.GetGroup().GetPlacementGroupId()) != detached {
		t.Errorf("lookup by name found %v", r.GetGroup())
	}
	_, err = pc.c.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{Name: "named"})
	wantCode(t, err, codes.NotFound, `no placement group named "named"`)
}

func TestCreatePlacementGroupRefusesBadInput(t *testing.T) {
	pc, _ := startPGCluster(t, 4)
	tests := []struct {
		name string
		g    *gorayv1.PlacementGroupInfo
		want string
	}{
		{"no bundles", &gorayv1.PlacementGroupInfo{PlacementGroupId: newID().Bytes()}, "0 bundles"},
		{"empty bundle", &gorayv1.PlacementGroupInfo{PlacementGroupId: newID().Bytes(), Bundles: []*gorayv1.Bundle{{}}}, "group.bundles[0]: a bundle must ask for some resource"},
		{"group resource in a bundle", &gorayv1.PlacementGroupInfo{PlacementGroupId: newID().Bytes(), Bundles: []*gorayv1.Bundle{{Resources: &gorayv1.Resources{Amounts: map[string]int64{"CPU_group_x": 1}}}}}, "is a placement group resource"},
		{"bad strategy", &gorayv1.PlacementGroupInfo{PlacementGroupId: newID().Bytes(), Strategy: 9, Bundles: bundlesOf(1)}, "unknown strategy"},
		{"no id", &gorayv1.PlacementGroupInfo{Bundles: bundlesOf(1)}, "group.placement_group_id: required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := pc.c.CreatePlacementGroup(ctxT(t), &gorayv1.CreatePlacementGroupRequest{Group: tt.g})
			wantCode(t, err, codes.InvalidArgument, tt.want)
		})
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	id := pc.create(t, "", strictPack, newID(), false, 8) // never fits
	cancel()
	_, err := pc.c.GetPlacementGroup(ctx, &gorayv1.GetPlacementGroupRequest{PlacementGroupId: id.Bytes(), WaitReady: true})
	wantCode(t, err, codes.Canceled, "")
}

// TestPartialReservationIsNotVisible: while a group is prepared on one node
// and not yet on the other, the cluster's view of available resources
// shows no hold (no one sees a partial reservation); once it is created
// the view shows all of it.
func TestPartialReservationIsNotVisible(t *testing.T) {
	pc, nodes := startPGCluster(t, 4, 4)
	gate := make(chan struct{})
	var closeGate sync.Once
	t.Cleanup(func() { closeGate.Do(func() { close(gate) }) }) // never leave Run stuck
	// Bundles are prepared in node id order: gate the later node.
	later := nodes[1]
	if later.String() < nodes[0].String() {
		later = nodes[0]
	}
	pc.f.mu.Lock()
	pc.f.gate[later] = gate
	pc.f.mu.Unlock()
	id := pc.create(t, "", strictSpread, newID(), false, 3, 3)
	waitFor(t, "the first node prepared and its reply recorded", func() bool {
		pc.s.mu.Lock()
		defer pc.s.mu.Unlock()
		for _, n := range pc.s.nodes {
			if len(n.holding) > 0 && n.available.GetAmounts()["CPU"] == 1*resources.Unit {
				return true
			}
		}
		return false
	})
	for _, n := range nodes {
		if got := nodeView(t, pc.c, n).GetAvailable().GetAmounts()["CPU"]; got != 4*resources.Unit {
			t.Errorf("node %s shows %v CPU available during the reservation; want all 4", n.Short(), float64(got)/resources.Unit)
		}
	}
	closeGate.Do(func() { close(gate) })
	pc.waitState(t, id, stCreated)
	for _, n := range nodes {
		if got := nodeView(t, pc.c, n).GetAvailable().GetAmounts()["CPU"]; got != 1*resources.Unit {
			t.Errorf("node %s shows %v CPU available once the group is created; want 1", n.Short(), float64(got)/resources.Unit)
		}
	}
}

// TestFailedCancelIsRetried: a raylet that does not take a removal's
// cancel keeps the group's resources in the GCS's view of its total (so its
// heartbeats, which still show them, are accepted) until a retry gets
// through; then they are gone and the raylet holds nothing.
func TestFailedCancelIsRetried(t *testing.T) {
	pc, nodes := startPGCluster(t, 4)
	id := pc.create(t, "", pack, newID(), false, 2)
	pc.waitState(t, id, stCreated)
	pc.f.mu.Lock()
	pc.f.cancelFails = 2
	pc.f.mu.Unlock()
	_, err := pc.c.RemovePlacementGroup(ctxT(t), &gorayv1.RemovePlacementGroupRequest{PlacementGroupId: id.Bytes()})
	mustOK(t, err)
	groupCPU := resources.GroupName("CPU", id.String(), -1)
	if got := nodeView(t, pc.c, nodes[0]).GetInfo().GetTotal().GetAmounts()[groupCPU]; got == 0 {
		t.Fatal("the group's resources left the node's total although its raylet did not take the cancel")
	}
	waitFor(t, "the cancel retried until taken", func() bool {
		return pc.f.heldBy(id) == 0 && nodeView(t, pc.c, nodes[0]).GetInfo().GetTotal().GetAmounts()[groupCPU] == 0
	})
}

// TestRemovedGroupsArePruned: the table keeps the newest removed groups
// only.
func TestRemovedGroupsArePruned(t *testing.T) {
	pc, _ := startPGCluster(t, 4)
	pc.s.hist.limits.RemovedPlacementGroups = 2 // (before any group is removed)
	var ids4 []ids.ID
	for range 4 {
		id := pc.create(t, "", pack, newID(), false, 1)
		pc.waitState(t, id, stCreated)
		_, err := pc.c.RemovePlacementGroup(ctxT(t), &gorayv1.RemovePlacementGroupRequest{PlacementGroupId: id.Bytes()})
		mustOK(t, err)
		ids4 = append(ids4, id)
	}
	list, err := pc.c.ListPlacementGroups(ctxT(t), &gorayv1.ListPlacementGroupsRequest{})
	mustOK(t, err)
	if n := len(list.GetGroups()); n != 2 {
		t.Fatalf("%d groups listed after removing 4 with a limit of 2", n)
	}
	if got := ids.MustFromBytes(list.GetGroups()[1].GetPlacementGroupId()); got != ids4[3] {
		t.Fatalf("the newest removed group is not kept: %v", got)
	}
	_, err = pc.c.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{PlacementGroupId: ids4[0].Bytes()})
	wantCode(t, err, codes.NotFound, "no placement group")
}

// TestWaitReadyEndsWithRemoval: a caller blocked waiting for a group that
// cannot fit is woken by its removal and sees it REMOVED.
func TestWaitReadyEndsWithRemoval(t *testing.T) {
	pc, _ := startPGCluster(t, 1)
	id := pc.create(t, "", strictPack, newID(), false, 8) // never fits
	got := make(chan *gorayv1.PlacementGroupInfo, 1)
	go func() {
		r, err := pc.c.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{PlacementGroupId: id.Bytes(), WaitReady: true})
		if err != nil {
			t.Error(err)
		}
		got <- r.GetGroup()
	}()
	waitFor(t, "a waiter", func() bool { return pc.s.pgs.waiters.Load() == 1 })
	_, err := pc.c.RemovePlacementGroup(ctxT(t), &gorayv1.RemovePlacementGroupRequest{PlacementGroupId: id.Bytes()})
	mustOK(t, err)
	select {
	case g := <-got:
		if g.GetState() != stRemoved {
			t.Fatalf("the waiter saw %v, want REMOVED", g.GetState())
		}
	case <-ctxT(t).Done():
		t.Fatal("the waiter was not woken by the removal")
	}
}

// TestPlacementGroupNamesPerNamespace: a group's name is unique in its
// namespace only, as in Ray (and as actors' names): two namespaces each
// have a group "gang", a lookup finds the one of the namespace it names,
// and a GCS restored from its storage keeps both.
func TestPlacementGroupNamesPerNamespace(t *testing.T) {
	pc, _ := startPGCluster(t, 4)
	create := func(ns string) (ids.ID, error) {
		id := newID()
		_, err := pc.c.CreatePlacementGroup(ctxT(t), &gorayv1.CreatePlacementGroupRequest{Group: &gorayv1.PlacementGroupInfo{
			PlacementGroupId: id.Bytes(), Name: "gang", Namespace: ns, Strategy: pack, Bundles: bundlesOf(1)}})
		return id, err
	}
	a, err := create("a")
	mustOK(t, err)
	b, err := create("b")
	mustOK(t, err)
	_, err = create("a")
	wantCode(t, err, codes.AlreadyExists, `placement group name "gang" in namespace "a" is already taken`)
	_, err = create("bad\x00ns")
	wantCode(t, err, codes.InvalidArgument, "group.namespace")
	lookup := func(c gorayv1.GcsClient, ns string) (ids.ID, error) {
		r, err := c.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{Name: "gang", Namespace: ns})
		if err != nil {
			return ids.Nil, err
		}
		return ids.MustFromBytes(r.GetGroup().GetPlacementGroupId()), nil
	}
	for ns, want := range map[string]ids.ID{"a": a, "b": b} {
		if got, err := lookup(pc.c, ns); err != nil || got != want {
			t.Fatalf("GetPlacementGroup(gang) in namespace %q = %s, %v; want %s", ns, got, err, want)
		}
	}
	_, err = lookup(pc.c, "c")
	wantCode(t, err, codes.NotFound, `no placement group named "gang" in namespace "c"`)

	st := keepOpen{store.NewMemory()}
	recs := map[string][]byte{}
	for _, g := range pc.s.PlacementGroups() {
		recs[ids.MustFromBytes(g.GetPlacementGroupId()).String()] = marshalled(g)
	}
	mustOK(t, st.Put(ctxT(t), tableMeta, map[string][]byte{"cluster_id": []byte(ids.New().String())}))
	mustOK(t, st.Put(ctxT(t), tableGroups, recs))
	s, err := openOn(ctxT(t), Options{Reserver: newFakeRaylets()}, st)
	mustOK(t, err)
	c, _ := serveOpened(t, s)
	if s.StorageSetAside() != 0 {
		t.Fatalf("the restored GCS set %d records aside", s.StorageSetAside())
	}
	for ns, want := range map[string]ids.ID{"a": a, "b": b} {
		if got, err := lookup(c, ns); err != nil || got != want {
			t.Fatalf("restored: GetPlacementGroup(gang) in namespace %q = %s, %v; want %s", ns, got, err, want)
		}
	}
}
