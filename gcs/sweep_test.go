package gcs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// crashingReserver passes a GCS's calls on to the fake raylets until the
// GCS "crashes": from then on none of its calls reaches them, as none of
// a dead process's would. With stallCommits set, commits wait for the
// crash (the GCS dies between the two phases).
type crashingReserver struct {
	f            *fakeRaylets
	stallCommits atomic.Bool
	crashed      chan struct{}
}

var errCrashed = errors.New("the GCS crashed")

func (c *crashingReserver) dead() bool {
	select {
	case <-c.crashed:
		return true
	default:
		return false
	}
}

func (c *crashingReserver) Prepare(ctx context.Context, n *gorayv1.NodeInfo, g ids.ID, b []*gorayv1.Bundle) (*gorayv1.PrepareBundlesReply, error) {
	if c.dead() {
		return nil, errCrashed
	}
	return c.f.Prepare(ctx, n, g, b)
}

func (c *crashingReserver) Commit(ctx context.Context, n *gorayv1.NodeInfo, g ids.ID, idx []int32) (*gorayv1.CommitBundlesReply, error) {
	if c.stallCommits.Load() {
		select {
		case <-c.crashed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if c.dead() {
		return nil, errCrashed
	}
	return c.f.Commit(ctx, n, g, idx)
}

func (c *crashingReserver) Cancel(ctx context.Context, n *gorayv1.NodeInfo, g ids.ID, idx []int32, reason string) (*gorayv1.CancelReserveReply, error) {
	if c.dead() {
		return nil, errCrashed
	}
	return c.f.Cancel(ctx, n, g, idx, reason)
}

func (c *crashingReserver) ReleaseUnused(ctx context.Context, n *gorayv1.NodeInfo, inUse []*gorayv1.BundleRef, reason string) (*gorayv1.ReleaseUnusedBundlesReply, error) {
	if c.dead() {
		return nil, errCrashed
	}
	return c.f.ReleaseUnused(ctx, n, inUse, reason)
}

// heldMatchesTable compares what the fake raylets hold on each node with
// what the GCS's table has placed there: the same bundles, all
// committed, and the node's free resources its total less the bundles.
// It returns what differs ("" when nothing does).
func heldMatchesTable(s *Server, f *fakeRaylets, totals map[ids.ID]float64) string {
	placed := map[ids.ID][]string{}
	for _, g := range s.PlacementGroups() {
		if g.GetState() == stRemoved {
			continue
		}
		gid := ids.MustFromBytes(g.GetPlacementGroupId())
		for _, b := range g.GetBundles() {
			if len(b.GetNodeId()) > 0 {
				n := ids.MustFromBytes(b.GetNodeId())
				placed[n] = append(placed[n], fmt.Sprintf("%s[%d]", gid.Short(), b.GetIndex()))
			}
		}
	}
	var diffs []string
	for node, total := range totals {
		var held []string
		used := resources.Set{}
		f.mu.Lock()
		for g, bundles := range f.held[node] {
			for i, b := range bundles {
				c := ""
				if !f.committed[node][g][i] {
					c = " (prepared only)"
				}
				held = append(held, fmt.Sprintf("%s[%d]%s", g.Short(), i, c))
				used.Add(b)
			}
		}
		free := f.available[node].Clone()
		f.mu.Unlock()
		sort.Strings(held)
		sort.Strings(placed[node])
		if strings.Join(held, " ") != strings.Join(placed[node], " ") {
			diffs = append(diffs, fmt.Sprintf("node %s holds %v, the table places %v there", node.Short(), held, placed[node]))
		}
		want := resources.Set{"CPU": int64(total * resources.Unit)}
		want.Sub(used)
		if free["CPU"] != want["CPU"] {
			diffs = append(diffs, fmt.Sprintf("node %s has %v free, want %v", node.Short(), free, want))
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

// TestRestartSweepsLeakedBundles: the GCS dies while a group is PREPARED
// on two nodes; the GCS opened again on the same storage places the group
// again (elsewhere: a node that was busy is free now) and the nodes
// register again. The raylets end up holding exactly the bundles the
// table places on them: the prepared bundles left behind are given back,
// and a CREATED group's committed bundles are kept where they were.
func TestRestartSweepsLeakedBundles(t *testing.T) {
	leaktest.Goroutines(t)
	st := Storage{Backend: BackendBolt, Path: filepath.Join(t.TempDir(), "gcs.db")}
	f := newFakeRaylets()
	r1 := &crashingReserver{f: f, crashed: make(chan struct{})}
	// (No node heartbeats here: none must be declared dead meanwhile.)
	s1, err := Open(ctxT(t), Options{Storage: st, Reserver: r1, FailureThreshold: 1 << 20})
	mustOK(t, err)
	c1, stop1 := serveOpened(t, s1)
	pc1 := &pgCluster{s: s1, c: c1, f: f}
	totals := map[ids.ID]float64{}
	infos := map[ids.ID]*gorayv1.NodeInfo{}
	register := func(c gorayv1.GcsClient, name string, cpus float64) ids.ID {
		id := newID()
		f.addNode(id, cpus)
		info := nodeInfo(id, name)
		info.Total = &gorayv1.Resources{Amounts: map[string]int64{"CPU": int64(cpus * resources.Unit)}}
		_, err := c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: info})
		mustOK(t, err)
		totals[id], infos[id] = cpus, info
		return id
	}
	a := register(c1, "a", 4)
	b := register(c1, "b", 4)
	kept := pc1.create(t, "kept", strictSpread, newID(), true, 1, 1)
	keptBefore := pc1.waitState(t, kept, stCreated).GetBundles()

	// A small node that is busy (it says so in its heartbeat): the next
	// group goes on the two big ones.
	small := register(c1, "small", 2)
	_, err = c1.ReportHeartbeat(ctxT(t), &gorayv1.HeartbeatRequest{NodeId: small.Bytes(), Available: &gorayv1.Resources{}})
	mustOK(t, err)
	r1.stallCommits.Store(true)
	leak := pc1.create(t, "leak", strictSpread, newID(), true, 2, 2)
	waitFor(t, "the group prepared on two nodes", func() bool {
		return f.heldBy(leak) == 2 && pc1.get(t, leak).GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PREPARED
	})
	close(r1.crashed) // the GCS dies before committing: its cancels never arrive
	stop1()
	if n := f.heldBy(leak); n != 2 {
		t.Fatalf("after the crash the raylets hold %d of the group's bundles, want the 2 prepared", n)
	}

	s2, err := Open(ctxT(t), Options{Storage: st, Reserver: f, FailureThreshold: 1 << 20})
	mustOK(t, err)
	c2, _ := serveOpened(t, s2)
	pc2 := &pgCluster{s: s2, c: c2, f: f}
	// The nodes register again (the restored GCS places nothing on a node
	// before it has): the small one first, so that the group, which needs
	// two nodes, is placed again once a big one is back too.
	for _, id := range []ids.ID{small, a, b} {
		_, err := c2.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: infos[id], ClusterId: s2.ClusterID()})
		mustOK(t, err)
	}
	g := pc2.waitState(t, leak, stCreated)
	on := map[ids.ID]bool{}
	for _, b := range g.GetBundles() {
		on[ids.MustFromBytes(b.GetNodeId())] = true
	}
	if !on[small] {
		t.Fatalf("the group was placed again on %v; want the small node, free now, to take a bundle", g.GetBundles())
	}
	var diff string
	wait := ctxT(t)
	for tick := time.NewTicker(time.Millisecond); ; <-tick.C {
		if diff = heldMatchesTable(s2, f, totals); diff == "" {
			tick.Stop()
			break
		}
		if wait.Err() != nil {
			t.Fatalf("the raylets do not hold what the table places on them: %s", diff)
		}
	}
	keptAfter := pc2.get(t, kept)
	if keptAfter.GetState() != stCreated {
		t.Fatalf("the created group is %v after the restart", keptAfter.GetState())
	}
	for i, b := range keptAfter.GetBundles() {
		if string(b.GetNodeId()) != string(keptBefore[i].GetNodeId()) {
			t.Errorf("bundle %d of the created group moved across the restart", i)
		}
	}
	f.mu.Lock()
	swept := maps.Clone(f.releases)
	f.mu.Unlock()
	for id := range infos {
		if swept[id] == 0 {
			t.Errorf("node %s was never swept", id.Short())
		}
	}
}

// TestReregisteredNodeIsSwept: a node registering again with the cluster
// id gets its raylet swept without the registration waiting for it; a
// failed sweep is retried until taken; only bundles no group has placed
// there are given back; a first registration is not swept; the sweep of a
// node that dies is dropped.
func TestReregisteredNodeIsSwept(t *testing.T) {
	pc, nodes := startPGCluster(t, 4, 4)
	kept := pc.create(t, "", strictSpread, newID(), false, 1, 1)
	pc.waitState(t, kept, stCreated)
	// Node 0's raylet holds bundles of a group the table has not placed
	// there: one prepared, one committed.
	stray, n0 := newID(), nodes[0]
	pc.f.mu.Lock()
	pc.f.held[n0][stray] = map[int32]resources.Set{0: {"CPU": resources.Unit}, 1: {"CPU": resources.Unit}}
	pc.f.committed[n0][stray] = map[int32]bool{1: true}
	pc.f.available[n0].Sub(resources.Set{"CPU": 2 * resources.Unit})
	gate := make(chan struct{})
	pc.f.releaseGate = gate
	pc.f.releaseFails = 2
	pc.f.mu.Unlock()
	released := false
	t.Cleanup(func() {
		if !released {
			close(gate)
		}
	})
	fresh := pc.addNode(t, "fresh", 4)

	_, err := pc.c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: nodeInfo(n0, "n0"), ClusterId: pc.s.ClusterID()})
	mustOK(t, err) // answered while the sweep is held at the gate
	waitFor(t, "the sweep to reach the raylet", func() bool {
		pc.f.mu.Lock()
		defer pc.f.mu.Unlock()
		return pc.f.releases[n0] == 1
	})
	close(gate)
	released = true
	waitFor(t, "the stray bundles given back", func() bool {
		_, ok := pc.f.heldOn(n0)[stray]
		return !ok
	})
	pc.f.mu.Lock()
	calls, freshCalls, freeCPU := pc.f.releases[n0], pc.f.releases[fresh], pc.f.available[n0]["CPU"]
	pc.f.mu.Unlock()
	if calls != 3 {
		t.Errorf("%d sweep calls to the node, want 3 (two failed, retried)", calls)
	}
	if freshCalls != 0 {
		t.Errorf("a first registration was swept")
	}
	if freeCPU != 3*resources.Unit {
		t.Errorf("node 0 has %v CPU free after the sweep, want 3 (4 less the created group's bundle)", float64(freeCPU)/resources.Unit)
	}
	for _, n := range nodes {
		if b := pc.f.heldOn(n)[kept]; len(b) != 1 || !b[0] && !b[1] {
			t.Errorf("node %s holds %v of the created group, want its committed bundle", n.Short(), b)
		}
	}
	if st := pc.get(t, kept).GetState(); st != stCreated {
		t.Errorf("the created group is %v after the sweep", st)
	}

	// A node whose sweep keeps failing dies: the sweep is dropped.
	pc.f.mu.Lock()
	pc.f.releaseFails = 1 << 30
	pc.f.mu.Unlock()
	t.Cleanup(func() { pc.f.mu.Lock(); pc.f.releaseFails = 0; pc.f.mu.Unlock() })
	_, err = pc.c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: nodeInfo(nodes[1], "n1"), ClusterId: pc.s.ClusterID()})
	mustOK(t, err)
	waitFor(t, "the failed sweep retried", func() bool {
		pc.f.mu.Lock()
		defer pc.f.mu.Unlock()
		return pc.f.releases[nodes[1]] >= 2
	})
	_, err = pc.c.UnregisterNode(ctxT(t), &gorayv1.UnregisterNodeRequest{NodeId: nodes[1].Bytes(), Reason: "killed"})
	mustOK(t, err)
	waitFor(t, "the dead node's sweep dropped", func() bool {
		pc.s.pgs.mu.Lock()
		defer pc.s.pgs.mu.Unlock()
		return len(pc.s.pgs.sweeps) == 0
	})
}

