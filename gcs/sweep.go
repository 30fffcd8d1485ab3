package gcs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// This file is the placement group manager's sweep of a node's bundles
// (Ray's ReleaseUnusedBundles). A GCS that dies during a two-phase
// reservation can leave a raylet holding bundles, prepared or committed,
// that the restored table does not have placed there: a PREPARED group
// is restored PENDING and placed again, maybe elsewhere. When a node comes
// back (it registers again with the cluster id, as a node a restored GCS
// read back from its storage must before it is dialled) the manager tells
// its raylet which bundles the table has placed on it, and the raylet
// gives back every other one.

// Backoff between attempts of a sweep a raylet did not take.
const (
	sweepRetryInitial = 100 * time.Millisecond
	sweepRetryMax     = 5 * time.Second
)

// Why a node is swept (said in logs and to the work a release ends). A
// restored GCS sweeps a node when it registers again (restore.go), and any
// GCS a node that registers holding bundles without the cluster id (its
// first registration's answer was lost with the GCS that prepared them).
const (
	sweepReregistered = "the node registered again"
	sweepHoldsBundles = "the node registered holding placement group bundles"
)

// pendingSweep is a sweep of one node not taken by its raylet yet. Its
// fields are guarded by placementGroups.mu.
type pendingSweep struct {
	why  string
	b    *backoff.ExponentialBackOff
	next time.Time // no attempt before
	// failures counts the attempts that failed (the first is logged as a
	// warning, the others at debug level).
	failures int
}

// requestSweep asks the manager's goroutine to sweep node soon. It does
// not wait for the sweep: a sweep already asked for the node starts over
// at once, without backoff.
func (p *placementGroups) requestSweep(node ids.ID, why string) {
	if p.reserver == nil {
		return
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = sweepRetryInitial, sweepRetryMax
	p.mu.Lock()
	p.sweeps[node] = &pendingSweep{why: why, b: b}
	p.mu.Unlock()
	p.wake()
}

// nextSweep returns how long until the earliest sweep is due, and false
// when none waits.
func (p *placementGroups) nextSweep() (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sweeps) == 0 {
		return 0, false
	}
	var first time.Time
	for _, sw := range p.sweeps {
		if first.IsZero() || sw.next.Before(first) {
			first = sw.next
		}
	}
	return max(time.Until(first), 0), true
}

// retrySweeps runs the sweeps that are due, in node id order; those of
// nodes no longer alive are dropped (a dead node holds nothing). It runs
// on the manager's goroutine, between placements, so no reservation is
// under way on any node while a sweep's in-use list is made and sent.
func (p *placementGroups) retrySweeps(ctx context.Context) {
	now := time.Now()
	p.mu.Lock()
	var due []ids.ID
	for id, sw := range p.sweeps {
		if !sw.next.After(now) {
			due = append(due, id)
		}
	}
	p.mu.Unlock()
	if len(due) == 0 {
		return
	}
	slices.SortFunc(due, func(a, b ids.ID) int { return strings.Compare(a.String(), b.String()) })
	// A node known only from the storage is not swept: it is when it
	// registers again (restore.go).
	alive := p.s.reachableNodes()
	for _, id := range due {
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		sw := p.sweeps[id]
		if sw != nil && alive[id] == nil {
			delete(p.sweeps, id)
			sw = nil
		}
		p.mu.Unlock()
		if sw != nil {
			p.sweep(ctx, id, alive[id], sw)
		}
	}
}

// inUseOn lists the bundles the table has placed on node: those of every
// group that is not REMOVED whose bundle names the node (CREATED and
// RESCHEDULING groups, and a group waiting again that kept bundles
// committed before a node death cut its placement short).
func (p *placementGroups) inUseOn(node ids.ID) []*gorayv1.BundleRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*gorayv1.BundleRef
	for _, gid := range p.order {
		e := p.groups[gid]
		if e.info.GetState() == gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED {
			continue
		}
		for _, b := range e.info.GetBundles() {
			if nid := b.GetNodeId(); len(nid) > 0 && ids.MustFromBytes(nid) == node {
				out = append(out, &gorayv1.BundleRef{PlacementGroupId: gid.Bytes(), Index: b.GetIndex()})
			}
		}
	}
	return out
}

// sweep tells node's raylet which bundles the table has placed on it; the
// raylet gives back every other one. A failure is retried with backoff
// (retrySweeps) until the raylet takes it, the node dies or ctx ends (the
// server stops).
func (p *placementGroups) sweep(ctx context.Context, id ids.ID, node *gorayv1.NodeInfo, sw *pendingSweep) {
	inUse := p.inUseOn(id)
	reason := fmt.Sprintf("the GCS released a placement group bundle node %s held that no group has placed there (%s)", id.Short(), sw.why)
	cctx, cancel := context.WithTimeout(ctx, reserveTimeout)
	rep, err := p.reserver.ReleaseUnused(cctx, node, inUse, reason)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		var wait time.Duration
		failures := 0
		if p.sweeps[id] == sw {
			sw.failures++
			failures = sw.failures
			wait = sw.b.NextBackOff()
			sw.next = time.Now().Add(wait)
		}
		p.mu.Unlock()
		switch failures {
		case 0: // asked for again meanwhile: the new sweep runs next
		case 1:
			p.log.Warn("a raylet did not take the sweep of its placement group bundles; retrying", "node", id.Short(), "why", sw.why, "retry_in", wait, "error", err)
		default:
			p.log.Debug("a raylet did not take the sweep of its placement group bundles; retrying", "node", id.Short(), "attempts", failures, "retry_in", wait, "error", err)
		}
		return
	}
	p.mu.Lock()
	if p.sweeps[id] == sw {
		delete(p.sweeps, id)
	}
	p.mu.Unlock()
	p.s.setAvailable(id, rep.GetAvailable())
	if len(rep.GetReleased()) == 0 {
		p.log.Debug("swept a node's placement group bundles: none to release", "node", id.Short(), "why", sw.why, "in_use", len(inUse))
		return
	}
	released := make([]string, 0, len(rep.GetReleased()))
	for _, b := range rep.GetReleased() {
		g, err := ids.FromBytes(b.GetPlacementGroupId())
		name := g.Short()
		if err != nil {
			name = fmt.Sprintf("%x", b.GetPlacementGroupId())
		}
		released = append(released, fmt.Sprintf("%s[%d]", name, b.GetIndex()))
	}
	p.log.Info("released placement group bundles a raylet held that no group has placed there", "node", id.Short(), "why", sw.why, "released", released, "in_use", len(inUse))
}
