package raylet

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/raylet/internal/policy"
)

func gpus(n float64) resources.Set {
	v, _ := resources.FromFloat(resources.GPU, n)
	return resources.Set{resources.GPU: v}
}

// inGroup is what a task asking for res placed in bundle index of group
// asks the raylet for.
func inGroup(res resources.Set, group ids.ID, index int) resources.Set {
	return resources.InGroup(res, group.String(), index)
}

func groupPending(j *job, res resources.Set, group ids.ID) *pendingLease {
	p := pending(j, res)
	p.group = group
	return p
}

func newTestScheduler(total resources.Set, b workerBinder) *scheduler {
	return newScheduler(ids.New(), total, hclog.NewNullLogger(), b)
}

func idleBinder(j *job, n int) *fakeBinder {
	b := &fakeBinder{idle: map[*job][]*worker{}, started: map[*job]int{}}
	for range n {
		b.idle[j] = append(b.idle[j], &worker{id: ids.New(), job: j})
	}
	return b
}

// TestPrepareBundles: prepare holds all of a group's bundles or none, says
// what is missing when they do not fit, and never holds a bundle twice.
func TestPrepareBundles(t *testing.T) {
	s := newTestScheduler(cpus(4), idleBinder(testJob(), 0))
	g1, g2, g3 := ids.New(), ids.New(), ids.New()
	both := resources.Set{}
	both.Add(cpus(1))
	both.Add(gpus(1))
	tests := []struct {
		name      string
		group     ids.ID
		bundles   []groupBundle
		ok        bool
		reason    []string // words the reason must contain
		available resources.Set
		held      map[int]bool
	}{
		{"fits: held", g1, []groupBundle{{0, cpus(2)}, {1, cpus(1)}}, true, nil, cpus(1), map[int]bool{0: false, 1: false}},
		{"again: held once", g1, []groupBundle{{0, cpus(2)}, {1, cpus(1)}}, true, nil, cpus(1), map[int]bool{0: false, 1: false}},
		{"too big: nothing held", g2, []groupBundle{{0, cpus(1)}, {1, cpus(1)}}, false, []string{"CPU", "needs 2", "1 available", "bundles 0, 1"}, cpus(1), map[int]bool{}},
		{"a missing resource: nothing held", g3, []groupBundle{{0, both}}, false, []string{"GPU"}, cpus(1), map[int]bool{}},
		{"only the new bundle is held", g1, []groupBundle{{0, cpus(2)}, {1, cpus(1)}, {2, cpus(1)}}, true, nil, resources.Set{}, map[int]bool{0: false, 1: false, 2: false}},
		{"a duplicate index counts once", g2, []groupBundle{{0, resources.Set{}}, {0, resources.Set{}}}, true, nil, resources.Set{}, map[int]bool{0: false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, reason, avail, err := s.prepareBundles(tt.group, tt.bundles)
			if err != nil || ok != tt.ok {
				t.Fatalf("prepare: ok %v, reason %q, err %v; want ok %v", ok, reason, err, tt.ok)
			}
			for _, w := range tt.reason {
				if !strings.Contains(reason, w) {
					t.Errorf("reason %q does not say %q", reason, w)
				}
			}
			if !maps.Equal(avail, tt.available) || !maps.Equal(s.availableResources(), tt.available) {
				t.Errorf("available = %v (reply %v), want %v", s.availableResources(), avail, tt.available)
			}
			if got := s.heldBundles(tt.group); !maps.Equal(got, tt.held) {
				t.Errorf("held bundles = %v, want %v", got, tt.held)
			}
		})
	}
}

// TestConcurrentPreparesOneWins: two groups asking for the same resources
// at once: exactly one holds them.
func TestConcurrentPreparesOneWins(t *testing.T) {
	for range 50 {
		s := newTestScheduler(cpus(2), idleBinder(testJob(), 0))
		groups := []ids.ID{ids.New(), ids.New()}
		oks := make([]bool, len(groups))
		var wg sync.WaitGroup
		for i, g := range groups {
			wg.Go(func() {
				ok, _, _, err := s.prepareBundles(g, []groupBundle{{0, cpus(1)}, {1, cpus(1)}})
				if err != nil {
					t.Error(err)
				}
				oks[i] = ok
			})
		}
		wg.Wait()
		if oks[0] == oks[1] {
			t.Fatalf("concurrent prepares of the same 2 CPUs: ok = %v, want exactly one", oks)
		}
		if avail := s.availableResources(); len(avail) != 0 {
			t.Fatalf("available = %v, want nothing left", avail)
		}
	}
}

