package raylet

import (
	"strings"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// policyRaylet is a raylet with 4 CPUs (avail free) and the given peers,
// for the policy alone.
func policyRaylet(avail float64, peers ...*peerNode) *Raylet {
	r := &Raylet{cfg: Config{NodeID: ids.New(), Resources: cpus(4)}, available: cpus(avail), peers: map[ids.ID]*peerNode{}}
	for _, p := range peers {
		r.peers[p.id] = p
	}
	return r
}

func peer(total, avail float64, alive bool) *peerNode {
	return &peerNode{id: ids.New(), info: &gorayv1.NodeInfo{RayletTcp: "127.0.0.9:1", DeathReason: "killed"},
		total: cpus(total), available: cpus(avail), alive: alive}
}

func TestHybridPolicy(t *testing.T) {
	idle := peer(4, 4, true)
	busy := peer(4, 0, true)
	dead := peer(8, 8, false)
	big := peer(16, 16, true)
	tests := []struct {
		name    string
		r       *Raylet
		res     float64
		spilled int32
		want    *peerNode // nil: stay local
	}{
		{"local under threshold", policyRaylet(4, idle), 1, 0, nil},
		{"local at 50% spreads to the idle node", policyRaylet(2, idle), 1, 0, idle},
		{"busy everywhere but feasible: wait here", policyRaylet(0, busy), 1, 0, nil},
		{"dead nodes are never picked", policyRaylet(0, dead), 1, 0, nil},
		{"infeasible here: the node that fits", policyRaylet(4, idle, big), 8, 0, big},
		{"infeasible everywhere: wait here (pending demand)", policyRaylet(4, idle), 64, 0, nil},
		{"spilled requests stay where feasible", policyRaylet(0, idle), 1, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.r.scheduleLocked(cpus(tt.res), nil, tt.spilled)
			if d.unschedulable != "" || d.spill != tt.want {
				t.Fatalf("decision = %+v, want spill to %v", d, tt.want)
			}
		})
	}
}

func TestHybridTopK(t *testing.T) {
	// 10 nodes: k = 2, so only the two least loaded are ever chosen.
	var peers []*peerNode
	for i := range 9 {
		peers = append(peers, peer(4, float64(i%4), true))
	}
	least1, least2 := peer(4, 4, true), peer(4, 4, true)
	peers = append(peers, least1, least2)
	r := policyRaylet(0, peers...)
	seen := map[*peerNode]int{}
	for range 200 {
		d := r.scheduleLocked(cpus(1), nil, 0)
		seen[d.spill]++
	}
	if len(seen) != 2 || seen[least1] == 0 || seen[least2] == 0 {
		t.Fatalf("hybrid picked %d distinct nodes (%v); want both least loaded, at random", len(seen), seen)
	}
}

func TestSpreadPolicy(t *testing.T) {
	a, b := peer(4, 4, true), peer(4, 4, true)
	r := policyRaylet(4, a, b, peer(4, 4, false))
	st := &gorayv1.SchedulingStrategy{Kind: gorayv1.SchedulingStrategy_SPREAD}
	seen := map[*peerNode]int{}
	for range 9 {
		seen[r.scheduleLocked(cpus(1), st, 0).spill]++
	}
	if len(seen) != 3 || seen[nil] != 3 || seen[a] != 3 || seen[b] != 3 {
		t.Fatalf("spread over local, a and b: %v", seen)
	}
}

func TestNodeAffinityPolicy(t *testing.T) {
	alive, dead, small := peer(4, 0, true), peer(4, 4, false), peer(1, 1, true)
	r := policyRaylet(4, alive, dead, small)
	aff := func(n ids.ID, soft bool) *gorayv1.SchedulingStrategy {
		return &gorayv1.SchedulingStrategy{Kind: gorayv1.SchedulingStrategy_NODE_AFFINITY, NodeId: n.Bytes(), Soft: soft}
	}
	tests := []struct {
		name      string
		st        *gorayv1.SchedulingStrategy
		res       float64
		want      *peerNode
		wantError string
	}{
		{"hard to a busy node goes there", aff(alive.id, false), 1, alive, ""},
		{"hard to this node", aff(r.cfg.NodeID, false), 1, nil, ""},
		{"hard to a dead node fails", aff(dead.id, false), 1, nil, "is dead (killed)"},
		{"hard to an unknown node fails", aff(ids.New(), false), 1, nil, "no node"},
		{"hard to a node too small fails", aff(small.id, false), 2, nil, "can never fit"},
		{"soft to a dead node runs elsewhere", aff(dead.id, true), 1, nil, ""},
		{"soft to a node too small runs elsewhere", aff(small.id, true), 2, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := r.scheduleLocked(cpus(tt.res), tt.st, 0)
			if tt.wantError != "" {
				if !strings.Contains(d.unschedulable, tt.wantError) {
					t.Fatalf("unschedulable = %q, want it to say %q", d.unschedulable, tt.wantError)
				}
				return
			}
			if d.unschedulable != "" || d.spill != tt.want {
				t.Fatalf("decision = %+v, want spill to %v", d, tt.want)
			}
		})
	}
}
