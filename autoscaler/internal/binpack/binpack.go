// Package binpack decides which nodes the autoscaler launches: it packs
// resource demands (task and actor shapes with counts) and placement groups
// first onto the free capacity of the cluster's nodes, running and pending,
// then onto new nodes of the node types that fit them best, within the
// per-type and global launch caps. It is a pure function of its Input.
//
// # Algorithm
//
// Placement groups come first, in input order (callers order them by
// priority, e.g. creation time), each atomically: a group is either placed
// whole (its bundles' capacity reserved and its nodes launched) or leaves
// no trace and is reported as unplaced or infeasible.
//
//   - STRICT_PACK: the sum of the bundles on one node: the first node with
//     that much free, else one new node of the best type that holds it.
//   - STRICT_SPREAD: each bundle (largest first) on a distinct node: the
//     first free-enough node the group does not use yet, else a new node of
//     the best type for that bundle.
//   - PACK (also an empty or unknown strategy): the whole group on the first
//     node that holds it; else bundles first fit across the nodes, and what
//     is left on one new node when one type holds it all, else on as many
//     new nodes as the utilisation scorer picks.
//   - SPREAD: each bundle (largest first) on the first node the group does
//     not use yet, else on any node; what is left goes onto new nodes
//     packed (launching extra nodes only to spread would waste them).
//
// Then the demands: identical shapes are merged and counted, the shapes are
// sorted largest first (more resources, then a bigger share of the largest
// node type, then by Key) and each is packed first fit onto the nodes
// (existing ones sorted by ID, then those launched for groups), as many
// copies per node as fit. A shape left over that fits no node type (even
// empty) is infeasible. The rest go onto new nodes, one launch decision at
// a time as in Ray: every type still under its caps is filled greedily
// with the remaining shapes (largest first) and scored; the best type is
// launched. The score is Ray's utilisation scorer, lexicographic:
//
//  1. not a GPU type when no remaining shape asks for a GPU;
//  2. how many of the type's resources the remaining shapes ask for;
//  3. the lowest utilisation of the type's resources (every resource it
//     has counts: one left idle scores 0);
//  4. the mean utilisation of its resources;
//
// ties broken by type name. Utilisation is the filled fraction of each
// resource (Ray weights it by the amount, which would let memory, counted
// in bytes, outweigh everything else). A type none of whose resources
// fits a remaining shape is never picked.
//
// # Complexity
//
// With D demands of S distinct shapes, N nodes, T types, G groups of B
// bundles in all, r resources per shape and R distinct resources asked for:
// merging and sorting is O(D·r + S log S), the first-fit pass O(S·N·r) (a
// shape needing more of a resource than any node has free skips the scan),
// and launching O(I·T·S·r) where I is the number of launch decisions. A
// decision launches a batch: as many nodes of the chosen type as the same
// decision would be taken again (the fill of every type is provably
// unchanged), so a large homogeneous demand costs one decision, not one per
// node; I is at most the number of nodes launched. Groups cost
// O(B·(N+L)·r) plus their own launch decisions, L being the nodes launched
// for groups. Memory is O((N+L)·R + T·S). Counts are never expanded into
// per-item work. A type's fill stops as soon as its node has less of some
// resource free than every remaining shape needs.

package binpack

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/goray-dev/goray/internal/resources"
)

// Placement group strategies, Ray's names.
const (
	// Pack places the bundles on as few nodes as possible, best effort.
	Pack = "PACK"
	// Spread places the bundles on distinct nodes, best effort.
	Spread = "SPREAD"
	// StrictPack places every bundle on one node.
	StrictPack = "STRICT_PACK"
	// StrictSpread places each bundle on a node of its own.
	StrictSpread = "STRICT_SPREAD"
)

// NodeType is a kind of node the autoscaler may launch.
type NodeType struct {
	// Name identifies the type; Result.Launch is keyed by it. Of several
	// types with one name the first counts.
	Name string
	// Resources is what one node of the type offers.
	Resources resources.Set
	// Max is how many more nodes of the type may be launched this round
	// (its max_workers minus what exists); 0 or less launches none.
	Max int
}

