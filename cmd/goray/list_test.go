package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/state"
	"google.golang.org/protobuf/proto"
)

// fakeCluster serves fixed replies; sockets missing from its maps are
// unreachable.
type fakeCluster struct {
	views  []*pb.NodeView
	jobs   []*pb.JobInfo
	actors []*pb.ActorInfo
	groups []*pb.PlacementGroupInfo
	stats  map[string]*pb.GetNodeStatsReply
	owned  map[string]*pb.ListOwnedReply
	tasks  []*pb.TaskStatus

	mu    sync.Mutex
	calls map[string]int
}

func (f *fakeCluster) count(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[s]++
}

func (f *fakeCluster) Nodes(context.Context) ([]*pb.NodeView, error)   { return f.views, nil }
func (f *fakeCluster) Jobs(context.Context) ([]*pb.JobInfo, error)     { return f.jobs, nil }
func (f *fakeCluster) Actors(context.Context) ([]*pb.ActorInfo, error) { return f.actors, nil }
func (f *fakeCluster) PlacementGroups(context.Context) ([]*pb.PlacementGroupInfo, error) {
	return f.groups, nil
}

func (f *fakeCluster) ClusterInfo(context.Context) (*pb.GetClusterInfoReply, error) {
	return &pb.GetClusterInfoReply{ClusterId: "c1a55e5", Storage: "bolt /data/gcs.db", StartedAtMs: 1000, NowMs: 61000}, nil
}

// NodeStats answers as the raylet of node would: its stats, and with
// includeOwned what each of its clients answered (as the raylet asks
// them over their unix sockets).
func (f *fakeCluster) NodeStats(_ context.Context, node *pb.NodeInfo, includeOwned bool) (*pb.GetNodeStatsReply, error) {
	f.count(node.GetRayletUnix())
	r, ok := f.stats[node.GetRayletUnix()]
	if !ok {
		return nil, errors.New("connection refused")
	}
	r = proto.Clone(r).(*pb.GetNodeStatsReply)
	r.Node = node
	if includeOwned {
		for _, a := range r.Clients {
			f.count(a.GetUnixPath())
			o, ok := f.owned[a.GetUnixPath()]
			if !ok {
				r.OwnedErrors = append(r.OwnedErrors, fmt.Sprintf("process %x at %s: ListOwned: connection refused", a.GetWorkerId()[:4], a.GetUnixPath()))
				continue
			}
			o = proto.Clone(o).(*pb.ListOwnedReply)
			if o.Owner == nil {
				o.Owner = a
			}
			r.Owned = append(r.Owned, o)
		}
	}
	return r, nil
}

// ListTasks answers from the fake's task events, newest limit last.
func (f *fakeCluster) ListTasks(_ context.Context, req *pb.ListTasksRequest) (*pb.ListTasksReply, error) {
	var out []*pb.TaskStatus
	for _, t := range f.tasks {
		ok := true
		for _, fl := range req.GetFilters() {
			if fl.GetKey() == "state" && !strings.EqualFold(t.GetState(), fl.GetValue()) {
				ok = false
			}
		}
		if ok {
			out = append(out, t)
		}
	}
	total := len(out)
	if l := int(req.GetLimit()); l > 0 && len(out) > l {
		out = out[len(out)-l:]
	}
	return &pb.ListTasksReply{Tasks: out, Total: int64(total), Evicted: 2}, nil
}

func objID(b byte) []byte { return append(id(b, 16), 0, 0, 0, 1) }

