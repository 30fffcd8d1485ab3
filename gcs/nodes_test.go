package gcs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/waitfor"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

func TestRegisterNodeAndHeartbeat(t *testing.T) {
	clock := newFakeClock()
	_, c := startServer(t, Options{HeartbeatPeriod: 250 * time.Millisecond, Now: clock.Now})
	ctx := ctxT(t)
	id := newID()
	start := clock.Now()

	reply, err := c.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: nodeInfo(id, "n1")})
	mustOK(t, err)
	if got := reply.GetHeartbeatPeriodMs(); got != 250 {
		t.Fatalf("heartbeat_period_ms = %d, want 250", got)
	}
	v := nodeView(t, c, id)
	if v.GetInfo().GetState() != StateAlive || v.GetInfo().GetStartTimeMs() != start.UnixMilli() {
		t.Fatalf("after register: state %q start %d, want ALIVE %d", v.GetInfo().GetState(), v.GetInfo().GetStartTimeMs(), start.UnixMilli())
	}
	if v.GetInfo().GetNodeName() != "n1" || v.GetInfo().GetLabels()["zone"] != "a" || v.GetInfo().GetPid() != 42 {
		t.Fatalf("info not stored: %v", v.GetInfo())
	}
	if v.GetAvailable().GetAmounts()["CPU"] != 40000 {
		t.Fatalf("available before heartbeat = %v, want total", v.GetAvailable())
	}

	// Re-registering is idempotent: same start time, still one node.
	clock.Advance(time.Second)
	_, err = c.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: nodeInfo(id, "n1")})
	mustOK(t, err)
	all, err := c.GetAllNodes(ctx, &gorayv1.GetAllNodesRequest{})
	mustOK(t, err)
	if len(all.GetNodes()) != 1 || all.GetNodes()[0].GetInfo().GetStartTimeMs() != start.UnixMilli() {
		t.Fatalf("re-register changed the table: %v", all.GetNodes())
	}

	clock.Advance(time.Second)
	pending := []*gorayv1.PendingDemand{{Resources: &gorayv1.Resources{Amounts: map[string]int64{"GPU": 10000}}, Count: 3, Infeasible: true}}
	hb, err := c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{
		NodeId:        id.Bytes(),
		Available:     &gorayv1.Resources{Amounts: map[string]int64{"CPU": 15000}},
		StoreUsed:     100,
		StoreCapacity: 1000,
		Pending:       pending,
	})
	mustOK(t, err)
	if hb.GetDead() {
		t.Fatal("heartbeat of live node replied dead")
	}
	v = nodeView(t, c, id)
	if v.GetAvailable().GetAmounts()["CPU"] != 15000 || v.GetStoreUsed() != 100 || v.GetStoreCapacity() != 1000 {
		t.Fatalf("heartbeat not recorded: %v", v)
	}
	if len(v.GetPending()) != 1 || !proto.Equal(v.GetPending()[0], pending[0]) {
		t.Fatalf("pending = %v, want %v", v.GetPending(), pending)
	}
	if v.GetLastHeartbeatMs() != clock.Now().UnixMilli() {
		t.Fatalf("last_heartbeat_ms = %d, want %d", v.GetLastHeartbeatMs(), clock.Now().UnixMilli())
	}

	// A later heartbeat with no demand clears the pending list.
	_, err = c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: id.Bytes()})
	mustOK(t, err)
	if v := nodeView(t, c, id); len(v.GetPending()) != 0 {
		t.Fatalf("pending not cleared: %v", v.GetPending())
	}

	_, err = c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: newID().Bytes()})
	wantCode(t, err, codes.NotFound, "no node with id")
}

