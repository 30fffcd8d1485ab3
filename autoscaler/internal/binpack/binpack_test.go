package binpack

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/goray-dev/goray/internal/resources"
)

// rs builds a resource set from float amounts.
func rs(t testing.TB, m map[string]float64) resources.Set {
	t.Helper()
	s, err := resources.FromFloats(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// cpu is {CPU: n}.
func cpu(t testing.TB, n float64) resources.Set { return rs(t, map[string]float64{"CPU": n}) }

// want is the expected result: launches, infeasible shapes, unplaced
// demands (shape key -> count) and group outcomes.
type want struct {
	launch           map[string]int
	infeasible       []resources.Set
	unplaced         map[string]int
	infeasibleGroups []int
	unplacedGroups   []int
}

func check(t *testing.T, got Result, w want) {
	t.Helper()
	if got.Launch == nil {
		t.Errorf("Launch is nil")
	}
	if len(got.Launch) != 0 || len(w.launch) != 0 {
		if !reflect.DeepEqual(got.Launch, w.launch) {
			t.Errorf("Launch = %v, want %v", got.Launch, w.launch)
		}
	}
	gotInf := make([]string, 0)
	for _, s := range got.Infeasible {
		gotInf = append(gotInf, s.Key())
	}
	wantInf := make([]string, 0)
	for _, s := range w.infeasible {
		wantInf = append(wantInf, s.Key())
	}
	if !slices.Equal(gotInf, wantInf) {
		t.Errorf("Infeasible = %v, want %v", gotInf, wantInf)
	}
	gotUn := map[string]int{}
	var keys []string
	for _, d := range got.Unplaced {
		gotUn[d.Shape.Key()] += d.Count
		keys = append(keys, d.Shape.Key())
	}
	if !slices.IsSorted(keys) {
		t.Errorf("Unplaced not sorted: %v", keys)
	}
	if len(gotUn) != 0 || len(w.unplaced) != 0 {
		if !reflect.DeepEqual(gotUn, w.unplaced) {
			t.Errorf("Unplaced = %v, want %v", gotUn, w.unplaced)
		}
	}
	if !slices.Equal(got.InfeasibleGroups, w.infeasibleGroups) {
		t.Errorf("InfeasibleGroups = %v, want %v", got.InfeasibleGroups, w.infeasibleGroups)
	}
	if !slices.Equal(got.UnplacedGroups, w.unplacedGroups) {
		t.Errorf("UnplacedGroups = %v, want %v", got.UnplacedGroups, w.unplacedGroups)
	}
}

func TestPlan(t *testing.T) {
	cpuType := func(max int) NodeType { return NodeType{Name: "cpu", Resources: cpu(t, 4), Max: max} }
	gpuType := NodeType{Name: "gpu", Resources: rs(t, map[string]float64{"CPU": 8, "GPU": 1}), Max: 10}
	gpuShape := rs(t, map[string]float64{"CPU": 1, "GPU": 1})
	node := func(id string, n float64) Node { return Node{ID: id, Type: "cpu", Available: cpu(t, n)} }
	d := func(s resources.Set, n int) Demand { return Demand{Shape: s, Count: n} }
	g := func(strategy string, bundles ...resources.Set) Group {
		return Group{Bundles: bundles, Strategy: strategy}
	}
	key := func(s resources.Set) string { return s.Key() }

	tests := []struct {
		name string
		in   Input
		want want
	}{
		{"empty input", Input{}, want{}},
		{"no demand launches nothing", Input{Types: []NodeType{cpuType(10)}, Nodes: []Node{node("a", 1)}, MaxLaunch: 10}, want{}},
		{"fits existing free capacity", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("a", 2), node("b", 2)},
			Demands: []Demand{d(cpu(t, 1), 4)}, MaxLaunch: 10,
		}, want{}},
		{"existing capacity first, the rest on one new node", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("a", 2)},
			Demands: []Demand{d(cpu(t, 1), 6)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 1}}},
		{"needs one new node", Input{
			Types: []NodeType{cpuType(10)}, Demands: []Demand{d(cpu(t, 1), 3)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 1}}},
		{"needs many new nodes", Input{
			Types: []NodeType{cpuType(10)}, Demands: []Demand{d(cpu(t, 1), 10)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 3}}},
		{"fractional shapes pack exactly", Input{
			Types: []NodeType{cpuType(10)}, Demands: []Demand{d(cpu(t, 0.1), 80)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 2}}},
		{"a GPU shape picks the GPU type", Input{
			Types: []NodeType{cpuType(10), gpuType}, Demands: []Demand{d(gpuShape, 2)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"gpu": 2}}},
		{"a CPU shape avoids the GPU type when a CPU type fits", Input{
			Types: []NodeType{
				{Name: "a-gpu", Resources: rs(t, map[string]float64{"CPU": 4, "GPU": 1}), Max: 10},
				{Name: "z-cpu", Resources: cpu(t, 4), Max: 10},
			},
			Demands: []Demand{d(cpu(t, 1), 4)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"z-cpu": 1}}},
		{"a CPU shape takes the GPU type when only it holds the shape", Input{
			Types: []NodeType{cpuType(10), gpuType}, Demands: []Demand{d(cpu(t, 6), 1)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"gpu": 1}}},
		// The gpu node takes the GPU shape and one 4 CPU shape too.
		{"mixed CPU and GPU shapes each get their type", Input{
			Types:   []NodeType{cpuType(10), gpuType},
			Demands: []Demand{d(gpuShape, 1), d(cpu(t, 4), 3)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"gpu": 1, "cpu": 2}}},
		{"the type the demand fills most", Input{
			Types: []NodeType{
				{Name: "big", Resources: cpu(t, 16), Max: 10},
				{Name: "small", Resources: cpu(t, 2), Max: 10},
			},
			Demands: []Demand{d(cpu(t, 2), 1)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"small": 1}}},
		{"an idle resource of the type lowers its score", Input{
			Types: []NodeType{
				{Name: "a-mem", Resources: rs(t, map[string]float64{"CPU": 4, "memory": 1 << 30}), Max: 10},
				{Name: "b-plain", Resources: cpu(t, 4), Max: 10},
			},
			Demands: []Demand{d(cpu(t, 4), 1)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"b-plain": 1}}},
		{"a type with every resource asked for wins", Input{
			Types: []NodeType{
				{Name: "a-cpu", Resources: cpu(t, 4), Max: 10},
				{Name: "b-mem", Resources: rs(t, map[string]float64{"CPU": 8, "memory": 8 << 30}), Max: 10},
			},
			Demands: []Demand{d(cpu(t, 4), 1), d(rs(t, map[string]float64{"CPU": 4, "memory": 8 << 30}), 1)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"b-mem": 1}}},
		{"equal types: the first name", Input{
			Types:   []NodeType{{Name: "b", Resources: cpu(t, 4), Max: 10}, {Name: "a", Resources: cpu(t, 4), Max: 10}},
			Demands: []Demand{d(cpu(t, 4), 1)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"a": 1}}},
		{"a duplicate type name: the first counts", Input{
			Types:   []NodeType{{Name: "a", Resources: cpu(t, 2), Max: 1}, {Name: "a", Resources: cpu(t, 4), Max: 10}},
			Demands: []Demand{d(cpu(t, 4), 1)}, MaxLaunch: 10,
		}, want{infeasible: []resources.Set{cpu(t, 4)}}},
		{"per-type cap", Input{
			Types: []NodeType{cpuType(2)}, Demands: []Demand{d(cpu(t, 4), 5)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 2}, unplaced: map[string]int{key(cpu(t, 4)): 3}}},
		{"a capped type spills to the next best", Input{
			Types: []NodeType{
				{Name: "small", Resources: cpu(t, 2), Max: 1},
				{Name: "big", Resources: cpu(t, 8), Max: 10},
			},
			Demands: []Demand{d(cpu(t, 2), 9)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"big": 2, "small": 1}}},
		{"global cap", Input{
			Types:   []NodeType{cpuType(10), {Name: "other", Resources: cpu(t, 4), Max: 10}},
			Demands: []Demand{d(cpu(t, 4), 5)}, MaxLaunch: 3,
		}, want{launch: map[string]int{"cpu": 3}, unplaced: map[string]int{key(cpu(t, 4)): 2}}},
		{"MaxLaunch 0 launches nothing", Input{
			Types: []NodeType{cpuType(10)}, Demands: []Demand{d(cpu(t, 1), 2)},
		}, want{unplaced: map[string]int{key(cpu(t, 1)): 2}}},
		{"a type at Max 0 that fits: unplaced, not infeasible", Input{
			Types: []NodeType{cpuType(0)}, Demands: []Demand{d(cpu(t, 1), 2)}, MaxLaunch: 10,
		}, want{unplaced: map[string]int{key(cpu(t, 1)): 2}}},
		{"infeasible shapes launch nothing", Input{
			Types: []NodeType{cpuType(10)},
			Demands: []Demand{
				d(cpu(t, 64), 3), d(rs(t, map[string]float64{"accel": 1}), 1), d(gpuShape, 1),
			}, MaxLaunch: 10,
		}, want{infeasible: []resources.Set{gpuShape, cpu(t, 64), rs(t, map[string]float64{"accel": 1})}}},
		{"infeasible and feasible together", Input{
			Types:   []NodeType{cpuType(10)},
			Demands: []Demand{d(cpu(t, 64), 3), d(cpu(t, 2), 2)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 1}, infeasible: []resources.Set{cpu(t, 64)}}},
		{"a shape no type holds but a node's free capacity does is placed", Input{
			Types:   []NodeType{cpuType(10)},
			Nodes:   []Node{{ID: "head", Type: "head", Available: rs(t, map[string]float64{"CPU": 1, "accel": 2})}},
			Demands: []Demand{d(rs(t, map[string]float64{"accel": 1}), 3)}, MaxLaunch: 10,
		}, want{infeasible: []resources.Set{rs(t, map[string]float64{"accel": 1})}}},
		{"pending nodes absorb demand", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("pending-1", 4), node("pending-2", 4)},
			Demands: []Demand{d(cpu(t, 1), 8)}, MaxLaunch: 10,
		}, want{}},
		{"pending nodes absorb part of the demand", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("pending-1", 4)},
			Demands: []Demand{d(cpu(t, 1), 9)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 2}}},
		{"largest shape first onto existing nodes", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("a", 3)},
			Demands: []Demand{d(cpu(t, 1), 1), d(cpu(t, 3), 1)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 1}}},
		{"identical demands are merged", Input{
			Types:   []NodeType{cpuType(0)},
			Demands: []Demand{d(cpu(t, 1), 2), d(cpu(t, 1), 3), d(rs(t, map[string]float64{"CPU": 1, "GPU": 0}), 1)}, MaxLaunch: 10,
		}, want{unplaced: map[string]int{key(cpu(t, 1)): 6}}},
		{"zero counts and empty shapes need nothing", Input{
			Types:   []NodeType{cpuType(10)},
			Demands: []Demand{d(cpu(t, 1), 0), d(cpu(t, 1), -3), d(resources.Set{}, 5), d(nil, 5)}, MaxLaunch: 10,
		}, want{}},
		{"negative Max launches none", Input{
			Types: []NodeType{cpuType(-1)}, Demands: []Demand{d(cpu(t, 1), 1)}, MaxLaunch: 10,
		}, want{unplaced: map[string]int{key(cpu(t, 1)): 1}}},

		// Placement groups.
		{"STRICT_PACK on an existing node with the sum free", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("a", 3), node("b", 4)},
			Groups: []Group{g(StrictPack, cpu(t, 2), cpu(t, 2))}, MaxLaunch: 10,
		}, want{}},
		{"STRICT_PACK launches one node when none has the sum free", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("a", 3), node("b", 3)},
			Groups: []Group{g(StrictPack, cpu(t, 2), cpu(t, 2))}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 1}}},
		{"STRICT_PACK whose sum fits no type is infeasible", Input{
			Types:  []NodeType{cpuType(10)},
			Groups: []Group{g(StrictPack, cpu(t, 3), cpu(t, 3))}, MaxLaunch: 10,
		}, want{infeasibleGroups: []int{0}}},
		{"STRICT_PACK picks the type that holds the sum", Input{
			Types:  []NodeType{cpuType(10), gpuType},
			Groups: []Group{g(StrictPack, gpuShape, cpu(t, 2))}, MaxLaunch: 10,
		}, want{launch: map[string]int{"gpu": 1}}},
		{"STRICT_SPREAD one bundle per node", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("a", 4)},
			Groups: []Group{g(StrictSpread, cpu(t, 1), cpu(t, 1), cpu(t, 1))}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 2}}},
		{"STRICT_SPREAD on distinct existing nodes", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("a", 1), node("b", 2), node("c", 1)},
			Groups: []Group{g(StrictSpread, cpu(t, 1), cpu(t, 2), cpu(t, 1))}, MaxLaunch: 10,
		}, want{}},
		{"STRICT_SPREAD over the cap is unplaced and launches nothing", Input{
			Types:  []NodeType{cpuType(2)},
			Groups: []Group{g(StrictSpread, cpu(t, 1), cpu(t, 1), cpu(t, 1))}, MaxLaunch: 10,
		}, want{unplacedGroups: []int{0}}},
		{"STRICT_SPREAD with a bundle no type holds is infeasible", Input{
			Types:  []NodeType{cpuType(10)},
			Groups: []Group{g(StrictSpread, cpu(t, 1), cpu(t, 8))}, MaxLaunch: 10,
		}, want{infeasibleGroups: []int{0}}},
		{"PACK on one existing node", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("a", 2), node("b", 2)},
			Groups: []Group{g(Pack, cpu(t, 1), cpu(t, 1))}, Demands: []Demand{d(cpu(t, 2), 1)}, MaxLaunch: 10,
		}, want{}},
		{"SPREAD on distinct existing nodes", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("a", 2), node("b", 2)},
			Groups: []Group{g(Spread, cpu(t, 1), cpu(t, 1))}, Demands: []Demand{d(cpu(t, 2), 1)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 1}}},
		{"SPREAD shares a node when there are too few", Input{
			Types: []NodeType{cpuType(10)}, Nodes: []Node{node("a", 2)},
			Groups: []Group{g(Spread, cpu(t, 1), cpu(t, 1))}, MaxLaunch: 10,
		}, want{}},
		{"SPREAD packs new nodes", Input{
			Types:  []NodeType{cpuType(10)},
			Groups: []Group{g(Spread, cpu(t, 1), cpu(t, 1), cpu(t, 1))}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 1}}},
		{"PACK puts what existing nodes cannot hold on one new node", Input{
			Types: []NodeType{cpuType(10), {Name: "big", Resources: cpu(t, 16), Max: 10}}, Nodes: []Node{node("a", 1)},
			Groups: []Group{g(Pack, cpu(t, 1), cpu(t, 3), cpu(t, 3), cpu(t, 3))}, MaxLaunch: 10,
		}, want{launch: map[string]int{"big": 1}}},
		{"PACK spans new nodes when no type holds it all", Input{
			Types:  []NodeType{cpuType(10)},
			Groups: []Group{g("", cpu(t, 3), cpu(t, 3), cpu(t, 3))}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 3}}},
		{"PACK with a bundle no type holds is infeasible", Input{
			Types:  []NodeType{cpuType(10)},
			Groups: []Group{g(Pack, cpu(t, 1), gpuShape)}, MaxLaunch: 10,
		}, want{infeasibleGroups: []int{0}}},
		{"PACK over the global cap is unplaced and launches nothing", Input{
			Types:  []NodeType{cpuType(10)},
			Groups: []Group{g(Pack, cpu(t, 4), cpu(t, 4), cpu(t, 4))}, MaxLaunch: 2,
		}, want{unplacedGroups: []int{0}}},
		{"an unplaced group gives its capacity back to later demand", Input{
			Types: []NodeType{cpuType(0)}, Nodes: []Node{node("a", 2)},
			Groups:  []Group{g(StrictSpread, cpu(t, 2), cpu(t, 2))},
			Demands: []Demand{d(cpu(t, 2), 1)}, MaxLaunch: 10,
		}, want{unplacedGroups: []int{0}}},
		{"demand uses what a group's new node leaves free", Input{
			Types:   []NodeType{cpuType(10)},
			Groups:  []Group{g(StrictPack, cpu(t, 1), cpu(t, 1))},
			Demands: []Demand{d(cpu(t, 2), 1)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 1}}},
		{"groups in order: the first takes the last slot", Input{
			Types:  []NodeType{cpuType(1)},
			Groups: []Group{g(StrictPack, cpu(t, 4)), g(StrictPack, cpu(t, 1))}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 1}, unplacedGroups: []int{1}}},
		{"lowercase strategy names and empty bundles", Input{
			Types:  []NodeType{cpuType(10)},
			Groups: []Group{g("strict_spread", cpu(t, 1), resources.Set{}, cpu(t, 1)), g(Pack)}, MaxLaunch: 10,
		}, want{launch: map[string]int{"cpu": 2}}},
		{"mixed", Input{
			Types: []NodeType{cpuType(3), gpuType, {Name: "head", Resources: cpu(t, 2)}},
			Nodes: []Node{
				{ID: "head", Type: "head", Available: cpu(t, 1)},
				{ID: "w1", Type: "cpu", Available: cpu(t, 4)},
				{ID: "w2", Type: "gpu", Available: rs(t, map[string]float64{"CPU": 2})},
			},
			Groups: []Group{
				g(StrictSpread, cpu(t, 2), cpu(t, 2), cpu(t, 2)),
				g(StrictPack, gpuShape, gpuShape),
				g(Pack, rs(t, map[string]float64{"TPU": 1})),
			},
			Demands: []Demand{
				d(cpu(t, 1), 10), d(gpuShape, 3), d(cpu(t, 100), 1),
			},
			MaxLaunch: 6,
		}, want{
			// The spread group: w1, w2 and a new cpu node (2 CPU left).
			// The pack group fits no type (1 GPU each). Demand: 1 CPU on
			// the head, 2 on w1, 2 on the new cpu node; 3 GPU shapes on 3
			// gpu nodes (5 CPU left on each holds the last 5 CPU).
			launch:           map[string]int{"cpu": 1, "gpu": 3},
			infeasible:       []resources.Set{cpu(t, 100)},
			infeasibleGroups: []int{1, 2},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check(t, Plan(tc.in), tc.want)
		})
	}
}

