package gcs

import (
	"testing"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// TestGroupRemovalTellsOnlyItsNodes: a removal is sent to the node holding
// the group's bundle and to the node whose heartbeat shows a request
// queued for the group, not to the other nodes; a node that reports such
// a request after the removal is told by the sweep, and a node already
// told is not told again.
func TestGroupRemovalTellsOnlyItsNodes(t *testing.T) {
	pc, nodes := startPGCluster(t, 4, 4, 4, 4, 4)
	id := pc.create(t, "", pack, newID(), false, 2)
	g := pc.waitState(t, id, stCreated)
	holder := ids.MustFromBytes(g.GetBundles()[0].GetNodeId())
	var others []ids.ID
	for _, n := range nodes {
		if n != holder {
			others = append(others, n)
		}
	}
	queued, late := others[0], others[1]
	demand := func(node ids.ID) {
		t.Helper()
		_, err := pc.c.ReportHeartbeat(ctxT(t), &gorayv1.HeartbeatRequest{
			NodeId:    node.Bytes(),
			Available: &gorayv1.Resources{Amounts: map[string]int64{"CPU": 4 * resources.Unit}},
			Pending: []*gorayv1.PendingDemand{{
				Resources: &gorayv1.Resources{Amounts: resources.InGroup(resources.Set{"CPU": resources.Unit}, id.String(), -1)},
				Count:     1,
			}},
		})
		mustOK(t, err)
	}
	demand(queued)
	_, err := pc.c.RemovePlacementGroup(ctxT(t), &gorayv1.RemovePlacementGroupRequest{PlacementGroupId: id.Bytes()})
	mustOK(t, err)
	cancelsOn := func(n ids.ID) int {
		pc.f.mu.Lock()
		defer pc.f.mu.Unlock()
		return pc.f.cancelsOn[n]
	}
	// RemovePlacementGroup returns once the removal's cancels were made.
	for _, tt := range []struct {
		name string
		node ids.ID
		want int
	}{
		{"the node holding its bundle", holder, 1},
		{"a node with a request queued for it", queued, 1},
		{"a node with nothing of it", late, 0},
		{"another node with nothing of it", others[2], 0},
	} {
		if got := cancelsOn(tt.node); got != tt.want {
			t.Errorf("%s: %d cancels, want %d", tt.name, got, tt.want)
		}
	}
	// A request queued after the removal shows in the next heartbeat.
	demand(late)
	waitFor(t, "the sweep telling the node that queued a request late", func() bool { return cancelsOn(late) == 1 })
	if got := cancelsOn(queued); got != 1 {
		t.Errorf("the node told at removal, still showing its stale demand, was told %d times; want once", got)
	}
	if got := cancelsOn(others[2]); got != 0 {
		t.Errorf("a node with nothing of the group got %d cancels", got)
	}
}
