package state

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"

	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Where an object's value lives.
const (
	WhereInline  = "inline"  // in the owner's memory
	WhereStore   = "store"   // in the shared-memory store of StoreNodes
	WhereSpilled = "spilled" // only in spill storage
)

// ObjectRow is one object (`goray list objects`).
type ObjectRow struct {
	ObjectID string `json:"object_id"`
	// State is PENDING, READY or FAILED; "" when no owner reported it.
	State string `json:"state"`
	Size  int64  `json:"size"`
	// Where is "inline" or "store".
	Where string `json:"where"`
	// StoreNodes are the nodes whose store holds the object.
	StoreNodes []string `json:"store_nodes"`
	// Spilled is where the object's bytes are stored when it was spilled
	// ("s3://bucket/prefix/file.spill@offset", one per node).
	Spilled       []string `json:"spilled,omitempty"`
	OwnerWorkerID string   `json:"owner_worker_id"`
	OwnerNodeID   string   `json:"owner_node_id"`
	LocalRefs     int64    `json:"local_refs"`
	SubmittedRefs int64    `json:"submitted_refs"`
	Borrowers     int64    `json:"borrowers"`
	CallSite      string   `json:"call_site,omitempty"`
}

// ObjectRows merges what owners report with what the stores hold. Objects
// in a store that no owner reported come last.
func ObjectRows(d NodeData) []ObjectRow {
	inStore := map[string][]string{} // object id → node ids
	sizes := map[string]int64{}
	spilled := map[string][]string{} // object id → file@offset
	for _, node := range slices.Sorted(maps.Keys(d.Stats)) {
		for _, o := range d.Stats[node].GetStoreObjectsList() {
			if !o.GetFound() && len(o.GetObjectId()) == 0 {
				continue
			}
			id := hexID(o.GetObjectId())
			inStore[id] = append(inStore[id], node)
			sizes[id] = o.GetDataSize()
		}
		for _, o := range d.Stats[node].GetSpilled() {
			id := hexID(o.GetObjectId())
			spilled[id] = append(spilled[id], fmt.Sprintf("%s@%d", o.GetUrl(), o.GetOffset()))
			if _, ok := sizes[id]; !ok {
				sizes[id] = o.GetSize()
			}
		}
	}
	out := []ObjectRow{}
	reported := map[string]bool{}
	for _, r := range d.Owned {
		objs := slices.Clone(r.GetObjects())
		slices.SortStableFunc(objs, func(a, b *pb.ObjectState) int { return bytes.Compare(a.GetObjectId(), b.GetObjectId()) })
		for _, o := range objs {
			id := hexID(o.GetObjectId())
			if reported[id] {
				continue
			}
			reported[id] = true
			row := ObjectRow{
				ObjectID: id, State: o.GetState(), Size: o.GetSize(), Where: WhereInline, StoreNodes: []string{},
				OwnerWorkerID: hexID(r.GetOwner().GetWorkerId()), OwnerNodeID: hexID(r.GetOwner().GetNodeId()),
				LocalRefs: o.GetLocalRefs(), SubmittedRefs: o.GetSubmittedRefs(), Borrowers: o.GetBorrowers(), CallSite: o.GetCallSite(),
			}
			row.Spilled = spilled[id]
			if nodes, ok := inStore[id]; ok {
				row.Where, row.StoreNodes = WhereStore, nodes
			} else if o.GetInStore() {
				row.Where = WhereStore
				if len(row.Spilled) > 0 {
					row.Where = WhereSpilled
				}
				if len(o.GetNodeId()) > 0 && len(row.Spilled) == 0 {
					row.StoreNodes = []string{hexID(o.GetNodeId())}
				}
			}
			out = append(out, row)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(inStore)) {
		if reported[id] {
			continue
		}
		reported[id] = true
		out = append(out, ObjectRow{ObjectID: id, Size: sizes[id], Where: WhereStore, StoreNodes: inStore[id], Spilled: spilled[id]})
	}
	for _, id := range slices.Sorted(maps.Keys(spilled)) {
		if reported[id] {
			continue
		}
		out = append(out, ObjectRow{ObjectID: id, Size: sizes[id], Where: WhereSpilled, StoreNodes: []string{}, Spilled: spilled[id]})
	}
	return out
}

// Reasons a reference keeps an object alive (`goray memory`), after
// Ray's reference types.
const (
	PinLocalRef     = "LOCAL_REFERENCE"      // a handle in the owner process
	PinBorrowed     = "BORROWED"             // other processes hold references
	PinSubmittedArg = "USED_BY_PENDING_TASK" // an argument of a task not finished
	PinInStore      = "PINNED_IN_STORE"      // in a store, no owner reported it
)

// MemoryRow is one reference to an object: who holds it and why it keeps
// the object alive.
type MemoryRow struct {
	ObjectID      string `json:"object_id"`
	OwnerWorkerID string `json:"owner_worker_id"`
	OwnerNodeID   string `json:"owner_node_id"`
	CallSite      string `json:"call_site"`
	Size          int64  `json:"size"`
	// Where is inline, store or spilled; Node is the store's node (the
	// first when there are copies).
	Where string `json:"where"`
	Node  string `json:"node_id"`
	// Reason is one of the Pin* constants; Count how many such references.
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
}

// MemoryRows lists every reference of the objects.
func MemoryRows(objs []ObjectRow) []MemoryRow {
	out := []MemoryRow{}
	for _, o := range objs {
		base := MemoryRow{ObjectID: o.ObjectID, OwnerWorkerID: o.OwnerWorkerID, OwnerNodeID: o.OwnerNodeID, CallSite: o.CallSite, Size: o.Size, Where: o.Where}
		if len(o.StoreNodes) > 0 {
			base.Node = o.StoreNodes[0]
		} else if o.Where == WhereInline {
			base.Node = o.OwnerNodeID
		}
		if base.CallSite == "" {
			base.CallSite = "(unknown)"
		}
		n := 0
		for _, c := range []struct {
			reason string
			count  int64
		}{{PinLocalRef, o.LocalRefs}, {PinBorrowed, o.Borrowers}, {PinSubmittedArg, o.SubmittedRefs}} {
			if c.count > 0 {
				r := base
				r.Reason, r.Count = c.reason, c.count
				out = append(out, r)
				n++
			}
		}
		if n == 0 && o.Where != WhereInline {
			r := base
			r.Reason, r.Count = PinInStore, 1
			out = append(out, r)
		}
	}
	return out
}

// MemoryGroup is the references of one node or owner, and their total.
type MemoryGroup struct {
	Key        string      `json:"key"`
	Rows       []MemoryRow `json:"rows"`
	Objects    int         `json:"objects"`
	TotalBytes int64       `json:"total_bytes"`
}

// Memory groupings and sort orders of `goray memory`.
var (
	MemoryGroupBy = []string{"node", "owner"}
	MemorySortBy  = []string{"size", "object_id", "reason"}
)

// GroupMemory groups rows by node (the node holding the object) or owner
// (worker@node), sorting each group by size (largest first), object id or
// reason; each object's bytes count once per group.
func GroupMemory(rows []MemoryRow, groupBy, sortBy string) ([]MemoryGroup, error) {
	if !slices.Contains(MemoryGroupBy, groupBy) {
		return nil, fmt.Errorf("--group-by %q: use node or owner", groupBy)
	}
	if !slices.Contains(MemorySortBy, sortBy) {
		return nil, fmt.Errorf("--sort-by %q: use size, object_id or reason", sortBy)
	}
	idx := map[string]int{}
	var out []MemoryGroup
	counted := map[[2]string]bool{}
	for _, r := range rows {
		key := r.Node
		if groupBy == "owner" {
			key = short(r.OwnerWorkerID) + "@" + short(r.OwnerNodeID)
		}
		if key == "" {
			key = "-"
		}
		i, ok := idx[key]
		if !ok {
			i = len(out)
			idx[key] = i
			out = append(out, MemoryGroup{Key: key})
		}
		g := &out[i]
		g.Rows = append(g.Rows, r)
		if !counted[[2]string{key, r.ObjectID}] {
			counted[[2]string{key, r.ObjectID}] = true
			g.Objects++
			g.TotalBytes += r.Size
		}
	}
	for i := range out {
		slices.SortStableFunc(out[i].Rows, func(a, b MemoryRow) int {
			switch sortBy {
			case "object_id":
				return cmp.Compare(a.ObjectID, b.ObjectID)
			case "reason":
				return cmp.Or(cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.ObjectID, b.ObjectID))
			}
			return cmp.Or(cmp.Compare(b.Size, a.Size), cmp.Compare(a.ObjectID, b.ObjectID))
		})
	}
	slices.SortStableFunc(out, func(a, b MemoryGroup) int { return cmp.Compare(a.Key, b.Key) })
	return out, nil
}