// TestPlanHugeCounts shows counts are not expanded: ten million copies of
// one shape over a million launches is one batched decision.
func TestPlanHugeCounts(t *testing.T) {
	in := Input{
		Types:     []NodeType{{Name: "cpu", Resources: cpu(t, 4), Max: 1_000_000}, {Name: "gpu", Resources: rs(t, map[string]float64{"CPU": 8, "GPU": 1}), Max: 5}},
		Demands:   []Demand{{Shape: cpu(t, 1), Count: 10_000_000}},
		MaxLaunch: 1 << 40,
	}
	check(t, Plan(in), want{
		launch:   map[string]int{"cpu": 1_000_000, "gpu": 5},
		unplaced: map[string]int{cpu(t, 1).Key(): 10_000_000 - 4_000_000 - 40},
	})
}

// randomInput builds a random but valid input.
func randomInput(r *rand.Rand, t testing.TB) Input {
	names := []string{"CPU", "GPU", "memory", "accel"}
	set := func(maxCPU int) resources.Set {
		m := map[string]float64{"CPU": float64(1 + r.IntN(maxCPU))}
		for _, n := range names[1:] {
			if r.IntN(4) == 0 {
				m[n] = float64(1 + r.IntN(4))
			}
		}
		return rs(t, m)
	}
	var in Input
	for i := range 1 + r.IntN(5) {
		in.Types = append(in.Types, NodeType{Name: fmt.Sprintf("t%d", i), Resources: set(16), Max: r.IntN(20)})
	}
	for i := range r.IntN(20) {
		in.Nodes = append(in.Nodes, Node{ID: fmt.Sprintf("n%02d", i), Available: set(4)})
	}
	for range r.IntN(20) {
		in.Demands = append(in.Demands, Demand{Shape: set(6), Count: r.IntN(200)})
	}
	strategies := []string{Pack, Spread, StrictPack, StrictSpread}
	for range r.IntN(5) {
		var g Group
		for range 1 + r.IntN(4) {
			g.Bundles = append(g.Bundles, set(4))
		}
		g.Strategy = strategies[r.IntN(len(strategies))]
		in.Groups = append(in.Groups, g)
	}
	in.MaxLaunch = r.IntN(60)
	return in
}