func TestHealthCheckKillsNodeAndItsActors(t *testing.T) {
	clock := newFakeClock()
	s, c := startServer(t, Options{Now: clock.Now}) // defaults: 1s, 5 periods
	ctx := ctxT(t)
	nodeA, nodeB, job := newID(), newID(), newID()
	registerNode(t, c, nodeA, "a")
	registerNode(t, c, nodeB, "b")

	pendingOnA, aliveOnA, deadOnA, onB := newID(), newID(), newID(), newID()
	registerActor(t, c, actorOn(pendingOnA, job, nodeA, ids.Nil, "p"))
	registerActor(t, c, actorOn(aliveOnA, job, nodeA, newID(), "q"))
	registerActor(t, c, actorOn(deadOnA, job, nodeA, newID(), ""))
	registerActor(t, c, actorOn(onB, job, nodeB, newID(), ""))
	setState(t, c, aliveOnA, gorayv1.ActorState_ACTOR_STATE_ALIVE, "")
	setState(t, c, onB, gorayv1.ActorState_ACTOR_STATE_ALIVE, "")
	setState(t, c, deadOnA, gorayv1.ActorState_ACTOR_STATE_DEAD, "exited")

	clock.Advance(3 * time.Second)
	_, err := c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: nodeB.Bytes()})
	mustOK(t, err)
	clock.Advance(2 * time.Second)
	_, err = c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: nodeB.Bytes()}) // B reports on time (health.go)
	mustOK(t, err)
	s.checkHealth() // exactly 5s: not yet dead
	if st := nodeView(t, c, nodeA).GetInfo().GetState(); st != StateAlive {
		t.Fatalf("node A %s after exactly 5 periods, want ALIVE", st)
	}
	clock.Advance(1200 * time.Millisecond)
	s.checkHealth()

	a := nodeView(t, c, nodeA).GetInfo()
	wantReason := "missed 5 health checks (last seen 6.2s ago)"
	if a.GetState() != StateDead || a.GetDeathReason() != wantReason || a.GetEndTimeMs() != clock.Now().UnixMilli() {
		t.Fatalf("node A = %s %q end %d, want DEAD %q end %d", a.GetState(), a.GetDeathReason(), a.GetEndTimeMs(), wantReason, clock.Now().UnixMilli())
	}
	if st := nodeView(t, c, nodeB).GetInfo().GetState(); st != StateAlive {
		t.Fatalf("node B %s, want ALIVE (heartbeat 1.2s ago)", st)
	}

	wantActorReason := fmt.Sprintf("node %s died: %s", nodeA.Short(), wantReason)
	for _, tc := range []struct {
		name   string
		id     ids.ID
		state  gorayv1.ActorState
		reason string
	}{
		{"pending on dead node", pendingOnA, gorayv1.ActorState_ACTOR_STATE_DEAD, wantActorReason},
		{"alive on dead node", aliveOnA, gorayv1.ActorState_ACTOR_STATE_DEAD, wantActorReason},
		{"already dead keeps reason", deadOnA, gorayv1.ActorState_ACTOR_STATE_DEAD, "exited"},
		{"on live node", onB, gorayv1.ActorState_ACTOR_STATE_ALIVE, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := getActor(t, c, tc.id)
			if got.GetState() != tc.state || got.GetDeathReason() != tc.reason {
				t.Fatalf("actor = %v %q, want %v %q", got.GetState(), got.GetDeathReason(), tc.state, tc.reason)
			}
		})
	}

	hb, err := c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: nodeA.Bytes(), StoreUsed: 7})
	mustOK(t, err)
	if !hb.GetDead() {
		t.Fatal("heartbeat from dead node: dead = false")
	}
	if v := nodeView(t, c, nodeA); v.GetStoreUsed() == 7 || v.GetInfo().GetState() != StateDead {
		t.Fatalf("heartbeat revived or updated a dead node: %v", v)
	}
	_, err = c.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: nodeInfo(nodeA, "a")})
	wantCode(t, err, codes.FailedPrecondition, "rejoin with a new node id")

	// Name "q" was freed by the death.
	registerActor(t, c, actorOn(newID(), job, nodeB, ids.Nil, "q"))
}

func TestRunDetectsDeadNode(t *testing.T) {
	s, c := startServer(t, Options{HeartbeatPeriod: 10 * time.Millisecond, FailureThreshold: 2})
	ctx, cancel := context.WithCancel(ctxT(t))
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-ran
	})

	node, job, actor := newID(), newID(), newID()
	registerNode(t, c, node, "n")
	registerActor(t, c, actorOn(actor, job, node, ids.Nil, "a"))

	// The actor never becomes ALIVE; the wait must end when its node dies.
	got, err := c.GetActor(ctx, &gorayv1.GetActorRequest{Name: "a", WaitAlive: true})
	mustOK(t, err)
	if got.GetActor().GetState() != gorayv1.ActorState_ACTOR_STATE_DEAD {
		t.Fatalf("actor state %v, want DEAD", got.GetActor().GetState())
	}
	info := nodeView(t, c, node).GetInfo()
	if info.GetState() != StateDead {
		t.Fatalf("node state %q, want DEAD", info.GetState())
	}
	wantPrefix := "missed 2 health checks (last seen "
	if r := info.GetDeathReason(); len(r) < len(wantPrefix) || r[:len(wantPrefix)] != wantPrefix {
		t.Fatalf("death reason %q, want prefix %q", r, wantPrefix)
	}

	cancel()
	select {
	case <-ran:
	case <-time.After(waitfor.Generous):
		t.Fatal("Run did not return after cancel")
	}
}

