package placement

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/goray-dev/goray/internal/resources"
)

func set(t *testing.T, m map[string]float64) resources.Set {
	t.Helper()
	s, err := resources.FromFloats(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func cpus(t *testing.T, n float64) resources.Set { return set(t, map[string]float64{"CPU": n}) }

// node is a node with total CPUs, free CPUs.
func node(t *testing.T, id string, total, free float64) Node {
	return Node{ID: id, Total: cpus(t, total), Available: cpus(t, free)}
}

func TestPlace(t *testing.T) {
	type want struct {
		nodes      []string // nil: a *NoFitError
		infeasible bool
	}
	tests := []struct {
		name     string
		strategy Strategy
		bundles  []float64 // CPUs of each bundle
		nodes    []Node
		fixed    map[int]string
		want     want
	}{
		{"PACK fits on one node: best fit", Pack, []float64{1, 1}, []Node{node(t, "a", 8, 8), node(t, "b", 4, 2)}, nil, want{nodes: []string{"b", "b"}}},
		{"PACK spills to a second node only when it must", Pack, []float64{2, 2, 2}, []Node{node(t, "a", 4, 4), node(t, "b", 4, 4), node(t, "c", 4, 4)}, nil, want{nodes: []string{"a", "a", "b"}}},
		{"PACK waits when a bundle fits nowhere now", Pack, []float64{3}, []Node{node(t, "a", 4, 2)}, nil, want{}},
		{"SPREAD uses distinct nodes", Spread, []float64{1, 1, 1}, []Node{node(t, "a", 4, 4), node(t, "b", 4, 4), node(t, "c", 4, 4)}, nil, want{nodes: []string{"a", "b", "c"}}},
		{"SPREAD shares nodes when there are too few", Spread, []float64{1, 1, 1}, []Node{node(t, "a", 4, 4), node(t, "b", 4, 4)}, nil, want{nodes: []string{"a", "b", "a"}}},
		{"STRICT_PACK on the one node that holds all", StrictPack, []float64{2, 2}, []Node{node(t, "a", 3, 3), node(t, "b", 4, 4)}, nil, want{nodes: []string{"b", "b"}}},
		{"STRICT_PACK waits when no node has the sum free", StrictPack, []float64{2, 2}, []Node{node(t, "a", 4, 3), node(t, "b", 4, 3)}, nil, want{}},
		{"STRICT_PACK too big for any node is infeasible", StrictPack, []float64{3, 3}, []Node{node(t, "a", 4, 4), node(t, "b", 4, 4)}, nil, want{infeasible: true}},
		{"STRICT_SPREAD one node each", StrictSpread, []float64{1, 1}, []Node{node(t, "a", 4, 4), node(t, "b", 4, 4)}, nil, want{nodes: []string{"a", "b"}}},
		{"STRICT_SPREAD with a bundle more than nodes waits, not infeasible", StrictSpread, []float64{1, 1, 1}, []Node{node(t, "a", 4, 4), node(t, "b", 4, 4)}, nil, want{}},
		{"STRICT_SPREAD matches shapes a greedy pass would miss", StrictSpread, []float64{2, 1}, []Node{node(t, "a", 1, 1), node(t, "b", 2, 2)}, nil, want{nodes: []string{"b", "a"}}},
		{"bundle bigger than every node is infeasible", Spread, []float64{16}, []Node{node(t, "a", 8, 8)}, nil, want{infeasible: true}},
		{"reschedule STRICT_SPREAD avoids the nodes it holds", StrictSpread, []float64{1, 1}, []Node{node(t, "a", 4, 3), node(t, "c", 4, 4)}, map[int]string{0: "a"}, want{nodes: []string{"a", "c"}}},
		{"reschedule STRICT_PACK goes back to its node", StrictPack, []float64{1, 1}, []Node{node(t, "a", 4, 3), node(t, "b", 8, 8)}, map[int]string{0: "a"}, want{nodes: []string{"a", "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bs []resources.Set
			for _, c := range tt.bundles {
				bs = append(bs, cpus(t, c))
			}
			got, err := Place(tt.strategy, bs, tt.nodes, tt.fixed)
			if tt.want.nodes != nil {
				if err != nil {
					t.Fatalf("Place: %v", err)
				}
				if !reflect.DeepEqual(got, tt.want.nodes) {
					t.Fatalf("Place = %v, want %v", got, tt.want.nodes)
				}
				return
			}
			var nf *NoFitError
			if !errors.As(err, &nf) {
				t.Fatalf("Place = %v, %v; want a *NoFitError", got, err)
			}
			if nf.Infeasible != tt.want.infeasible {
				t.Fatalf("Infeasible = %v, want %v (%v)", nf.Infeasible, tt.want.infeasible, err)
			}
		})
	}
}

// TestPlaceDoesNotChangeNodes: placement works on copies; the caller's view
// of the nodes is what the raylets will be asked to reserve from.
func TestPlaceDoesNotChangeNodes(t *testing.T) {
	nodes := []Node{node(t, "a", 4, 4)}
	if _, err := Place(Pack, []resources.Set{cpus(t, 2)}, nodes, nil); err != nil {
		t.Fatal(err)
	}
	if got := nodes[0].Available.Get("CPU"); got != 4 {
		t.Fatalf("Available CPU = %v after Place, want 4", got)
	}
}

// TestStrictSpreadSearchIsBounded: a group that cannot be matched ends the
// search within its budget instead of trying every permutation.
func TestStrictSpreadSearchIsBounded(t *testing.T) {
	// Every node's X is taken, so the last bundle fits nowhere; an
	// unbounded search would try every assignment of the others first.
	var nodes []Node
	var bs []resources.Set
	for i := 0; i < 40; i++ {
		nodes = append(nodes, Node{ID: fmt.Sprintf("n%02d", i), Total: set(t, map[string]float64{"CPU": 2, "X": 1}), Available: cpus(t, 1)})
		bs = append(bs, cpus(t, 1))
	}
	bs[39] = set(t, map[string]float64{"X": 1})
	_, err := Place(StrictSpread, bs, nodes, nil)
	var nf *NoFitError
	if !errors.As(err, &nf) || nf.Infeasible {
		t.Fatalf("Place = %v; want a not-now *NoFitError", err)
	}
}

func TestParseStrategy(t *testing.T) {
	for _, s := range []Strategy{Pack, Spread, StrictPack, StrictSpread} {
		got, err := ParseStrategy(s.String())
		if err != nil || got != s {
			t.Errorf("ParseStrategy(%q) = %v, %v", s.String(), got, err)
		}
	}
	if _, err := ParseStrategy("CLUSTER"); err == nil {
		t.Error("ParseStrategy(CLUSTER) succeeded")
	}
}
