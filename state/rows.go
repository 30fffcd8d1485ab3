package state

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

func hexID(b []byte) string { return hex.EncodeToString(b) }

// TaskRow is one attempt of a task (`goray list tasks`), from the task
// events its owner and its worker reported.
type TaskRow struct {
	TaskID     string `json:"task_id"`
	Attempt    int32  `json:"attempt"`
	JobID      string `json:"job_id"`
	Name       string `json:"name"`
	Function   string `json:"function"`
	Kind       string `json:"kind"`
	ActorID    string `json:"actor_id,omitempty"`
	ActorClass string `json:"actor_class,omitempty"`
	// State is PENDING_ARGS_AVAIL, PENDING_NODE_ASSIGNMENT,
	// SUBMITTED_TO_WORKER, RUNNING, FINISHED or FAILED.
	State         string `json:"state"`
	NodeID        string `json:"node_id"`
	WorkerID      string `json:"worker_id"`
	Pid           int32  `json:"pid"`
	ErrorType     string `json:"error_type,omitempty"`
	ErrorMessage  string `json:"error_message,omitempty"`
	OwnerWorkerID string `json:"owner_worker_id"`
	OwnerNodeID   string `json:"owner_node_id"`
	// StateTimesUs says when each state was entered (Unix µs).
	StateTimesUs map[string]int64 `json:"state_times_us"`
	// Phases are the scheduling, fetch_args and execution spans.
	Phases []PhaseRow `json:"phases"`
}

// PhaseRow is one phase of a task attempt.
type PhaseRow struct {
	Phase    string `json:"phase"`
	StartUs  int64  `json:"start_us"`
	EndUs    int64  `json:"end_us"`
	NodeID   string `json:"node_id"`
	WorkerID string `json:"worker_id"`
	Pid      int32  `json:"pid"`
}

// TaskRowOf converts a stored task attempt.
func TaskRowOf(t *pb.TaskStatus) TaskRow {
	r := TaskRow{
		TaskID: hexID(t.GetTaskId()), Attempt: t.GetAttempt(), JobID: hexID(t.GetJobId()), Name: t.GetName(), Function: t.GetFunction(),
		Kind: strings.TrimPrefix(t.GetKind().String(), "TASK_KIND_"), ActorID: hexID(t.GetActorId()), ActorClass: t.GetActorClass(),
		State: t.GetState(), NodeID: hexID(t.GetNodeId()), WorkerID: hexID(t.GetWorkerId()), Pid: t.GetPid(),
		ErrorType: t.GetErrorType(), ErrorMessage: t.GetErrorMessage(),
		OwnerWorkerID: hexID(t.GetOwnerWorkerId()), OwnerNodeID: hexID(t.GetOwnerNodeId()),
		StateTimesUs: map[string]int64{}, Phases: []PhaseRow{},
	}
	for _, s := range t.GetStates() {
		r.StateTimesUs[s.GetState()] = s.GetTimeUs()
	}
	for _, p := range t.GetPhases() {
		r.Phases = append(r.Phases, PhaseRow{Phase: p.GetPhase(), StartUs: p.GetStartUs(), EndUs: p.GetEndUs(),
			NodeID: hexID(p.GetNodeId()), WorkerID: hexID(p.GetWorkerId()), Pid: p.GetPid()})
	}
	return r
}

// serverTaskKeys are the task fields the GCS filters on itself (see
// gcs.TaskFilterKeys); others are applied here.
var serverTaskKeys = []string{"task_id", "attempt", "job_id", "function", "name", "kind", "actor_id", "actor_class", "state", "node_id", "worker_id", "pid", "error_type", "owner_worker_id", "owner_node_id"}

// TaskPage is the answer of Tasks.
type TaskPage struct {
	Page[TaskRow]
	// Evicted counts tasks the GCS dropped to stay in its bound;
	// DroppedEvents the events processes dropped, by job.
	Evicted       int64            `json:"evicted"`
	DroppedEvents map[string]int64 `json:"dropped_events"`
}

// Tasks lists the task attempts matching fs (the newest limit of them; 0:
// all the GCS keeps), oldest first.
func Tasks(ctx context.Context, src Source, fs []Filter, limit int) (TaskPage, error) {
	if err := CheckFilters[TaskRow](fs); err != nil {
		return TaskPage{}, err
	}
	req := &pb.ListTasksRequest{Limit: int64(max(limit, 0))}
	var local []Filter
	for _, f := range fs {
		if slices.Contains(serverTaskKeys, f.Key) {
			req.Filters = append(req.Filters, &pb.TaskFilter{Key: f.Key, Value: f.Value})
		} else {
			local = append(local, f)
		}
	}
	if len(local) > 0 {
		req.Limit = 0 // the limit applies after the filters the GCS cannot apply
	}
	rep, err := src.ListTasks(ctx, req)
	if err != nil {
		return TaskPage{}, err
	}
	rows := make([]TaskRow, 0, len(rep.GetTasks()))
	for _, t := range rep.GetTasks() {
		rows = append(rows, TaskRowOf(t))
	}
	page := TaskPage{Evicted: rep.GetEvicted(), DroppedEvents: rep.GetDroppedByJob()}
	if len(local) == 0 {
		page.Page = Page[TaskRow]{Rows: rows, Total: int(rep.GetTotal()), Truncated: int64(len(rows)) < rep.GetTotal()}
		return page, nil
	}
	p, err := Apply(rows, local, 0)
	if err != nil {
		return TaskPage{}, err
	}
	if limit > 0 && len(p.Rows) > limit {
		p.Rows, p.Truncated = p.Rows[len(p.Rows)-limit:], true
	}
	page.Page = p
	return page, nil
}

