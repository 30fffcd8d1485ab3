package gcs

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

func TestNodeChangesLog(t *testing.T) {
	a, b, c := newID(), newID(), newID()
	// A log of 3 holding changes 1..5 (a, b, a, c, b): 1 and 2 dropped.
	log := newNodeChanges(3)
	for _, id := range []ids.ID{a, b, a, c, b} {
		log.add(id)
	}
	tests := []struct {
		name    string
		epoch   string
		since   uint64
		want    []ids.ID
		wantOK  bool
		comment string
	}{
		{name: "up to date", epoch: log.epoch, since: 5, want: nil, wantOK: true},
		{name: "one behind", epoch: log.epoch, since: 4, want: []ids.ID{b}, wantOK: true},
		{name: "each node once, oldest change first", epoch: log.epoch, since: 2, want: []ids.ID{a, c, b}, wantOK: true},
		{name: "older than the log", epoch: log.epoch, since: 1, wantOK: false},
		{name: "from the start", epoch: log.epoch, since: 0, wantOK: false},
		{name: "another epoch", epoch: "other", since: 5, wantOK: false},
		{name: "a version never given", epoch: log.epoch, since: 6, wantOK: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := log.since(tc.epoch, tc.since)
			if ok != tc.wantOK || !slices.Equal(got, tc.want) {
				t.Fatalf("since(%d) = %v, %v; want %v, %v", tc.since, got, ok, tc.want, tc.wantOK)
			}
		})
	}
	if len(log.log) != 3 {
		t.Fatalf("the log holds %d changes, want at most 3", len(log.log))
	}
}

func TestLoadMoved(t *testing.T) {
	res := func(kv ...int64) *gorayv1.Resources {
		r := &gorayv1.Resources{Amounts: map[string]int64{}}
		names := []string{"CPU", "GPU"}
		for i, v := range kv {
			if v >= 0 {
				r.Amounts[names[i]] = v
			}
		}
		return r
	}
	total := res(640000, 10000) // 64 CPUs, 1 GPU
	tests := []struct {
		name     string
		pub, cur *gorayv1.Resources
		want     bool
	}{
		{"unchanged", res(320000, 10000), res(320000, 10000), false},
		{"a CPU of 64", res(320000, 10000), res(310000, 10000), false},
		{"a tenth of the CPUs", res(320000, 10000), res(256000, 10000), true},
		{"CPUs ran out", res(10000, 10000), res(0, 10000), true},
		{"CPUs came back", res(0, 10000), res(10000, 10000), true},
		{"the GPU taken", res(320000, 10000), res(320000, 0), true},
		{"a resource vanished", res(320000, 10000), res(320000, -1), true},
		{"a resource appeared", res(320000, -1), res(320000, 10000), true},
		{"never reported", nil, res(320000, 10000), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := loadMoved(tc.pub, tc.cur, total, loadThreshold); got != tc.want {
				t.Fatalf("loadMoved = %v, want %v", got, tc.want)
			}
		})
	}
}

// refreshNodes asks for the nodes since (epoch, v).
func refreshNodes(t *testing.T, c gorayv1.GcsClient, epoch string, v uint64) *gorayv1.GetAllNodesReply {
	t.Helper()
	r, err := c.GetAllNodes(ctxT(t), &gorayv1.GetAllNodesRequest{SinceEpoch: epoch, SinceVersion: v})
	mustOK(t, err)
	return r
}

func nodeIDs(vs []*gorayv1.NodeView) []ids.ID {
	var out []ids.ID
	for _, v := range vs {
		out = append(out, ids.MustFromBytes(v.GetInfo().GetNodeId()))
	}
	return out
}

func heartbeat(t *testing.T, c gorayv1.GcsClient, id ids.ID, cpu int64, draining bool) {
	t.Helper()
	_, err := c.ReportHeartbeat(ctxT(t), &gorayv1.HeartbeatRequest{
		NodeId: id.Bytes(), Available: &gorayv1.Resources{Amounts: map[string]int64{"CPU": cpu}}, Draining: draining,
	})
	mustOK(t, err)
}