func newFakeCluster() *fakeCluster {
	views := fakeViews()
	// A third alive node whose raylet does not answer.
	views = append(views, &pb.NodeView{Info: &pb.NodeInfo{NodeId: id(0xdd, 16), NodeName: "far", State: "ALIVE", RayletUnix: "/nowhere.sock"}})
	driver := &pb.Address{NodeId: id(0xaa, 16), WorkerId: id(0xd1, 16), UnixPath: "/tmp/s1/sockets/driver.sock"}
	worker := &pb.Address{NodeId: id(0xbb, 16), WorkerId: id(0xe1, 16), UnixPath: "/tmp/s2/sockets/worker.sock"}
	lost := &pb.Address{NodeId: id(0xbb, 16), WorkerId: id(0xe2, 16), UnixPath: "/tmp/s2/sockets/lost.sock"}
	return &fakeCluster{
		views: views, jobs: fakeJobs(), actors: fakeActors(), groups: fakeGroups(),
		stats: map[string]*pb.GetNodeStatsReply{
			"/tmp/s1/sockets/raylet.sock": {
				Clients: []*pb.Address{driver},
				StoreObjectsList: []*pb.StoreObject{
					{ObjectId: objID(0x52), Found: true, DataSize: 4 << 20},
					{ObjectId: objID(0x60), Found: true, DataSize: 100},
				},
			},
			"/tmp/s2/sockets/raylet.sock": {
				// The driver is listed twice (also connected here); it is asked once.
				Clients: []*pb.Address{worker, lost, driver},
				Workers: []*pb.WorkerStats{
					{WorkerId: worker.WorkerId, Pid: 31, JobId: id(0x01, 4), State: "LEASED", Address: worker},
					{WorkerId: lost.WorkerId, Pid: 32, JobId: id(0x01, 4), State: "IDLE", Address: lost},
				},
				StoreObjectsList: []*pb.StoreObject{{ObjectId: objID(0x52), Found: true, DataSize: 4 << 20}},
			},
		},
		owned: map[string]*pb.ListOwnedReply{
			driver.UnixPath: {
				Owner: driver,
				Objects: []*pb.ObjectState{
					{ObjectId: objID(0x51), Size: 8, State: "READY", LocalRefs: 1, CallSite: "main.go:10"},
					{ObjectId: objID(0x52), Size: 4 << 20, InStore: true, NodeId: id(0xaa, 16), State: "READY", LocalRefs: 2, SubmittedRefs: 1, Borrowers: 1},
					{ObjectId: objID(0x53), Size: 1 << 20, InStore: true, NodeId: id(0xbb, 16), State: "READY"},
				},
			},
			worker.UnixPath: {
				// No owner in the reply: the address asked is used.
				Objects: []*pb.ObjectState{{ObjectId: objID(0x54), Size: 3, State: "READY", LocalRefs: 1}},
			},
		},
		tasks: []*pb.TaskStatus{
			{TaskId: id(0x71, 16), Function: "main.add", State: "FINISHED", NodeId: id(0xbb, 16), WorkerId: id(0xe1, 16), OwnerWorkerId: driver.WorkerId},
			{TaskId: id(0x72, 16), Name: "slow one", Function: "main.slow", State: "RUNNING", Attempt: 1, NodeId: id(0xbb, 16), WorkerId: id(0xe1, 16), OwnerWorkerId: driver.WorkerId},
			{TaskId: id(0x73, 16), Function: "main.nested", State: "FAILED", ErrorType: "*errors.errorString", ErrorMessage: "boom\nstack", NodeId: id(0xaa, 16)},
		},
	}
}

