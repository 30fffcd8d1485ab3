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
	"testing"
	"time"

	"github.com/goray-dev/goray/autoscaler"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

func res(m map[string]float64) *pb.Resources {
	s, err := resources.FromFloats(m)
	if err != nil {
		panic(err)
	}
	return &pb.Resources{Amounts: s}
}

func id(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

const gib = 1 << 30

// fakeViews is a cluster of a head, a second alive node and a dead node.
func fakeViews() []*pb.NodeView {
	return []*pb.NodeView{
		{
			Info: &pb.NodeInfo{NodeId: id(0xbb, 16), NodeName: "worker-1", State: "ALIVE", StartTimeMs: 2000, Pid: 20,
				RayletUnix: "/tmp/s2/sockets/raylet.sock", Total: res(map[string]float64{"CPU": 2, "memory": 4 * gib, "object_store_memory": gib, "disk": 1})},
			Available: res(map[string]float64{"CPU": 0.5, "memory": 4 * gib, "object_store_memory": gib, "disk": 1}),
			StoreUsed: 512 << 20, StoreCapacity: gib,
			Pending: []*pb.PendingDemand{
				{Resources: res(map[string]float64{"CPU": 1}), Count: 2},
				{Resources: res(map[string]float64{"GPU": 1}), Count: 1, Infeasible: true},
			},
		},
		{
			Info: &pb.NodeInfo{NodeId: id(0xcc, 16), NodeName: "gone", State: "DEAD", DeathReason: "missed 5 heartbeats", StartTimeMs: 500,
				Total: res(map[string]float64{"CPU": 8})},
			Available: res(map[string]float64{"CPU": 8}),
		},
		{
			Info: &pb.NodeInfo{NodeId: id(0xaa, 16), NodeName: "head", State: "ALIVE", IsHead: true, StartTimeMs: 1000, Pid: 10,
				RayletUnix: "/tmp/s1/sockets/raylet.sock", Total: res(map[string]float64{"CPU": 4, "GPU": 1, "memory": 8 * gib, "object_store_memory": 2 * gib})},
			Available:     res(map[string]float64{"CPU": 3, "GPU": 1, "memory": 8 * gib, "object_store_memory": 2 * gib}),
			StoreCapacity: 0, // no heartbeat yet
			Pending:       []*pb.PendingDemand{{Resources: res(map[string]float64{"CPU": 1}), Count: 3}},
		},
	}
}

func fakeJobs() []*pb.JobInfo {
	return []*pb.JobInfo{
		{JobId: id(0x01, 16), State: "RUNNING", DriverPid: 100, BinaryPath: "/bin/app", StartTimeMs: 3000},
		{JobId: id(0x02, 16), State: "FINISHED", DriverPid: 101, BinaryPath: "/bin/old", StartTimeMs: 1000, EndTimeMs: 2000},
	}
}

func fakeActors() []*pb.ActorInfo {
	return []*pb.ActorInfo{
		{ActorId: id(0x10, 16), ClassName: "main.Counter", Name: "c1", Namespace: "prod", Detached: true, State: pb.ActorState_ACTOR_STATE_ALIVE, JobId: id(0x01, 16),
			Address: &pb.Address{NodeId: id(0xaa, 16), WorkerId: id(0x31, 16)}, Pid: 300, StartTimeMs: 5, Resources: res(map[string]float64{"CPU": 1})},
		{ActorId: id(0x11, 16), ClassName: "main.Counter", State: pb.ActorState_ACTOR_STATE_DEAD, DeathReason: "killed", StartTimeMs: 4},
		{ActorId: id(0x12, 16), ClassName: "main.Other", State: pb.ActorState_ACTOR_STATE_PENDING, StartTimeMs: 6},
		{ActorId: id(0x13, 16), ClassName: "main.Counter", State: pb.ActorState_ACTOR_STATE_RESTARTING, StartTimeMs: 7,
			MaxRestarts: -1, NumRestarts: 2, DeathReason: "worker crashed"},
	}
}

func TestBuildStatus(t *testing.T) {
	r := buildStatus("127.0.0.1:6380", fakeViews(), fakeJobs(), fakeActors())
	if r.AliveNodes != 2 || r.DeadNodes != 1 {
		t.Errorf("alive %d dead %d, want 2 and 1", r.AliveNodes, r.DeadNodes)
	}
	var order []string
	for _, n := range r.Nodes {
		order = append(order, n.NodeName)
	}
	if want := []string{"head", "worker-1", "gone"}; !reflect.DeepEqual(order, want) {
		t.Errorf("node order %v, want %v (head first, dead last)", order, want)
	}
	wantTotal := amounts(must(resources.FromFloats(map[string]float64{"CPU": 6, "GPU": 1, "memory": 12 * gib, "object_store_memory": 3 * gib, "disk": 1})))
	if !reflect.DeepEqual(r.Cluster.ResourcesTotal, wantTotal) {
		t.Errorf("cluster total %v, want %v (dead nodes excluded)", r.Cluster.ResourcesTotal, wantTotal)
	}
	if got := resources.Set(r.Cluster.ResourcesAvailable).Get("CPU"); got != 3.5 {
		t.Errorf("cluster available CPU %v, want 3.5", got)
	}
	if r.Nodes[0].ObjectStoreCapacity != 2*gib {
		t.Errorf("head store capacity %d, want the object_store_memory resource before the first heartbeat", r.Nodes[0].ObjectStoreCapacity)
	}
	if r.Cluster.ObjectStoreUsed != 512<<20 || r.Cluster.ObjectStoreCapacity != 3*gib {
		t.Errorf("cluster store %d/%d", r.Cluster.ObjectStoreUsed, r.Cluster.ObjectStoreCapacity)
	}
	if dead := r.Nodes[2]; len(dead.ResourcesAvailable) != 0 || dead.DeathReason != "missed 5 heartbeats" {
		t.Errorf("dead node %+v: want no available resources and its death reason", dead)
	}
	wantDemand := []demand{
		{Resources: amounts{"CPU": resources.Unit}, Count: 5},
		{Resources: amounts{"GPU": resources.Unit}, Count: 1, Infeasible: true},
	}
	if !reflect.DeepEqual(r.PendingDemand, wantDemand) {
		t.Errorf("pending %+v, want %+v", r.PendingDemand, wantDemand)
	}
	if r.Jobs != (jobCounts{Total: 2, Running: 1, Finished: 1}) {
		t.Errorf("jobs %+v", r.Jobs)
	}
	if r.Actors != (actorCount{Total: 4, Alive: 1, Pending: 1, Restarting: 1, Dead: 1}) {
		t.Errorf("actors %+v", r.Actors)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestStatusJSON(t *testing.T) {
	var b bytes.Buffer
	if err := writeJSON(&b, buildStatus("127.0.0.1:6380", fakeViews(), fakeJobs(), fakeActors())); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		GCSAddress string `json:"gcs_address"`
		AliveNodes int    `json:"alive_nodes"`
		Nodes      []struct {
			NodeID             string             `json:"node_id"`
			State              string             `json:"state"`
			IsHead             bool               `json:"is_head"`
			DeathReason        string             `json:"death_reason"`
			ResourcesTotal     map[string]float64 `json:"resources_total"`
			ResourcesAvailable map[string]float64 `json:"resources_available"`
			ObjectStoreUsed    int64              `json:"object_store_used"`
		} `json:"nodes"`
		Cluster struct {
			ResourcesTotal map[string]float64 `json:"resources_total"`
		} `json:"cluster"`
		PendingDemand []struct {
			Resources  map[string]float64 `json:"resources"`
			Count      int                `json:"count"`
			Infeasible bool               `json:"infeasible"`
		} `json:"pending_demand"`
		Jobs   map[string]int `json:"jobs"`
		Actors map[string]int `json:"actors"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.GCSAddress != "127.0.0.1:6380" || doc.AliveNodes != 2 || len(doc.Nodes) != 3 {
		t.Fatalf("doc %+v", doc)
	}
	head := doc.Nodes[0]
	if head.NodeID != strings.Repeat("aa", 16) || !head.IsHead || head.State != "ALIVE" {
		t.Errorf("first node %+v, want the head with its full id", head)
	}
	if head.ResourcesTotal["CPU"] != 4 || head.ResourcesTotal["memory"] != 8*gib || head.ResourcesAvailable["CPU"] != 3 {
		t.Errorf("head resources %v / %v: want float amounts, bytes for memory", head.ResourcesAvailable, head.ResourcesTotal)
	}
	if doc.Nodes[2].DeathReason != "missed 5 heartbeats" || doc.Nodes[2].ResourcesAvailable == nil {
		t.Errorf("dead node %+v: want its reason and an empty (not null) available map", doc.Nodes[2])
	}
	if doc.Cluster.ResourcesTotal["CPU"] != 6 {
		t.Errorf("cluster CPU %v", doc.Cluster.ResourcesTotal["CPU"])
	}
	if len(doc.PendingDemand) != 2 || doc.PendingDemand[0].Count != 5 || !doc.PendingDemand[1].Infeasible {
		t.Errorf("pending %+v", doc.PendingDemand)
	}
	if doc.Jobs["running"] != 1 || doc.Actors["alive"] != 1 || doc.Actors["dead"] != 1 || doc.Actors["pending"] != 1 {
		t.Errorf("jobs %v actors %v", doc.Jobs, doc.Actors)
	}
}

func TestStatusText(t *testing.T) {
	var b bytes.Buffer
	if err := writeStatus(&b, buildStatus("127.0.0.1:6380", fakeViews(), fakeJobs(), fakeActors())); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	find := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return l
			}
		}
		t.Errorf("no line starting with %q in:\n%s", prefix, out)
		return ""
	}
	if !strings.Contains(out, "goray cluster at 127.0.0.1:6380: 2 nodes alive, 1 dead") {
		t.Errorf("header missing:\n%s", out)
	}
	headRow := strings.Fields(find("aaaaaaaa"))
	if want := []string{"aaaaaaaa", "head", "ALIVE", "*", "3/4", "1/1", "8.0", "GiB/8.0", "GiB", "0", "B", "used", "of", "2.0", "GiB", "-", "-"}; !reflect.DeepEqual(headRow, want) {
		t.Errorf("head row %q, want %q", headRow, want)
	}
	if row := find("bbbbbbbb"); !strings.Contains(row, "0.5/2") || !strings.Contains(row, "disk 1/1") || !strings.Contains(row, "512 MiB used of 1.0 GiB") {
		t.Errorf("worker row %q", row)
	}
	if row := find("cccccccc"); !strings.Contains(row, "DEAD") || !strings.Contains(row, "missed 5 heartbeats") {
		t.Errorf("dead row %q", row)
	}
	if row := find("CPU  "); !strings.Contains(row, "3.5 / 6") {
		t.Errorf("cluster CPU row %q", row)
	}
	if row := find("GPU  "); !strings.Contains(row, "1 / 1") {
		t.Errorf("cluster GPU row %q", row)
	}
	for _, want := range []string{"{CPU: 1} x 5", "{GPU: 1} x 1 (infeasible", "Jobs: 2 (1 running, 1 finished)", "Actors: 4 (1 alive, 1 pending, 1 restarting, 1 dead)", "Object store: 512 MiB used of 3.0 GiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestStatusEmptyCluster(t *testing.T) {
	var b bytes.Buffer
	r := buildStatus("h:1", nil, nil, nil)
	if err := writeStatus(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "0 nodes alive") || !strings.Contains(b.String(), "(none)") {
		t.Errorf("empty status:\n%s", b.String())
	}
	b.Reset()
	if err := writeJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	// Lists and maps are [] and {}, never null, so consumers need no nil checks.
	if strings.Contains(b.String(), "null") {
		t.Errorf("JSON has null:\n%s", b.String())
	}
}

// kvCluster is a fakeCluster with a KV store and a GCS clock: what
// `goray status` reads the autoscaler's status from.
type kvCluster struct {
	*fakeCluster
	now   time.Time
	kv    map[string][]byte // by "namespace/key"
	kvErr error
}

func (c *kvCluster) ClusterInfo(ctx context.Context) (*pb.GetClusterInfoReply, error) {
	info, err := c.fakeCluster.ClusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	info.NowMs = c.now.UnixMilli()
	return info, nil
}

func (c *kvCluster) KVGet(_ context.Context, ns, key string) ([]byte, bool, error) {
	if c.kvErr != nil {
		return nil, false, c.kvErr
	}
	v, ok := c.kv[ns+"/"+key]
	return v, ok, nil
}

// TestStatusAutoscaler: `goray status` shows the status the autoscaler
// publishes in the KV store (text and --json), says when it is stale or
// unreadable, and goes on with the rest of the report.
func TestStatusAutoscaler(t *testing.T) {
	now := time.Date(2026, 11, 24, 14, 3, 11, 0, time.UTC)
	at := now.Add(-4 * time.Second)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	published := func(st autoscaler.Status) []byte { return must(json.Marshal(st)) }
	failures := make([]autoscaler.Failure, 7)
	for i := range failures {
		failures[i] = autoscaler.Failure{NodeType: "cpu", Message: fmt.Sprintf("launch failed: quota exceeded (#%d)", i), At: ago(time.Duration(70-i) * time.Second)}
	}
	tests := []struct {
		name  string
		value []byte // nil: no key
		kvErr error
		// want and notWant are substrings of the text; line checks
		// lines (fields) that must appear, in order.
		want, notWant []string
		lines         [][]string
		// status is what --json must hold under "autoscaler" (nil:
		// absent); stale and errText its other fields.
		status  *autoscaler.Status
		stale   bool
		errText string
	}{
		{
			name:   "active",
			value:  published(autoscaler.Status{Cluster: "demo", At: at, Active: map[string]int{"cpu": 2, "gpu": 1, "tpu": 0}}),
			status: &autoscaler.Status{Cluster: "demo", At: at, Active: map[string]int{"cpu": 2, "gpu": 1, "tpu": 0}},
			want: []string{"Autoscaler of cluster demo: status of " + formatTime(at.UnixMilli()) + " (4s ago)\n", "  Active workers: 2 cpu, 1 gpu\n",
				"  Pending: (none)\n", "  Terminating: (none)\n", "  Recent failures: (none)\n", "  Backing off: (none)\n", "  Demands: (none)\n"},
			notWant: []string{"STALE", "tpu", "Launched"},
		},
		{
			name: "pending",
			value: published(autoscaler.Status{Cluster: "demo", At: at, Active: map[string]int{},
				Pending: []autoscaler.PendingInstance{
					{ID: "local-3", NodeType: "cpu", State: "installing", Address: "127.0.1.3", Since: ago(12 * time.Second)},
					{NodeType: "cpu", State: "requested (ab12)", Since: ago(3 * time.Second)},
				},
				Terminating: []autoscaler.PendingInstance{{ID: "local-1", NodeType: "gpu", State: "terminating", Address: "127.0.1.1", Since: ago(time.Second)}},
				Launched:    map[string]int{"cpu": 1}}),
			want: []string{"  Active workers: (none)\n", "  Pending:\n", "  Terminating:\n", "  Launched by the last round: 1 cpu\n"},
			lines: [][]string{
				{"NODE", "TYPE", "INSTANCE", "ADDRESS", "STATE", "FOR"},
				{"cpu", "local-3", "127.0.1.3", "installing", "12s"},
				{"cpu", "-", "(no", "address", "yet)", "requested", "(ab12)", "3s"},
				{"NODE", "TYPE", "INSTANCE", "ADDRESS", "STATE", "FOR"},
				{"gpu", "local-1", "127.0.1.1", "terminating", "1s"},
			},
		},
		{
			name: "draining and kept",
			value: published(autoscaler.Status{Cluster: "demo", At: at, Active: map[string]int{"cpu": 2},
				Draining: []autoscaler.PendingInstance{{ID: "local-2", NodeType: "cpu", State: "draining", Address: "127.0.1.2", Since: ago(2 * time.Second), Detail: "spilled 1 of 3 primary copies"}},
				Kept:     []autoscaler.PendingInstance{{ID: "local-4", NodeType: "cpu", State: "running", Address: "127.0.1.4", Since: ago(time.Minute), Detail: "kept: no shared spill storage"}}}),
			want: []string{"  Active workers: 2 cpu\n", "  Draining (no new work; objects moving to spill storage):\n", "  Idle but kept (the node refused to drain):\n"},
			lines: [][]string{
				{"NODE", "TYPE", "INSTANCE", "ADDRESS", "STATE", "FOR", "DETAIL"},
				{"cpu", "local-2", "127.0.1.2", "draining", "2s", "spilled", "1", "of", "3", "primary", "copies"},
				{"cpu", "local-4", "127.0.1.4", "running", "1m0s", "kept:", "no", "shared", "spill", "storage"},
			},
		},
		{
			name: "last round failed",
			value: published(autoscaler.Status{Cluster: "demo", At: at, Interval: time.Second, Active: map[string]int{},
				LastError: "autoscaler: listing the instances of cluster \"demo\": plugin provider \"local\" is restarting", LastErrorAt: ago(time.Second)}),
			want: []string{"  LAST ROUND FAILED (1s ago): autoscaler: listing the instances of cluster \"demo\": plugin provider \"local\" is restarting\n"},
		},
		{
			name: "failures and backoff",
			value: published(autoscaler.Status{Cluster: "demo", At: at, Failures: failures,
				BackingOff: map[string]time.Time{"cpu": now.Add(2 * time.Minute), "gpu": ago(time.Second)}}),
			want: []string{"  Recent failures (newest first):\n", "    (2 earlier failures not shown; goray status --json lists them)\n",
				"until " + formatTime(now.Add(2*time.Minute).UnixMilli()) + "  (in 2m0s)"},
			notWant: []string{"(#1)", "(#0)"},
			lines: [][]string{
				{"cpu", "1m4s", "ago", "launch", "failed:", "quota", "exceeded", "(#6)"},
				{"cpu", "1m5s", "ago", "launch", "failed:", "quota", "exceeded", "(#5)"},
				{"cpu", "1m8s", "ago", "launch", "failed:", "quota", "exceeded", "(#2)"},
				append(append([]string{"cpu", "until"}, strings.Fields(formatTime(now.Add(2*time.Minute).UnixMilli()))...), "(in", "2m0s)"),
				append(append([]string{"gpu", "until"}, strings.Fields(formatTime(ago(time.Second).UnixMilli()))...), "(over)"),
			},
		},
		{
			name: "infeasible",
			value: published(autoscaler.Status{Cluster: "demo", At: at, Demands: []autoscaler.Demand{
				{Resources: map[string]float64{"CPU": 1}, Count: 12},
				{Resources: map[string]float64{"CPU": 1, "memory": 2 * gib}, Count: 1},
				{Resources: map[string]float64{"CPU": 64}, Count: 1, Infeasible: true},
			}}),
			want: []string{"  Demands (queued work, pending placement groups, ray.RequestResources):\n", "    {CPU: 1} x 12\n",
				"    {CPU: 1, memory: 2.0 GiB} x 1\n", "    {CPU: 64} x 1 (infeasible: no node type can hold it)\n"},
		},
		{
			name: "groups",
			value: published(autoscaler.Status{Cluster: "demo", At: at, Demands: []autoscaler.Demand{
				{Bundles: []map[string]float64{{"CPU": 2}, {"CPU": 2}}, Strategy: "STRICT_SPREAD", Count: 1},
				{Bundles: []map[string]float64{{"GPU": 8}}, Strategy: "PACK", Count: 1, Infeasible: true},
			}}),
			want: []string{"    placement group STRICT_SPREAD: {CPU: 2} {CPU: 2}\n", "    placement group PACK: {GPU: 8} (infeasible: no node type can hold it)\n"},
		},
		{
			name:    "fresh at the limit",
			value:   published(autoscaler.Status{At: ago(autoscalerStaleAfter)}),
			want:    []string{"Autoscaler: status of " + formatTime(ago(autoscalerStaleAfter).UnixMilli()) + " (15s ago)\n"},
			notWant: []string{"STALE"},
		},
		{
			name:  "stale",
			value: published(autoscaler.Status{Cluster: "demo", At: ago(3 * time.Minute)}),
			stale: true,
			want:  []string{" (3m0s ago; STALE: it publishes every 5s, is it running?)\n"},
		},
		{
			name:    "no autoscaler",
			want:    []string{"\nAutoscaler: not running (no status published; a cluster started with `goray start` has none, `goray up` starts one)\n"},
			notWant: []string{"Active workers"},
		},
		{
			name:    "malformed",
			value:   []byte(`{"cluster": "demo", "at": `),
			errText: `the autoscaler's status in key "status" of the GCS's KV namespace "autoscaler" is unreadable: unexpected end of JSON input`,
			want:    []string{"Autoscaler: STATUS UNREADABLE: the autoscaler's status in key \"status\" of the GCS's KV namespace \"autoscaler\" is unreadable"},
			notWant: []string{"Active workers"},
		},
		{
			name:    "wrong shape",
			value:   []byte(`[1, 2]`),
			errText: "is unreadable: json: cannot unmarshal array",
			want:    []string{"Autoscaler: STATUS UNREADABLE"},
		},
		{
			name:    "no time",
			value:   []byte(`{"cluster": "demo"}`),
			errText: `is unreadable: it has no time ("at")`,
			want:    []string{"Autoscaler: STATUS UNREADABLE"},
		},
		{
			name:    "KV read fails",
			kvErr:   errors.New("querying the KV: deadline exceeded"),
			errText: "cannot read the autoscaler's status: querying the KV: deadline exceeded",
			want:    []string{"Autoscaler: STATUS UNREADABLE: cannot read the autoscaler's status: querying the KV: deadline exceeded\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &kvCluster{fakeCluster: newFakeCluster(), now: now, kv: map[string][]byte{}, kvErr: tt.kvErr}
			if tt.value != nil {
				c.kv[autoscaler.StatusNamespace+"/"+autoscaler.StatusKey] = tt.value
			}
			r, err := gatherStatus(context.Background(), c, "h:1")
			if err != nil {
				t.Fatalf("gatherStatus: %v (an autoscaler status must never fail status)", err)
			}

			var b bytes.Buffer
			if err := writeStatus(&b, r); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if !strings.Contains(out, "Placement groups: ") || !strings.Contains(out, "goray cluster at h:1") {
				t.Errorf("the rest of the report is missing:\n%s", out)
			}
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Errorf("text lacks %q:\n%s", want, out)
				}
			}
			for _, not := range tt.notWant {
				if strings.Contains(out, not) {
					t.Errorf("text has %q:\n%s", not, out)
				}
			}
			section := out[strings.Index(out, "\nAutoscaler"):]
			next := 0
			for _, l := range strings.Split(section, "\n") {
				if next < len(tt.lines) && hasFields(strings.Fields(l), tt.lines[next]) {
					next++
				}
			}
			if next < len(tt.lines) {
				t.Errorf("no line with fields %q (after the ones before it) in:\n%s", tt.lines[next], section)
			}

			b.Reset()
			if err := writeJSON(&b, r); err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Autoscaler      json.RawMessage `json:"autoscaler"`
				AutoscalerStale bool            `json:"autoscaler_stale"`
				AutoscalerError string          `json:"autoscaler_error"`
				AliveNodes      int             `json:"alive_nodes"`
			}
			if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			if doc.AliveNodes != 3 {
				t.Errorf("JSON alive_nodes %d, want 3 (the rest of the report)", doc.AliveNodes)
			}
			want := tt.status
			if want == nil && tt.errText == "" && tt.value != nil {
				want = new(autoscaler.Status)
				if err := json.Unmarshal(tt.value, want); err != nil {
					t.Fatal(err)
				}
			}
			switch {
			case want == nil && doc.Autoscaler != nil:
				t.Errorf("JSON has \"autoscaler\": %s; want it omitted", doc.Autoscaler)
			case want != nil:
				var got autoscaler.Status
				if err := json.Unmarshal(doc.Autoscaler, &got); err != nil {
					t.Fatalf("JSON \"autoscaler\" %s: %v", doc.Autoscaler, err)
				}
				if !reflect.DeepEqual(&got, want) {
					t.Errorf("JSON \"autoscaler\" is %+v, want %+v as published", got, *want)
				}
			}
			if doc.AutoscalerStale != tt.stale {
				t.Errorf("JSON autoscaler_stale %v, want %v", doc.AutoscalerStale, tt.stale)
			}
			if !strings.Contains(doc.AutoscalerError, tt.errText) || (tt.errText == "") != (doc.AutoscalerError == "") {
				t.Errorf("JSON autoscaler_error %q, want one containing %q", doc.AutoscalerError, tt.errText)
			}
			if tt.value == nil && tt.kvErr == nil && strings.Contains(b.String(), "autoscaler") {
				t.Errorf("JSON without an autoscaler mentions one:\n%s", b.String())
			}
		})
	}
}

// hasFields reports whether fields starts with want.
func hasFields(fields, want []string) bool {
	return len(fields) >= len(want) && slices.Equal(fields[:len(want)], want)
}

// TestStatusAutoscalerAgedByGCSClock: ages count from the GCS's clock
// (the head's, as the autoscaler's), not from this machine's.
func TestStatusAutoscalerAgedByGCSClock(t *testing.T) {
	gcsNow := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC) // far from this machine's clock
	c := &kvCluster{fakeCluster: newFakeCluster(), now: gcsNow, kv: map[string][]byte{
		autoscaler.StatusNamespace + "/" + autoscaler.StatusKey: must(json.Marshal(autoscaler.Status{At: gcsNow.Add(-7 * time.Second)})),
	}}
	r, err := gatherStatus(context.Background(), c, "h:1")
	if err != nil {
		t.Fatal(err)
	}
	if r.AutoscalerStale {
		t.Errorf("a status 7s old by the GCS's clock is marked stale")
	}
	var b bytes.Buffer
	if err := writeAutoscaler(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "(7s ago)") {
		t.Errorf("want the status 7s old by the GCS's clock:\n%s", b.String())
	}
}

// TestStatusResourceRequest: a ray.RequestResources request stored in a
// cluster without an autoscaler shows in `goray status` (text and --json),
// saying nothing acts on it; with an autoscaler the request is among its
// demands instead; an unreadable one is reported, the rest stands.
func TestStatusResourceRequest(t *testing.T) {
	now := time.Date(2026, 12, 7, 14, 3, 11, 0, time.UTC)
	req := []byte(`[{"resources":{"CPU":1},"count":16},{"resources":{"CPU":8,"GPU":4},"count":2}]`)
	for _, tc := range []struct {
		name          string
		status        []byte // the autoscaler's, nil: none
		request       []byte // nil: none stored
		want, notWant []string
		jsonCount     int
		jsonErr       string
	}{
		{
			name:      "no autoscaler",
			request:   req,
			want:      []string{"Resource request (ray.RequestResources), stored; no autoscaler acts on it:\n", "  {CPU: 1} x 16\n", "  {CPU: 8, GPU: 4} x 2\n"},
			jsonCount: 2,
		},
		{
			name:    "none stored",
			notWant: []string{"Resource request"},
		},
		{
			name:    "with an autoscaler",
			status:  must(json.Marshal(autoscaler.Status{Cluster: "demo", At: now.Add(-time.Second)})),
			request: req,
			notWant: []string{"no autoscaler acts on it"}, jsonCount: 2,
		},
		{
			name:    "unreadable",
			request: []byte(`{"cpu": `),
			want:    []string{`Resource request: UNREADABLE: the resource request in key "resource_requests" of the GCS's KV namespace "autoscaler" is unreadable`},
			jsonErr: "is unreadable",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &kvCluster{fakeCluster: newFakeCluster(), now: now, kv: map[string][]byte{}}
			if tc.status != nil {
				c.kv[autoscaler.StatusNamespace+"/"+autoscaler.StatusKey] = tc.status
			}
			if tc.request != nil {
				c.kv[autoscaler.StatusNamespace+"/"+autoscaler.RequestsKey] = tc.request
			}
			r, err := gatherStatus(context.Background(), c, "h:1")
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := writeStatus(&b, r); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("text lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(b.String(), w) {
					t.Errorf("text has %q:\n%s", w, b.String())
				}
			}
			b.Reset()
			if err := writeJSON(&b, r); err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Request []autoscaler.Request `json:"resource_request"`
				Err     string               `json:"resource_request_error"`
			}
			if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			if len(doc.Request) != tc.jsonCount || !strings.Contains(doc.Err, tc.jsonErr) || (tc.jsonErr == "") != (doc.Err == "") {
				t.Errorf("JSON resource_request %+v, error %q; want %d shapes, error with %q", doc.Request, doc.Err, tc.jsonCount, tc.jsonErr)
			}
		})
	}
}
