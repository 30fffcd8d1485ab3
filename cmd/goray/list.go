package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/dustin/go-humanize"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/spf13/cobra"
)

// actorRow is one actor of `list actors`.
type actorRow struct {
	ActorID        string  `json:"actor_id"`
	JobID          string  `json:"job_id"`
	Name           string  `json:"name"`
	ClassName      string  `json:"class_name"`
	State          string  `json:"state"`
	NodeID         string  `json:"node_id"`
	WorkerID       string  `json:"worker_id"`
	Pid            int32   `json:"pid"`
	Resources      amounts `json:"resources"`
	MaxConcurrency int32   `json:"max_concurrency"`
	MaxRestarts    int32   `json:"max_restarts"`
	NumRestarts    int32   `json:"num_restarts"`
	DeathReason    string  `json:"death_reason,omitempty"`
	StartTimeMs    int64   `json:"start_time_ms"`
	EndTimeMs      int64   `json:"end_time_ms,omitempty"`
}

// jobRow is one job of `list jobs`.
type jobRow struct {
	JobID        string `json:"job_id"`
	State        string `json:"state"`
	DriverPid    int32  `json:"driver_pid"`
	DriverNodeID string `json:"driver_node_id"`
	BinaryPath   string `json:"binary_path"`
	BinarySHA256 string `json:"binary_sha256,omitempty"`
	WorkingDir   string `json:"working_dir,omitempty"`
	StartTimeMs  int64  `json:"start_time_ms"`
	EndTimeMs    int64  `json:"end_time_ms,omitempty"`
}

// taskRow is one task of `list tasks`.
type taskRow struct {
	TaskID        string `json:"task_id"`
	Name          string `json:"name"`
	Function      string `json:"function"`
	State         string `json:"state"`
	Attempt       int32  `json:"attempt"`
	NodeID        string `json:"node_id"`
	WorkerID      string `json:"worker_id"`
	ActorID       string `json:"actor_id,omitempty"`
	Error         string `json:"error,omitempty"`
	OwnerWorkerID string `json:"owner_worker_id"`
	OwnerNodeID   string `json:"owner_node_id"`
}

// Where an object's value lives.
const (
	whereInline = "inline" // in the owner's memory
	whereStore  = "store"  // in the shared-memory store of StoreNodes
)

