package autoscaler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/sdk/provider"
)

// fakeCloud is a provider and a GCS in one: launched instances become
// nodes when join is called. A fake is enough here: the acceptance tests
// run the real local provider and a real cluster.
type fakeCloud struct {
	pb.GcsClient // unimplemented methods panic

	mu        sync.Mutex
	instances map[string]*provider.Instance
	requests  map[string]bool
	nodes     map[string]*pb.NodeView // by instance id
	head      *pb.NodeView
	kv        map[string][]byte
	errs      []provider.LaunchError
	failNext  bool
	// crashBefore and crashAfter make the next calls of Launch fail as a
	// provider that died does: before or after taking the request.
	crashBefore, crashAfter int
	launchIDs               []string // every Launch call's request id
	drains                  int      // DrainNode calls
	slowDrain               int      // accepted drains that report not drained yet
	launches                int
	seq                     int
}

func newFakeCloud() *fakeCloud {
	f := &fakeCloud{instances: map[string]*provider.Instance{}, requests: map[string]bool{}, nodes: map[string]*pb.NodeView{}, kv: map[string][]byte{}}
	f.head = nodeView("", map[string]float64{"CPU": 1}, nil)
	return f
}

func nodeView(inst string, total map[string]float64, labels map[string]string) *pb.NodeView {
	set, _ := resources.FromFloats(total)
	id := ids.New()
	l := map[string]string{}
	for k, v := range labels {
		l[k] = v
	}
	if inst != "" {
		l[provider.LabelInstanceID] = inst
	}
	return &pb.NodeView{
		Info:      &pb.NodeInfo{NodeId: id.Bytes(), State: "ALIVE", Total: &pb.Resources{Amounts: set}, Labels: l},
		Available: &pb.Resources{Amounts: set.Clone()},
	}
}

// Provider side.

func (f *fakeCloud) NodeConfigSchema(context.Context, *provider.NodeConfigSchemaRequest) (*provider.NodeConfigSchemaResponse, error) {
	return &provider.NodeConfigSchemaResponse{}, nil
}

func (f *fakeCloud) Launch(_ context.Context, r *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.launchIDs = append(f.launchIDs, r.RequestID)
	if f.crashBefore > 0 {
		f.crashBefore--
		return nil, errors.New("rpc error: code = Unavailable desc = connection refused")
	}
	if f.crashAfter > 0 {
		f.crashAfter--
		_, _ = f.launchLocked(r)
		return nil, errors.New("rpc error: code = Unavailable desc = error reading from server: EOF")
	}
	return f.launchLocked(r)
}

func (f *fakeCloud) launchLocked(r *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	if f.failNext {
		f.failNext = false
		f.errs = append(f.errs, provider.LaunchError{Op: provider.ErrorOpLaunch, RequestID: r.RequestID, NodeType: r.NodeType, Count: r.Count, Message: "quota exceeded", At: time.Now()})
		return &provider.LaunchResponse{}, nil
	}
	if f.requests[r.RequestID] {
		return &provider.LaunchResponse{}, nil
	}
	f.requests[r.RequestID] = true
	f.launches += r.Count
	for range r.Count {
		f.seq++
		id := fmt.Sprintf("i-%d", f.seq)
		f.instances[id] = &provider.Instance{ID: id, NodeType: r.NodeType, RequestID: r.RequestID, State: provider.StatePending}
	}
	return &provider.LaunchResponse{}, nil
}

func (f *fakeCloud) Terminate(_ context.Context, r *provider.TerminateRequest) (*provider.TerminateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range r.InstanceIDs {
		delete(f.instances, id)
		if n := f.nodes[id]; n != nil {
			n.Info.State = "DEAD"
		}
	}
	return &provider.TerminateResponse{}, nil
}

func (f *fakeCloud) List(context.Context, *provider.ListRequest) (*provider.ListResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []provider.Instance
	for _, i := range f.instances {
		out = append(out, *i)
	}
	return &provider.ListResponse{Instances: out}, nil
}

func (f *fakeCloud) PollErrors(context.Context, *provider.PollErrorsRequest) (*provider.PollErrorsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.errs
	f.errs = nil
	return &provider.PollErrorsResponse{Errors: e}, nil
}

// join makes every pending instance's node join with its type's resources.
func (f *fakeCloud) join(c *config.Cluster) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, i := range f.instances {
		if i.State == provider.StatePending {
			i.State = provider.StateRunning
			nt, _ := c.NodeType(i.NodeType)
			f.nodes[id] = nodeView(id, nt.Resources, nil)
		}
	}
}

