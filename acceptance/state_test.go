package acceptance

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// stateTaskRow is the part of a `goray list tasks --json` row the tests
// read.
type stateTaskRow struct {
	TaskID       string `json:"task_id"`
	Function     string `json:"function"`
	State        string `json:"state"`
	NodeID       string `json:"node_id"`
	ErrorMessage string `json:"error_message"`
}

// TestStateClusterWide: a job runs tasks on a head (127.0.0.1) and a
// worker node (127.0.0.2), one failing on the head, and keeps an object in
// each node's store. From the worker node's side (its own temp dir, or
// GORAY_ADDRESS) `goray list` sees the whole cluster: the failed task
// with the head's node id, objects and workers of both nodes; `goray
// summary tasks` counts what `goray list tasks` lists; `goray timeline`
// has the tasks' executions on both nodes.
func TestStateClusterWide(t *testing.T) {
	ctx := testCtx(t)
	// The head runs a plugin (at debug level, so that it logs), which the
	// worker node's side lists and reads.
	cfg := writeConfig(t, shortTempDir(t), fastHealth+fmt.Sprintf("log_level = \"debug\"\nplugin_dir = %q\nplugin \"transport\" \"shm\" {}\n", pluginDir))
	h := startHead(t, ctx, "--config", cfg, "--num-cpus", "2", "--node-name", "head")
	n := joinNode(t, ctx, h, "127.0.0.2", "")
	headID := readNodeJSON(t, h.session).NodeID
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "state", dir)
	waitFile(t, j, 40*time.Second, filepath.Join(dir, "ready"))

	// fromWorker runs goray on the worker node's side.
	fromWorker := func(args ...string) cliResult {
		t.Helper()
		r := runGoray(t, ctx, append(args, "--temp-dir", n.tempDir)...)
		if r.code != 0 {
			t.Fatalf("goray %s: %s", strings.Join(args, " "), r)
		}
		return r
	}
	decode := func(r cliResult, key string, into any) {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Fatalf("JSON: %v\n%s", err, r)
		}
		if err := json.Unmarshal(m[key], into); err != nil {
			t.Fatalf("JSON %s: %v\n%s", key, err, r)
		}
	}

	// Task events reach the GCS within a flush period or so.
	var failed []stateTaskRow
	waitFor(t, 15*time.Second, "the failed task in `goray list tasks --filter state=FAILED`", func() bool {
		r := runGorayEnv(t, ctx, []string{"GORAY_ADDRESS=" + h.addr}, "list", "tasks", "--filter", "state=FAILED", "--json", "--temp-dir", n.tempDir)
		if r.code != 0 {
			t.Fatalf("goray list tasks: %s", r)
		}
		decode(r, "tasks", &failed)
		return len(failed) > 0
	})
	if len(failed) != 1 || failed[0].Function != "main.failOnPurpose" || failed[0].NodeID != headID || !strings.Contains(failed[0].ErrorMessage, "failed on purpose") {
		t.Fatalf("failed tasks %+v, want main.failOnPurpose on the head %s", failed, headID[:8])
	}
	// Lower case works too, and the table names it.
	if r := fromWorker("list", "tasks", "--filter", "state=failed"); !strings.Contains(r.stdout, "main.failOnPurpose") || !strings.Contains(r.stdout, headID[:8]) {
		t.Errorf("list tasks --filter state=failed:\n%s", r)
	}
	if r := runGoray(t, ctx, "list", "tasks", "--filter", "colour=red", "--temp-dir", n.tempDir); r.code != 2 || !strings.Contains(r.stderr, "filter on one of task_id") {
		t.Errorf("unknown filter key: %s", r)
	}

	// Every task has finished or failed by now (the job waits for them);
	// their executors' events may still be on their way.
	var tasks []stateTaskRow
	waitFor(t, 15*time.Second, "7 finished or failed tasks", func() bool {
		decode(fromWorker("list", "tasks", "--limit", "0", "--json"), "tasks", &tasks)
		done := 0
		for _, tk := range tasks {
			if tk.State == "FINISHED" || tk.State == "FAILED" {
				done++
			}
		}
		return done == 7
	})
	byFunc := map[string]map[string]int64{}
	nodesOf := map[string]map[string]bool{}
	for _, tk := range tasks {
		if byFunc[tk.Function] == nil {
			byFunc[tk.Function], nodesOf[tk.Function] = map[string]int64{}, map[string]bool{}
		}
		byFunc[tk.Function][tk.State]++
		nodesOf[tk.Function][tk.NodeID] = true
	}
	if byFunc["main.whereAmI"]["FINISHED"] != 4 || !nodesOf["main.whereAmI"][headID] || !nodesOf["main.whereAmI"][n.id] {
		t.Errorf("whereAmI tasks %v on %v, want 4 finished on both nodes", byFunc["main.whereAmI"], nodesOf["main.whereAmI"])
	}
	var summary struct {
		Rows []struct {
			Key    string           `json:"key"`
			Total  int64            `json:"total"`
			States map[string]int64 `json:"states"`
		} `json:"rows"`
		Total int64 `json:"total"`
	}
	if err := json.Unmarshal([]byte(fromWorker("summary", "tasks", "--json").stdout), &summary); err != nil {
		t.Fatal(err)
	}
	if summary.Total != int64(len(tasks)) || len(summary.Rows) != len(byFunc) {
		t.Errorf("summary of %d tasks in %d rows, list has %d in %d functions", summary.Total, len(summary.Rows), len(tasks), len(byFunc))
	}
	for _, r := range summary.Rows {
		for st, c := range r.States {
			if byFunc[r.Key][st] != c {
				t.Errorf("summary %s %s: %d, list: %d", r.Key, st, c, byFunc[r.Key][st])
			}
		}
	}
	if r := fromWorker("summary", "tasks"); !strings.Contains(r.stdout, "main.whereAmI") || !strings.Contains(r.stdout, "total: 7 tasks") {
		t.Errorf("summary tasks table:\n%s", r)
	}

	// Objects and workers of both nodes, reached through each raylet.
	var objects []struct {
		StoreNodes []string `json:"store_nodes"`
		Size       int64    `json:"size"`
	}
	decode(fromWorker("list", "objects", "--json"), "objects", &objects)
	stores := map[string]bool{}
	for _, o := range objects {
		for _, s := range o.StoreNodes {
			stores[s] = true
		}
	}
	if !stores[headID] || !stores[n.id] {
		t.Errorf("objects in the stores of %v, want both nodes:\n%+v", stores, objects)
	}
	var workers []struct {
		NodeID string `json:"node_id"`
		Type   string `json:"type"`
	}
	decode(fromWorker("list", "workers", "--json"), "workers", &workers)
	workerNodes := map[string]bool{}
	for _, w := range workers {
		if w.Type == "WORKER" {
			workerNodes[w.NodeID] = true
		}
	}
	if !workerNodes[headID] || !workerNodes[n.id] {
		t.Errorf("workers on %v, want both nodes: %+v", workerNodes, workers)
	}
	if r := fromWorker("memory", "--group-by", "node"); !strings.Contains(r.stdout, "node "+headID) || !strings.Contains(r.stdout, "node "+n.id) || !strings.Contains(r.stdout, "total: ") {
		t.Errorf("memory grouped by node lacks a node:\n%s", r)
	}
	if r := fromWorker("plugins", "list"); strings.Contains(r.stderr, "warning") || !strings.Contains(lineWith(r.stdout, "shm"), headID[:8]) || !strings.Contains(lineWith(r.stdout, "shm"), "running") {
		t.Errorf("plugins list from the worker node lacks the head's shm transport, running:\n%s", r)
	}
	// The plugin's own log, on the head, read from the worker node's side.
	if r := fromWorker("logs"); !strings.Contains(r.stdout, "plugin-transport-shm.log") {
		t.Errorf("goray logs does not list the plugin's log:\n%s", r)
	}
	if r := fromWorker("logs", "--plugin", "transport/shm"); !strings.Contains(r.stdout, `"@message":"configured"`) {
		t.Errorf("goray logs --plugin transport/shm lacks the plugin's log line:\n%s", r)
	}
	if r := runGoray(t, ctx, "logs", "--plugin", "shm", "--temp-dir", n.tempDir); r.code != 2 || !strings.Contains(r.stderr, "want KIND/NAME") {
		t.Errorf("goray logs --plugin shm: %s", r)
	}
	// Nodes: short rows, socket paths only in --detail.
	nodes := fromWorker("list", "nodes")
	for _, line := range strings.Split(strings.TrimSpace(nodes.stdout), "\n") {
		if len(line) > 120 || strings.Contains(line, ".sock") {
			t.Errorf("list nodes row of %d characters: %q", len(line), line)
		}
	}
	if d := fromWorker("list", "nodes", "--detail"); !strings.Contains(d.stdout, "raylet_socket: ") || !strings.Contains(d.stdout, "node_id: "+headID) {
		t.Errorf("list nodes --detail:\n%s", d)
	}

	// The timeline has executions on both nodes (an execution comes with
	// its worker's events, which may arrive a flush period after the
	// owner's FINISHED).
	trace := filepath.Join(dir, "trace.json")
	var execOn []string
	onBoth := func() bool {
		for _, id := range []string{headID, n.id} {
			if !slices.ContainsFunc(execOn, func(p string) bool { return strings.HasPrefix(p, "node "+id[:8]) }) {
				return false
			}
		}
		return true
	}
	waitFor(t, 15*time.Second, "executions on both nodes in the trace", func() bool {
		fromWorker("timeline", "-o", trace)
		b, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			TraceEvents []struct {
				Name string         `json:"name"`
				Cat  string         `json:"cat"`
				Ph   string         `json:"ph"`
				Pid  int            `json:"pid"`
				Ts   int64          `json:"ts"`
				Args map[string]any `json:"args"`
			} `json:"traceEvents"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("trace: %v", err)
		}
		procs := map[int]string{}
		execOn = execOn[:0]
		for _, e := range doc.TraceEvents {
			if e.Ph == "M" && e.Name == "process_name" {
				procs[e.Pid], _ = e.Args["name"].(string)
			}
		}
		for _, e := range doc.TraceEvents {
			if e.Ph == "X" && e.Cat == "execution" && e.Ts > 0 && e.Args["task_id"] != nil {
				execOn = append(execOn, procs[e.Pid])
			}
		}
		return onBoth()
	})

	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("job exited %d:\n%s", code, out)
	}
}

// TestDocState runs the walk-through of docs/state.md: a head and a node
// on 127.0.0.2, examples/cluster, then the commands it shows; the trace
// it writes is a Chrome trace with the program's tasks.
func TestDocState(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 3*time.Minute))
	out := d.runBlock("", "docs/state.md", "goray start --head --port 6380", 0)
	wantLines(t, out[2].stdout, "OK")
	wantLines(t, out[3].stdout, "NODE ID", "127.0.0.1", "127.0.0.2")
	for _, line := range strings.Split(strings.TrimSpace(out[3].stdout), "\n") {
		if len(line) > 120 {
			t.Errorf("list nodes row of %d characters: %q", len(line), line)
		}
	}
	wantLines(t, out[4].stdout, "TASK ID", "FINISHED")
	if n := strings.Count(strings.TrimSpace(out[4].stdout), "\n"); n != 5 {
		t.Errorf("list tasks --limit 5 printed %d rows:\n%s", n, out[4].stdout)
	}
	wantLines(t, out[4].stderr, "note: showing 5 of")
	wantLines(t, out[5].stdout, "main.sample", "main.sumBlock", "total: ")
	wantLines(t, out[6].stdout, "task_id: ", "state_times_us: ", "phases: ")
	wantLines(t, out[7].stdout, "total: ")
	wantLines(t, out[8].stdout, "open it at https://ui.perfetto.dev")
	trace := filepath.Join(d.tmp, "trace.json")
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Ph  string `json:"ph"`
			Cat string `json:"cat"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("trace: %v", err)
	}
	if !slices.ContainsFunc(doc.TraceEvents, func(e struct {
		Ph  string `json:"ph"`
		Cat string `json:"cat"`
	}) bool {
		return e.Ph == "X" && e.Cat == "execution"
	}) {
		t.Errorf("the trace has no execution events")
	}
	if err := os.Remove(trace); err != nil {
		t.Fatal(err)
	}
	d.checkNothingLeft()
}
