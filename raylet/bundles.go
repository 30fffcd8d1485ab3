package raylet

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/resources"
)

// This file is the scheduler's part of placement group reservation (see
// PrepareBundleResources, CommitBundleResources and CancelResourceReserve):
// the bundles held on this node and the groups known to be removed. Bundles
// are resource accounting, so they live under the scheduler's lock with
// the total and available resources they change.

// Removed placement groups are remembered this long (and at most this
// many), so that lease requests for them that arrive after the removal
// fail instead of waiting for resources that will never come.
const (
	removedGroupTTL  = 10 * time.Minute
	maxRemovedGroups = 4096
)

// maxGroupBundles bounds the bundles of one group, as the GCS does: a
// prepare naming more (or an index past it) is refused before the
// scheduler's lock is taken.
const maxGroupBundles = 1000

// groupBundle is one bundle of a placement group as the GCS asks this node
// to hold it: its index in the group and its resources (plain names). It
// is a value decoded for one call and never changed; it needs no lock.
type groupBundle struct {
	index int
	res   resources.Set
}

// heldBundle is a bundle held on this node: prepared (its resources are
// out of the node's available resources) or committed (they are the
// group's resources, under the group's names, in total and available).
// res never changes; committed is guarded by scheduler.mu.
type heldBundle struct {
	res       resources.Set
	committed bool
}

// PlacementGroupRemovedError fails a lease request for a placement group
// that was removed: queued requests fail with it when the GCS cancels the
// group's reservation on this node, and so do later ones. The reply is
// LeaseReply{unschedulable: Reason, placement_group_removed: true}.
type PlacementGroupRemovedError struct {
	Group  ids.ID
	Reason string
}

func (e *PlacementGroupRemovedError) Error() string {
	if e.Reason != "" {
		return "raylet: " + e.Reason
	}
	return fmt.Sprintf("raylet: placement group %s was removed", e.Group)
}

// reason is what the lease reply says.
func (e *PlacementGroupRemovedError) reason() string {
	if e.Reason != "" {
		return e.Reason
	}
	return fmt.Sprintf("placement group %s was removed", e.Group)
}

// BundleNotPreparedError is returned by CommitBundleResources for a bundle
// this node does not hold (never prepared, or cancelled since).
type BundleNotPreparedError struct {
	Group ids.ID
	Index int
}

func (e *BundleNotPreparedError) Error() string {
	return fmt.Sprintf("raylet: bundle %d of placement group %s is not prepared on this node", e.Index, e.Group)
}

// removedGroups remembers removed placement groups with the reason given.
// Entries expire after removedGroupTTL; at most maxRemovedGroups are kept,
// the oldest dropped first. It is guarded by scheduler.mu.
type removedGroups struct {
	at    map[ids.ID]removal
	order []removedGroup // oldest first
}

type removal struct {
	at     time.Time
	reason string
}

type removedGroup struct {
	id ids.ID
	at time.Time
}

// add records group as removed at now.
func (g *removedGroups) add(group ids.ID, reason string, now time.Time) {
	if g.at == nil {
		g.at = map[ids.ID]removal{}
	}
	g.at[group] = removal{now, reason}
	g.order = append(g.order, removedGroup{group, now})
	for len(g.order) > 0 && (len(g.order) > maxRemovedGroups || now.Sub(g.order[0].at) > removedGroupTTL) {
		if old := g.order[0]; g.at[old.id].at.Equal(old.at) {
			delete(g.at, old.id)
		}
		g.order = g.order[1:]
	}
}

// lookup returns the error for a request of group when the group was
// removed (within the TTL), else nil.
func (g *removedGroups) lookup(group ids.ID, now time.Time) *PlacementGroupRemovedError {
	r, ok := g.at[group]
	if !ok || now.Sub(r.at) > removedGroupTTL {
		return nil
	}
	return &PlacementGroupRemovedError{Group: group, Reason: r.reason}
}