// busy sets how much of node inst's CPU is leased and what it stores.
func (f *fakeCloud) busy(inst string, cpuUsed float64, storeUsed int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[inst]
	avail := resources.Set(n.Info.Total.Amounts).Clone()
	avail[resources.CPU] -= int64(cpuUsed * resources.Unit)
	n.Available = &pb.Resources{Amounts: avail}
	n.StoreUsed = storeUsed
}

// queue puts count queued requests of shape on the head.
func (f *fakeCloud) queue(shape map[string]float64, count int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	set, _ := resources.FromFloats(shape)
	f.head.Pending = nil
	if count > 0 {
		f.head.Pending = []*pb.PendingDemand{{Resources: &pb.Resources{Amounts: set}, Count: int32(count)}}
	}
}

// GCS side.

func (f *fakeCloud) GetAllNodes(context.Context, *pb.GetAllNodesRequest, ...grpc.CallOption) (*pb.GetAllNodesReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []*pb.NodeView{f.head}
	keys := make([]string, 0, len(f.nodes))
	for k := range f.nodes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, f.nodes[k])
	}
	return &pb.GetAllNodesReply{Nodes: out}, nil
}

func (f *fakeCloud) ListPlacementGroups(context.Context, *pb.ListPlacementGroupsRequest, ...grpc.CallOption) (*pb.ListPlacementGroupsReply, error) {
	return &pb.ListPlacementGroupsReply{}, nil
}

func (f *fakeCloud) KVGet(_ context.Context, r *pb.KVGetRequest, _ ...grpc.CallOption) (*pb.KVGetReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &pb.KVGetReply{Value: f.kv[r.Ns+"/"+r.Key]}, nil
}

// DrainNode drains a node at once unless it stores something, which
// (without shared spill storage) it refuses; slowDrain makes a node take
// that many calls to drain.
func (f *fakeCloud) DrainNode(_ context.Context, r *pb.DrainNodeRequest, _ ...grpc.CallOption) (*pb.DrainNodeReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.nodes {
		if string(n.Info.NodeId) != string(r.NodeId) {
			continue
		}
		f.drains++
		if r.Cancel {
			n.Draining = false
			return &pb.DrainNodeReply{Accepted: true}, nil
		}
		if n.StoreUsed > 0 {
			return &pb.DrainNodeReply{RejectionReason: "node holds 1 primary copies (1 MiB) and has no shared spill storage to move them to"}, nil
		}
		n.Draining = true
		if f.slowDrain > 0 {
			f.slowDrain--
			return &pb.DrainNodeReply{Accepted: true, PrimariesLeft: 1, Progress: "spilled 0 of 1 primary copies"}, nil
		}
		return &pb.DrainNodeReply{Accepted: true, Drained: true}, nil
	}
	return nil, fmt.Errorf("node %x not found", r.NodeId)
}

func (f *fakeCloud) KVPut(_ context.Context, r *pb.KVPutRequest, _ ...grpc.CallOption) (*pb.KVPutReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kv[r.Ns+"/"+r.Key] = r.Value
	return &pb.KVPutReply{}, nil
}

const testCluster = `
cluster_name    = "t"
max_workers     = 3
idle_timeout    = "1m"
head_node_type  = "head"
provider "fake" {}
node_type "head" {
  resources = { CPU = 1 }
}
node_type "cpu" {
  resources   = { CPU = 2 }
  max_workers = 3
}
node_type "big" {
  resources   = { CPU = 8, GPU = 1 }
  min_workers = %d
  max_workers = 1
}
`

type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock               { return &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }
func (f *fakeCloud) count() int      { f.mu.Lock(); defer f.mu.Unlock(); return len(f.instances) }
func (f *fakeCloud) launched() int   { f.mu.Lock(); defer f.mu.Unlock(); return f.launches }
func (f *fakeCloud) status(t *testing.T) Status {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var s Status
	if err := json.Unmarshal(f.kv[StatusNamespace+"/"+StatusKey], &s); err != nil {
		t.Fatalf("published status: %v", err)
	}
	return s
}

func newTestAutoscaler(t *testing.T, f *fakeCloud, clk *clock, minBig int) (*Autoscaler, *config.Cluster) {
	t.Helper()
	return newAutoscalerFor(t, f, clk, fmt.Sprintf(testCluster, minBig))
}