// Node is a node of the cluster, running or pending.
type Node struct {
	// ID identifies the node; nodes are tried in ID order.
	ID string
	// Type is the node's type name (informational).
	Type string
	// Available is what demand may still use: the free resources of a
	// running node, the type's total for a pending one.
	Available resources.Set
}

// Demand is Count tasks or actors (or explicitly requested bundles) that
// each need Shape.
type Demand struct {
	// Shape is what one of them needs.
	Shape resources.Set
	// Count is how many; 0 or less is ignored.
	Count int
}

// Group is a pending placement group.
type Group struct {
	// Bundles are the group's bundles; empty bundles need nothing.
	Bundles []resources.Set
	// Strategy is Pack, Spread, StrictPack or StrictSpread (case does not
	// matter; anything else is treated as Pack, Ray's default).
	Strategy string
}

// Input is everything Plan decides on.
type Input struct {
	// Types are the node types that may be launched.
	Types []NodeType
	// Nodes are the cluster's running and pending nodes.
	Nodes []Node
	// Demands are the resource shapes waiting for capacity.
	Demands []Demand
	// Groups are the pending placement groups, in priority order.
	Groups []Group
	// MaxLaunch caps the new nodes of all types together this round
	// (max_workers and upscaling speed); 0 or less launches none.
	MaxLaunch int
}

// Result is what Plan decided. Every slice is sorted; the result depends
// only on the input, not on the order of Types, Nodes or Demands.
type Result struct {
	// Launch is how many nodes of each type to launch (only types with a
	// count above zero; never nil).
	Launch map[string]int
	// Infeasible are the demand shapes (from Input.Demands) that fit no
	// node type, even an empty one, and did not fit any node's free
	// capacity: nothing is launched for them. Sorted by Key.
	Infeasible []resources.Set
	// Unplaced are the demands that some node type could hold but that
	// were left over because of Max or MaxLaunch. Sorted by shape Key.
	Unplaced []Demand
	// InfeasibleGroups are the indices in Input.Groups of the groups that
	// no node types could ever hold (a bundle, or a STRICT_PACK group's
	// sum, that fits no type and no node). Ascending.
	InfeasibleGroups []int
	// UnplacedGroups are the indices in Input.Groups of the feasible
	// groups that could not be placed within the caps. Ascending.
	UnplacedGroups []int
}

// Plan packs the demand of in onto its nodes and new nodes and returns
// what to launch. See the package documentation for the algorithm.
func Plan(in Input) Result {
	return plan(in, true)
}

// plan is Plan; batch=false takes every launch decision one node at a time
// (the reference the tests compare the batched decisions with).
func plan(in Input, batch bool) Result {
	p := newPlanner(in, batch)
	res := Result{Launch: map[string]int{}}
	for gi := range p.groups {
		switch p.placeGroup(gi) {
		case groupUnplaced:
			res.UnplacedGroups = append(res.UnplacedGroups, gi)
		case groupInfeasible:
			res.InfeasibleGroups = append(res.InfeasibleGroups, gi)
		}
	}
	p.placeDemands(&res)
	for t := range p.types {
		if n := p.launched[t]; n > 0 {
			res.Launch[p.types[t].name] = n
		}
	}
	return res
}

// entry is one resource of a shape: its index in planner.names and amount.
type entry struct {
	r int
	v int64
}

// shape is a canonical resource set (positive amounts only) in the
// planner's dense form.
type shape struct {
	set  resources.Set
	key  string
	ent  []entry
	size float64
}

// ptype is a node type in the planner's dense form.
type ptype struct {
	name string
	cap  []int64 // per requested resource
	nres int     // resources with an amount > 0, requested or not
	gpu  bool
	max  int
}

// undo is one subtraction from a bin, replayed backwards on rollback.
type undo struct {
	bin int
	s   *shape
	k   int64
}