// objectRow is one object of `list objects`.
type objectRow struct {
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

func actorRows(as []*pb.ActorInfo) []actorRow {
	out := []actorRow{}
	for _, a := range as {
		out = append(out, actorRow{
			ActorID: hexID(a.GetActorId()), JobID: hexID(a.GetJobId()), Name: a.GetName(), ClassName: a.GetClassName(),
			State: strings.TrimPrefix(a.GetState().String(), "ACTOR_STATE_"), NodeID: hexID(a.GetAddress().GetNodeId()),
			WorkerID: hexID(a.GetAddress().GetWorkerId()), Pid: a.GetPid(), Resources: amountsOf(a.GetResources()),
			MaxConcurrency: a.GetMaxConcurrency(), MaxRestarts: a.GetMaxRestarts(), NumRestarts: a.GetNumRestarts(), DeathReason: a.GetDeathReason(),
			StartTimeMs: a.GetStartTimeMs(), EndTimeMs: a.GetEndTimeMs(),
		})
	}
	slices.SortStableFunc(out, func(a, b actorRow) int {
		return cmp.Or(cmp.Compare(a.StartTimeMs, b.StartTimeMs), cmp.Compare(a.ActorID, b.ActorID))
	})
	return out
}

func jobRows(js []*pb.JobInfo) []jobRow {
	out := []jobRow{}
	for _, j := range js {
		out = append(out, jobRow{
			JobID: hexID(j.GetJobId()), State: j.GetState(), DriverPid: j.GetDriverPid(), DriverNodeID: hexID(j.GetDriverNodeId()),
			BinaryPath: j.GetBinaryPath(), BinarySHA256: j.GetBinarySha256(), WorkingDir: j.GetWorkingDir(),
			StartTimeMs: j.GetStartTimeMs(), EndTimeMs: j.GetEndTimeMs(),
		})
	}
	slices.SortStableFunc(out, func(a, b jobRow) int {
		return cmp.Or(cmp.Compare(a.StartTimeMs, b.StartTimeMs), cmp.Compare(a.JobID, b.JobID))
	})
	return out
}

// ownedData is what the fan-out to raylets and core workers collected.
type ownedData struct {
	// Owned are the ListOwned replies, sorted by owner node and worker.
	Owned []*pb.ListOwnedReply
	// Stores maps a node id (hex) to its store's objects.
	Stores map[string][]*pb.StoreObject
	// Spilled maps a node id (hex) to the objects it spilled.
	Spilled map[string][]*pb.SpilledObject
}

// maxFanout bounds concurrent fan-out RPCs.
const maxFanout = 16

// gatherOwned asks the raylet of every alive node for its stats and every
// client of those raylets for what it owns. Unreachable raylets and clients
// are reported to warn and skipped.
func gatherOwned(ctx context.Context, c cluster, views []*pb.NodeView, warn func(string)) ownedData {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		sem  = make(chan struct{}, maxFanout)
		data = ownedData{Stores: map[string][]*pb.StoreObject{}}
		seen = map[string]bool{}
	)
	call := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			f()
		}()
	}
	askOwner := func(node string, addr *pb.Address) {
		cctx, cancel := context.WithTimeout(ctx, fanoutTimeout)
		defer cancel()
		r, err := c.ListOwned(cctx, addr.GetUnixPath())
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			warn(fmt.Sprintf("skipping process %s on node %s: ListOwned at %s: %v", shortID(addr.GetWorkerId()), shortHex(node), orDash(addr.GetUnixPath()), err))
			return
		}
		if r.GetOwner() == nil {
			r.Owner = addr
		}
		data.Owned = append(data.Owned, r)
	}
	for _, v := range views {
		in := v.GetInfo()
		if in.GetState() != stateAlive {
			continue
		}
		nodeID := hexID(in.GetNodeId())
		call(func() {
			cctx, cancel := context.WithTimeout(ctx, fanoutTimeout)
			defer cancel()
			st, err := c.NodeStats(cctx, in.GetRayletUnix())
			if err != nil {
				mu.Lock()
				warn(fmt.Sprintf("skipping node %s (%s): GetNodeStats at %s: %v", shortHex(nodeID), in.GetNodeName(), orDash(in.GetRayletUnix()), err))
				mu.Unlock()
				return
			}
			mu.Lock()
			data.Stores[nodeID] = st.GetStoreObjectsList()
			if sp := st.GetSpilled(); len(sp) > 0 {
				if data.Spilled == nil {
					data.Spilled = map[string][]*pb.SpilledObject{}
				}
				data.Spilled[nodeID] = sp
			}
			var todo []*pb.Address
			for _, a := range st.GetClients() {
				key := a.GetUnixPath()
				if key == "" {
					key = hexID(a.GetWorkerId())
				}
				if seen[key] {
					continue
				}
				seen[key] = true
				todo = append(todo, a)
			}
			mu.Unlock()
			for _, a := range todo {
				call(func() { askOwner(nodeID, a) })
			}
		})
	}
	wg.Wait()
	slices.SortStableFunc(data.Owned, func(a, b *pb.ListOwnedReply) int {
		return cmp.Or(
			cmp.Compare(hexID(a.GetOwner().GetNodeId()), hexID(b.GetOwner().GetNodeId())),
			cmp.Compare(hexID(a.GetOwner().GetWorkerId()), hexID(b.GetOwner().GetWorkerId())))
	})
	return data
}

func taskRows(d ownedData) []taskRow {
	out := []taskRow{}
	seen := map[string]bool{}
	for _, r := range d.Owned {
		// Task ids end in a per-owner counter: sorting them gives
		// submission order.
		tasks := slices.Clone(r.GetTasks())
		slices.SortStableFunc(tasks, func(a, b *pb.TaskState) int { return bytes.Compare(a.GetTaskId(), b.GetTaskId()) })
		for _, t := range tasks {
			id := hexID(t.GetTaskId())
			if seen[id] {
				continue
			}
			seen[id] = true
			out = append(out, taskRow{
				TaskID: id, Name: t.GetName(), Function: t.GetFunction(), State: t.GetState(), Attempt: t.GetAttempt(),
				NodeID: hexID(t.GetNodeId()), WorkerID: hexID(t.GetWorkerId()), ActorID: hexID(t.GetActorId()), Error: t.GetError(),
				OwnerWorkerID: hexID(r.GetOwner().GetWorkerId()), OwnerNodeID: hexID(r.GetOwner().GetNodeId()),
			})
		}
	}
	return out
}