// TestCommitBundles: commit turns held bundles into the group's resources,
// grants the request that waited for them, is a no-op when repeated and
// fails for a bundle that is not held.
func TestCommitBundles(t *testing.T) {
	j := testJob()
	s := newTestScheduler(cpus(4), idleBinder(j, 1))
	g := ids.New()
	// A task of the group, before the group is placed: it waits (pending,
	// not infeasible) under the group's names.
	p := groupPending(j, inGroup(cpus(1), g, 0), g)
	if d, err := s.request(p, emptySnapshot, 0); err != nil || d.Spill != nil || d.Unschedulable != "" {
		t.Fatalf("request for a pending group: %+v, %v; want it queued", d, err)
	}
	demand := s.pendingDemand()
	if len(demand) != 1 || demand[0].GetInfeasible() || demand[0].GetResources().GetAmounts()[resources.GroupName(resources.CPU, g.String(), 0)] != resources.Unit {
		t.Fatalf("pending demand = %v, want one feasible request for the group's CPU", demand)
	}
	if _, err := s.commitBundles(g, []int{0}); !errors.As(err, new(*BundleNotPreparedError)) || !strings.Contains(err.Error(), "bundle 0") {
		t.Fatalf("commit before prepare: %v, want BundleNotPreparedError naming bundle 0", err)
	}
	if ok, reason, _, _ := s.prepareBundles(g, []groupBundle{{0, cpus(2)}, {1, cpus(1)}}); !ok {
		t.Fatal(reason)
	}
	if isAnswered(p) {
		t.Fatal("granted on prepare, before commit")
	}
	avail, err := s.commitBundles(g, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if !isAnswered(p) || p.lease == nil {
		t.Fatal("the request waiting for the group was not granted on commit")
	}
	want := cpus(1)
	want.Add(resources.BundleResources(cpus(2), g.String(), 0))
	want.Sub(p.res)
	if !maps.Equal(avail, want) {
		t.Fatalf("available after commit = %v, want %v", avail, want)
	}
	if _, err := s.commitBundles(g, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	want.Add(resources.BundleResources(cpus(1), g.String(), 1))
	if got := s.availableResources(); !maps.Equal(got, want) {
		t.Fatalf("available after committing bundle 1 (bundle 0 again) = %v, want %v", got, want)
	}
	s.mu.Lock()
	total := s.total.Clone()
	s.mu.Unlock()
	wantTotal := cpus(4)
	wantTotal.Add(resources.BundleResources(cpus(2), g.String(), 0))
	wantTotal.Add(resources.BundleResources(cpus(1), g.String(), 1))
	if !maps.Equal(total, wantTotal) {
		t.Fatalf("total = %v, want %v", total, wantTotal)
	}
	if got := s.heldBundles(g); !maps.Equal(got, map[int]bool{0: true, 1: true}) {
		t.Fatalf("held = %v, want both committed", got)
	}
}

// TestCancelBundles: cancelling gives bundles back and ends exactly the
// leases holding resources no bundle provides any more; cancelling the
// whole group fails its waiting and later requests.
func TestCancelBundles(t *testing.T) {
	j := testJob()
	s := newTestScheduler(cpus(4), idleBinder(j, 4))
	g, other := ids.New(), ids.New()
	before := s.availableResources()
	if ok, reason, _, _ := s.prepareBundles(g, []groupBundle{{0, cpus(1)}, {1, cpus(1)}, {2, cpus(1)}}); !ok {
		t.Fatal(reason)
	}
	if _, err := s.commitBundles(g, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	grant := func(res resources.Set, group ids.ID) *pendingLease {
		t.Helper()
		p := groupPending(j, res, group)
		if _, err := s.request(p, emptySnapshot, 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	in0 := grant(inGroup(cpus(1), g, 0), g)
	anyB := grant(inGroup(cpus(1), g, -1), g)
	plain := grant(cpus(1), ids.Nil)
	// The bundle's name and the any-bundle name are separate amounts.
	in1 := grant(inGroup(cpus(1), g, 1), g)
	if in0.lease == nil || anyB.lease == nil || plain.lease == nil || in1.lease == nil {
		t.Fatal("leases not granted")
	}

	steps := []struct {
		name    string
		indexes []int
		all     bool
		ended   []*pendingLease
		held    map[int]bool
	}{
		{"a prepared bundle: given back, no lease ends", []int{2}, false, nil, map[int]bool{0: true, 1: true}},
		{"bundle 0: its lease ends, the any-bundle lease stays", []int{0}, false, []*pendingLease{in0}, map[int]bool{1: true}},
		{"again: nothing", []int{0}, false, nil, map[int]bool{1: true}},
		{"an unknown bundle: nothing", []int{7}, false, nil, map[int]bool{1: true}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			ended := s.cancelBundles(g, st.indexes, st.all, "test")
			if len(ended) != len(st.ended) {
				t.Fatalf("ended %d leases, want %d", len(ended), len(st.ended))
			}
			for i, p := range st.ended {
				if ended[i] != p.lease || !p.lease.ended {
					t.Fatalf("ended lease %d is not the one holding the bundle", i)
				}
			}
			if got := s.heldBundles(g); !maps.Equal(got, st.held) {
				t.Fatalf("held = %v, want %v", got, st.held)
			}
		})
	}

	// The whole group: the any-bundle lease and bundle 1's leases end,
	// the waiting request fails, and so does a later one.
	queued := groupPending(j, inGroup(cpus(1), g, 5), g)
	if _, err := s.request(queued, emptySnapshot, 0); err != nil || isAnswered(queued) {
		t.Fatalf("request for a bundle not placed: %v, answered %v", err, isAnswered(queued))
	}
	ended := s.cancelBundles(g, nil, true, "placement group removed by test")
	if len(ended) != 2 || !anyB.lease.ended || !in1.lease.ended || plain.lease.ended {
		t.Fatalf("removing the group ended %d leases, want the any-bundle one and bundle 1's", len(ended))
	}
	var pgr *PlacementGroupRemovedError
	if !isAnswered(queued) || !errors.As(queued.err, &pgr) || pgr.Group != g || pgr.reason() != "placement group removed by test" {
		t.Fatalf("queued request of the removed group: answered %v, err %v", isAnswered(queued), queued.err)
	}
	if _, err := s.request(groupPending(j, inGroup(cpus(1), g, 0), g), emptySnapshot, 0); !errors.As(err, &pgr) {
		t.Fatalf("later request of the removed group: %v, want PlacementGroupRemovedError", err)
	}
	if ok, reason, _, _ := s.prepareBundles(g, []groupBundle{{0, cpus(1)}}); ok || !strings.Contains(reason, "removed by test") {
		t.Fatalf("prepare of a removed group: ok %v, reason %q", ok, reason)
	}
	// Another group's requests are untouched.
	o := groupPending(j, inGroup(cpus(1), other, 0), other)
	if _, err := s.request(o, emptySnapshot, 0); err != nil || isAnswered(o) {
		t.Fatalf("request of another group: %v, answered %v", err, isAnswered(o))
	}
	if len(s.cancelBundles(g, nil, true, "again")) != 0 {
		t.Fatal("removing the group again ended leases")
	}
	// Only the plain lease holds resources now: once it returns, the node
	// is as before the group.
	if !s.endLease(plain.lease) {
		t.Fatal("the plain lease had ended")
	}
	if got := s.availableResources(); !maps.Equal(got, before) {
		t.Fatalf("available = %v, want %v as before the group", got, before)
	}
	s.mu.Lock()
	total := s.total.Clone()
	s.mu.Unlock()
	if !maps.Equal(total, cpus(4)) {
		t.Fatalf("total = %v, want the node's own 4 CPUs", total)
	}
}

// hookBinder runs hook once, while a dispatch has reserved resources for
// its candidates and the scheduler's lock is released.
type hookBinder struct {
	*fakeBinder
	hook func()
}

func (b *hookBinder) bindIdle(rd *dispatchRound) {
	if h := b.hook; h != nil && len(rd.cands) > 0 {
		b.hook = nil
		h()
	}
	b.fakeBinder.bindIdle(rd)
}

// TestCancelDuringDispatch: a bundle cancelled while a request for it is
// being bound to a worker is not granted, and no resource is left over.
func TestCancelDuringDispatch(t *testing.T) {
	j := testJob()
	b := &hookBinder{fakeBinder: idleBinder(j, 1)}
	s := newTestScheduler(cpus(2), b)
	g := ids.New()
	if ok, reason, _, _ := s.prepareBundles(g, []groupBundle{{0, cpus(1)}}); !ok {
		t.Fatal(reason)
	}
	p := groupPending(j, inGroup(cpus(1), g, 0), g)
	if _, err := s.request(p, emptySnapshot, 0); err != nil {
		t.Fatal(err)
	}
	b.hook = func() {
		if ended := s.cancelBundles(g, []int{0}, false, "test"); len(ended) != 0 {
			t.Errorf("cancel ended %d leases, want none granted yet", len(ended))
		}
	}
	if _, err := s.commitBundles(g, []int{0}); err != nil {
		t.Fatal(err)
	}
	if isAnswered(p) || p.cand != nil {
		t.Fatalf("request of a bundle cancelled during its dispatch: answered %v (lease %v)", isAnswered(p), p.lease)
	}
	if len(b.unbound) != 1 {
		t.Fatalf("%d workers unbound, want the one bound to the request", len(b.unbound))
	}
	if got := s.availableResources(); !maps.Equal(got, cpus(2)) {
		t.Fatalf("available = %v, want the node's 2 CPUs and nothing else", got)
	}
}

// TestGroupRequestsSpill: a request for group resources another node has
// goes there, and one that waited here is passed on once the view shows
// a node with them free.
func TestGroupRequestsSpill(t *testing.T) {
	j := testJob()
	s := newTestScheduler(cpus(2), idleBinder(j, 1))
	g := ids.New()
	res := inGroup(cpus(1), g, 0)
	groupRes := resources.BundleResources(cpus(1), g.String(), 0)
	peerTotal := cpus(2)
	peerTotal.Add(groupRes)
	peer := &policy.Node{ID: ids.New(), Info: &gorayv1.NodeInfo{RayletTcp: "127.0.0.9:1"}, Total: peerTotal, Available: peerTotal.Clone(), Alive: true}
	withPeer := &clusterSnapshot{list: []*policy.Node{peer}, byID: map[ids.ID]*policy.Node{peer.ID: peer}}
	without := &clusterSnapshot{list: []*policy.Node{{ID: peer.ID, Info: peer.Info, Total: cpus(2), Available: cpus(2), Alive: true}}}
	without.byID = map[ids.ID]*policy.Node{peer.ID: without.list[0]}

	if d, err := s.request(groupPending(j, res, g), withPeer, 0); err != nil || d.Spill != peer {
		t.Fatalf("request for a group placed on a peer: %+v, %v; want spilled there", d, err)
	}
	p := groupPending(j, res, g)
	if d, err := s.request(p, without, 0); err != nil || d.Spill != nil || isAnswered(p) {
		t.Fatalf("request for a pending group: %+v, %v; want it waiting here", d, err)
	}
	s.respill(without, time.Now().Add(time.Second))
	if isAnswered(p) {
		t.Fatal("respilled with no node holding the group")
	}
	s.respill(withPeer, time.Now().Add(time.Second))
	if !isAnswered(p) || p.spill != peer {
		t.Fatalf("waiting request not passed on to the node holding the group: spill %v", p.spill)
	}
}

// ---------------------------------------------------------------- over RPC

func (h *harness) prepare(group ids.ID, bundles map[int32]resources.Set) *gorayv1.PrepareBundlesReply {
	h.t.Helper()
	req := &gorayv1.PrepareBundlesRequest{PlacementGroupId: group.Bytes()}
	for i, res := range bundles {
		req.Bundles = append(req.Bundles, &gorayv1.Bundle{Index: i, Resources: resourcesProto(res)})
	}
	rep, err := h.cl.PrepareBundleResources(context.Background(), req)
	if err != nil {
		h.t.Fatalf("PrepareBundleResources: %v", err)
	}
	return rep
}

func (h *harness) commit(group ids.ID, indexes ...int32) *gorayv1.CommitBundlesReply {
	h.t.Helper()
	rep, err := h.cl.CommitBundleResources(context.Background(), &gorayv1.CommitBundlesRequest{PlacementGroupId: group.Bytes(), Indexes: indexes})
	if err != nil {
		h.t.Fatalf("CommitBundleResources: %v", err)
	}
	return rep
}

func (h *harness) cancelReserve(group ids.ID, reason string, indexes ...int32) *gorayv1.CancelReserveReply {
	h.t.Helper()
	rep, err := h.cl.CancelResourceReserve(context.Background(), &gorayv1.CancelReserveRequest{PlacementGroupId: group.Bytes(), Indexes: indexes, Reason: reason})
	if err != nil {
		h.t.Fatalf("CancelResourceReserve: %v", err)
	}
	return rep
}

func groupLeaseReq(job ids.ID, res resources.Set, group ids.ID) *gorayv1.LeaseRequest {
	return &gorayv1.LeaseRequest{JobId: job.Bytes(), Resources: resourcesProto(res), PlacementGroupId: group.Bytes()}
}

// TestPlacementGroupLifecycle runs a group through a real raylet: a task
// of the group waits while it is pending, is granted once its bundle is
// committed, the heartbeat and stats show the group's resources, and
// cancelling the bundle kills the task's worker and gives the node back
// what it had before.
func TestPlacementGroupLifecycle(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Resources = cpus(4) })
	d := h.driver()
	g := ids.New()
	before := h.stats().GetAvailable().GetAmounts()
	res := inGroup(cpus(1), g, 0)

	type result struct {
		rep *gorayv1.LeaseReply
		err error
	}
	got := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	go func() {
		rep, err := h.cl.RequestWorkerLease(ctx, groupLeaseReq(d.job, res, g))
		got <- result{rep, err}
	}()
	waitFor(t, "the group's request to queue", func() bool { return h.pendingCount() == 1 })
	pend := h.stats().GetPending()
	if len(pend) != 1 || pend[0].GetInfeasible() || pend[0].GetResources().GetAmounts()[resources.GroupName(resources.CPU, g.String(), 0)] != resources.Unit {
		t.Fatalf("pending demand = %v, want the group's CPU, not infeasible", pend)
	}

	rep := h.prepare(g, map[int32]resources.Set{0: cpus(2)})
	if !rep.GetSuccess() || rep.GetAvailable().GetAmounts()[resources.CPU] != 2*resources.Unit {
		t.Fatalf("prepare: %v", rep)
	}
	if again := h.prepare(g, map[int32]resources.Set{0: cpus(2)}); !again.GetSuccess() || again.GetAvailable().GetAmounts()[resources.CPU] != 2*resources.Unit {
		t.Fatalf("prepare again: %v, want success holding nothing more", again)
	}
	if _, err := h.cl.CommitBundleResources(context.Background(), &gorayv1.CommitBundlesRequest{PlacementGroupId: g.Bytes(), Indexes: []int32{3}}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "bundle 3") {
		t.Fatalf("commit of an unknown bundle: %v, want NotFound naming bundle 3", err)
	}
	h.commit(g, 0)
	r := <-got
	if r.err != nil || len(r.rep.GetLeaseId()) == 0 {
		t.Fatalf("the waiting request after commit: %v, %v; want a lease", r.rep, r.err)
	}
	pid := r.rep.GetWorkerPid()

	// The heartbeat reports the group's resources (the GCS counts them in
	// the node's total).
	h.r.heartbeat(context.Background())
	var hb *gorayv1.HeartbeatRequest
	h.gcs.locked(func() { hb = h.gcs.heartbeats[len(h.gcs.heartbeats)-1] })
	cpuName := resources.GroupName(resources.CPU, g.String(), 0)
	if hb.GetAvailable().GetAmounts()[cpuName] != resources.Unit || hb.GetAvailable().GetAmounts()[resources.GroupName(resources.BundleMarker, g.String(), -1)] == 0 {
		t.Fatalf("heartbeat available = %v, want the group's resources", hb.GetAvailable().GetAmounts())
	}

	c := h.cancelReserve(g, "bundle 0 cancelled by test", 0)
	if c.GetWorkersKilled() != 1 {
		t.Fatalf("cancel killed %d workers, want 1", c.GetWorkersKilled())
	}
	waitFor(t, "the worker holding the bundle to die", func() bool { return processGone(pid) })
	if !maps.Equal(c.GetAvailable().GetAmounts(), before) {
		t.Fatalf("available after cancel = %v, want %v as before prepare", c.GetAvailable().GetAmounts(), before)
	}
	waitFor(t, "the killed worker to be forgotten", func() bool { return len(h.workers("")) == 0 })
	if got := h.stats().GetAvailable().GetAmounts(); !maps.Equal(got, before) {
		t.Fatalf("available once the worker died = %v, want %v", got, before)
	}
	if n := h.leaseCount(); n != 0 {
		t.Fatalf("%d leases left", n)
	}
	// Its owner returning the lease changes nothing.
	h.returnLease(r.rep, false)
	if got := h.stats().GetAvailable().GetAmounts(); !maps.Equal(got, before) {
		t.Fatalf("available after a late return = %v, want %v", got, before)
	}
	var fail *gorayv1.ReportWorkerFailureRequest
	h.gcs.locked(func() {
		if len(h.gcs.failures) > 0 {
			fail = h.gcs.failures[0]
		}
	})
	if fail != nil {
		t.Fatalf("a task worker's death was reported to the GCS: %v", fail)
	}
}

// TestRemovedGroupFailsRequests: removing a group (a cancel without
// indexes) fails its queued requests and later ones with
// placement_group_removed, kills the workers of its leases, and is
// idempotent.
func TestRemovedGroupFailsRequests(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Resources = cpus(2) })
	d := h.driver()
	g := ids.New()
	before := h.stats().GetAvailable().GetAmounts()
	if rep := h.prepare(g, map[int32]resources.Set{0: cpus(1), 1: cpus(1)}); !rep.GetSuccess() {
		t.Fatal(rep.GetReason())
	}
	h.commit(g, 0, 1)
	l := h.mustLeaseReq(groupLeaseReq(d.job, inGroup(cpus(1), g, -1), g))

	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	errc := make(chan *gorayv1.LeaseReply, 1)
	go func() {
		// Bundle 5 is not here: it waits.
		rep, err := h.cl.RequestWorkerLease(ctx, groupLeaseReq(d.job, inGroup(cpus(1), g, 5), g))
		if err != nil {
			t.Error(err)
		}
		errc <- rep
	}()
	waitFor(t, "the request to queue", func() bool { return h.pendingCount() == 1 })

	const reason = "placement group was removed (by the test)"
	c := h.cancelReserve(g, reason)
	if c.GetWorkersKilled() != 1 || !maps.Equal(c.GetAvailable().GetAmounts(), before) {
		t.Fatalf("remove: killed %d, available %v; want 1 killed and %v", c.GetWorkersKilled(), c.GetAvailable().GetAmounts(), before)
	}
	if rep := <-errc; !rep.GetPlacementGroupRemoved() || rep.GetUnschedulable() != reason {
		t.Fatalf("queued request of the removed group: %v", rep)
	}
	later, err := h.cl.RequestWorkerLease(ctx, groupLeaseReq(d.job, inGroup(cpus(1), g, 0), g))
	if err != nil || !later.GetPlacementGroupRemoved() || later.GetUnschedulable() != reason {
		t.Fatalf("later request of the removed group: %v, %v", later, err)
	}
	waitFor(t, "the group's worker to die", func() bool { return processGone(l.GetWorkerPid()) })
	if c := h.cancelReserve(g, "again"); c.GetWorkersKilled() != 0 || !maps.Equal(c.GetAvailable().GetAmounts(), before) {
		t.Fatalf("remove again: %v", c)
	}
	if n := h.pendingCount(); n != 0 {
		t.Fatalf("%d requests still pending", n)
	}
	// Plain requests run as before.
	h.returnLease(h.mustLease(d.job, cpus(2)), false)
}