func TestRunKeepsHeartbeatingNodeAlive(t *testing.T) {
	s, c := startServer(t, Options{HeartbeatPeriod: 50 * time.Millisecond, FailureThreshold: 4})
	ctx, cancel := context.WithCancel(ctxT(t))
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-ran
	})
	live, silent := newID(), newID()
	registerNode(t, c, live, "live")
	registerNode(t, c, silent, "silent")
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for nodeView(t, c, silent).GetInfo().GetState() != StateDead {
		if time.Now().After(deadline) {
			t.Fatal("silent node never declared dead")
		}
		r, err := c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: live.Bytes()})
		mustOK(t, err)
		if r.GetDead() {
			t.Fatal("heartbeating node declared dead")
		}
		<-tick.C
	}
	if st := nodeView(t, c, live).GetInfo().GetState(); st != StateAlive {
		t.Fatalf("heartbeating node %s, want ALIVE", st)
	}
}

func TestUnregisterNode(t *testing.T) {
	clock := newFakeClock()
	_, c := startServer(t, Options{Now: clock.Now})
	ctx := ctxT(t)
	node, job, actor := newID(), newID(), newID()
	registerNode(t, c, node, "n")
	registerActor(t, c, actorOn(actor, job, node, newID(), ""))
	setState(t, c, actor, gorayv1.ActorState_ACTOR_STATE_ALIVE, "")
	clock.Advance(time.Second)

	_, err := c.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: node.Bytes(), Reason: "shutdown requested"})
	mustOK(t, err)
	info := nodeView(t, c, node).GetInfo()
	if info.GetState() != StateDead || info.GetDeathReason() != "shutdown requested" || info.GetEndTimeMs() != clock.Now().UnixMilli() {
		t.Fatalf("node after unregister: %v", info)
	}
	want := fmt.Sprintf("node %s died: shutdown requested", node.Short())
	if a := getActor(t, c, actor); a.GetState() != gorayv1.ActorState_ACTOR_STATE_DEAD || a.GetDeathReason() != want {
		t.Fatalf("actor = %v %q, want DEAD %q", a.GetState(), a.GetDeathReason(), want)
	}
	// Again: no-op, reason kept.
	_, err = c.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: node.Bytes(), Reason: "other"})
	mustOK(t, err)
	if r := nodeView(t, c, node).GetInfo().GetDeathReason(); r != "shutdown requested" {
		t.Fatalf("second unregister changed reason to %q", r)
	}
	_, err = c.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: newID().Bytes()})
	wantCode(t, err, codes.NotFound, "no node with id")

	other := newID()
	registerNode(t, c, other, "o")
	_, err = c.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: other.Bytes()})
	mustOK(t, err)
	if r := nodeView(t, c, other).GetInfo().GetDeathReason(); r != "unregistered" {
		t.Fatalf("default reason %q, want %q", r, "unregistered")
	}
}

// TestRegisterRefusesAnotherCluster: a node that says it belongs to
// another cluster is refused; the reply tells a new node the cluster id.
func TestRegisterRefusesAnotherCluster(t *testing.T) {
	s, c := startServer(t, Options{})
	id := newID()
	rep, err := c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: nodeInfo(id, "n")})
	mustOK(t, err)
	if rep.GetClusterId() != s.ClusterID() || rep.GetClusterId() == "" {
		t.Fatalf("reply cluster id %q, want %q", rep.GetClusterId(), s.ClusterID())
	}
	_, err = c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: nodeInfo(newID(), "m"), ClusterId: "another"})
	wantCode(t, err, codes.FailedPrecondition, "belongs to cluster another")
	_, err = c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: nodeInfo(id, "n"), ClusterId: s.ClusterID()})
	mustOK(t, err)
}

// TestNodeDeathFinishesItsDriversJobs: a job whose driver's node dies is
// FINISHED (its end report may never have reached the GCS); jobs of other
// nodes' drivers go on.
func TestNodeDeathFinishesItsDriversJobs(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)
	gone, stays := newID(), newID()
	registerNode(t, c, gone, "gone")
	registerNode(t, c, stays, "stays")
	jobGone, jobStays := newID(), newID()
	for _, j := range []struct{ job, node ids.ID }{{jobGone, gone}, {jobStays, stays}} {
		_, err := c.AddJob(ctx, &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: j.job.Bytes(), DriverNodeId: j.node.Bytes(), BinaryPath: "/bin/app", BinarySha256: testSHA}})
		mustOK(t, err)
	}
	_, err := c.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: gone.Bytes(), Reason: "killed"})
	mustOK(t, err)
	rep, err := c.GetAllJobs(ctx, &gorayv1.GetAllJobsRequest{})
	mustOK(t, err)
	states := map[string]string{}
	for _, j := range rep.GetJobs() {
		states[string(j.GetJobId())] = j.GetState()
	}
	if states[string(jobGone.Bytes())] != StateFinished || states[string(jobStays.Bytes())] != StateRunning {
		t.Fatalf("jobs after the driver's node died: %v", states)
	}
}