// objectRows merges what owners report with what the stores hold. Objects
// in a store that no owner reported come last.
func objectRows(d ownedData) []objectRow {
	inStore := map[string][]string{} // object id → node ids
	sizes := map[string]int64{}
	for _, node := range slices.Sorted(maps.Keys(d.Stores)) {
		for _, o := range d.Stores[node] {
			if !o.GetFound() && len(o.GetObjectId()) == 0 {
				continue
			}
			id := hexID(o.GetObjectId())
			inStore[id] = append(inStore[id], node)
			sizes[id] = o.GetDataSize()
		}
	}
	spilled := map[string][]string{} // object id → file@offset
	for _, node := range slices.Sorted(maps.Keys(d.Spilled)) {
		for _, o := range d.Spilled[node] {
			id := hexID(o.GetObjectId())
			spilled[id] = append(spilled[id], fmt.Sprintf("%s@%d", o.GetUrl(), o.GetOffset()))
			if _, ok := sizes[id]; !ok {
				sizes[id] = o.GetSize()
			}
		}
	}
	out := []objectRow{}
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
			row := objectRow{
				ObjectID: id, State: o.GetState(), Size: o.GetSize(), Where: whereInline, StoreNodes: []string{},
				OwnerWorkerID: hexID(r.GetOwner().GetWorkerId()), OwnerNodeID: hexID(r.GetOwner().GetNodeId()),
				LocalRefs: o.GetLocalRefs(), SubmittedRefs: o.GetSubmittedRefs(), Borrowers: o.GetBorrowers(), CallSite: o.GetCallSite(),
			}
			row.Spilled = spilled[id]
			if nodes, ok := inStore[id]; ok {
				row.Where, row.StoreNodes = whereStore, nodes
			} else if o.GetInStore() {
				row.Where = whereStore
				if len(o.GetNodeId()) > 0 {
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
		out = append(out, objectRow{ObjectID: id, Size: sizes[id], Where: whereStore, StoreNodes: inStore[id], Spilled: spilled[id]})
	}
	for _, id := range slices.Sorted(maps.Keys(spilled)) {
		if reported[id] {
			continue
		}
		out = append(out, objectRow{ObjectID: id, Size: sizes[id], Where: whereStore, StoreNodes: []string{}, Spilled: spilled[id]})
	}
	return out
}

func writeNodes(w io.Writer, ns []nodeStatus) error {
	t := newTable(w, "NODE ID", "NAME", "STATE", "HEAD", "PID", "RAYLET", "RESOURCES", "STARTED", "DEATH REASON")
	for _, n := range ns {
		head := ""
		if n.IsHead {
			head = "*"
		}
		t.row(n.NodeID, orDash(n.NodeName), n.State, head, strconv.Itoa(int(n.Pid)), orDash(n.RayletSocket),
			formatSet(n.ResourcesTotal), formatTime(n.StartTimeMs), orDash(n.DeathReason))
	}
	return t.flush()
}

func writeActors(w io.Writer, as []actorRow) error {
	t := newTable(w, "ACTOR ID", "CLASS", "NAME", "STATE", "JOB", "NODE", "PID", "RESOURCES", "DEATH REASON")
	for _, a := range as {
		t.row(a.ActorID, orDash(a.ClassName), orDash(a.Name), a.State, shortHex(a.JobID), shortHex(a.NodeID),
			pidCell(a.Pid), formatSet(a.Resources), orDash(a.DeathReason))
	}
	return t.flush()
}

func writeJobs(w io.Writer, js []jobRow) error {
	t := newTable(w, "JOB ID", "STATE", "DRIVER PID", "DRIVER NODE", "BINARY", "STARTED", "ENDED")
	for _, j := range js {
		t.row(j.JobID, j.State, pidCell(j.DriverPid), shortHex(j.DriverNodeID), orDash(j.BinaryPath), formatTime(j.StartTimeMs), formatTime(j.EndTimeMs))
	}
	return t.flush()
}

func writeTasks(w io.Writer, ts []taskRow) error {
	t := newTable(w, "TASK ID", "NAME", "STATE", "ATTEMPT", "NODE", "WORKER", "ACTOR", "OWNER", "ERROR")
	for _, k := range ts {
		name := k.Name
		if name == "" {
			name = k.Function
		}
		t.row(k.TaskID, orDash(name), k.State, strconv.Itoa(int(k.Attempt)), shortHex(k.NodeID), shortHex(k.WorkerID),
			shortHex(k.ActorID), shortHex(k.OwnerWorkerID), orDash(k.Error))
	}
	return t.flush()
}

func writeObjects(w io.Writer, objs []objectRow) error {
	t := newTable(w, "OBJECT ID", "STATE", "SIZE", "WHERE", "OWNER", "REFS (LOCAL/SUBMITTED/BORROWERS)", "CALL SITE")
	for _, o := range objs {
		where := "inline in owner"
		if o.Where == whereStore {
			nodes := make([]string, len(o.StoreNodes))
			for i, n := range o.StoreNodes {
				nodes[i] = shortHex(n)
			}
			where = "store on node " + orDash(strings.Join(nodes, ","))
			if len(nodes) == 0 && len(o.Spilled) > 0 {
				where = "spilled"
			}
		}
		if len(o.Spilled) > 0 {
			where += " (spilled to " + strings.Join(o.Spilled, ", ") + ")"
		}
		owner, refs := "-", "-"
		if o.OwnerWorkerID != "" {
			owner = shortHex(o.OwnerWorkerID) + "@" + shortHex(o.OwnerNodeID)
			refs = fmt.Sprintf("%d/%d/%d", o.LocalRefs, o.SubmittedRefs, o.Borrowers)
		}
		t.row(o.ObjectID, orDash(o.State), humanize.IBytes(uint64(max(o.Size, 0))), where, owner, refs, orDash(o.CallSite))
	}
	return t.flush()
}

func pidCell(pid int32) string {
	if pid <= 0 {
		return "-"
	}
	return strconv.Itoa(int(pid))
}

// listKinds are the things `goray list` shows.
var listKinds = []string{"nodes", "actors", "tasks", "objects", "jobs", "placement-groups"}

// list runs `goray list <kind>` against c and writes the result.
func (a *app) list(ctx context.Context, c cluster, kind string, asJSON bool) error {
	gctx, cancel := context.WithTimeout(ctx, gcsTimeout)
	defer cancel()
	var rows any
	var write func() error
	switch kind {
	case "nodes", "tasks", "objects":
		views, err := c.Nodes(gctx)
		if err != nil {
			return err
		}
		if kind == "nodes" {
			ns := []nodeStatus{}
			for _, v := range views {
				ns = append(ns, nodeStatusOf(v))
			}
			sortNodes(ns)
			rows, write = ns, func() error { return writeNodes(a.stdout, ns) }
			break
		}
		d := gatherOwned(ctx, c, views, func(msg string) { fmt.Fprintln(a.stderr, "warning: "+msg) })
		if kind == "tasks" {
			ts := taskRows(d)
			rows, write = ts, func() error { return writeTasks(a.stdout, ts) }
		} else {
			objs := objectRows(d)
			rows, write = objs, func() error { return writeObjects(a.stdout, objs) }
		}
	case "actors":
		as, err := c.Actors(gctx)
		if err != nil {
			return err
		}
		ar := actorRows(as)
		rows, write = ar, func() error { return writeActors(a.stdout, ar) }
	case "jobs":
		js, err := c.Jobs(gctx)
		if err != nil {
			return err
		}
		jr := jobRows(js)
		rows, write = jr, func() error { return writeJobs(a.stdout, jr) }
	case "placement-groups":
		gs, err := c.PlacementGroups(gctx)
		if err != nil {
			return err
		}
		gr := placementGroupRows(gs)
		rows, write = gr, func() error { return writePlacementGroups(a.stdout, gr) }
	default:
		return usagef("cannot list %q: use one of %s", kind, strings.Join(listKinds, ", "))
	}
	if asJSON {
		return writeJSON(a.stdout, map[string]any{strings.ReplaceAll(kind, "-", "_"): rows})
	}
	return write()
}

func (a *app) listCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list nodes|actors|tasks|objects|jobs|placement-groups",
		Short: "List the cluster's nodes, actors, tasks, objects, jobs or placement groups",
		Long: "List nodes, actors, jobs and placement groups from the GCS. Tasks and objects are collected from every\n" +
			"driver and worker of the alive nodes of this machine (through each node's raylet).",
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return usagef("say what to list: %s", strings.Join(listKinds, ", "))
		}),
	}
	for _, kind := range listKinds {
		var f clusterFlags
		sub := &cobra.Command{
			Use:   kind,
			Short: "List " + kind,
			Args:  cobra.NoArgs,
			RunE: runE(func(cmd *cobra.Command, args []string) error {
				c, err := a.connect(&f)
				if err != nil {
					return err
				}
				defer c.Close()
				return a.list(cmd.Context(), c, kind, f.asJSON)
			}),
		}
		f.register(sub)
		cmd.AddCommand(sub)
	}
	return cmd
}
