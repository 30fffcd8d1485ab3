package gcs

import (
	"context"
	"strings"
	"sync"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// Telling raylets that a placement group was removed. Only the nodes that
// hold its bundles, and those whose last heartbeat showed requests queued
// for it, are told, in parallel (at most maxParallelCancels calls at
// once): a removal costs O(bundles) messages, not one per node of the
// cluster. A request queued for the group on another node after that
// node's last heartbeat is failed later: sweepRemovedDemand, run with the
// manager's other retries every heartbeat period, tells each node whose
// heartbeat shows demand for a removed group (once per node and group; the
// raylet then remembers the removal and fails later requests by itself).

// maxParallelCancels bounds the cancel calls one removal makes at once.
const maxParallelCancels = 16

// removalTargets returns the alive nodes to tell that group was removed:
// holding, the nodes its bundles were placed on, and those reporting
// demand for it.
func (s *Server) removalTargets(group ids.ID, holding map[ids.ID]bool) []*gorayv1.NodeInfo {
	suffix := resources.GroupName("", group.String(), -1) // "_group_<id>"
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*gorayv1.NodeInfo
	for _, id := range s.nodeOrder {
		n := s.nodes[id]
		if n.info.GetState() != StateAlive {
			continue
		}
		if holding[id] || demandNames(n.pending, func(name string) bool { return strings.HasSuffix(name, suffix) }) {
			out = append(out, cloneMsg(n.info))
		}
	}
	return out
}

// demandNames reports whether a resource name of pending satisfies match.
func demandNames(pending []*gorayv1.PendingDemand, match func(string) bool) bool {
	for _, d := range pending {
		for name := range d.GetResources().GetAmounts() {
			if match(name) {
				return true
			}
		}
	}
	return false
}

// groupOfResource returns the placement group a group resource name
// belongs to ("<name>_group_[<index>_]<group>").
func groupOfResource(name string) (ids.ID, bool) {
	if !resources.IsGroupName(name) {
		return ids.Nil, false
	}
	g, err := ids.Parse(name[strings.LastIndexByte(name, '_')+1:])
	return g, err == nil
}

// demandForGroups returns, for each alive node whose last heartbeat shows
// requests for a group resource, the groups named.
func (s *Server) demandForGroups() map[ids.ID][]ids.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out map[ids.ID][]ids.ID
	for _, id := range s.nodeOrder {
		n := s.nodes[id]
		if n.info.GetState() != StateAlive {
			continue
		}
		for _, d := range n.pending {
			for name := range d.GetResources().GetAmounts() {
				g, ok := groupOfResource(name)
				if !ok {
					continue
				}
				if out == nil {
					out = map[ids.ID][]ids.ID{}
				}
				if gs := out[id]; len(gs) == 0 || gs[len(gs)-1] != g {
					out[id] = append(gs, g)
				}
			}
		}
	}
	return out
}

// cancelGroupOn tells nodes that group is gone (see cancelOn), at most
// maxParallelCancels at once, and records them as told.
func (p *placementGroups) cancelGroupOn(ctx context.Context, group ids.ID, nodes []*gorayv1.NodeInfo, reason string) {
	p.mu.Lock()
	if e := p.groups[group]; e != nil {
		if e.told == nil {
			e.told = map[ids.ID]bool{}
		}
		for _, n := range nodes {
			e.told[ids.MustFromBytes(n.GetNodeId())] = true
		}
	}
	p.mu.Unlock()
	sem := make(chan struct{}, maxParallelCancels)
	var wg sync.WaitGroup
	for _, n := range nodes {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			p.cancel(ctx, pendingCancel{node: n, group: group, reason: reason})
		}()
	}
	wg.Wait()
}

// sweepRemovedDemand tells each node whose heartbeat shows requests queued
// for a removed group, and that was not told of that removal yet, that the
// group is gone, so that those requests fail.
func (p *placementGroups) sweepRemovedDemand(ctx context.Context) {
	demand := p.s.demandForGroups()
	if len(demand) == 0 {
		return
	}
	type job struct {
		group  ids.ID
		reason string
		nodes  []ids.ID
	}
	var jobs []*job
	byGroup := map[ids.ID]*job{}
	p.mu.Lock()
	for node, groups := range demand {
		for _, g := range groups {
			e := p.groups[g]
			if e == nil || e.info.GetState() != gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_REMOVED || e.told[node] {
				continue
			}
			j := byGroup[g]
			if j == nil {
				j = &job{group: g, reason: "placement group " + g.Short() + " was removed (" + e.info.GetRemovalReason() + ")"}
				byGroup[g] = j
				jobs = append(jobs, j)
			}
			j.nodes = append(j.nodes, node)
		}
	}
	p.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	infos := p.s.reachableNodes()
	for _, j := range jobs {
		var ns []*gorayv1.NodeInfo
		for _, id := range j.nodes {
			if n := infos[id]; n != nil {
				ns = append(ns, n)
			}
		}
		p.log.Debug("failing requests queued for a removed placement group", "group", j.group.Short(), "nodes", len(ns))
		p.cancelGroupOn(ctx, j.group, ns, j.reason)
	}
}