func TestGatherNodes(t *testing.T) {
	c := newFakeCluster()
	var warnings []string
	d, err := state.GatherNodes(context.Background(), c, true, func(s string) { warnings = append(warnings, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Owned) != 2 {
		t.Fatalf("owned replies %d, want 2 (the driver, listed by two raylets, once)", len(d.Owned))
	}
	if got := hexID(d.Owned[0].GetOwner().GetWorkerId()); got != strings.Repeat("d1", 16) {
		t.Errorf("first owner %s, want the driver (sorted by node)", got)
	}
	if got := hexID(d.Owned[1].GetOwner().GetWorkerId()); got != strings.Repeat("e1", 16) {
		t.Errorf("second owner %s, want the worker, filled in from the address asked", got)
	}
	if c.calls["/tmp/s1/sockets/raylet.sock"] != 1 || c.calls["/tmp/s2/sockets/raylet.sock"] != 1 || c.calls["/nowhere.sock"] != 1 {
		t.Errorf("raylet calls %v, want each alive node's raylet once", c.calls)
	}
	if _, asked := c.calls[""]; asked {
		t.Error("the dead node's raylet was asked")
	}
	slices.Sort(warnings)
	if len(warnings) != 2 || !strings.Contains(warnings[0], "node bbbbbbbb: skipping process e2e2e2e2") || !strings.Contains(warnings[1], "skipping node dddddddd (far)") {
		t.Errorf("warnings %q, want the unreachable raylet and process", warnings)
	}
	if len(d.Stats) != 2 {
		t.Errorf("stats of %d nodes, want 2", len(d.Stats))
	}
}

func TestTaskAndObjectRows(t *testing.T) {
	c := newFakeCluster()
	tp, err := state.Tasks(context.Background(), c, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range tp.Rows {
		ids = append(ids, shortHex(r.TaskID))
	}
	if want := []string{"71717171", "72727272", "73737373"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("tasks %v, want %v", ids, want)
	}
	if r := tp.Rows[1]; r.Name != "slow one" || r.State != "RUNNING" || r.Attempt != 1 || r.OwnerWorkerID != strings.Repeat("d1", 16) {
		t.Errorf("task row %+v", r)
	}

	d, err := state.GatherNodes(context.Background(), c, true, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	objs := state.ObjectRows(d)
	byID := map[string]state.ObjectRow{}
	var order []string
	for _, o := range objs {
		byID[o.ObjectID[:2]] = o
		order = append(order, o.ObjectID[:2])
	}
	if want := []string{"51", "52", "53", "54", "60"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("objects %v, want owned ones first then store-only", order)
	}
	if o := byID["51"]; o.Where != state.WhereInline || len(o.StoreNodes) != 0 || o.CallSite != "main.go:10" {
		t.Errorf("inline object %+v", o)
	}
	if o := byID["52"]; o.Where != state.WhereStore || !reflect.DeepEqual(o.StoreNodes, []string{strings.Repeat("aa", 16), strings.Repeat("bb", 16)}) ||
		o.LocalRefs != 2 || o.SubmittedRefs != 1 || o.Borrowers != 1 {
		t.Errorf("stored object %+v, want both stores listed with its refs", o)
	}
	if o := byID["53"]; o.Where != state.WhereStore || !reflect.DeepEqual(o.StoreNodes, []string{strings.Repeat("bb", 16)}) {
		t.Errorf("object in a store not listed %+v, want the owner's node", o)
	}
	if o := byID["60"]; o.Where != state.WhereStore || o.OwnerWorkerID != "" || o.Size != 100 || o.State != "" {
		t.Errorf("store-only object %+v", o)
	}
}

func TestListCommands(t *testing.T) {
	tests := []struct {
		kind     string
		jsonKey  string
		jsonLen  int
		contains []string
	}{
		{"nodes", "nodes", 4, []string{"NODE ID", "aaaaaaaa  head", "missed 5 heartbeats", "8.0 GiB"}},
		{"actors", "actors", 4, []string{"ACTOR ID", "NAMESPACE  LIFETIME", strings.Repeat("10", 16) + "  main.Counter  c1    prod       detached  ALIVE", "owned", "killed", "PENDING", "RESTARTING"}},
		{"jobs", "jobs", 2, []string{"JOB ID", "RUNNING", "/bin/app", "FINISHED"}},
		{"tasks", "tasks", 3, []string{"TASK ID", "main.add", "slow one", "*errors.errorString: boom stack"}},
		{"objects", "objects", 5, []string{"OBJECT ID", "inline in owner", "store on node aaaaaaaa,bbbbbbbb", "4.0 MiB", "2/1/1", "d1d1d1d1@aaaaaaaa"}},
		{"workers", "workers", 3, []string{"WORKER ID", "d1d1d1d1   DRIVER  aaaaaaaa", "e1e1e1e1   WORKER  bbbbbbbb  31", "LEASED", "IDLE"}},
		{"placement-groups", "placement_groups", 4, []string{"PLACEMENT GROUP ID", strings.Repeat("70", 16) + "  gang (detached)  prod       CREATED       STRICT_SPREAD",
			"{CPU: 1} {CPU: 1}", "0@aaaaaaaa 1@bbbbbbbb", "PENDING", "infeasible: bundle 0 {CPU: 64} fits no node", "1@-", "RESCHEDULING", "node bbbbbbbb died", "REMOVED", "removed by its owner"}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			a := &app{stdout: &stdout, stderr: &stderr}
			if err := a.list(context.Background(), newFakeCluster(), tt.kind, listOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.contains {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("table lacks %q:\n%s", want, stdout.String())
				}
			}
			if lines := strings.Count(stdout.String(), "\n"); lines != tt.jsonLen+1 {
				t.Errorf("table has %d lines, want header + %d:\n%s", lines, tt.jsonLen, stdout.String())
			}
			if tt.kind == "objects" && !strings.Contains(stderr.String(), "warning: skipping node dddddddd") {
				t.Errorf("stderr lacks the skipped node warning: %q", stderr.String())
			}
			if tt.kind == "tasks" && !strings.Contains(stderr.String(), "evicted 2 finished tasks") {
				t.Errorf("stderr lacks the evictions: %q", stderr.String())
			}

			stdout.Reset()
			if err := a.list(context.Background(), newFakeCluster(), tt.kind, listOptions{asJSON: true}); err != nil {
				t.Fatal(err)
			}
			var doc map[string][]map[string]any
			if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
				t.Fatalf("JSON: %v\n%s", err, stdout.String())
			}
			if len(doc) != 1 || len(doc[tt.jsonKey]) != tt.jsonLen {
				t.Errorf("JSON %v, want {%q: [%d rows]}", doc, tt.jsonKey, tt.jsonLen)
			}
		})
	}
	var stdout bytes.Buffer
	a := &app{stdout: &stdout, stderr: &stdout}
	var ue *usageError
	if err := a.list(context.Background(), newFakeCluster(), "widgets", listOptions{}); !errors.As(err, &ue) {
		t.Errorf("list widgets: %v, want a usage error", err)
	}
}

func TestListJSONFields(t *testing.T) {
	var stdout bytes.Buffer
	a := &app{stdout: &stdout, stderr: &bytes.Buffer{}}
	if err := a.list(context.Background(), newFakeCluster(), "objects", listOptions{asJSON: true}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Objects []map[string]any `json:"objects"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range doc.Objects[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"borrowers", "call_site", "local_refs", "object_id", "owner_node_id", "owner_worker_id", "size", "state", "store_nodes", "submitted_refs", "where"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("object fields %v, want %v", keys, want)
	}
}

// fakeGroups are a created detached group, an infeasible pending one, one
// rescheduling after a node death and a removed one.
func fakeGroups() []*pb.PlacementGroupInfo {
	bundle := func(i int32, cpu float64, node []byte) *pb.Bundle {
		return &pb.Bundle{Index: i, Resources: res(map[string]float64{"CPU": cpu}), NodeId: node}
	}
	return []*pb.PlacementGroupInfo{
		{PlacementGroupId: id(0x70, 16), Name: "gang", Namespace: "prod", JobId: id(0x01, 4), Detached: true, Strategy: pb.PlacementStrategy_PLACEMENT_STRATEGY_STRICT_SPREAD,
			State: pb.PlacementGroupState_PLACEMENT_GROUP_STATE_CREATED, Bundles: []*pb.Bundle{bundle(0, 1, id(0xaa, 16)), bundle(1, 1, id(0xbb, 16))}},
		{PlacementGroupId: id(0x71, 16), JobId: id(0x01, 4), Strategy: pb.PlacementStrategy_PLACEMENT_STRATEGY_STRICT_PACK,
			State: pb.PlacementGroupState_PLACEMENT_GROUP_STATE_PENDING, PendingReason: "bundle 0 {CPU: 64} fits no node", Infeasible: true,
			Bundles: []*pb.Bundle{bundle(0, 64, nil)}},
		{PlacementGroupId: id(0x72, 16), JobId: id(0x01, 4), Strategy: pb.PlacementStrategy_PLACEMENT_STRATEGY_PACK,
			State: pb.PlacementGroupState_PLACEMENT_GROUP_STATE_RESCHEDULING, PendingReason: "node bbbbbbbb died", Reschedules: 1,
			Bundles: []*pb.Bundle{bundle(0, 2, id(0xaa, 16)), bundle(1, 3, nil)}},
		{PlacementGroupId: id(0x73, 16), JobId: id(0x01, 4), Strategy: pb.PlacementStrategy_PLACEMENT_STRATEGY_SPREAD,
			State: pb.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED, RemovalReason: "removed by its owner",
			Bundles: []*pb.Bundle{bundle(0, 1, nil)}},
	}
}

func TestPlacementGroupStatus(t *testing.T) {
	r := buildStatus("h:1", fakeViews(), nil, nil)
	r.addPlacementGroups(fakeGroups())
	if want := (groupCounts{Total: 4, Pending: 1, Created: 1, Rescheduling: 1, Removed: 1}); r.PlacementGroups != want {
		t.Errorf("counts %+v, want %+v", r.PlacementGroups, want)
	}
	if len(r.PendingGroups) != 2 {
		t.Fatalf("pending groups %+v, want the pending and the rescheduling one", r.PendingGroups)
	}
	if p := r.PendingGroups[0]; !p.Infeasible || p.Strategy != "STRICT_PACK" || len(p.Bundles) != 1 {
		t.Errorf("pending group %+v, want the infeasible STRICT_PACK one", p)
	}
	if p := r.PendingGroups[1]; p.Infeasible || len(p.Bundles) != 1 || p.Bundles[0][resources.CPU] != 3*resources.Unit {
		t.Errorf("rescheduling group %+v, want only its lost {CPU: 3} bundle as demand", p)
	}
	var b bytes.Buffer
	if err := writeStatus(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"placement group 71717171 STRICT_PACK PENDING: {CPU: 64} (infeasible: no node can ever hold it: bundle 0 {CPU: 64} fits no node)",
		"placement group 72727272 PACK RESCHEDULING: {CPU: 3} (waiting: node bbbbbbbb died)",
		"Placement groups: 4 (1 created, 1 pending, 1 rescheduling, 1 removed)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "(none)") {
		t.Errorf("status says no pending demand while groups wait:\n%s", b.String())
	}
}

func TestStatusHidesGroupResources(t *testing.T) {
	views := fakeViews()
	grp := resources.BundleResources(resources.Set{resources.CPU: resources.Unit}, strings.Repeat("70", 16), 0)
	for k, v := range grp {
		views[0].Info.Total.Amounts[k] = v
		views[0].Available.Amounts[k] = v
	}
	r := buildStatus("h:1", views, nil, nil)
	var b bytes.Buffer
	if err := writeStatus(&b, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "_group_") {
		t.Errorf("status text shows placement group resources:\n%s", b.String())
	}
	if _, ok := r.Cluster.ResourcesTotal[resources.GroupName(resources.CPU, strings.Repeat("70", 16), -1)]; !ok {
		t.Errorf("status JSON lost the group resources: %v", r.Cluster.ResourcesTotal)
	}
}