// TestConcurrentPreparesOverRPC: two groups prepared at once for the same
// resources of a real raylet: exactly one succeeds.
func TestConcurrentPreparesOverRPC(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Resources = cpus(2) })
	for range 10 {
		groups := []ids.ID{ids.New(), ids.New()}
		reps := make([]*gorayv1.PrepareBundlesReply, len(groups))
		var wg sync.WaitGroup
		for i, g := range groups {
			wg.Go(func() {
				rep, err := h.cl.PrepareBundleResources(context.Background(), &gorayv1.PrepareBundlesRequest{
					PlacementGroupId: g.Bytes(),
					Bundles:          []*gorayv1.Bundle{{Index: 0, Resources: resourcesProto(cpus(2))}},
				})
				if err != nil {
					t.Error(err)
				}
				reps[i] = rep
			})
		}
		wg.Wait()
		if reps[0].GetSuccess() == reps[1].GetSuccess() {
			t.Fatalf("concurrent prepares: %v and %v, want exactly one success", reps[0], reps[1])
		}
		for i, rep := range reps {
			if !rep.GetSuccess() && !strings.Contains(rep.GetReason(), "CPU") {
				t.Fatalf("the failed prepare's reason %q does not name CPU", rep.GetReason())
			}
			h.cancelReserve(groups[i], "")
		}
		if got := h.availableCPU(); got != 2*resources.Unit {
			t.Fatalf("available CPU after cancelling both = %d", got)
		}
	}
}

