package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"

	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// placementGroupRow is one placement group of `list placement-groups`.
type placementGroupRow struct {
	PlacementGroupID string `json:"placement_group_id"`
	Name             string `json:"name"`
	Namespace        string `json:"namespace"`
	JobID            string `json:"job_id"`
	Detached         bool   `json:"detached"`
	Strategy         string `json:"strategy"`
	// State is PENDING, PREPARED, CREATED, REMOVED or RESCHEDULING.
	State   string      `json:"state"`
	Bundles []bundleRow `json:"bundles"`
	// PendingReason says why a PENDING or RESCHEDULING group waits;
	// Infeasible marks one no node of the cluster could ever hold.
	PendingReason string `json:"pending_reason,omitempty"`
	Infeasible    bool   `json:"infeasible"`
	RemovalReason string `json:"removal_reason,omitempty"`
	Reschedules   int32  `json:"reschedules"`
	CreateTimeMs  int64  `json:"create_time_ms"`
	ReadyTimeMs   int64  `json:"ready_time_ms,omitempty"`
	RemoveTimeMs  int64  `json:"remove_time_ms,omitempty"`
}

// bundleRow is one bundle of a placement group and the node holding it
// ("" while it is not placed).
type bundleRow struct {
	Index     int32   `json:"index"`
	Resources amounts `json:"resources"`
	NodeID    string  `json:"node_id"`
}

func placementGroupRows(gs []*pb.PlacementGroupInfo) []placementGroupRow {
	out := []placementGroupRow{}
	for _, g := range gs {
		r := placementGroupRow{
			PlacementGroupID: hexID(g.GetPlacementGroupId()), Name: g.GetName(), Namespace: g.GetNamespace(), JobID: hexID(g.GetJobId()), Detached: g.GetDetached(),
			Strategy: strings.TrimPrefix(g.GetStrategy().String(), "PLACEMENT_STRATEGY_"),
			State:    strings.TrimPrefix(g.GetState().String(), "PLACEMENT_GROUP_STATE_"),
			Bundles:  []bundleRow{}, PendingReason: g.GetPendingReason(), Infeasible: g.GetInfeasible(),
			RemovalReason: g.GetRemovalReason(), Reschedules: g.GetReschedules(),
			CreateTimeMs: g.GetCreateTimeMs(), ReadyTimeMs: g.GetReadyTimeMs(), RemoveTimeMs: g.GetRemoveTimeMs(),
		}
		for _, b := range g.GetBundles() {
			r.Bundles = append(r.Bundles, bundleRow{Index: b.GetIndex(), Resources: amountsOf(b.GetResources()), NodeID: hexID(b.GetNodeId())})
		}
		out = append(out, r)
	}
	return out // the GCS lists them in creation order
}

// formatBundles writes bundles as "{CPU: 1} {CPU: 2, GPU: 1}".
func formatBundles(bs []bundleRow) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = "{" + formatSet(b.Resources) + "}"
	}
	return strings.Join(parts, " ")
}

// formatBundleNodes writes where each bundle is, by index: "0@1a2b3c4d
// 1@-".
func formatBundleNodes(bs []bundleRow) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		node := "-"
		if b.NodeID != "" {
			node = shortHex(b.NodeID)
		}
		parts[i] = strconv.Itoa(int(b.Index)) + "@" + node
	}
	return strings.Join(parts, " ")
}

// groupNote is the reason shown for a group: why it waits, or why it was
// removed.
func groupNote(g placementGroupRow) string {
	switch g.State {
	case "REMOVED":
		return g.RemovalReason
	case "CREATED":
		return ""
	}
	if g.Infeasible {
		return "infeasible: " + g.PendingReason
	}
	return g.PendingReason
}

