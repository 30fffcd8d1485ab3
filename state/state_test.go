package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseFilters(t *testing.T) {
	tests := []struct {
		args []string
		want []Filter
		err  string
	}{
		{args: nil, want: nil},
		{args: []string{"state=FAILED"}, want: []Filter{{"state", "FAILED"}}},
		{args: []string{" name = a=b ", "node_id="}, want: []Filter{{"name", "a=b"}, {"node_id", ""}}},
		{args: []string{"state"}, err: `--filter "state": want key=value`},
		{args: []string{"=x"}, err: `--filter "=x": want key=value`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, ","), func(t *testing.T) {
			got, err := ParseFilters(tt.args)
			if tt.err != "" {
				var fe *FilterError
				if !errors.As(err, &fe) || err.Error() != tt.err {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("%v %v, want %v", got, err, tt.want)
			}
		})
	}
}

type row struct {
	ID     string            `json:"id"`
	State  string            `json:"state"`
	Size   int64             `json:"size"`
	Head   bool              `json:"head"`
	Labels map[string]string `json:"labels"`
	Hidden string            `json:"-"`
}

func TestApply(t *testing.T) {
	rows := []row{{"a", "RUNNING", 1, true, nil, ""}, {"b", "FAILED", 1700000000000, false, nil, ""}, {"c", "failed", 3, false, nil, ""}, {"d", "FINISHED", 4, false, nil, ""}}
	tests := []struct {
		name      string
		filters   []Filter
		limit     int
		want      string
		total     int
		truncated bool
		err       string
	}{
		{name: "all", want: "abcd", total: 4},
		{name: "state any case", filters: []Filter{{"state", "Failed"}}, want: "bc", total: 2},
		{name: "number", filters: []Filter{{"size", "1700000000000"}}, want: "b", total: 1},
		{name: "bool", filters: []Filter{{"head", "true"}}, want: "a", total: 1},
		{name: "two filters", filters: []Filter{{"state", "failed"}, {"id", "c"}}, want: "c", total: 1},
		{name: "limit", limit: 2, want: "ab", total: 4, truncated: true},
		{name: "limit not reached", limit: 10, want: "abcd", total: 4},
		{name: "unknown key", filters: []Filter{{"colour", "red"}}, err: `--filter "colour=red": no field "colour"; filter on one of id, state, size, head`},
		{name: "map field", filters: []Filter{{"labels", "x"}}, err: `no field "labels"`},
		{name: "hidden field", filters: []Filter{{"Hidden", "x"}}, err: `no field "Hidden"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Apply(rows, tt.filters, tt.limit)
			if tt.err != "" {
				var fe *FilterError
				if !errors.As(err, &fe) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			for _, r := range p.Rows {
				got.WriteString(r.ID)
			}
			if got.String() != tt.want || p.Total != tt.total || p.Truncated != tt.truncated {
				t.Errorf("rows %q total %d truncated %v, want %q %d %v", got.String(), p.Total, p.Truncated, tt.want, tt.total, tt.truncated)
			}
		})
	}
}

func TestTaskRowKeysAreTheGCSFilters(t *testing.T) {
	// Every scalar field of a task row but the error message is filtered
	// by the GCS itself, so --limit counts after the filters.
	var local []string
	for _, k := range Keys[TaskRow]() {
		found := false
		for _, s := range serverTaskKeys {
			found = found || s == k
		}
		if !found {
			local = append(local, k)
		}
	}
	if !reflect.DeepEqual(local, []string{"error_message"}) {
		t.Errorf("task keys the GCS does not filter: %v", local)
	}
}

// traceTasks are two tasks on two nodes, one with a fetch that the
// owner's clock puts before its scheduling ended.
func traceTasks() []TaskRow {
	return []TaskRow{
		{TaskID: "t1", Function: "main.add", State: "FINISHED", NodeID: "aa", WorkerID: "w1", Pid: 11, Phases: []PhaseRow{
			{Phase: "execution", StartUs: 1_000_120, EndUs: 1_000_300, NodeID: "aa", WorkerID: "w1", Pid: 11},
			{Phase: "scheduling", StartUs: 1_000_000, EndUs: 1_000_100, NodeID: "aa", WorkerID: "w1"},
			{Phase: "fetch_args", StartUs: 1_000_090, EndUs: 1_000_110, NodeID: "aa", WorkerID: "w1", Pid: 11},
		}},
		{TaskID: "t2", Name: "fails", Function: "main.fail", State: "FAILED", NodeID: "bb", WorkerID: "w2", Pid: 22, Phases: []PhaseRow{
			{Phase: "execution", StartUs: 2_000_000, EndUs: 2_000_050, NodeID: "bb", WorkerID: "w2", Pid: 22},
		}},
	}
}

// TestTimelineTraceFormat checks the trace against the Chrome trace
// format: a traceEvents array; every event has name, ph, pid, tid and a
// µs ts; complete events ("X") have a dur ≥ 0 and the task in args;
// metadata ("M") names each process and thread; one process per node; a
// task's phases do not overlap.
func TestTimelineTraceFormat(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTrace(&b, Timeline(traceTasks(), map[string]string{"aa": "head"})); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	evs, ok := doc["traceEvents"].([]any)
	if !ok {
		t.Fatalf("no traceEvents array: %s", b.String())
	}
	type span struct{ start, end float64 }
	phases := map[string][]span{}
	processes := map[float64]string{}
	threads := map[[2]float64]string{}
	complete := 0
	for i, raw := range evs {
		ev := raw.(map[string]any)
		for _, f := range []string{"name", "ph", "pid", "tid"} {
			if _, ok := ev[f]; !ok {
				t.Fatalf("event %d lacks %q: %v", i, f, ev)
			}
		}
		pid, tid := ev["pid"].(float64), ev["tid"].(float64)
		switch ev["ph"] {
		case "M":
			name := ev["args"].(map[string]any)["name"].(string)
			switch ev["name"] {
			case "process_name":
				processes[pid] = name
			case "thread_name":
				threads[[2]float64{pid, tid}] = name
			default:
				t.Errorf("metadata event %v", ev)
			}
		case "X":
			complete++
			ts, ok1 := ev["ts"].(float64)
			dur, ok2 := ev["dur"].(float64)
			if !ok1 || !ok2 || dur < 0 || ts < 1e6 {
				t.Fatalf("complete event without µs ts and dur ≥ 0: %v", ev)
			}
			args := ev["args"].(map[string]any)
			if args["task_id"] == nil || !strings.Contains(ev["name"].(string), ":") {
				t.Errorf("complete event without the task: %v", ev)
			}
			if processes[pid] == "" || threads[[2]float64{pid, tid}] == "" {
				t.Errorf("event on an unnamed process or thread: %v", ev)
			}
			id := args["task_id"].(string)
			for _, s := range phases[id] {
				if ts < s.end && s.start < ts+dur {
					t.Errorf("task %s: phase %v overlaps [%v, %v]", id, ev, s.start, s.end)
				}
			}
			phases[id] = append(phases[id], span{ts, ts + dur})
		default:
			t.Errorf("unexpected phase type %v", ev["ph"])
		}
	}
	if complete != 4 || len(processes) != 2 {
		t.Errorf("%d complete events on %d processes, want 4 on 2 (one per node)", complete, len(processes))
	}
	if processes[1] != "node aa (head)" {
		t.Errorf("processes %v", processes)
	}
	want := map[string]bool{"worker w1 (pid 11)": true, "worker w1 (pid 11) queue": true, "worker w2 (pid 22)": true}
	for _, n := range threads {
		if !want[n] {
			t.Errorf("thread %q, want one of %v", n, want)
		}
	}
}

func TestMemory(t *testing.T) {
	objs := []ObjectRow{
		{ObjectID: "o1", Size: 10, Where: WhereInline, OwnerWorkerID: "w1", OwnerNodeID: "aa", LocalRefs: 1, Borrowers: 2, CallSite: "put"},
		{ObjectID: "o2", Size: 1000, Where: WhereStore, StoreNodes: []string{"bb"}, OwnerWorkerID: "w1", OwnerNodeID: "aa", SubmittedRefs: 1},
		{ObjectID: "o3", Size: 500, Where: WhereStore, StoreNodes: []string{"bb"}},
	}
	rows := MemoryRows(objs)
	var reasons []string
	for _, r := range rows {
		reasons = append(reasons, r.ObjectID+":"+r.Reason)
	}
	if want := []string{"o1:" + PinLocalRef, "o1:" + PinBorrowed, "o2:" + PinSubmittedArg, "o3:" + PinInStore}; !reflect.DeepEqual(reasons, want) {
		t.Errorf("references %v, want %v", reasons, want)
	}
	tests := []struct {
		groupBy, sortBy string
		want            string
		err             string
	}{
		{"node", "size", "aa:1/10[o1 o1] bb:2/1500[o2 o3]", ""},
		{"owner", "object_id", "-@-:1/500[o3] w1@aa:2/1010[o1 o1 o2]", ""},
		{"owner", "size", "-@-:1/500[o3] w1@aa:2/1010[o2 o1 o1]", ""},
		{"colour", "size", "", `--group-by "colour"`},
		{"node", "age", "", `--sort-by "age"`},
	}
	for _, tt := range tests {
		t.Run(tt.groupBy+"/"+tt.sortBy, func(t *testing.T) {
			gs, err := GroupMemory(rows, tt.groupBy, tt.sortBy)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			var parts []string
			for _, g := range gs {
				var ids []string
				for _, r := range g.Rows {
					ids = append(ids, r.ObjectID)
				}
				parts = append(parts, fmt.Sprintf("%s:%d/%d%v", g.Key, g.Objects, g.TotalBytes, ids))
			}
			if got := strings.Join(parts, " "); got != tt.want {
				t.Errorf("groups %s, want %s", got, tt.want)
			}
		})
	}
}

func TestSummaries(t *testing.T) {
	tasks := []TaskRow{
		{Function: "main.add", Kind: "NORMAL", State: "FINISHED"},
		{Function: "main.add", Kind: "NORMAL", State: "FINISHED"},
		{Function: "main.add", Kind: "NORMAL", State: "FAILED"},
		{Function: "Incr", ActorClass: "main.Counter", Kind: "ACTOR_METHOD", State: "RUNNING"},
	}
	s := SummarizeTasks(tasks)
	if s.Total != 4 || len(s.Rows) != 2 || s.Rows[0].Key != "main.add" || s.Rows[0].States["FINISHED"] != 2 || s.Rows[0].States["FAILED"] != 1 ||
		s.Rows[1].Key != "main.Counter.Incr" || s.Totals["RUNNING"] != 1 {
		t.Errorf("task summary %+v", s)
	}
	if got := s.StateKeys(); !reflect.DeepEqual(got, []string{"FAILED", "FINISHED", "RUNNING"}) {
		t.Errorf("state keys %v", got)
	}
	a := SummarizeActors([]ActorSummaryInput{{"main.Counter", "ALIVE"}, {"main.Counter", "DEAD"}, {"", "PENDING"}})
	if a.Total != 3 || a.Rows[0].Key != "main.Counter" || a.Rows[1].Key != "(unknown)" {
		t.Errorf("actor summary %+v", a)
	}
	o := SummarizeObjects([]ObjectRow{{CallSite: "put", Where: WhereStore, State: "READY", Size: 100}, {CallSite: "put", Where: WhereInline, State: "READY", Size: 5}, {Where: WhereStore, Size: 7}})
	if o.Rows[0].Key != "put" || o.Rows[0].Bytes != 105 || o.Rows[0].States["store:READY"] != 1 || o.Totals["store:UNOWNED"] != 1 {
		t.Errorf("object summary %+v", o)
	}
}