func newAutoscalerFor(t *testing.T, f *fakeCloud, clk *clock, src string) (*Autoscaler, *config.Cluster) {
	t.Helper()
	c, diags := config.ParseCluster([]byte(src), "cluster.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	a, err := New(Config{Cluster: c, Provider: f, GCS: f, HeadAddress: "127.0.0.1:1", AuthToken: "secret", Now: clk.now, BackoffInitial: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return a, c
}

func reconcile(t *testing.T, a *Autoscaler) {
	t.Helper()
	if err := a.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestScaleUpAndDown: a burst of one-CPU tasks launches CPU nodes (within
// max_workers, the best type, never the 8-CPU one), they join and run;
// once idle for idle_timeout they are terminated; a restarted autoscaler
// adopts running instances instead of launching new ones.
func TestScaleUpAndDown(t *testing.T) {
	f, clk := newFakeCloud(), newClock()
	a, c := newTestAutoscaler(t, f, clk, 0)
	f.queue(map[string]float64{"CPU": 1}, 10)
	reconcile(t, a)
	if n := f.launched(); n != 3 {
		t.Fatalf("launched %d instances for 10 one-CPU tasks, want 3 (max_workers)", n)
	}
	st := f.status(t)
	if len(st.Pending) != 3 || st.Launched["cpu"] != 3 || st.Launched["big"] != 0 {
		t.Fatalf("status after launch: %+v", st)
	}
	reconcile(t, a) // the same demand: nothing more (pending capacity, caps)
	if n := f.launched(); n != 3 {
		t.Fatalf("launched %d after a second round, want still 3", n)
	}
	f.join(c)
	reconcile(t, a)
	if st := f.status(t); st.Active["cpu"] != 3 || len(st.Pending) != 0 {
		t.Fatalf("status after join: %+v", st)
	}
	// A restarted autoscaler adopts the three.
	b, _ := newTestAutoscaler(t, f, clk, 0)
	reconcile(t, b)
	if n := f.launched(); n != 3 {
		t.Fatalf("a restarted autoscaler launched %d more", n-3)
	}
	if st := f.status(t); st.Active["cpu"] != 3 {
		t.Fatalf("restarted autoscaler's view: %+v", st)
	}
	// The work is done: one node still busy, one holds an object, one idle.
	f.queue(nil, 0)
	f.busy("i-1", 1, 0)
	f.busy("i-2", 0, 1<<20)
	reconcile(t, b)
	clk.add(30 * time.Second)
	reconcile(t, b)
	if f.count() != 3 {
		t.Fatalf("terminated before the idle timeout: %d left", f.count())
	}
	clk.add(31 * time.Second)
	reconcile(t, b)
	if f.count() != 2 {
		t.Fatalf("after the idle timeout %d instances are left, want 2 (busy and holding an object)", f.count())
	}
	f.mu.Lock()
	_, gone := f.instances["i-3"]
	f.mu.Unlock()
	if gone {
		t.Fatal("the idle instance i-3 was kept")
	}
}

// TestMinWorkersAndInfeasible: min_workers are launched without demand; a
// shape no node type can hold is reported infeasible and launches
// nothing.
func TestMinWorkersAndInfeasible(t *testing.T) {
	f, clk := newFakeCloud(), newClock()
	a, c := newTestAutoscaler(t, f, clk, 1)
	f.queue(map[string]float64{"TPU": 1}, 2)
	reconcile(t, a)
	if n := f.launched(); n != 1 {
		t.Fatalf("launched %d, want 1 (big's min_workers)", n)
	}
	st := f.status(t)
	if len(st.Demands) != 1 || !st.Demands[0].Infeasible || st.Demands[0].Count != 2 {
		t.Fatalf("demands: %+v, want the TPU shape infeasible", st.Demands)
	}
	f.join(c)
	clk.add(time.Hour)
	f.queue(nil, 0)
	reconcile(t, a)
	reconcile(t, a)
	if f.count() != 1 {
		t.Fatalf("the min_workers node was terminated when idle: %d left", f.count())
	}
}

// TestLaunchFailureBacksOff: a failed launch is shown and its type waits
// before launching again.
func TestLaunchFailureBacksOff(t *testing.T) {
	f, clk := newFakeCloud(), newClock()
	a, _ := newAutoscalerFor(t, f, clk, `
cluster_name   = "t"
head_node_type = "head"
provider "fake" {}
node_type "head" {
  resources = { CPU = 1 }
}
node_type "cpu" {
  resources   = { CPU = 2 }
  max_workers = 3
}
`)
	f.failNext = true
	f.queue(map[string]float64{"CPU": 2}, 1)
	reconcile(t, a) // launch sent; the provider fails it asynchronously
	reconcile(t, a) // the error is polled
	st := f.status(t)
	if len(st.Failures) != 1 || !strings.Contains(st.Failures[0].Message, "quota exceeded") || st.BackingOff["cpu"].IsZero() {
		t.Fatalf("status after a failed launch: %+v", st)
	}
	reconcile(t, a)
	if n := f.launchedOf("cpu"); n != 0 {
		t.Fatalf("launched %d cpu nodes while the type backs off", n)
	}
	clk.add(2 * time.Minute)
	reconcile(t, a)
	if n := f.launchedOf("cpu"); n != 1 {
		t.Fatalf("launched %d cpu nodes after the backoff, want 1", n)
	}
}

// TestExplicitRequest: RequestResources-style requests launch capacity
// without queued work.
func TestExplicitRequest(t *testing.T) {
	f, clk := newFakeCloud(), newClock()
	a, _ := newTestAutoscaler(t, f, clk, 0)
	b, _ := json.Marshal([]Request{{Resources: map[string]float64{"CPU": 2}, Count: 2}})
	f.kv[StatusNamespace+"/"+RequestsKey] = b
	reconcile(t, a)
	if n := f.launched(); n != 2 {
		t.Fatalf("launched %d for a request of 2 × 2 CPUs, want 2", n)
	}
	if strings.Contains(string(f.kv[StatusNamespace+"/"+StatusKey]), "secret") {
		t.Fatal("the cluster token is in the published status")
	}
}

// launchedOf counts the instances of a node type the provider holds.
func (f *fakeCloud) launchedOf(nodeType string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, i := range f.instances {
		if i.NodeType == nodeType {
			n++
		}
	}
	return n
}

// TestLaunchSentAgainAfterProviderCrash: a Launch call that fails as a
// crashed provider's does (before or after the provider took the request)
// is sent again with the same request id, and never launches twice.
func TestLaunchSentAgainAfterProviderCrash(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after int
	}{{"crash before taking it", 2, 0}, {"crash after taking it", 0, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			f, clk := newFakeCloud(), newClock()
			a, c := newTestAutoscaler(t, f, clk, 0)
			f.crashBefore, f.crashAfter = tc.before, tc.after
			f.queue(map[string]float64{"CPU": 2}, 2)
			for range 4 {
				reconcile(t, a)
			}
			if n := f.launched(); n != 2 {
				t.Fatalf("launched %d instances for 2 two-CPU tasks, want 2", n)
			}
			f.mu.Lock()
			ids := append([]string(nil), f.launchIDs...)
			f.mu.Unlock()
			for _, id := range ids {
				if id != ids[0] {
					t.Fatalf("launch calls %v: a retry used another request id", ids)
				}
			}
			// After a crash that took the request the provider lists its
			// instances: nothing is sent again.
			if want := tc.before + 1; len(ids) != want {
				t.Fatalf("%d launch calls (%v), want %d", len(ids), ids, want)
			}
			st := f.status(t)
			if len(st.Failures) == 0 || !strings.Contains(st.Failures[0].Message, "sending the same request again") {
				t.Fatalf("failures %+v: want the failed call reported", st.Failures)
			}
			f.join(c)
			reconcile(t, a)
			if st := f.status(t); st.Active["cpu"] != 2 || len(st.Pending) != 0 {
				t.Fatalf("after joining: %+v", st)
			}
		})
	}
}

// TestExplicitRequestKeepsNodes: nodes a standing request needs are not
// terminated when idle; once the request is cleared they go.
func TestExplicitRequestKeepsNodes(t *testing.T) {
	f, clk := newFakeCloud(), newClock()
	a, c := newTestAutoscaler(t, f, clk, 0)
	b, _ := json.Marshal([]Request{{Resources: map[string]float64{"CPU": 1}, Count: 4}})
	f.kv[StatusNamespace+"/"+RequestsKey] = b
	reconcile(t, a)
	// 4 one-CPU bundles: the head's CPU holds one, so 2 two-CPU nodes.
	if n := f.launched(); n != 2 {
		t.Fatalf("launched %d for a request of 4 × 1 CPU with a 1-CPU head, want 2", n)
	}
	f.join(c)
	for range 3 {
		reconcile(t, a)
		clk.add(time.Hour)
	}
	if n := f.count(); n != 2 {
		t.Fatalf("%d instances left while the request stands, want 2", n)
	}
	if d := f.status(t).Demands; len(d) != 1 || !d[0].Request || d[0].Count != 4 {
		t.Fatalf("demands %+v: want the request shown", d)
	}
	// Half the request: one node may go.
	b, _ = json.Marshal([]Request{{Resources: map[string]float64{"CPU": 1}, Count: 2}})
	f.kv[StatusNamespace+"/"+RequestsKey] = b
	reconcile(t, a)
	clk.add(2 * time.Minute)
	reconcile(t, a)
	if n := f.count(); n != 1 {
		t.Fatalf("%d instances left after the request shrank to 2 CPUs, want 1", n)
	}
	delete(f.kv, StatusNamespace+"/"+RequestsKey)
	reconcile(t, a)
	clk.add(2 * time.Minute)
	reconcile(t, a)
	if n := f.count(); n != 0 {
		t.Fatalf("%d instances left after the request was cleared, want 0", n)
	}
}

// TestIdleNodeIsDrainedFirst: an idle node is drained before it is
// terminated, and terminated only once drained; one that refuses (it
// holds objects it cannot move) stays, shown as kept; a drain that does
// not finish in time is cancelled and the node goes back to work.
func TestIdleNodeIsDrainedFirst(t *testing.T) {
	f, clk := newFakeCloud(), newClock()
	a, c := newAutoscalerFor(t, f, clk, `
cluster_name   = "t"
head_node_type = "head"
idle_timeout   = "1m"
provider "fake" {}
node_type "head" {
  resources = { CPU = 1 }
}
node_type "cpu" {
  resources   = { CPU = 2 }
  max_workers = 3
}
`)
	a.cfg.DrainTimeout = 5 * time.Minute
	f.queue(map[string]float64{"CPU": 2}, 3)
	reconcile(t, a)
	f.join(c)
	reconcile(t, a)
	f.queue(nil, 0)
	f.busy("i-2", 0, 1<<20) // holds an object
	f.slowDrain = 1         // the first accepted drain (i-1's) takes two calls
	reconcile(t, a)         // idle from now
	clk.add(61 * time.Second)
	reconcile(t, a)
	st := f.status(t)
	if len(st.Draining) != 1 || st.Draining[0].ID != "i-1" || st.Draining[0].Detail != "spilled 0 of 1 primary copies" {
		t.Fatalf("draining %+v: want i-1 with its progress", st.Draining)
	}
	if len(st.Kept) != 1 || st.Kept[0].ID != "i-2" || !strings.Contains(st.Kept[0].Detail, "no shared spill storage") {
		t.Fatalf("kept %+v: want i-2 with why", st.Kept)
	}
	if f.count() != 2 {
		t.Fatalf("%d instances, want 2: i-3 drained and terminated, i-1 draining, i-2 kept", f.count())
	}
	reconcile(t, a) // i-1 drained
	if f.count() != 1 {
		t.Fatalf("%d instances after the drains, want 1 (i-2 kept)", f.count())
	}
	// The kept node is asked again only after another idle timeout.
	n := f.drains
	reconcile(t, a)
	if f.drains != n {
		t.Fatal("the kept node was asked to drain again before its idle time was up")
	}
	// A drain that never finishes is cancelled after DrainTimeout.
	f.busy("i-2", 0, 0)
	f.slowDrain = 1000
	clk.add(61 * time.Second)
	reconcile(t, a)
	if st := f.status(t); len(st.Draining) != 1 {
		t.Fatalf("draining %+v: want i-2", st.Draining)
	}
	clk.add(6 * time.Minute)
	reconcile(t, a)
	st = f.status(t)
	if len(st.Draining) != 0 || len(st.Failures) == 0 || !strings.Contains(st.Failures[len(st.Failures)-1].Message, "not drained within 5m0s") {
		t.Fatalf("after the drain timeout: draining %+v, failures %+v", st.Draining, st.Failures)
	}
	f.mu.Lock()
	draining := f.nodes["i-2"].Draining
	f.mu.Unlock()
	if draining || f.count() != 1 {
		t.Fatalf("after the drain timeout the node is still draining (%v) or gone (%d instances)", draining, f.count())
	}
}

// TestAboveMaxWorkersShrinks: after the cluster file lowers max_workers
// (or drops a node type), a restarted autoscaler drains and terminates the
// idle instances above it at once, without waiting for the idle timeout,
// and keeps the busy ones.
func TestAboveMaxWorkersShrinks(t *testing.T) {
	f, clk := newFakeCloud(), newClock()
	a, c := newTestAutoscaler(t, f, clk, 0)
	f.queue(map[string]float64{"CPU": 2}, 3)
	reconcile(t, a)
	f.join(c)
	reconcile(t, a)
	f.queue(nil, 0)
	f.busy("i-1", 2, 0)
	b, _ := newAutoscalerFor(t, f, clk, strings.Replace(fmt.Sprintf(testCluster, 0), "max_workers = 3\n}", "max_workers = 1\n}", 1))
	reconcile(t, b) // adopt, drain the idle ones above max at once
	reconcile(t, b)
	if n := f.count(); n != 1 {
		t.Fatalf("%d instances after max_workers went from 3 to 1, want 1", n)
	}
	f.mu.Lock()
	_, kept := f.instances["i-1"]
	f.mu.Unlock()
	if !kept {
		t.Fatal("the busy instance i-1 was terminated; the idle ones should go")
	}
}

// TestUnmeetableRequestHoldsNothing: a standing request no node can hold
// (4 GPUs) keeps no idle CPU worker alive.
func TestUnmeetableRequestHoldsNothing(t *testing.T) {
	f, clk := newFakeCloud(), newClock()
	a, c := newTestAutoscaler(t, f, clk, 0)
	f.queue(map[string]float64{"CPU": 2}, 2)
	reconcile(t, a)
	f.join(c)
	reconcile(t, a)
	f.queue(nil, 0)
	b, _ := json.Marshal([]Request{{Resources: map[string]float64{"GPU": 4}, Count: 1}})
	f.kv[StatusNamespace+"/"+RequestsKey] = b
	reconcile(t, a)
	clk.add(2 * time.Minute)
	reconcile(t, a)
	if n := f.count(); n != 0 {
		t.Fatalf("%d idle instances kept by a request none of them can hold, want 0", n)
	}
	if d := f.status(t).Demands; len(d) != 1 || !d[0].Infeasible || !d[0].Request {
		t.Fatalf("demands %+v: want the 4-GPU request infeasible", d)
	}
}

// TestDeadNodeIsTerminated: an instance whose node dies is terminated at
// once (the provider still lists it), counted toward max_workers until it
// is gone, and backs nothing off.
func TestDeadNodeIsTerminated(t *testing.T) {
	f, clk := newFakeCloud(), newClock()
	a, c := newTestAutoscaler(t, f, clk, 0)
	f.queue(map[string]float64{"CPU": 2}, 3)
	reconcile(t, a)
	f.join(c)
	reconcile(t, a)
	f.mu.Lock()
	f.nodes["i-1"].Info.State = "DEAD"
	f.mu.Unlock()
	reconcile(t, a)
	f.mu.Lock()
	_, listed := f.instances["i-1"]
	f.mu.Unlock()
	if listed {
		t.Fatal("the instance of a dead node was not terminated")
	}
	st := f.status(t)
	if !st.BackingOff["cpu"].IsZero() {
		t.Fatalf("a dead node backed its type off: %+v", st)
	}
	reconcile(t, a) // the demand is still there: a replacement
	if n := f.count(); n != 3 {
		t.Fatalf("%d instances after the replacement, want 3 (max_workers)", n)
	}
}

// TestLowerMaxKeepsMin: lowering the cluster's max_workers drains idle
// instances above it, but never a type below its min_workers.
func TestLowerMaxKeepsMin(t *testing.T) {
	f, clk := newFakeCloud(), newClock()
	src := `
cluster_name   = "t"
head_node_type = "head"
max_workers    = %d
provider "fake" {}
node_type "head" {
  resources = { CPU = 1 }
}
node_type "a" {
  resources   = { CPU = 2 }
  min_workers = 2
  max_workers = 2
}
node_type "b" {
  resources   = { CPU = 4 }
  max_workers = 2
}
`
	a, c := newAutoscalerFor(t, f, clk, fmt.Sprintf(src, 4))
	f.queue(map[string]float64{"CPU": 4}, 2)
	reconcile(t, a)
	f.join(c)
	reconcile(t, a)
	f.queue(nil, 0)
	if f.launchedOf("a") != 2 || f.launchedOf("b") != 2 {
		t.Fatalf("launched a=%d b=%d, want 2 and 2", f.launchedOf("a"), f.launchedOf("b"))
	}
	b, _ := newAutoscalerFor(t, f, clk, fmt.Sprintf(src, 2))
	for range 3 {
		reconcile(t, b)
	}
	if f.launchedOf("a") != 2 || f.launchedOf("b") != 0 {
		t.Fatalf("after max_workers 4 → 2: a=%d b=%d, want a kept at its min (2) and b gone", f.launchedOf("a"), f.launchedOf("b"))
	}
}

// TestPartialLaunchFailure: a launch of 3 of which one fails keeps the
// other two as pending capacity: nothing more is launched for them.
func TestPartialLaunchFailure(t *testing.T) {
	f, clk := newFakeCloud(), newClock()
	a, _ := newTestAutoscaler(t, f, clk, 0)
	f.queue(map[string]float64{"CPU": 2}, 3)
	reconcile(t, a)
	f.mu.Lock()
	// One instance of the three failed; the other two are not listed yet.
	var req string
	for id, i := range f.instances {
		req = i.RequestID
		delete(f.instances, id)
	}
	f.errs = append(f.errs, provider.LaunchError{Op: provider.ErrorOpLaunch, RequestID: req, NodeType: "cpu", Count: 1, Message: "capacity", At: time.Now()})
	f.mu.Unlock()
	reconcile(t, a)
	n := 0
	for _, p := range f.status(t).Pending {
		if p.State == "requested ("+req+")" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d instances of the partly failed launch still pending, want 2: %+v", n, f.status(t).Pending)
	}
}

// BenchmarkReconcile is one autoscaler round on a large cluster: 500
// running workers (half of them busy), 10,000 queued demands in 20
// shapes, a standing request, the provider and GCS answered from memory.
// It is the autoscaler's own cost per round (every 5 s by default), the
// provider's and GCS's calls aside.
func BenchmarkReconcile(b *testing.B) {
	f, clk := newFakeCloud(), newClock()
	src := `
cluster_name   = "bench"
head_node_type = "head"
max_workers    = 1000
provider "fake" {}
node_type "head" {
  resources = { CPU = 1 }
}
node_type "cpu" {
  resources   = { CPU = 16, memory = "64GiB" }
  max_workers = 1000
}
node_type "gpu" {
  resources   = { CPU = 8, GPU = 1 }
  max_workers = 100
}
`
	c, diags := config.ParseCluster([]byte(src), "cluster.hcl")
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	for i := range 500 {
		id := fmt.Sprintf("w-%d", i)
		f.instances[id] = &provider.Instance{ID: id, NodeType: "cpu", RequestID: "r", State: provider.StateRunning}
		f.nodes[id] = nodeView(id, map[string]float64{"CPU": 16, "memory": 64 << 30}, nil)
		if i%2 == 0 {
			f.busy(id, 16, 0)
		}
	}
	var pending []*pb.PendingDemand
	for s := range 20 {
		set, _ := resources.FromFloats(map[string]float64{"CPU": float64(1 + s%8), "GPU": float64(s % 2)})
		pending = append(pending, &pb.PendingDemand{Resources: &pb.Resources{Amounts: set}, Count: 500})
	}
	f.head.Pending = pending
	req, _ := json.Marshal([]Request{{Resources: map[string]float64{"CPU": 4}, Count: 100}})
	f.kv[StatusNamespace+"/"+RequestsKey] = req
	a, err := New(Config{Cluster: c, Provider: f, GCS: f, Now: clk.now})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := a.Reconcile(ctx); err != nil { // adopt
		b.Fatal(err)
	}
	reset := func() { // every round starts from the same cluster
		f.mu.Lock()
		for id := range f.instances {
			if !strings.HasPrefix(id, "w-") {
				delete(f.instances, id)
			}
		}
		f.requests = map[string]bool{}
		f.mu.Unlock()
		a.mu.Lock()
		a.launches = map[string]*launch{}
		for id := range a.insts {
			if !strings.HasPrefix(id, "w-") {
				delete(a.insts, id)
			}
		}
		a.mu.Unlock()
	}
	reset()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		reset()
		b.StartTimer()
		if err := a.Reconcile(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
