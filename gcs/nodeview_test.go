package gcs

import (
	"testing"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"google.golang.org/protobuf/proto"
)

// TestUnversionedViewsShareNothingMutable: a refresh without a version (a
// joining raylet's first, `goray status`) gets every node's current view
// without cloning it (currentViewLocked): the same figures as the cloned
// snapshot of Nodes, and a reply taken before later heartbeats, a
// placement group's hold and a node's death still says what it said.
func TestUnversionedViewsShareNothingMutable(t *testing.T) {
	s, c := startServer(t, Options{})
	ctx := ctxT(t)
	a, b := newID(), newID()
	registerNode(t, c, a, "a")
	registerNode(t, c, b, "b")
	heartbeat := func(id ids.ID, cpu int64, pendingCount int32) {
		t.Helper()
		_, err := c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{
			NodeId:        id.Bytes(),
			Available:     &gorayv1.Resources{Amounts: map[string]int64{"CPU": cpu}},
			StoreUsed:     int64(cpu),
			StoreCapacity: 1 << 20,
			Spill:         &gorayv1.SpillStats{SpilledBytes: cpu},
			Memory:        &gorayv1.MemoryMonitorStats{UsedBytes: cpu},
			Pending:       []*gorayv1.PendingDemand{{Resources: &gorayv1.Resources{Amounts: map[string]int64{"CPU": 10000}}, Count: pendingCount}},
		})
		mustOK(t, err)
	}
	heartbeat(a, 30000, 2)
	heartbeat(b, 5000, 7)
	s.mu.Lock()
	s.nodes[b].holding = resources.Set{"CPU": 20000} // a group being reserved holds some of b
	s.nodeChangedLocked(b, s.nodes[b])
	s.mu.Unlock()

	rep := s.NodesSince("", 0)
	want := s.Nodes()
	if len(rep.GetNodes()) != len(want) {
		t.Fatalf("%d views, want %d", len(rep.GetNodes()), len(want))
	}
	for i := range want {
		if !proto.Equal(rep.GetNodes()[i], want[i]) {
			t.Fatalf("view %d = %v, want %v", i, rep.GetNodes()[i], want[i])
		}
	}
	if got := rep.GetNodes()[1].GetAvailable().GetAmounts()["CPU"]; got != 25000 {
		t.Fatalf("b's available CPU = %d, want 25000 (5000 free + 20000 held)", got)
	}

	before := proto.Clone(rep).(*gorayv1.GetAllNodesReply)
	heartbeat(a, 1000, 9)
	heartbeat(b, 40000, 0)
	_, err := c.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: a.Bytes()})
	mustOK(t, err)
	if !proto.Equal(rep, before) {
		t.Fatalf("a reply changed after it was made:\n got %v\nwant %v", rep, before)
	}
	if st := nodeView(t, c, a).GetInfo().GetState(); st != StateDead {
		t.Fatalf("a is %s after its unregistration, want DEAD", st)
	}
}
