// Package placement decides where the bundles of a placement group go: a
// pure function of the group (its bundles and strategy) and the nodes'
// resources, so each strategy's promise is tested without a cluster. The
// GCS's placement group manager calls it, then reserves what it chose on
// the raylets in two phases.
package placement

import (
	"fmt"
	"sort"
	"strings"

	"github.com/goray-dev/goray/internal/resources"
)

// Strategy is how a group's bundles are spread over nodes.
type Strategy int

// The strategies, as Ray's.
const (
	// Pack puts the bundles on as few nodes as possible (best effort).
	Pack Strategy = iota
	// Spread puts the bundles on as many distinct nodes as possible (best
	// effort).
	Spread
	// StrictPack puts every bundle on one node, or waits.
	StrictPack
	// StrictSpread puts every bundle on a distinct node, or waits.
	StrictSpread
)

var strategyNames = [...]string{"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}

// String returns Ray's name of s ("STRICT_SPREAD").
func (s Strategy) String() string {
	if s < 0 || int(s) >= len(strategyNames) {
		return fmt.Sprintf("Strategy(%d)", int(s))
	}
	return strategyNames[s]
}

// ParseStrategy reads a strategy's name, in any case ("strict_spread").
func ParseStrategy(name string) (Strategy, error) {
	for i, n := range strategyNames {
		if strings.EqualFold(n, name) {
			return Strategy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown placement strategy %q (want one of %s)", name, strings.Join(strategyNames[:], ", "))
}

// Node is a node as placement sees it.
type Node struct {
	// ID names the node; ties are broken by it, so a placement is
	// deterministic.
	ID string
	// Total is the node's capacity; Available what is free of it now.
	Total, Available resources.Set
}

// NoFitError says a group cannot be placed now. Infeasible marks a group no
// node of the cluster could ever hold, however much were free (a bundle, or
// a STRICT_PACK group's sum, bigger than every node's total): it waits for
// a bigger node to join, and is shown as such.
type NoFitError struct {
	// Bundle is the index of the bundle that did not fit (-1: the group as
	// a whole, for STRICT_PACK and STRICT_SPREAD).
	Bundle int
	// Infeasible is set when no node's total could hold it.
	Infeasible bool
	// Reason says what is missing.
	Reason string
}

func (e *NoFitError) Error() string {
	what := "placement group"
	if e.Bundle >= 0 {
		what = fmt.Sprintf("bundle %d", e.Bundle)
	}
	if e.Infeasible {
		return fmt.Sprintf("%s is infeasible: %s", what, e.Reason)
	}
	return fmt.Sprintf("%s does not fit now: %s", what, e.Reason)
}

// maxSearch bounds the backtracking search STRICT_SPREAD falls back to
// when the greedy pass fails: enough for groups of hundreds of bundles of
// few shapes, and a placement attempt stays well under a millisecond.
const maxSearch = 20000

// Place returns the node of every bundle (out[i] for bundles[i]), or a
// *NoFitError. fixed holds bundles already placed (index -> node id) that
// must stay where they are, as when a group is rescheduled after a node
// died; their resources are already taken from the nodes' Available, and
// out repeats them.
func Place(s Strategy, bundles []resources.Set, nodes []Node, fixed map[int]string) ([]string, error) {
	if err := Feasible(s, bundles, nodes); err != nil {
		return nil, err
	}
	ns := make([]*slot, len(nodes))
	byID := make(map[string]*slot, len(nodes))
	for i, n := range nodes {
		ns[i] = &slot{id: n.ID, total: n.Total, free: n.Available.Clone()}
		byID[n.ID] = ns[i]
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i].id < ns[j].id })
	out := make([]string, len(bundles))
	var todo []int
	for i := range bundles {
		if id, ok := fixed[i]; ok {
			out[i] = id
			if sl := byID[id]; sl != nil {
				sl.used++
			}
			continue
		}
		todo = append(todo, i)
	}
	// Biggest bundles first: they have the fewest places to go.
	sort.SliceStable(todo, func(a, b int) bool { return size(bundles[todo[a]]) > size(bundles[todo[b]]) })
	var err error
	switch s {
	case StrictPack:
		err = placeStrictPack(bundles, todo, ns, byID, fixed, out)
	case StrictSpread:
		err = placeStrictSpread(bundles, todo, ns, out)
	case Spread:
		err = placeGreedy(bundles, todo, ns, out, preferUnused)
	default:
		if err = placeStrictPack(bundles, todo, ns, byID, fixed, out); err != nil {
			err = placeGreedy(bundles, todo, ns, out, preferUsed)
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Feasible returns a *NoFitError with Infeasible set when no node's total
// could ever hold the group under s, and nil otherwise.
func Feasible(s Strategy, bundles []resources.Set, nodes []Node) error {
	for i, b := range bundles {
		if !anyTotal(nodes, b) {
			return &NoFitError{Bundle: i, Infeasible: true, Reason: fmt.Sprintf("no node has %s in total", b)}
		}
	}
	if s == StrictPack && len(bundles) > 1 {
		sum := resources.Set{}
		for _, b := range bundles {
			sum.Add(b)
		}
		if !anyTotal(nodes, sum) {
			return &NoFitError{Bundle: -1, Infeasible: true, Reason: fmt.Sprintf("STRICT_PACK needs one node with %s in total; none has", sum)}
		}
	}
	return nil
}

func anyTotal(nodes []Node, need resources.Set) bool {
	for _, n := range nodes {
		if n.Total.Fits(need) {
			return true
		}
	}
	return false
}

// slot is a node during one placement.
type slot struct {
	id    string
	total resources.Set
	free  resources.Set
	used  int // bundles of this group on it
}

// size orders bundles: the sum of their amounts (fixed point), which puts
// a {GPU: 1, CPU: 8} before a {CPU: 1}.
func size(b resources.Set) int64 {
	var n int64
	for _, v := range b {
		n += v
	}
	return n
}

func placeStrictPack(bundles []resources.Set, todo []int, ns []*slot, byID map[string]*slot, fixed map[int]string, out []string) error {
	sum := resources.Set{}
	for _, i := range todo {
		sum.Add(bundles[i])
	}
	candidates := ns
	// Bundles that stayed pin the group to their node.
	for _, id := range fixed {
		sl := byID[id]
		if sl == nil {
			return &NoFitError{Bundle: -1, Reason: "the node holding the group's other bundles is gone"}
		}
		candidates = []*slot{sl}
		break
	}
	var best *slot
	for _, sl := range candidates {
		if !sl.free.Fits(sum) {
			continue
		}
		// Best fit: the node left with the least free, so big nodes stay
		// free for big groups.
		if best == nil || size(sl.free) < size(best.free) {
			best = sl
		}
	}
	if best == nil {
		return &NoFitError{Bundle: -1, Reason: fmt.Sprintf("no node has %s free for all the bundles together", sum)}
	}
	for _, i := range todo {
		out[i] = best.id
	}
	best.free.Sub(sum)
	return nil
}

type preference int

const (
	preferUsed   preference = iota // PACK: fill nodes the group is on
	preferUnused                   // SPREAD: new nodes first
)

func placeGreedy(bundles []resources.Set, todo []int, ns []*slot, out []string, pref preference) error {
	for _, i := range todo {
		var best *slot
		for _, sl := range ns {
			if !sl.free.Fits(bundles[i]) {
				continue
			}
			if best == nil || better(sl, best, pref) {
				best = sl
			}
		}
		if best == nil {
			return &NoFitError{Bundle: i, Reason: fmt.Sprintf("no node has %s free", bundles[i])}
		}
		out[i] = best.id
		best.free.Sub(bundles[i])
		best.used++
	}
	return nil
}

// better reports whether a is a better node than b for the next bundle.
func better(a, b *slot, pref preference) bool {
	if a.used != b.used {
		if pref == preferUsed {
			return a.used > b.used
		}
		return a.used < b.used
	}
	// Among equals, the node with the most free keeps a spread group
	// balanced; a packed one goes where it leaves least behind.
	if pref == preferUsed {
		return size(a.free) < size(b.free)
	}
	return size(a.free) > size(b.free)
}

// placeStrictSpread gives every bundle its own node: a greedy pass, then a
// bounded backtracking search, so bundles of different shapes on nodes of
// different sizes are matched when a matching exists (Ray's scheduler gives
// up after its greedy pass).
func placeStrictSpread(bundles []resources.Set, todo []int, ns []*slot, out []string) error {
	var avail []*slot
	for _, sl := range ns {
		if sl.used == 0 {
			avail = append(avail, sl)
		}
	}
	if len(todo) > len(avail) {
		return &NoFitError{Bundle: -1, Reason: fmt.Sprintf("STRICT_SPREAD needs %d more distinct nodes; %d are free of this group", len(todo), len(avail))}
	}
	taken := make([]bool, len(avail))
	steps := 0
	var search func(k int) bool
	search = func(k int) bool {
		if k == len(todo) {
			return true
		}
		b := bundles[todo[k]]
		// Try the tightest fitting nodes first: big nodes are kept for
		// big bundles.
		order := make([]int, 0, len(avail))
		for j, sl := range avail {
			if !taken[j] && sl.free.Fits(b) {
				order = append(order, j)
			}
		}
		sort.SliceStable(order, func(x, y int) bool { return size(avail[order[x]].free) < size(avail[order[y]].free) })
		for _, j := range order {
			if steps++; steps > maxSearch {
				return false
			}
			taken[j] = true
			out[todo[k]] = avail[j].id
			if search(k + 1) {
				return true
			}
			taken[j] = false
		}
		return false
	}
	if !search(0) {
		return &NoFitError{Bundle: -1, Reason: fmt.Sprintf("no %d distinct nodes have the bundles' resources free", len(todo))}
	}
	for _, i := range todo {
		for _, sl := range avail {
			if sl.id == out[i] {
				sl.free.Sub(bundles[i])
				sl.used++
			}
		}
	}
	return nil
}