// denseInput is a small random input of a few types and shapes over CPU
// and GPU with large counts: where batched decisions could go wrong.
func denseInput(r *rand.Rand, t testing.TB) Input {
	var in Input
	for j := range 2 + r.IntN(3) {
		m := map[string]float64{"CPU": float64(1 + r.IntN(12))}
		if r.IntN(2) == 0 {
			m["GPU"] = float64(1 + r.IntN(3))
		}
		in.Types = append(in.Types, NodeType{Name: fmt.Sprintf("t%d", j), Resources: rs(t, m), Max: 100})
	}
	for range 1 + r.IntN(3) {
		m := map[string]float64{"CPU": float64(1 + r.IntN(5))}
		if r.IntN(3) == 0 {
			m["GPU"] = 1
		}
		in.Demands = append(in.Demands, Demand{Shape: rs(t, m), Count: 1 + r.IntN(30)})
	}
	in.MaxLaunch = 100
	return in
}

// TestBatchedDecisionsMatchOneAtATime compares the batched launch decisions
// with taking them one node at a time.
func TestBatchedDecisionsMatchOneAtATime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		in := denseInput(r, t)
		if i%10 == 0 {
			in = randomInput(r, t)
		}
		got, ref := plan(in, true), plan(in, false)
		if !reflect.DeepEqual(got, ref) {
			t.Fatalf("input %d: batched %+v, one at a time %+v\ninput %+v", i, got, ref, in)
		}
	}
}