func TestGetAllNodesDeltas(t *testing.T) {
	clock := newFakeClock()
	s, c := startServer(t, Options{HeartbeatPeriod: time.Second, Now: clock.Now})
	a, b, d := newID(), newID(), newID()
	registerNode(t, c, a, "a")
	registerNode(t, c, b, "b")
	registerNode(t, c, d, "d")

	full := refreshNodes(t, c, "", 0)
	if full.GetDelta() || len(full.GetNodes()) != 3 || full.GetEpoch() == "" || full.GetVersion() == 0 {
		t.Fatalf("a caller without a version: delta %v, %d nodes, epoch %q, version %d; want the whole table of 3 with an epoch and version",
			full.GetDelta(), len(full.GetNodes()), full.GetEpoch(), full.GetVersion())
	}
	epoch, v := full.GetEpoch(), full.GetVersion()

	steps := []struct {
		name   string
		change func()
		want   []ids.ID
	}{
		{"no change", func() {}, nil},
		{"heartbeats with the same load", func() { heartbeat(t, c, a, 40000, false); heartbeat(t, c, b, 40000, false) }, nil},
		{"load below the threshold", func() { heartbeat(t, c, a, 37000, false) }, nil},
		{"load past the threshold", func() { heartbeat(t, c, b, 20000, false) }, []ids.ID{b}},
		{"draining", func() { heartbeat(t, c, d, 40000, true) }, []ids.ID{d}},
		{"a death and a join", func() {
			_, err := c.UnregisterNode(ctxT(t), &gorayv1.UnregisterNodeRequest{NodeId: b.Bytes()})
			mustOK(t, err)
			registerNode(t, c, newID(), "e")
		}, []ids.ID{b, ids.Nil}},
		{"drift published after loadRepublish", func() {
			clock.Advance(loadRepublish)
			heartbeat(t, c, a, 37000, false) // (a sign of life: a is not declared dead)
			s.checkHealth()
		}, []ids.ID{a}},
	}
	for _, st := range steps {
		st.change()
		r := refreshNodes(t, c, epoch, v)
		got := nodeIDs(r.GetNodes())
		want := st.want
		if len(want) == 2 && want[1] == ids.Nil { // the new node's id is not known here
			want = []ids.ID{want[0], got[len(got)-1]}
		}
		if !r.GetDelta() || !slices.Equal(got, want) {
			t.Fatalf("%s: delta %v, nodes %v; want a delta of %v", st.name, r.GetDelta(), got, want)
		}
		if len(want) == 0 && r.GetVersion() != v {
			t.Fatalf("%s: version %d, want %d (nothing changed)", st.name, r.GetVersion(), v)
		}
		if len(want) > 0 && r.GetVersion() <= v {
			t.Fatalf("%s: version %d, want more than %d", st.name, r.GetVersion(), v)
		}
		v = r.GetVersion()
	}
	// What the deltas carry is the node's current view.
	r := refreshNodes(t, c, epoch, v-1)
	if got := r.GetNodes()[0].GetAvailable().GetAmounts()["CPU"]; got != 37000 {
		t.Fatalf("the republished node's available CPU = %d, want 37000", got)
	}
	// A version from another epoch, or one never given: the whole table.
	for _, bad := range []struct {
		epoch string
		v     uint64
	}{{"another", v}, {epoch, v + 100}} {
		if r := refreshNodes(t, c, bad.epoch, bad.v); r.GetDelta() || len(r.GetNodes()) != 4 {
			t.Fatalf("since %q/%d: delta %v with %d nodes, want the whole table of 4", bad.epoch, bad.v, r.GetDelta(), len(r.GetNodes()))
		}
	}
}

func TestGetAllNodesTooFarBehind(t *testing.T) {
	s, c := startServer(t, Options{})
	s.mu.Lock()
	s.changes = newNodeChanges(4)
	s.mu.Unlock()
	var nodes []ids.ID
	for range 3 {
		id := newID()
		nodes = append(nodes, id)
		registerNode(t, c, id, "n")
	}
	r := refreshNodes(t, c, "", 0)
	epoch, v := r.GetEpoch(), r.GetVersion()
	for i := range 5 { // more changes than the log keeps
		heartbeat(t, c, nodes[0], int64(i%2)*40000, false)
	}
	if r := refreshNodes(t, c, epoch, v); r.GetDelta() || len(r.GetNodes()) != 3 {
		t.Fatalf("5 changes behind a log of 4: delta %v with %d nodes, want the whole table of 3", r.GetDelta(), len(r.GetNodes()))
	}
	s.mu.Lock()
	n := len(s.changes.log)
	s.mu.Unlock()
	if n != 4 {
		t.Fatalf("the log holds %d changes, want 4", n)
	}
}

func TestGetAllNodesAfterRestart(t *testing.T) {
	leaktest.Goroutines(t)
	st := Storage{Backend: BackendBolt, Path: filepath.Join(t.TempDir(), "head", "gcs.db")}
	s1, err := Open(ctxT(t), Options{Storage: st})
	mustOK(t, err)
	c1, stop1 := serveOpened(t, s1)
	node := newID()
	registerNode(t, c1, node, "n0")
	before := refreshNodes(t, c1, "", 0)
	stop1()

	s2, err := Open(ctxT(t), Options{Storage: st})
	mustOK(t, err)
	c2, _ := serveOpened(t, s2)
	if r := refreshNodes(t, c2, "", 0); len(r.GetNodes()) != 0 {
		t.Fatalf("a restored node is in the view before it registered again: %v", r.GetNodes())
	}
	_, err = c2.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: nodeInfo(node, "n0"), ClusterId: s2.ClusterID()})
	mustOK(t, err)
	r := refreshNodes(t, c2, before.GetEpoch(), before.GetVersion())
	if r.GetDelta() || len(r.GetNodes()) != 1 || r.GetEpoch() == before.GetEpoch() {
		t.Fatalf("a caller of the GCS before its restart: delta %v with %d nodes, epoch %q (was %q); want the whole table in a new epoch",
			r.GetDelta(), len(r.GetNodes()), r.GetEpoch(), before.GetEpoch())
	}
}