// prepareBundles holds bundles of group out of the available resources,
// all or none. Bundles already held (prepared or committed) are not held
// again. When the others do not fit, ok is false, reason says what is
// missing, and nothing is held. avail is the available resources after
// the call.
func (s *scheduler) prepareBundles(group ids.ID, bundles []groupBundle) (ok bool, reason string, avail resources.Set, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, "", nil, ErrShuttingDown
	}
	if gone := s.removed.lookup(group, time.Now()); gone != nil {
		return false, gone.reason(), s.available.Clone(), nil
	}
	if s.draining {
		return false, fmt.Sprintf("node %s is draining: it takes no new placement group bundles", s.nodeID.Short()), s.available.Clone(), nil
	}
	held := s.bundles[group]
	need := resources.Set{}
	var fresh []groupBundle
	seen := make(map[int]bool, len(bundles))
	for _, b := range bundles {
		if held[b.index] != nil || seen[b.index] {
			continue
		}
		seen[b.index] = true
		fresh = append(fresh, b)
		need.Add(b.res)
	}
	if !s.available.Fits(need) {
		return false, s.shortfallLocked(group, fresh, need), s.available.Clone(), nil
	}
	if len(fresh) > 0 && held == nil {
		held = map[int]*heldBundle{}
		s.bundles[group] = held
	}
	for _, b := range fresh {
		held[b.index] = &heldBundle{res: b.res}
	}
	s.available.Sub(need)
	return true, "", s.available.Clone(), nil
}

// shortfallLocked explains why need (of bundles) does not fit the
// available resources.
func (s *scheduler) shortfallLocked(group ids.ID, bundles []groupBundle, need resources.Set) string {
	idx := make([]string, 0, len(bundles))
	for _, b := range bundles {
		idx = append(idx, strconv.Itoa(b.index))
	}
	var short []string
	for _, name := range s.available.Missing(need) {
		short = append(short, fmt.Sprintf("%s (needs %s, %s available of %s)", name,
			resources.FormatAmount(name, need[name]), resources.FormatAmount(name, max(s.available[name], 0)),
			resources.FormatAmount(name, s.total[name])))
	}
	sort.Strings(short)
	return fmt.Sprintf("node %s cannot hold bundles %s of placement group %s: not enough %s",
		s.nodeID.Short(), strings.Join(idx, ", "), group.Short(), strings.Join(short, ", "))
}

// commitBundles makes prepared bundles of group the group's resources on
// this node: each bundle's resources under the group's names
// (resources.BundleResources) join the total and available resources, and
// waiting requests are dispatched. Committed bundles are skipped; a bundle
// that is not held fails the call (and nothing is committed). avail is the
// available resources once the requests that now fit are reserved.
func (s *scheduler) commitBundles(group ids.ID, indexes []int) (avail resources.Set, err error) {
	rd := rounds.Get().(*dispatchRound)
	defer putRound(rd)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrShuttingDown
	}
	held := s.bundles[group]
	for _, i := range indexes {
		if held[i] == nil {
			s.mu.Unlock()
			return nil, &BundleNotPreparedError{Group: group, Index: i}
		}
	}
	hex := group.String()
	added := false
	for _, i := range indexes {
		b := held[i]
		if b.committed {
			continue
		}
		b.committed = true
		br := resources.BundleResources(b.res, hex, i)
		s.total.Add(br)
		s.available.Add(br)
		added = true
	}
	if added {
		s.collectLocked(rd)
	}
	avail = s.available.Clone()
	s.mu.Unlock()
	s.dispatchFrom(rd)
	return avail, nil
}

// cancelBundles gives back the bundles of group named by indexes (all:
// every bundle of the group held here). A prepared bundle's resources
// return to available. A committed bundle's group resources leave total
// and available and its resources return to available; the leases that
// hold a group resource no bundle provides any more (the bundle's own
// names, and the any-bundle names once the group has no bundle left here)
// end at once and are returned for the caller to kill their workers. With
// all, the group is also remembered as removed: its waiting requests fail
// with PlacementGroupRemovedError, as do later ones. Unknown bundles are
// ignored, so a repeated call is a no-op. Leases of any bundle may hold
// more of an any-bundle resource than the bundles left provide: its
// available amount is then negative until enough of them end, as a
// resumed worker's CPU oversubscribes the node.
func (s *scheduler) cancelBundles(group ids.ID, indexes []int, all bool, reason string) (ended []*lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if all {
		removed := &PlacementGroupRemovedError{Group: group, Reason: reason}
		s.removed.add(group, reason, time.Now())
		s.takeQueuedLocked(func(p *pendingLease) bool {
			if p.group != group {
				return false
			}
			p.err = removed
			p.answer()
			return true
		})
		indexes = nil
		for i := range s.bundles[group] {
			indexes = append(indexes, i)
		}
	}
	dropped := s.releaseLocked(group, indexes, nil)
	return s.endOrphanedLocked(dropped)
}

