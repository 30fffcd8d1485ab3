package gcs

import (
	"slices"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Versioned node views. Every raylet refreshes its view of the cluster
// after every report; sending each the whole table made the GCS's work
// O(N²) per report period (docs/scale.md). Instead the GCS numbers every
// change of a node's view as raylets use it (registration, death, total,
// draining, available resources past loadThreshold), keeps the last
// maxNodeChanges of them, and answers a refresh that names the version it
// has with only the nodes changed since: O(changes) per refresh. A caller
// without a version, one from another epoch (this GCS restarted) or one
// further behind than the log reaches gets the whole table.

const (
	// maxNodeChanges bounds the change log: a caller more changes behind
	// gets the whole table (which is then about as cheap as the changes).
	maxNodeChanges = 4096
	// loadThreshold: a heartbeat's available resources are a change of
	// the view only when some resource moved by at least 1/loadThreshold
	// of the node's total of it since the view last changed, or reached
	// or left zero. Load moves with every task; schedulers need to know
	// what fits where, not every unit.
	loadThreshold = 10
	// loadRepublish: available resources that moved less than the
	// threshold are published anyway after this long, so that no view
	// stays off by a small amount for ever.
	loadRepublish = 5 * time.Second
)

// nodeChange is one entry of the change log: node id's view changed at
// version.
type nodeChange struct {
	version uint64
	id      ids.ID
}

// nodeChanges is the node table's change log; s.mu guards it.
type nodeChanges struct {
	// epoch names this GCS's incarnation: versions of another mean
	// nothing here.
	epoch string
	// version is the version of the latest change (0: none yet).
	version uint64
	// log is a ring of the last changes, oldest at start; dropped is the
	// version of the newest change that fell out of it.
	log     []nodeChange
	start   int
	dropped uint64
	limit   int
}

func newNodeChanges(limit int) nodeChanges {
	return nodeChanges{epoch: ids.New().String(), limit: limit}
}

// add records that node id changed and returns the new version.
func (c *nodeChanges) add(id ids.ID) uint64 {
	c.version++
	e := nodeChange{version: c.version, id: id}
	if len(c.log) < c.limit {
		c.log = append(c.log, e)
		return c.version
	}
	c.dropped = c.log[c.start].version
	c.log[c.start] = e
	c.start = (c.start + 1) % len(c.log)
	return c.version
}

// since returns the ids of the nodes changed after version v, oldest
// change first, each once; ok is false when the log cannot tell (another
// epoch, changes dropped, or a version this GCS never gave).
func (c *nodeChanges) since(epoch string, v uint64) (changed []ids.ID, ok bool) {
	if epoch != c.epoch || v < c.dropped || v > c.version {
		return nil, false
	}
	seen := map[ids.ID]bool{}
	for i := len(c.log) - 1; i >= 0; i-- {
		e := c.log[(c.start+i)%len(c.log)]
		if e.version <= v {
			break
		}
		if !seen[e.id] {
			seen[e.id] = true
			changed = append(changed, e.id)
		}
	}
	slices.Reverse(changed)
	return changed, true
}

// nodeChangedLocked records that n's view changed: the next refreshes
// bring it. s.mu must be held.
func (s *Server) nodeChangedLocked(id ids.ID, n *nodeEntry) {
	s.changes.add(id)
	n.pubView = nil
	n.pubAvailable = n.available
	n.pubAt = s.now()
	n.loadDrift = false
}

// availableChangedLocked records a node's new available resources (a
// heartbeat's): a change of its view when they moved past the threshold
// since it was last published, otherwise a drift published later by
// republishLoadLocked. s.mu must be held.
func (s *Server) availableChangedLocked(id ids.ID, n *nodeEntry) {
	switch {
	case loadMoved(n.pubAvailable, n.available, n.totalLocked(), loadThreshold):
		s.nodeChangedLocked(id, n)
	case !sameAmounts(n.pubAvailable, n.available):
		n.loadDrift = true
	}
}

// republishLoadLocked publishes the available resources of a node that
// drifted below the threshold for loadRepublish. s.mu must be held.
func (s *Server) republishLoadLocked(id ids.ID, n *nodeEntry, now time.Time) {
	if n.loadDrift && now.Sub(n.pubAt) >= loadRepublish {
		s.nodeChangedLocked(id, n)
	}
}

// loadMoved reports whether available resources moved from pub to cur
// enough to publish: a resource reached or left zero, appeared or
// vanished, or moved by at least 1/frac of the node's total of it.
func loadMoved(pub, cur, total *gorayv1.Resources, frac int64) bool {
	p, c, t := pub.GetAmounts(), cur.GetAmounts(), total.GetAmounts()
	if (pub == nil) != (cur == nil) {
		return true
	}
	moved := func(k string, a, b int64) bool {
		if (a == 0) != (b == 0) {
			return true
		}
		d := a - b
		if d < 0 {
			d = -d
		}
		return d >= max(t[k]/frac, 1)
	}
	for k, a := range p {
		if moved(k, a, c[k]) {
			return true
		}
	}
	for k, b := range c {
		if _, ok := p[k]; !ok && moved(k, 0, b) {
			return true
		}
	}
	return false
}

// sameAmounts reports whether a and b hold the same amounts.
func sameAmounts(a, b *gorayv1.Resources) bool {
	if (a == nil) != (b == nil) || len(a.GetAmounts()) != len(b.GetAmounts()) {
		return false
	}
	for k, v := range a.GetAmounts() {
		if w, ok := b.GetAmounts()[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// publishedLocked returns n's view as versioned refreshes see it: as of
// its last change (so a whole table and the deltas after it agree), built
// once per change and shared by the replies. The figures a heartbeat
// brings every time (last heartbeat, store, spill, memory, pending
// demand) are as of that change too; GetAllNodes without a version has
// them current. s.mu must be held.
func (n *nodeEntry) publishedLocked() *gorayv1.NodeView {
	if n.pubView == nil {
		n.pubView = n.viewLocked()
	}
	return n.pubView
}

// currentViewLocked returns n's view with its last heartbeat's figures, as
// callers without a version get it. It clones nothing: the NodeInfo is the
// published view's (which changes only with the view, and is never
// changed once built), and the heartbeat's messages are the entry's own,
// which heartbeats replace and never change. The reply must not change
// it. A joining raylet's first refresh is such a call, a thousand of them
// during a thousand nodes' join, each under s.mu: cloning every view there
// held the lock for milliseconds per call, and heartbeats waited behind
// it (docs/scale.md, the join storm). s.mu must be held.
func (n *nodeEntry) currentViewLocked() *gorayv1.NodeView {
	v := &gorayv1.NodeView{
		Info:            n.publishedLocked().GetInfo(),
		Available:       n.available,
		StoreUsed:       n.storeUsed,
		StoreCapacity:   n.storeCapacity,
		LastHeartbeatMs: n.lastHeartbeat.UnixMilli(),
		Draining:        n.draining,
		Spill:           n.spill,
		Memory:          n.memory,
		Pending:         slices.Clone(n.pending),
	}
	if n.available != nil && len(n.holding) > 0 {
		v.Available = n.availableViewLocked()
	}
	return v
}

// NodesSince returns the node table as a caller at version v of epoch
// needs it: only the views changed since, when the change log reaches
// back to v in this epoch (delta), else every node in registration order.
// Either way the reply carries the epoch and version to ask from next. A
// caller without an epoch gets every node's current view
// (currentViewLocked); a versioned caller gets the published views
// (publishedLocked). Both share messages with the GCS's tables and other
// replies: the caller must not change them.
func (s *Server) NodesSince(epoch string, v uint64) *gorayv1.GetAllNodesReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := &gorayv1.GetAllNodesReply{Epoch: s.changes.epoch, Version: s.changes.version}
	if epoch == "" {
		rep.Nodes = make([]*gorayv1.NodeView, 0, len(s.nodeOrder))
		for _, id := range s.nodeOrder {
			if n := s.nodes[id]; n.viewableLocked() {
				rep.Nodes = append(rep.Nodes, n.currentViewLocked())
			}
		}
		return rep
	}
	order, ok := s.changes.since(epoch, v)
	rep.Delta = ok
	if !ok {
		order = s.nodeOrder
	}
	rep.Nodes = make([]*gorayv1.NodeView, 0, len(order))
	for _, id := range order {
		if n := s.nodes[id]; n.viewableLocked() {
			rep.Nodes = append(rep.Nodes, n.publishedLocked())
		}
	}
	return rep
}

// viewableLocked reports whether views show n: not while it is alive and
// known only from the storage (restore.go), so that no raylet, collector
// or client dials an address the storage alone vouches for. s.mu must be
// held.
func (n *nodeEntry) viewableLocked() bool {
	// (nil: a dead node dropped from the history since it changed.)
	return n != nil && (!n.fromStorage || n.info.GetState() == StateDead)
}