// NodeData is what the alive nodes' raylets reported.
type NodeData struct {
	// Nodes are the alive nodes asked, in the GCS's order.
	Nodes []*pb.NodeInfo
	// Stats maps a node id (hex) to its raylet's answer.
	Stats map[string]*pb.GetNodeStatsReply
	// Owned are the ListOwned answers of every node's processes, sorted by
	// owner node and worker, each process once.
	Owned []*pb.ListOwnedReply
}

// GatherNodes asks the raylet of every alive node for its stats (with
// includeOwned, what its processes own). Unreachable raylets and
// processes are reported to warn and skipped.
func GatherNodes(ctx context.Context, src Source, includeOwned bool, warn func(string)) (NodeData, error) {
	views, err := src.Nodes(ctx)
	if err != nil {
		return NodeData{}, err
	}
	d := NodeData{Stats: map[string]*pb.GetNodeStatsReply{}}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, maxFanout)
	)
	for _, v := range views {
		in := v.GetInfo()
		if in.GetState() != "ALIVE" {
			continue
		}
		d.Nodes = append(d.Nodes, in)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, FanoutTimeout)
			defer cancel()
			st, err := src.NodeStats(cctx, in, includeOwned)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				warn(fmt.Sprintf("skipping node %s (%s): %v", short(hexID(in.GetNodeId())), in.GetNodeName(), err))
				return
			}
			d.Stats[hexID(in.GetNodeId())] = st
			for _, e := range st.GetOwnedErrors() {
				warn(fmt.Sprintf("node %s: skipping %s", short(hexID(in.GetNodeId())), e))
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, node := range slices.Sorted(maps.Keys(d.Stats)) {
		for _, r := range d.Stats[node].GetOwned() {
			key := hexID(r.GetOwner().GetWorkerId())
			if seen[key] {
				continue
			}
			seen[key] = true
			d.Owned = append(d.Owned, r)
		}
	}
	slices.SortStableFunc(d.Owned, func(a, b *pb.ListOwnedReply) int {
		return cmp.Or(
			bytes.Compare(a.GetOwner().GetNodeId(), b.GetOwner().GetNodeId()),
			bytes.Compare(a.GetOwner().GetWorkerId(), b.GetOwner().GetWorkerId()))
	})
	return d, nil
}

// short is the first 8 hex digits of an id.
func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	if s == "" {
		return "-"
	}
	return s
}

// WorkerRow is one driver or worker process of a node (`goray list
// workers`).
type WorkerRow struct {
	WorkerID string `json:"worker_id"`
	NodeID   string `json:"node_id"`
	// Type is WORKER or DRIVER.
	Type string `json:"type"`
	Pid  int32  `json:"pid"`
	// JobID is empty for a driver (its job is in `goray list jobs`).
	JobID string `json:"job_id"`
	// State is STARTING, IDLE, LEASED, ACTOR or DEAD for workers, ALIVE
	// for drivers.
	State      string `json:"state"`
	ActorID    string `json:"actor_id,omitempty"`
	UnixSocket string `json:"unix_socket"`
	TCPAddress string `json:"tcp_address"`
}

// WorkerRows lists the workers and drivers of every node, by node.
func WorkerRows(d NodeData) []WorkerRow {
	out := []WorkerRow{}
	for _, node := range slices.Sorted(maps.Keys(d.Stats)) {
		st := d.Stats[node]
		seen := map[string]bool{}
		for _, w := range st.GetWorkers() {
			id := hexID(w.GetWorkerId())
			seen[id] = true
			out = append(out, WorkerRow{WorkerID: id, NodeID: node, Type: "WORKER", Pid: w.GetPid(), JobID: hexID(w.GetJobId()), State: w.GetState(),
				ActorID: hexID(w.GetActorId()), UnixSocket: w.GetAddress().GetUnixPath(), TCPAddress: w.GetAddress().GetTcpAddr()})
		}
		for _, c := range st.GetClients() {
			id := hexID(c.GetWorkerId())
			if seen[id] || !bytes.Equal(c.GetNodeId(), st.GetNode().GetNodeId()) && len(c.GetNodeId()) > 0 {
				continue
			}
			seen[id] = true
			out = append(out, WorkerRow{WorkerID: id, NodeID: node, Type: "DRIVER", State: "ALIVE", UnixSocket: c.GetUnixPath(), TCPAddress: c.GetTcpAddr()})
		}
	}
	return out
}