type planner struct {
	batch     bool
	idx       map[string]int // requested resource name -> index
	names     []string       // requested resource names by index
	gpu       int            // index of GPU, or -1
	types     []ptype        // sorted by name
	free      [][]int64      // bins: existing nodes by ID, then new nodes
	launched  []int          // per type
	total     int
	maxLaunch int
	demands   []*shape
	counts    []int64
	groups    [][]*shape // per group, canonical bundles (nil entries dropped)
	strategy  []string
	logging   bool
	log       []undo
}

// canonical returns s without zero or negative amounts.
func canonical(s resources.Set) resources.Set {
	out := make(resources.Set, len(s))
	for k, v := range s {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

func newPlanner(in Input, batch bool) *planner {
	p := &planner{batch: batch, idx: map[string]int{}, gpu: -1, maxLaunch: max(in.MaxLaunch, 0)}

	// The resources shapes ask for are the only ones fits depend on.
	var names []string
	note := func(s resources.Set) {
		for k, v := range s {
			if _, ok := p.idx[k]; !ok && v > 0 {
				p.idx[k] = -1
				names = append(names, k)
			}
		}
	}
	for _, d := range in.Demands {
		if d.Count > 0 {
			note(d.Shape)
		}
	}
	for _, g := range in.Groups {
		for _, b := range g.Bundles {
			note(b)
		}
	}
	slices.Sort(names)
	p.names = names
	for i, k := range names {
		p.idx[k] = i
	}
	if i, ok := p.idx[resources.GPU]; ok {
		p.gpu = i
	}
	dense := func(s resources.Set) []int64 {
		v := make([]int64, len(names))
		for k, a := range s {
			if i, ok := p.idx[k]; ok && a > 0 {
				v[i] = a
			}
		}
		return v
	}

	// Types, sorted by name, the first of a name winning.
	order := make([]int, len(in.Types))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(in.Types[a].Name, in.Types[b].Name) })
	for _, i := range order {
		t := in.Types[i]
		if n := len(p.types); n > 0 && p.types[n-1].name == t.Name {
			continue
		}
		pt := ptype{name: t.Name, cap: dense(t.Resources), gpu: t.Resources[resources.GPU] > 0, max: max(t.Max, 0)}
		for _, v := range t.Resources {
			if v > 0 {
				pt.nres++
			}
		}
		p.types = append(p.types, pt)
	}
	p.launched = make([]int, len(p.types))

	// Existing nodes by ID.
	nodes := slices.Clone(in.Nodes)
	slices.SortStableFunc(nodes, func(a, b Node) int { return strings.Compare(a.ID, b.ID) })
	for _, n := range nodes {
		p.free = append(p.free, dense(n.Available))
	}

	// The scale of each resource: the most any type (else any shape) has,
	// so that a shape's size is a share of the largest node.
	scale := make([]float64, len(names))
	for _, t := range p.types {
		for i, v := range t.cap {
			scale[i] = max(scale[i], float64(v))
		}
	}
	sizeOf := func(s *shape) float64 {
		var sum float64
		for _, e := range s.ent {
			sum += float64(e.v) / scale[e.r]
		}
		return sum
	}
	shapeMax := make([]float64, len(names)) // for resources no type has
	mk := func(set resources.Set) *shape {
		s := p.shapeOf(set)
		for _, e := range s.ent {
			shapeMax[e.r] = max(shapeMax[e.r], float64(e.v))
		}
		return s
	}

	// Demands merged by shape (the key is built in a reused buffer, so a
	// repeated shape allocates nothing).
	byKey := map[string]int{}
	var buf []byte
	var keyNames []string
	for _, d := range in.Demands {
		if d.Count <= 0 {
			continue
		}
		buf, keyNames = appendKey(buf[:0], keyNames[:0], d.Shape)
		if len(buf) == 0 {
			continue // needs nothing
		}
		i, ok := byKey[string(buf)]
		if !ok {
			i = len(p.demands)
			byKey[string(buf)] = i
			p.demands = append(p.demands, mk(canonical(d.Shape)))
			p.counts = append(p.counts, 0)
		}
		p.counts[i] = satAdd(p.counts[i], int64(d.Count))
	}
	for _, g := range in.Groups {
		var bs []*shape
		for _, b := range g.Bundles {
			if set := canonical(b); len(set) > 0 {
				bs = append(bs, mk(set))
			}
		}
		p.groups = append(p.groups, bs)
		p.strategy = append(p.strategy, strings.ToUpper(g.Strategy))
	}
	for r, v := range scale {
		if v == 0 {
			scale[r] = shapeMax[r]
		}
	}
	for _, s := range p.demands {
		s.size = sizeOf(s)
	}
	for _, g := range p.groups {
		for _, s := range g {
			s.size = sizeOf(s)
		}
	}
	// Largest demand first.
	perm := make([]int, len(p.demands))
	for i := range perm {
		perm[i] = i
	}
	slices.SortFunc(perm, func(a, b int) int { return larger(p.demands[a], p.demands[b]) })
	ds, cs := make([]*shape, len(perm)), make([]int64, len(perm))
	for j, i := range perm {
		ds[j], cs[j] = p.demands[i], p.counts[i]
	}
	p.demands, p.counts = ds, cs
	return p
}