// TestBundleRPCsRefuseBadInput: malformed ids, negative indexes and group
// resources in bundles are InvalidArgument.
func TestBundleRPCsRefuseBadInput(t *testing.T) {
	h := newHarness(t, nil)
	g := ids.New()
	ctx := context.Background()
	calls := []struct {
		name string
		call func() error
	}{
		{"prepare without an id", func() error {
			_, err := h.cl.PrepareBundleResources(ctx, &gorayv1.PrepareBundlesRequest{})
			return err
		}},
		{"prepare with a negative index", func() error {
			_, err := h.cl.PrepareBundleResources(ctx, &gorayv1.PrepareBundlesRequest{PlacementGroupId: g.Bytes(), Bundles: []*gorayv1.Bundle{{Index: -1}}})
			return err
		}},
		{"prepare of more bundles than a group has", func() error {
			many := make([]*gorayv1.Bundle, maxGroupBundles+1)
			for i := range many {
				many[i] = &gorayv1.Bundle{Index: int32(i), Resources: resourcesProto(cpus(0.001))}
			}
			_, err := h.cl.PrepareBundleResources(ctx, &gorayv1.PrepareBundlesRequest{PlacementGroupId: g.Bytes(), Bundles: many})
			return err
		}},
		{"prepare with an index past the limit", func() error {
			_, err := h.cl.PrepareBundleResources(ctx, &gorayv1.PrepareBundlesRequest{PlacementGroupId: g.Bytes(), Bundles: []*gorayv1.Bundle{{Index: maxGroupBundles, Resources: resourcesProto(cpus(1))}}})
			return err
		}},
		{"prepare of group resources", func() error {
			_, err := h.cl.PrepareBundleResources(ctx, &gorayv1.PrepareBundlesRequest{PlacementGroupId: g.Bytes(),
				Bundles: []*gorayv1.Bundle{{Resources: resourcesProto(inGroup(cpus(1), ids.New(), 0))}}})
			return err
		}},
		{"commit with a negative index", func() error {
			_, err := h.cl.CommitBundleResources(ctx, &gorayv1.CommitBundlesRequest{PlacementGroupId: g.Bytes(), Indexes: []int32{-2}})
			return err
		}},
		{"cancel with a short id", func() error {
			_, err := h.cl.CancelResourceReserve(ctx, &gorayv1.CancelReserveRequest{PlacementGroupId: []byte{1}})
			return err
		}},
		{"lease with a short group id", func() error {
			_, err := h.cl.RequestWorkerLease(ctx, &gorayv1.LeaseRequest{JobId: ids.New().Bytes(), PlacementGroupId: []byte{1, 2}})
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
		})
	}
}