// TestPlanIsDeterministic shuffles the types, nodes (distinct IDs) and
// demands and expects the same result; and Plan leaves its input alone.
func TestPlanIsDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		in := randomInput(r, t)
		first := Plan(in)
		keys := func(in Input) []string {
			var k []string
			for _, n := range in.Nodes {
				k = append(k, n.Available.Key())
			}
			for _, d := range in.Demands {
				k = append(k, d.Shape.Key())
			}
			return k
		}
		before := keys(in)
		shuffled := in
		shuffled.Types = slices.Clone(in.Types)
		shuffled.Nodes = slices.Clone(in.Nodes)
		shuffled.Demands = slices.Clone(in.Demands)
		r.Shuffle(len(shuffled.Types), func(a, b int) { shuffled.Types[a], shuffled.Types[b] = shuffled.Types[b], shuffled.Types[a] })
		r.Shuffle(len(shuffled.Nodes), func(a, b int) { shuffled.Nodes[a], shuffled.Nodes[b] = shuffled.Nodes[b], shuffled.Nodes[a] })
		r.Shuffle(len(shuffled.Demands), func(a, b int) {
			shuffled.Demands[a], shuffled.Demands[b] = shuffled.Demands[b], shuffled.Demands[a]
		})
		if second := Plan(shuffled); !reflect.DeepEqual(first, second) {
			t.Fatalf("input %d: %+v, shuffled %+v", i, first, second)
		}
		if !slices.Equal(before, keys(in)) {
			t.Fatalf("input %d: Plan changed its input", i)
		}
	}
}