// TestRegistrationHoldingBundlesIsSwept: a node that registers without the
// cluster id (the answer to its first registration was lost with the GCS
// that then prepared bundles there) but says it holds bundles is swept;
// one that holds none is not. (TestGCSRestartReleasesCutReservation in
// raylet hit it: the restored GCS never swept the node.)
func TestRegistrationHoldingBundlesIsSwept(t *testing.T) {
	pc, _ := startPGCluster(t, 1, 4)
	n := pc.addNode(t, "lost-answer", 4)
	idle := pc.addNode(t, "idle", 4)
	stray := newID()
	pc.f.mu.Lock()
	if pc.f.held[n] == nil {
		pc.f.held[n] = map[ids.ID]map[int32]resources.Set{}
	}
	pc.f.held[n][stray] = map[int32]resources.Set{0: {"CPU": resources.Unit}}
	pc.f.available[n].Sub(resources.Set{"CPU": resources.Unit})
	pc.f.mu.Unlock()

	_, err := pc.c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: nodeInfo(idle, "idle")})
	mustOK(t, err)
	_, err = pc.c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: nodeInfo(n, "lost-answer"), HoldsBundles: true})
	mustOK(t, err)
	waitFor(t, "the stray bundle given back", func() bool {
		_, ok := pc.f.heldOn(n)[stray]
		return !ok
	})
	pc.f.mu.Lock()
	idleCalls := pc.f.releases[idle]
	pc.f.mu.Unlock()
	if idleCalls != 0 {
		t.Errorf("a node that holds no bundles and registered without the cluster id was swept %d times", idleCalls)
	}
}