// larger orders shapes largest first: more resources, then a bigger size,
// then by key.
func larger(a, b *shape) int {
	switch {
	case len(a.ent) != len(b.ent):
		return len(b.ent) - len(a.ent)
	case a.size > b.size:
		return -1
	case a.size < b.size:
		return 1
	}
	return strings.Compare(a.key, b.key)
}

// appendKey appends the key of s's positive amounts to buf, using names as
// scratch space.
func appendKey(buf []byte, names []string, s resources.Set) ([]byte, []string) {
	for k, v := range s {
		if v > 0 {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		buf = append(buf, k...)
		buf = append(buf, '=')
		buf = strconv.AppendInt(buf, s[k], 10)
		buf = append(buf, ';')
	}
	return buf, names
}

// satAdd adds without overflowing.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// fits returns how many copies of s (at most limit) fit in free.
func fits(free []int64, s *shape, limit int64) int64 {
	k := limit
	for _, e := range s.ent {
		if q := free[e.r] / e.v; q < k {
			if q <= 0 {
				return 0
			}
			k = q
		}
	}
	return k
}

// take subtracts k copies of s from bin b, logging it inside a group.
func (p *planner) take(b int, s *shape, k int64) {
	for _, e := range s.ent {
		p.free[b][e.r] -= k * e.v
	}
	if p.logging {
		p.log = append(p.log, undo{b, s, k})
	}
}

// feasible reports whether some node type, empty, holds one s.
func (p *planner) feasible(s *shape) bool {
	for i := range p.types {
		if fits(p.types[i].cap, s, 1) == 1 {
			return true
		}
	}
	return false
}

// canLaunch reports whether one more node of type t is within the caps.
func (p *planner) canLaunch(t int) bool {
	return p.total < p.maxLaunch && p.launched[t] < p.types[t].max
}

// launch records n new nodes of type t, each with free capacity left
// (nil: not kept as bins).
func (p *planner) launch(t, n int, left []int64) {
	p.launched[t] += n
	p.total += n
	if left != nil {
		for range n {
			p.free = append(p.free, slices.Clone(left))
		}
	}
}

// score is Ray's utilisation score of filling a node type; higher is better.
type score struct {
	gpuOK    bool
	matching int
	minU     float64
	meanU    float64
}

func (a score) better(b score) bool {
	switch {
	case a.gpuOK != b.gpuOK:
		return a.gpuOK
	case a.matching != b.matching:
		return a.matching > b.matching
	case a.minU != b.minU:
		return a.minU > b.minU
	}
	return a.meanU > b.meanU
}

// score scores type t with left free after a fill; want marks the
// resources the remaining demand asks for.
func (p *planner) score(t *ptype, left []int64, want []bool, anyGPU bool) score {
	sc := score{gpuOK: !t.gpu || anyGPU, minU: 1}
	var sum float64
	n := 0
	for r, c := range t.cap {
		if c <= 0 {
			continue
		}
		n++
		u := float64(c-left[r]) / float64(c)
		sum += u
		sc.minU = min(sc.minU, u)
		if want[r] {
			sc.matching++
		}
	}
	if extra := t.nres - n; extra > 0 {
		// Resources nobody asks for stay idle.
		sc.minU = 0
		n += extra
	}
	if n > 0 {
		sc.meanU = sum / float64(n)
	}
	return sc
}

// bestTypeFor returns the best type to launch for one copy of s and its
// free capacity after s, or -1 when no type within the caps holds s.
func (p *planner) bestTypeFor(s *shape) (int, []int64) {
	want := make([]bool, len(p.idx))
	for _, e := range s.ent {
		want[e.r] = true
	}
	anyGPU := p.gpu >= 0 && want[p.gpu]
	best, bestLeft := -1, []int64(nil)
	var bestScore score
	for t := range p.types {
		pt := &p.types[t]
		if !p.canLaunch(t) || fits(pt.cap, s, 1) == 0 {
			continue
		}
		left := slices.Clone(pt.cap)
		for _, e := range s.ent {
			left[e.r] -= e.v
		}
		if sc := p.score(pt, left, want, anyGPU); best < 0 || sc.better(bestScore) {
			best, bestLeft, bestScore = t, left, sc
		}
	}
	return best, bestLeft
}

// firstFit packs cnt[i] copies of each shape first fit onto the bins,
// largest shape first (sh is sorted), as many per bin as fit.
func (p *planner) firstFit(sh []*shape, cnt []int64) {
	if len(p.free) == 0 {
		return
	}
	// An upper bound of each resource's free amount over the bins (it only
	// shrinks while packing), to skip shapes no bin can take.
	bound := make([]int64, len(p.idx))
	for _, f := range p.free {
		for r, v := range f {
			bound[r] = max(bound[r], v)
		}
	}
	for i, s := range sh {
		if cnt[i] == 0 || fits(bound, s, 1) == 0 {
			continue
		}
		for b := range p.free {
			if k := fits(p.free[b], s, cnt[i]); k > 0 {
				p.take(b, s, k)
				cnt[i] -= k
				if cnt[i] == 0 {
					break
				}
			}
		}
	}
}

// launchFill launches new nodes for the copies in cnt (only feasible
// shapes, sorted largest first) one decision at a time, until everything is
// placed or the caps stop it. keep keeps the new nodes' leftover capacity
// as bins.
func (p *planner) launchFill(sh []*shape, cnt []int64, keep bool) {
	T, R := len(p.types), len(p.idx)
	take := make([][]int64, T)
	left := make([][]int64, T)
	for t := range T {
		take[t] = make([]int64, len(sh))
		left[t] = make([]int64, R)
	}
	filled := make([]bool, T)
	want := make([]bool, R)
	floor := make([]int64, R)
	needs := make([]int, R)
	var active []int
	for p.total < p.maxLaunch {
		// The shapes left, the resources they ask for, and the least of
		// each that any of them needs (a node with less of some resource
		// free holds none of them).
		active = active[:0]
		clear(want)
		clear(needs)
		for r := range floor {
			floor[r] = math.MaxInt64
		}
		for i, s := range sh {
			if cnt[i] > 0 {
				active = append(active, i)
				for _, e := range s.ent {
					want[e.r] = true
					needs[e.r]++
					floor[e.r] = min(floor[e.r], e.v)
				}
			}
		}
		if len(active) == 0 {
			return
		}
		for r := range floor {
			if needs[r] < len(active) {
				floor[r] = 0
			}
		}
		anyGPU := p.gpu >= 0 && want[p.gpu]
		best := -1
		var bestScore score
		for t := range T {
			filled[t] = false
			pt := &p.types[t]
			if !p.canLaunch(t) {
				continue
			}
			copy(left[t], pt.cap)
			clear(take[t])
			placed := false
		fill:
			for _, i := range active {
				s := sh[i]
				k := fits(left[t], s, cnt[i])
				if k == 0 {
					continue
				}
				for _, e := range s.ent {
					left[t][e.r] -= k * e.v
				}
				take[t][i] = k
				placed = true
				for r, f := range floor {
					if left[t][r] < f {
						break fill
					}
				}
			}
			if !placed {
				continue
			}
			filled[t] = true
			if sc := p.score(pt, left[t], want, anyGPU); best < 0 || sc.better(bestScore) {
				best, bestScore = t, sc
			}
		}
		if best < 0 {
			return
		}
		// The same decision repeats while every type's fill stays the same:
		// for each shape i the best type takes, as long as the count left
		// is at least the most any type takes of it (a type taking all
		// that is left could take more, so its fill would change).
		n := int64(1)
		if p.batch {
			r := int64(math.MaxInt64)
			for _, i := range active {
				tb := take[best][i]
				if tb == 0 {
					continue
				}
				most := int64(0)
				for t := range T {
					if filled[t] {
						most = max(most, take[t][i])
					}
				}
				r = min(r, (cnt[i]-most)/tb)
			}
			n = 1 + r
		}
		n = min(n, int64(p.types[best].max-p.launched[best]), int64(p.maxLaunch-p.total))
		for _, i := range active {
			cnt[i] -= n * take[best][i]
		}
		var keepLeft []int64
		if keep {
			keepLeft = left[best]
		}
		p.launch(best, int(n), keepLeft)
	}
}

// placeDemands places the demands and fills in res's demand fields.
func (p *planner) placeDemands(res *Result) {
	sh, cnt := p.demands, p.counts
	p.firstFit(sh, cnt)
	var infeasible []*shape
	for i, s := range sh {
		if cnt[i] > 0 && !p.feasible(s) {
			infeasible = append(infeasible, s)
			cnt[i] = 0
		}
	}
	p.launchFill(sh, cnt, false)
	var unplaced []int
	for i := range sh {
		if cnt[i] > 0 {
			unplaced = append(unplaced, i)
		}
	}
	slices.SortFunc(infeasible, func(a, b *shape) int { return strings.Compare(a.key, b.key) })
	slices.SortFunc(unplaced, func(a, b int) int { return strings.Compare(sh[a].key, sh[b].key) })
	for _, s := range infeasible {
		res.Infeasible = append(res.Infeasible, s.set.Clone())
	}
	for _, i := range unplaced {
		res.Unplaced = append(res.Unplaced, Demand{Shape: sh[i].set.Clone(), Count: int(min(cnt[i], math.MaxInt))})
	}
}

// groupOutcome is what became of a placement group.
type groupOutcome int

const (
	groupPlaced groupOutcome = iota
	groupUnplaced
	groupInfeasible
)

// placeGroup places group gi atomically: on failure every capacity it
// took and every node it launched is given back.
func (p *planner) placeGroup(gi int) groupOutcome {
	bs := p.groups[gi]
	if len(bs) == 0 {
		return groupPlaced
	}
	savedBins, savedTotal, savedLaunched := len(p.free), p.total, slices.Clone(p.launched)
	p.logging, p.log = true, p.log[:0]
	var out groupOutcome
	switch p.strategy[gi] {
	case StrictPack:
		out = p.strictPack(bs)
	case StrictSpread:
		out = p.strictSpread(bs)
	case Spread:
		out = p.spread(bs)
	default:
		out = p.pack(bs)
	}
	p.logging = false
	if out != groupPlaced {
		for j := len(p.log) - 1; j >= 0; j-- {
			if u := p.log[j]; u.bin < savedBins {
				for _, e := range u.s.ent {
					p.free[u.bin][e.r] += u.k * e.v
				}
			}
		}
		p.free, p.total, p.launched = p.free[:savedBins], savedTotal, savedLaunched
	}
	return out
}

// shapeOf builds the dense form of a canonical set made of requested
// resources.
func (p *planner) shapeOf(set resources.Set) *shape {
	s := &shape{set: set, key: set.Key()}
	for k, v := range set {
		s.ent = append(s.ent, entry{p.idx[k], v})
	}
	slices.SortFunc(s.ent, func(a, b entry) int { return a.r - b.r })
	return s
}

// sum returns the shape of cnt[i] copies of each sh[i].
func (p *planner) sum(sh []*shape, cnt []int64) *shape {
	set := resources.Set{}
	for i, s := range sh {
		for _, e := range s.ent {
			set[p.names[e.r]] += cnt[i] * e.v
		}
	}
	return p.shapeOf(canonical(set))
}

// merge counts identical bundles, largest first.
func merge(bs []*shape) ([]*shape, []int64) {
	bs = slices.Clone(bs)
	slices.SortStableFunc(bs, larger)
	var sh []*shape
	var cnt []int64
	for _, s := range bs {
		if n := len(sh); n > 0 && sh[n-1].key == s.key {
			cnt[n-1]++
			continue
		}
		sh, cnt = append(sh, s), append(cnt, 1)
	}
	return sh, cnt
}

// fitOne places one s on the first bin that holds it, skipping those
// avoid says no to (nil: none), and returns the bin or -1.
func (p *planner) fitOne(s *shape, avoid func(b int) bool) int {
	for b := range p.free {
		if (avoid == nil || !avoid(b)) && fits(p.free[b], s, 1) == 1 {
			p.take(b, s, 1)
			return b
		}
	}
	return -1
}

// rest launches new nodes for what is left of a PACK or SPREAD group
// (cnt[i] copies of sh[i]); when one type holds it all and pack is set,
// on a single node.
func (p *planner) rest(sh []*shape, cnt []int64, pack bool) groupOutcome {
	left := false
	for i, s := range sh {
		if cnt[i] > 0 {
			if !p.feasible(s) {
				return groupInfeasible
			}
			left = true
		}
	}
	if !left {
		return groupPlaced
	}
	if pack {
		if t, free := p.bestTypeFor(p.sum(sh, cnt)); t >= 0 {
			p.launch(t, 1, free)
			return groupPlaced
		}
	}
	p.launchFill(sh, cnt, true)
	for _, c := range cnt {
		if c > 0 {
			return groupUnplaced
		}
	}
	return groupPlaced
}

func (p *planner) strictPack(bs []*shape) groupOutcome {
	sh, cnt := merge(bs)
	sum := p.sum(sh, cnt)
	if p.fitOne(sum, nil) >= 0 {
		return groupPlaced
	}
	if !p.feasible(sum) {
		return groupInfeasible
	}
	t, free := p.bestTypeFor(sum)
	if t < 0 {
		return groupUnplaced
	}
	p.launch(t, 1, free)
	return groupPlaced
}

func (p *planner) strictSpread(bs []*shape) groupOutcome {
	bs = slices.Clone(bs)
	slices.SortStableFunc(bs, larger)
	used := map[int]bool{}
	isUsed := func(b int) bool { return used[b] }
	out := groupPlaced
	for _, s := range bs {
		if b := p.fitOne(s, isUsed); b >= 0 {
			used[b] = true
			continue
		}
		if !p.feasible(s) {
			out = groupInfeasible
			continue
		}
		t, free := p.bestTypeFor(s)
		if t < 0 {
			if out == groupPlaced {
				out = groupUnplaced
			}
			continue
		}
		p.launch(t, 1, free)
		used[len(p.free)-1] = true
	}
	return out
}

func (p *planner) pack(bs []*shape) groupOutcome {
	sh, cnt := merge(bs)
	if p.fitOne(p.sum(sh, cnt), nil) >= 0 {
		return groupPlaced
	}
	p.firstFit(sh, cnt)
	return p.rest(sh, cnt, true)
}

func (p *planner) spread(bs []*shape) groupOutcome {
	bs = slices.Clone(bs)
	slices.SortStableFunc(bs, larger)
	used := map[int]bool{}
	isUsed := func(b int) bool { return used[b] }
	var left []*shape
	for _, s := range bs {
		b := p.fitOne(s, isUsed)
		if b < 0 {
			b = p.fitOne(s, nil)
		}
		if b < 0 {
			left = append(left, s)
			continue
		}
		used[b] = true
	}
	sh, cnt := merge(left)
	return p.rest(sh, cnt, false)
}