// TestPlanNeverExceedsCaps checks the caps and that the launched nodes are
// not wasted on random inputs.
func TestPlanNeverExceedsCaps(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		in := randomInput(r, t)
		res := Plan(in)
		total := 0
		for name, n := range res.Launch {
			total += n
			max := -1
			for _, tp := range in.Types {
				if tp.Name == name {
					max = tp.Max
					break
				}
			}
			if n <= 0 || n > max {
				t.Fatalf("input %d: launches %d of %q (Max %d)", i, n, name, max)
			}
		}
		if total > in.MaxLaunch {
			t.Fatalf("input %d: launches %d nodes, MaxLaunch %d", i, total, in.MaxLaunch)
		}
		for _, s := range res.Infeasible {
			for _, tp := range in.Types {
				if tp.Resources.Fits(s) {
					t.Fatalf("input %d: %v reported infeasible but fits type %s", i, s, tp.Name)
				}
			}
		}
	}
}

// benchInput is 10k demands of the given number of distinct shapes, 1000
// nodes (mostly busy), 6 types and 20 placement groups.
func benchInput(b *testing.B, distinct int) Input {
	r := rand.New(rand.NewPCG(7, 8))
	in := Input{MaxLaunch: 1000}
	for i, c := range []float64{2, 4, 8, 16, 32, 64} {
		res := map[string]float64{"CPU": c, "memory": c * (4 << 30)}
		if i%2 == 1 {
			res["GPU"] = c / 8
		}
		in.Types = append(in.Types, NodeType{Name: fmt.Sprintf("type%d", i), Resources: rs(b, res), Max: 500})
	}
	for i := range 1000 {
		in.Nodes = append(in.Nodes, Node{ID: fmt.Sprintf("node%04d", i), Available: rs(b, map[string]float64{
			"CPU": float64(r.IntN(3)), "memory": float64(r.IntN(4) << 30),
		})})
	}
	var shapes []resources.Set
	for i := range distinct {
		m := map[string]float64{"CPU": float64(1+i%8) + float64(i/40)/1000, "memory": float64((1 + i%5) << 30)}
		if i%7 == 0 {
			m["GPU"] = 1
		}
		shapes = append(shapes, rs(b, m))
	}
	for i := range 10_000 {
		s := shapes[i%len(shapes)]
		if distinct < 10_000 {
			s = shapes[r.IntN(len(shapes))]
		}
		in.Demands = append(in.Demands, Demand{Shape: s, Count: 1})
	}
	strategies := []string{Pack, Spread, StrictPack, StrictSpread}
	for i := range 20 {
		g := Group{Strategy: strategies[i%4]}
		for range 4 {
			g.Bundles = append(g.Bundles, cpu(b, float64(1+r.IntN(4))))
		}
		in.Groups = append(in.Groups, g)
	}
	return in
}

// BenchmarkPlan plans 10k demands and 20 placement groups against 1000
// nodes and 6 node types (MaxLaunch 1000): demands of 40 distinct shapes
// (the usual case: Ray's demand is a few shapes), and all distinct.
func BenchmarkPlan(b *testing.B) {
	for _, distinct := range []int{40, 10_000} {
		b.Run(fmt.Sprintf("shapes=%d", distinct), func(b *testing.B) {
			in := benchInput(b, distinct)
			b.ReportAllocs()
			var res Result
			for b.Loop() {
				res = Plan(in)
			}
			n := 0
			for _, c := range res.Launch {
				n += c
			}
			b.ReportMetric(float64(n), "launched")
		})
	}
}
