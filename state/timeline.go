package state

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// TraceEvent is one event of the Chrome trace format (the "JSON Object
// Format" Perfetto and chrome://tracing open): a complete event ("ph":
// "X", ts and dur in µs) or metadata naming a process or thread ("ph":
// "M").
type TraceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   int64          `json:"ts"`
	Dur  *int64         `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Trace is a Chrome trace file.
type Trace struct {
	TraceEvents     []TraceEvent `json:"traceEvents"`
	DisplayTimeUnit string       `json:"displayTimeUnit"`
}

// phaseOrder is the order of a task's phases.
var phaseOrder = map[string]int{"scheduling": 0, "fetch_args": 1, "execution": 2}

// Timeline turns task attempts into a trace: one process per node (named
// from names, node id → name, when given), and per worker one thread for
// its argument fetches and executions and one ("<worker> queue") for the
// scheduling of the tasks it got, one complete event per phase with the
// task's name and id in args. A task's phases never overlap: a phase
// starts no earlier than the previous one ended (owner and worker clocks
// may differ by a little).
func Timeline(tasks []TaskRow, names map[string]string) Trace {
	t := Trace{TraceEvents: []TraceEvent{}, DisplayTimeUnit: "ms"}
	pids := map[string]int{}
	tids := map[[2]string]int{}
	pidOf := func(node string) int {
		if p, ok := pids[node]; ok {
			return p
		}
		p := len(pids) + 1
		pids[node] = p
		name := "node " + short(node)
		if n := names[node]; n != "" {
			name += " (" + n + ")"
		}
		t.TraceEvents = append(t.TraceEvents, TraceEvent{Name: "process_name", Ph: "M", Pid: p, Args: map[string]any{"name": name}})
		return p
	}
	tidOf := func(node, worker string, pid int32, queue bool) (int, int) {
		p := pidOf(node)
		lane := "run"
		if queue {
			lane = "queue"
		}
		k := [2]string{node, worker + "/" + lane}
		if id, ok := tids[k]; ok {
			return p, id
		}
		id := len(tids) + 1
		tids[k] = id
		name := "worker " + short(worker)
		if pid > 0 {
			name += fmt.Sprintf(" (pid %d)", pid)
		}
		if queue {
			name += " queue"
		}
		t.TraceEvents = append(t.TraceEvents, TraceEvent{Name: "thread_name", Ph: "M", Pid: p, Tid: id, Args: map[string]any{"name": name}})
		return p, id
	}
	for _, task := range tasks {
		phases := slices.Clone(task.Phases)
		slices.SortStableFunc(phases, func(a, b PhaseRow) int { return cmp.Compare(phaseOrder[a.Phase], phaseOrder[b.Phase]) })
		name := task.Name
		if name == "" {
			name = task.Function
		}
		var last int64
		for _, ph := range phases {
			start, end := max(ph.StartUs, last), ph.EndUs
			if end < start {
				end = start
			}
			last = end
			node, worker, pid := ph.NodeID, ph.WorkerID, ph.Pid
			if node == "" {
				node = task.NodeID
			}
			if worker == "" {
				worker = task.WorkerID
			}
			if pid == 0 {
				pid = task.Pid
			}
			p, tid := tidOf(node, worker, pid, ph.Phase == "scheduling")
			dur := end - start
			t.TraceEvents = append(t.TraceEvents, TraceEvent{
				Name: name + ": " + ph.Phase, Cat: ph.Phase, Ph: "X", Ts: start, Dur: &dur, Pid: p, Tid: tid,
				Args: map[string]any{"task_id": task.TaskID, "attempt": task.Attempt, "function": task.Function, "state": task.State, "job_id": task.JobID},
			})
		}
	}
	return t
}

// WriteTrace writes t as JSON.
func WriteTrace(w io.Writer, t Trace) error {
	enc := json.NewEncoder(w)
	return enc.Encode(t)
}
