package policy

import (
	"strings"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

func cpus(n float64) resources.Set {
	v, _ := resources.FromFloat(resources.CPU, n)
	return resources.Set{resources.CPU: v}
}

// policyCluster is a node with 4 CPUs (avail free) and the given peers,
// for the policy alone.
func policyCluster(avail float64, peers ...*Node) *Cluster {
	c := &Cluster{Self: ids.New(), Total: cpus(4), Available: cpus(avail), ByID: map[ids.ID]*Node{}}
	for _, p := range peers {
		c.ByID[p.ID] = p
		c.Peers = append(c.Peers, p)
	}
	SortByID(c.Peers)
	return c
}

func peer(total, avail float64, alive bool) *Node {
	return &Node{ID: ids.New(), Info: &gorayv1.NodeInfo{RayletTcp: "127.0.0.9:1", DeathReason: "killed"},
		Total: cpus(total), Available: cpus(avail), Alive: alive}
}

func TestHybridPolicy(t *testing.T) {
	idle := peer(4, 4, true)
	busy := peer(4, 0, true)
	dead := peer(8, 8, false)
	big := peer(16, 16, true)
	tests := []struct {
		name    string
		c       *Cluster
		res     float64
		spilled int32
		want    *Node // nil: stay local
	}{
		{"local under threshold", policyCluster(4, idle), 1, 0, nil},
		{"local at 50% spreads to the idle node", policyCluster(2, idle), 1, 0, idle},
		{"busy everywhere but feasible: wait here", policyCluster(0, busy), 1, 0, nil},
		{"dead nodes are never picked", policyCluster(0, dead), 1, 0, nil},
		{"infeasible here: the node that fits", policyCluster(4, idle, big), 8, 0, big},
		{"infeasible everywhere: wait here (pending demand)", policyCluster(4, idle), 64, 0, nil},
		{"spilled requests stay where feasible", policyCluster(0, idle), 1, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var next int
			d := Decide(tt.c, cpus(tt.res), nil, tt.spilled, &next)
			if d.Unschedulable != "" || d.Spill != tt.want {
				t.Fatalf("decision = %+v, want spill to %v", d, tt.want)
			}
		})
	}
}

func TestHybridTopK(t *testing.T) {
	// 10 nodes: k = 2, so only the two least loaded are ever chosen.
	var peers []*Node
	for i := range 9 {
		peers = append(peers, peer(4, float64(i%4), true))
	}
	least1, least2 := peer(4, 4, true), peer(4, 4, true)
	peers = append(peers, least1, least2)
	c := policyCluster(0, peers...)
	seen := map[*Node]int{}
	var next int
	for range 200 {
		d := Decide(c, cpus(1), nil, 0, &next)
		seen[d.Spill]++
	}
	if len(seen) != 2 || seen[least1] == 0 || seen[least2] == 0 {
		t.Fatalf("hybrid picked %d distinct nodes (%v); want both least loaded, at random", len(seen), seen)
	}
}

func TestSpreadPolicy(t *testing.T) {
	a, b := peer(4, 4, true), peer(4, 4, true)
	c := policyCluster(4, a, b, peer(4, 4, false))
	st := &gorayv1.SchedulingStrategy{Kind: gorayv1.SchedulingStrategy_SPREAD}
	seen := map[*Node]int{}
	var next int
	for range 9 {
		seen[Decide(c, cpus(1), st, 0, &next).Spill]++
	}
	if len(seen) != 3 || seen[nil] != 3 || seen[a] != 3 || seen[b] != 3 {
		t.Fatalf("spread over local, a and b: %v", seen)
	}
}