func (h *harness) mustLeaseReq(req *gorayv1.LeaseRequest) *gorayv1.LeaseReply {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	l, err := h.cl.RequestWorkerLease(ctx, req)
	if err != nil || len(l.GetLeaseId()) == 0 {
		h.t.Fatalf("lease %v: %v, %v", req.GetResources(), l, err)
	}
	return l
}

// TestReleaseUnused: the sweep gives back every bundle not in use,
// prepared or committed, ends exactly the leases holding resources no
// bundle provides any more, keeps the bundles in use, leaves the groups'
// queued requests waiting (the groups live on) and is idempotent.
func TestReleaseUnused(t *testing.T) {
	j := testJob()
	s := newTestScheduler(cpus(8), idleBinder(j, 4))
	prepared, committed, kept := ids.New(), ids.New(), ids.New()
	for _, g := range []ids.ID{prepared, committed, kept} {
		if ok, reason, _, _ := s.prepareBundles(g, []groupBundle{{0, cpus(1)}, {1, cpus(1)}}); !ok {
			t.Fatal(reason)
		}
	}
	for _, g := range []ids.ID{committed, kept} {
		if _, err := s.commitBundles(g, []int{0, 1}); err != nil {
			t.Fatal(err)
		}
	}
	grant := func(res resources.Set, group ids.ID) *pendingLease {
		t.Helper()
		p := groupPending(j, res, group)
		if _, err := s.request(p, emptySnapshot, 0); err != nil || p.lease == nil {
			t.Fatalf("lease of %v: %v, granted %v", res, err, p.lease != nil)
		}
		return p
	}
	inReleased := grant(inGroup(cpus(1), committed, 0), committed)
	anyKept := grant(inGroup(cpus(1), kept, -1), kept)
	inKept := grant(inGroup(cpus(1), kept, 1), kept)
	// A request for a bundle not here waits, and keeps waiting.
	queued := groupPending(j, inGroup(cpus(1), committed, 5), committed)
	if _, err := s.request(queued, emptySnapshot, 0); err != nil || isAnswered(queued) {
		t.Fatalf("request for a bundle not here: %v, answered %v", err, isAnswered(queued))
	}

	// Kept: both bundles of kept (one is named twice), and a bundle of
	// committed that is not here.
	inUse := map[bundleRef]bool{{kept, 0}: true, {kept, 1}: true, {committed, 7}: true}
	released, ended := s.releaseUnused(inUse)
	want := []bundleRef{{committed, 0}, {committed, 1}, {prepared, 0}, {prepared, 1}}
	slices.SortFunc(want, func(a, b bundleRef) int {
		if c := strings.Compare(a.group.String(), b.group.String()); c != 0 {
			return c
		}
		return a.index - b.index
	})
	if !slices.Equal(released, want) {
		t.Fatalf("released %v, want %v", released, want)
	}
	if len(ended) != 1 || ended[0] != inReleased.lease || !inReleased.lease.ended || anyKept.lease.ended || inKept.lease.ended {
		t.Fatalf("ended %d leases, want only the one holding a released bundle", len(ended))
	}
	if isAnswered(queued) {
		t.Fatalf("a queued request of a released group was answered: %v", queued.err)
	}
	if got := s.heldBundles(kept); !maps.Equal(got, map[int]bool{0: true, 1: true}) {
		t.Fatalf("kept group holds %v, want both bundles committed", got)
	}
	for _, g := range []ids.ID{prepared, committed} {
		if got := s.heldBundles(g); len(got) != 0 {
			t.Fatalf("released group %s still holds %v", g.Short(), got)
		}
	}
	// A released group is not taken as removed: it may be placed here again.
	if ok, reason, _, _ := s.prepareBundles(prepared, []groupBundle{{0, cpus(1)}}); !ok {
		t.Fatalf("prepare of a released group: %s", reason)
	}
	s.cancelBundles(prepared, []int{0}, false, "test")

	if released, ended := s.releaseUnused(inUse); len(released) != 0 || len(ended) != 0 {
		t.Fatalf("again: released %v, ended %d leases; want nothing", released, len(ended))
	}
	// Nothing in use: the kept group goes too, with its leases, and the
	// node is back to its own resources (and says it holds no bundles when
	// it registers).
	if !s.holdsBundles() {
		t.Fatal("holdsBundles is false with the kept group's bundles here")
	}
	if released, ended := s.releaseUnused(nil); len(released) != 2 || len(ended) != 2 {
		t.Fatalf("nothing in use: released %v, ended %d leases; want the kept group's 2 bundles and 2 leases", released, len(ended))
	}
	if s.holdsBundles() {
		t.Fatal("holdsBundles is true with no bundle here")
	}
	if got := s.availableResources(); !maps.Equal(got, cpus(8)) {
		t.Fatalf("available = %v, want the node's 8 CPUs", got)
	}
	s.mu.Lock()
	total := s.total.Clone()
	s.mu.Unlock()
	if !maps.Equal(total, cpus(8)) {
		t.Fatalf("total = %v, want the node's own 8 CPUs", total)
	}
}