// releaseLocked gives back the bundles of group named by indexes (unknown
// ones are skipped): a prepared bundle's resources return to available; a
// committed bundle's group resources also leave total and available. It
// appends the bundles given back to released and returns the group
// resource names whose amount went down, for endOrphanedLocked. s.mu must
// be held.
func (s *scheduler) releaseLocked(group ids.ID, indexes []int, released *[]bundleRef) (dropped []string) {
	held := s.bundles[group]
	hex := group.String()
	for _, i := range indexes {
		b := held[i]
		if b == nil {
			continue
		}
		delete(held, i)
		if b.committed {
			br := resources.BundleResources(b.res, hex, i)
			s.total.Sub(br)
			s.available.Sub(br)
			for name := range br {
				dropped = append(dropped, name)
			}
		}
		s.available.Add(b.res)
		if released != nil {
			*released = append(*released, bundleRef{group: group, index: i})
		}
	}
	if len(held) == 0 {
		delete(s.bundles, group)
	}
	return dropped
}

// endOrphanedLocked ends the leases that hold a group resource of dropped
// no bundle provides any more (the released bundles' own names, and the
// any-bundle names once their group has no bundle left here) and returns
// them, for the caller to kill their workers. s.mu must be held.
func (s *scheduler) endOrphanedLocked(dropped []string) (ended []*lease) {
	var gone []string
	for _, name := range dropped {
		if _, ok := s.total[name]; !ok && !slices.Contains(gone, name) {
			gone = append(gone, name)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	for _, l := range s.leases {
		for _, name := range gone {
			if l.res[name] > 0 {
				ended = append(ended, l)
				break
			}
		}
	}
	for _, l := range ended {
		s.endLeaseLocked(l)
	}
	return ended
}

// bundleRef names one bundle of a placement group held on this node.
type bundleRef struct {
	group ids.ID
	index int
}

// releaseUnused gives back every bundle held here, prepared or committed,
// that inUse does not name, each as cancelBundles gives back a named one:
// its resources return, and the leases holding group resources no bundle
// provides any more end (returned for the caller to kill their workers).
// It is the GCS's sweep after it restarted (ReleaseUnusedBundles): the
// groups themselves live on in the GCS, to be placed again here or
// elsewhere, so they are not remembered as removed and requests queued
// for them keep waiting (a request for bundles placed elsewhere later is
// passed on by respill). released lists what was given back, by group
// then index; a repeated call releases nothing.
func (s *scheduler) releaseUnused(inUse map[bundleRef]bool) (released []bundleRef, ended []*lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	groups := make([]ids.ID, 0, len(s.bundles))
	for g := range s.bundles {
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(a, b ids.ID) int { return strings.Compare(a.String(), b.String()) })
	var dropped []string
	for _, g := range groups {
		var unused []int
		for i := range s.bundles[g] {
			if !inUse[bundleRef{group: g, index: i}] {
				unused = append(unused, i)
			}
		}
		slices.Sort(unused)
		dropped = append(dropped, s.releaseLocked(g, unused, &released)...)
	}
	return released, s.endOrphanedLocked(dropped)
}

// groupRemovedLocked returns the error for a request of a removed group,
// else nil.
func (s *scheduler) groupRemovedLocked(p *pendingLease) error {
	if p.group.IsNil() {
		return nil
	}
	if gone := s.removed.lookup(p.group, time.Now()); gone != nil {
		return gone
	}
	return nil
}

// infeasibleLocked reports whether this node can never fit res: it lacks
// a resource, or has too little of it. A placement group resource the node
// has none of yet is not a reason: the group may still be placed here.
func (s *scheduler) infeasibleLocked(res resources.Set) bool {
	for name, v := range res {
		t, ok := s.total[name]
		if v > 0 && t < v && (ok || !resources.IsGroupName(name)) {
			return true
		}
	}
	return false
}

// heldBundles reports the bundles of group held here by index: true for
// committed, false for prepared (tests and stats).
// holdsBundles reports whether the node holds any placement group bundle,
// prepared or committed (a registration says so: the GCS sweeps it).
func (s *scheduler) holdsBundles() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, bs := range s.bundles {
		if len(bs) > 0 {
			return true
		}
	}
	return false
}

func (s *scheduler) heldBundles(group ids.ID) map[int]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]bool{}
	for i, b := range s.bundles[group] {
		out[i] = b.committed
	}
	return out
}