func TestNodeAffinityPolicy(t *testing.T) {
	alive, dead, small := peer(4, 0, true), peer(4, 4, false), peer(1, 1, true)
	c := policyCluster(4, alive, dead, small)
	aff := func(n ids.ID, soft bool) *gorayv1.SchedulingStrategy {
		return &gorayv1.SchedulingStrategy{Kind: gorayv1.SchedulingStrategy_NODE_AFFINITY, NodeId: n.Bytes(), Soft: soft}
	}
	tests := []struct {
		name      string
		st        *gorayv1.SchedulingStrategy
		res       float64
		want      *Node
		wantError string
	}{
		{"hard to a busy node goes there", aff(alive.ID, false), 1, alive, ""},
		{"hard to this node", aff(c.Self, false), 1, nil, ""},
		{"hard to a dead node fails", aff(dead.ID, false), 1, nil, "is dead (killed)"},
		{"hard to an unknown node fails", aff(ids.New(), false), 1, nil, "no node"},
		{"hard to a node too small fails", aff(small.ID, false), 2, nil, "can never fit"},
		{"soft to a dead node runs elsewhere", aff(dead.ID, true), 1, nil, ""},
		{"soft to a node too small runs elsewhere", aff(small.ID, true), 2, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var next int
			d := Decide(c, cpus(tt.res), tt.st, 0, &next)
			if tt.wantError != "" {
				if !strings.Contains(d.Unschedulable, tt.wantError) {
					t.Fatalf("unschedulable = %q, want it to say %q", d.Unschedulable, tt.wantError)
				}
				return
			}
			if d.Unschedulable != "" || d.Spill != tt.want {
				t.Fatalf("decision = %+v, want spill to %v", d, tt.want)
			}
		})
	}
}

// TestDrainingPolicy: no policy sends work to a draining node but a hard
// affinity to it; a draining node sends its requests to a node that fits,
// keeping only those no other node can take (or pinned to it).
func TestDrainingPolicy(t *testing.T) {
	draining := func(total, avail float64) *Node {
		p := peer(total, avail, true)
		p.Draining = true
		return p
	}
	aff := func(n ids.ID, soft bool) *gorayv1.SchedulingStrategy {
		return &gorayv1.SchedulingStrategy{Kind: gorayv1.SchedulingStrategy_NODE_AFFINITY, NodeId: n.Bytes(), Soft: soft}
	}
	spreadSt := &gorayv1.SchedulingStrategy{Kind: gorayv1.SchedulingStrategy_SPREAD}
	idle, busy := peer(4, 4, true), peer(4, 0, true)
	drainingIdle, drainingBig := draining(4, 4), draining(16, 16)
	selfDraining := func(avail float64, peers ...*Node) *Cluster {
		c := policyCluster(avail, peers...)
		c.Draining = true
		return c
	}
	affSelf := policyCluster(4, idle)
	affSelf.Draining = true
	tests := []struct {
		name    string
		c       *Cluster
		st      *gorayv1.SchedulingStrategy
		res     float64
		spilled int32
		want    *Node // nil: stay here
	}{
		{"a draining peer with room is not picked", policyCluster(0, drainingIdle), nil, 1, 0, nil},
		{"the peer that does not drain is picked", policyCluster(0, drainingIdle, idle), nil, 1, 0, idle},
		{"infeasible here, only a draining peer fits: wait here", policyCluster(4, drainingBig), nil, 8, 0, nil},
		{"a draining node sends work to a peer with room", selfDraining(4, idle), nil, 1, 0, idle},
		{"a draining node sends work to a busy peer that fits", selfDraining(4, busy), nil, 1, 0, busy},
		{"a draining node sends on a request already spilled", selfDraining(4, idle), nil, 1, 1, idle},
		{"a draining node keeps what nothing else fits", selfDraining(4, drainingIdle), nil, 1, 0, nil},
		{"spread skips a draining peer", policyCluster(0, drainingIdle, idle), spreadSt, 1, 0, idle},
		{"spread on a draining node skips it", selfDraining(4, idle), spreadSt, 1, 1, idle},
		{"hard affinity to a draining peer goes there", policyCluster(4, drainingIdle), aff(drainingIdle.ID, false), 1, 0, drainingIdle},
		{"soft affinity to a draining peer stays here", policyCluster(4, drainingIdle), aff(drainingIdle.ID, true), 1, 0, nil},
		{"hard affinity to this draining node stays", affSelf, aff(affSelf.Self, false), 1, 0, nil},
		{"soft affinity to this draining node goes elsewhere", affSelf, aff(affSelf.Self, true), 1, 0, idle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var next int
			d := Decide(tt.c, cpus(tt.res), tt.st, tt.spilled, &next)
			if d.Unschedulable != "" || d.Spill != tt.want {
				t.Fatalf("decision = %+v, want spill to %v", d, tt.want)
			}
		})
	}
	if got := LeastLoadedFree([]*Node{drainingIdle, busy}, cpus(1)); got != nil {
		t.Fatalf("LeastLoadedFree picked %v, want none: the only node with room drains", got)
	}
	if got := LeastLoadedFree([]*Node{drainingIdle, idle}, cpus(1)); got != idle {
		t.Fatalf("LeastLoadedFree picked %v, want the node that does not drain", got)
	}
}
