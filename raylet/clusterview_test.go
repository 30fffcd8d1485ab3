package raylet

import (
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// TestClusterViewRefresh: a refresh publishes the GCS's nodes (not this
// one) as a new snapshot, reports the nodes that turned dead once, and
// leaves earlier snapshots as they were.
func TestClusterViewRefresh(t *testing.T) {
	self, a, b := ids.New(), ids.New(), ids.New()
	gcs := &fakeGCS{nodes: []*gorayv1.NodeInfo{
		{NodeId: self.Bytes(), State: "ALIVE"},
		{NodeId: a.Bytes(), State: "ALIVE", Total: resourcesProto(cpus(4))},
		{NodeId: b.Bytes(), State: "ALIVE"},
	}}
	cv := newClusterView(self, gcs, nil, hclog.NewNullLogger())
	defer cv.close()
	steps := []struct {
		name      string
		change    func()
		wantDied  []ids.ID
		wantAlive map[ids.ID]bool
	}{
		{"first view", func() {}, nil, map[ids.ID]bool{a: true, b: true}},
		{"b dies", func() { gcs.nodes[2] = &gorayv1.NodeInfo{NodeId: b.Bytes(), State: "DEAD", DeathReason: "gone"} }, []ids.ID{b}, map[ids.ID]bool{a: true, b: false}},
		{"still dead: not reported again", func() {}, nil, map[ids.ID]bool{a: true, b: false}},
	}
	var prev *clusterSnapshot
	for _, st := range steps {
		gcs.locked(st.change)
		died, ok := cv.refresh(context.Background())
		if !ok {
			t.Fatalf("%s: refresh failed", st.name)
		}
		var got []ids.ID
		for _, p := range died {
			got = append(got, p.ID)
		}
		if len(got) != len(st.wantDied) || (len(got) == 1 && got[0] != st.wantDied[0]) {
			t.Fatalf("%s: died %v, want %v", st.name, got, st.wantDied)
		}
		snap := cv.snapshot()
		if len(snap.list) != len(st.wantAlive) || snap.byID[self] != nil {
			t.Fatalf("%s: %d peers (self listed: %v), want %d", st.name, len(snap.list), snap.byID[self] != nil, len(st.wantAlive))
		}
		for id, alive := range st.wantAlive {
			if p := cv.peer(id); p == nil || p.Alive != alive {
				t.Fatalf("%s: node %s: %+v, want alive=%v", st.name, id.Short(), p, alive)
			}
		}
		if prev != nil && prev == snap {
			t.Fatalf("%s: the snapshot was changed in place", st.name)
		}
		prev = snap
	}
	if _, err := cv.client(cv.peer(b)); err == nil {
		t.Fatal("a client for a dead node")
	}
}