func (h *harness) releaseUnused(reason string, inUse ...bundleRef) *gorayv1.ReleaseUnusedBundlesReply {
	h.t.Helper()
	req := &gorayv1.ReleaseUnusedBundlesRequest{Reason: reason}
	for _, b := range inUse {
		req.InUse = append(req.InUse, &gorayv1.BundleRef{PlacementGroupId: b.group.Bytes(), Index: int32(b.index)})
	}
	rep, err := h.cl.ReleaseUnusedBundles(context.Background(), req)
	if err != nil {
		h.t.Fatalf("ReleaseUnusedBundles: %v", err)
	}
	return rep
}

// refs decodes the bundles of a reply.
func refs(t *testing.T, in []*gorayv1.BundleRef) map[bundleRef]bool {
	t.Helper()
	out := map[bundleRef]bool{}
	for _, b := range in {
		g, err := ids.FromBytes(b.GetPlacementGroupId())
		if err != nil {
			t.Fatal(err)
		}
		out[bundleRef{g, int(b.GetIndex())}] = true
	}
	return out
}

// TestReleaseUnusedBundlesOverRPC runs the sweep on a real raylet: a
// prepared-only bundle and a committed one are released, the worker of
// the committed bundle's lease is killed, the bundle in use is kept; a
// repeated call releases nothing; once nothing is in use the node is back
// to its own resources.
func TestReleaseUnusedBundlesOverRPC(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Resources = cpus(4) })
	d := h.driver()
	before := h.stats().GetAvailable().GetAmounts()
	prepared, committed, kept := ids.New(), ids.New(), ids.New()
	for _, g := range []ids.ID{prepared, committed, kept} {
		if rep := h.prepare(g, map[int32]resources.Set{0: cpus(1)}); !rep.GetSuccess() {
			t.Fatal(rep.GetReason())
		}
	}
	h.commit(committed, 0)
	h.commit(kept, 0)
	gone := h.mustLeaseReq(groupLeaseReq(d.job, inGroup(cpus(1), committed, 0), committed))
	stays := h.mustLeaseReq(groupLeaseReq(d.job, inGroup(cpus(1), kept, 0), kept))

	const reason = "released by the test's sweep"
	rep := h.releaseUnused(reason, bundleRef{kept, 0})
	if got, want := refs(t, rep.GetReleased()), map[bundleRef]bool{{prepared, 0}: true, {committed, 0}: true}; !maps.Equal(got, want) {
		t.Fatalf("released %v, want %v", got, want)
	}
	waitFor(t, "the released bundle's worker to die", func() bool { return processGone(gone.GetWorkerPid()) })
	if processGone(stays.GetWorkerPid()) {
		t.Fatal("the worker of the bundle in use died")
	}
	if got := h.r.sched.heldBundles(kept); !maps.Equal(got, map[int]bool{0: true}) {
		t.Fatalf("the bundle in use is %v, want committed", got)
	}
	// The reply's figure: 4 CPUs less the kept bundle's, whose group CPU
	// is leased.
	wantAvail := cpus(3)
	wantAvail.Add(resources.BundleResources(cpus(1), kept.String(), 0))
	wantAvail.Sub(inGroup(cpus(1), kept, 0))
	if got := rep.GetAvailable().GetAmounts(); !maps.Equal(got, map[string]int64(wantAvail)) {
		t.Fatalf("available after the sweep = %v, want %v", got, wantAvail)
	}
	if again := h.releaseUnused(reason, bundleRef{kept, 0}); len(again.GetReleased()) != 0 {
		t.Fatalf("a repeated sweep released %v", again.GetReleased())
	}

	// Nothing in use: the kept bundle goes too, with its worker.
	if rep := h.releaseUnused(""); !maps.Equal(refs(t, rep.GetReleased()), map[bundleRef]bool{{kept, 0}: true}) {
		t.Fatalf("released %v, want the kept bundle", rep.GetReleased())
	}
	waitFor(t, "the kept bundle's worker to die", func() bool { return processGone(stays.GetWorkerPid()) })
	waitFor(t, "the killed workers to be forgotten", func() bool { return len(h.workers("")) == 0 })
	if got := h.stats().GetAvailable().GetAmounts(); !maps.Equal(got, before) {
		t.Fatalf("available = %v, want %v as before the groups", got, before)
	}
	h.r.sched.mu.Lock()
	total := h.r.sched.total.Clone()
	h.r.sched.mu.Unlock()
	if !maps.Equal(total, cpus(4)) {
		t.Fatalf("total = %v, want the node's own 4 CPUs", total)
	}
	if n := h.leaseCount(); n != 0 {
		t.Fatalf("%d leases left", n)
	}
	// The groups were not removed: one can be placed here again.
	if rep := h.prepare(committed, map[int32]resources.Set{0: cpus(1)}); !rep.GetSuccess() {
		t.Fatalf("prepare of a swept group: %s", rep.GetReason())
	}
	h.cancelReserve(committed, "")
}