func writePlacementGroups(w io.Writer, gs []placementGroupRow) error {
	t := newTable(w, "PLACEMENT GROUP ID", "NAME", "NAMESPACE", "STATE", "STRATEGY", "JOB", "BUNDLES", "NODES", "REASON")
	for _, g := range gs {
		name := g.Name
		if g.Detached {
			name = orDash(name) + " (detached)"
		}
		t.row(g.PlacementGroupID, orDash(name), orDash(g.Namespace), g.State, g.Strategy, shortHex(g.JobID), formatBundles(g.Bundles),
			formatBundleNodes(g.Bundles), orDash(groupNote(g)))
	}
	return t.flush()
}

// groupCounts counts placement groups by state for `goray status`.
type groupCounts struct {
	Total        int `json:"total"`
	Pending      int `json:"pending"`
	Created      int `json:"created"`
	Rescheduling int `json:"rescheduling"`
	Removed      int `json:"removed"`
}

// pendingGroup is a placement group waiting for room: pending demand of
// `goray status`.
type pendingGroup struct {
	PlacementGroupID string    `json:"placement_group_id"`
	Name             string    `json:"name,omitempty"`
	State            string    `json:"state"`
	Strategy         string    `json:"strategy"`
	Bundles          []amounts `json:"bundles"`
	Reason           string    `json:"reason"`
	Infeasible       bool      `json:"infeasible"`
}

// addPlacementGroups counts gs into the report and lists the groups that
// wait (PENDING, PREPARED or RESCHEDULING) as pending demand.
func (r *statusReport) addPlacementGroups(gs []*pb.PlacementGroupInfo) {
	r.PendingGroups = []pendingGroup{}
	for _, g := range placementGroupRows(gs) {
		r.PlacementGroups.Total++
		switch g.State {
		case "CREATED":
			r.PlacementGroups.Created++
			continue
		case "REMOVED":
			r.PlacementGroups.Removed++
			continue
		case "RESCHEDULING":
			r.PlacementGroups.Rescheduling++
		default:
			r.PlacementGroups.Pending++
		}
		p := pendingGroup{PlacementGroupID: g.PlacementGroupID, Name: g.Name, State: g.State, Strategy: g.Strategy,
			Bundles: []amounts{}, Reason: g.PendingReason, Infeasible: g.Infeasible}
		for _, b := range g.Bundles {
			if g.State == "RESCHEDULING" && b.NodeID != "" {
				continue // still held: only the lost bundles are demand
			}
			p.Bundles = append(p.Bundles, maps.Clone(b.Resources))
		}
		r.PendingGroups = append(r.PendingGroups, p)
	}
}

// writePendingGroups writes the waiting groups under "Pending demand".
func writePendingGroups(w io.Writer, ps []pendingGroup) {
	for _, p := range ps {
		name := ""
		if p.Name != "" {
			name = fmt.Sprintf(" %q", p.Name)
		}
		bundles := make([]string, len(p.Bundles))
		for i, b := range p.Bundles {
			bundles[i] = "{" + formatSet(b) + "}"
		}
		line := fmt.Sprintf("  placement group %s%s %s %s: %s", shortHex(p.PlacementGroupID), name, p.Strategy, p.State, strings.Join(bundles, " "))
		switch {
		case p.Infeasible:
			line += " (infeasible: no node can ever hold it: " + p.Reason + ")"
		case p.Reason != "":
			line += " (waiting: " + p.Reason + ")"
		}
		fmt.Fprintln(w, line)
	}
}

// withoutGroups drops placement group resources (CPU_group_...) from a
// set, for the text views: the groups' own section shows them.
func withoutGroups(s amounts) amounts {
	out := amounts{}
	for k, v := range s {
		if !resources.IsGroupName(k) {
			out[k] = v
		}
	}
	return out
}

// PlacementGroups returns every placement group, removed ones too.
func (c *grpcCluster) PlacementGroups(ctx context.Context) ([]*pb.PlacementGroupInfo, error) {
	r, err := c.gcs.ListPlacementGroups(ctx, &pb.ListPlacementGroupsRequest{})
	if err != nil {
		return nil, c.gcsErr("placement groups", err)
	}
	return r.GetGroups(), nil
}