// TestReleaseUnusedBundlesRefusesBadInput: a malformed group id, an index
// outside a group's bundles and more bundles of one group than a group has
// are InvalidArgument, naming the problem; nothing is released.
func TestReleaseUnusedBundlesRefusesBadInput(t *testing.T) {
	h := newHarness(t, nil)
	g := ids.New()
	if rep := h.prepare(g, map[int32]resources.Set{0: cpus(1)}); !rep.GetSuccess() {
		t.Fatal(rep.GetReason())
	}
	many := make([]*gorayv1.BundleRef, maxGroupBundles+1)
	for i := range many {
		many[i] = &gorayv1.BundleRef{PlacementGroupId: g.Bytes(), Index: int32(i % maxGroupBundles)}
	}
	tests := []struct {
		name  string
		inUse []*gorayv1.BundleRef
		want  string
	}{
		{"a short group id", []*gorayv1.BundleRef{{PlacementGroupId: []byte{1}}}, "in_use[0]: placement group id"},
		{"a negative index", []*gorayv1.BundleRef{{PlacementGroupId: g.Bytes()}, {PlacementGroupId: g.Bytes(), Index: -1}}, "in_use[1]: bundle index -1 of placement group " + g.Short() + " is outside 0 to 999"},
		{"an index past the limit", []*gorayv1.BundleRef{{PlacementGroupId: g.Bytes(), Index: maxGroupBundles}}, "bundle index 1000"},
		{"more bundles of a group than a group has", many, "more than 1000 bundles of placement group " + g.Short()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.cl.ReleaseUnusedBundles(context.Background(), &gorayv1.ReleaseUnusedBundlesRequest{InUse: tt.inUse})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want InvalidArgument saying %q", err, tt.want)
			}
		})
	}
	if got := h.r.sched.heldBundles(g); !maps.Equal(got, map[int]bool{0: false}) {
		t.Fatalf("after refused sweeps the bundle is %v, want still prepared", got)
	}
}
