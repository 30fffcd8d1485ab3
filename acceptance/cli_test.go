package acceptance

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStartBadConfig: `goray start --head --config bad.hcl` with a mistake
// exits 1 naming the file and line, and starts nothing.
func TestStartBadConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// line3 is the third line of the file; the first two are valid.
		line3 string
		want  []string
	}{
		{"typo in a block name", `objekt_store { memory = "1GiB" }`, []string{"bad.hcl:3", `Did you mean "object_store"?`}},
		{"wrong type", `log_level = 3`, []string{"bad.hcl:3", "log_level", "string"}},
		{"bad value", `object_store { memory = "lots" }`, []string{"bad.hcl:3", `"lots"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			dir := shortTempDir(t)
			cfg := filepath.Join(dir, "bad.hcl")
			content := "# acceptance test config\nnode_name = \"bad\"\n" + c.line3 + "\n"
			if err := os.WriteFile(cfg, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			port := freePort(t)
			r := runGoray(t, ctx, "start", "--head", "--config", cfg, "--port", strconv.Itoa(port), "--temp-dir", dir)
			if r.code != 1 {
				t.Fatalf("start with %q: want exit 1, got %s", c.line3, r)
			}
			wantLines(t, r.stderr, c.want...)
			if procs := findProcs(func(p proc) bool { return p.mentions(dir) }); len(procs) > 0 {
				t.Errorf("a rejected config left processes running: %v", procs)
			}
			if _, err := os.Lstat(filepath.Join(dir, "session_latest")); err == nil {
				t.Errorf("a rejected config started a session")
			}
		})
	}
}

// TestStartOnBusyPort: a second head on the same port fails clearly, and the
// first keeps serving.
func TestStartOnBusyPort(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	shm := watchShm(t)
	h := startHead(t, ctx)
	r := runGoray(t, ctx, "start", "--head", "--port", strconv.Itoa(h.port), "--temp-dir", h.tempDir)
	if r.code != 1 {
		t.Fatalf("second start on busy port %d: want exit 1, got %s", h.port, r)
	}
	if !strings.Contains(r.stderr, h.addr) {
		t.Errorf("the error does not name the address %s:\n%s", h.addr, r)
	}
	if strings.Count(r.stderr, "Error") == 0 || len(r.stderr) > 2000 {
		t.Errorf("want a short, clear error, got:\n%s", r.stderr)
	}
	// The failed start left no node process behind, and the first one
	// still serves.
	gcsPid := h.gcsInfo(t).GCSPid
	waitNoProcs(t, 5*time.Second, "the failed second node", func(p proc) bool {
		return p.pid != h.pid && p.pid != gcsPid && p.mentions(h.tempDir) && !p.hasEnv("GORAY_SESSION_DIR="+h.session)
	})
	if latest, err := filepath.EvalSymlinks(filepath.Join(h.tempDir, "session_latest")); err != nil || latest != h.session {
		t.Errorf("after the failed start session_latest is %q (%v), want the running %s", latest, err, h.session)
	}
	sessions, _ := filepath.Glob(filepath.Join(h.tempDir, "session_*_*"))
	for _, s := range sessions {
		if _, err := os.Stat(filepath.Join(s, "sockets")); s != h.session && err == nil {
			t.Errorf("the failed start left a sockets dir in %s", s)
		}
	}
	checkOneAliveNode(t, h)
	j := startJob(t, jobOptions{addr: h.addr}, quickstartBin)
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("quickstart on the first node after the failed start exited %d:\n%s", code, out)
	}
	stopAndCheckClean(t, h, shm)
}

// actorRow, jobRow, taskRow and objectRow are the parts of `goray list ... --json`
// rows the tests read.
type actorRow struct {
	ActorID     string `json:"actor_id"`
	Name        string `json:"name"`
	ClassName   string `json:"class_name"`
	State       string `json:"state"`
	Pid         int    `json:"pid"`
	DeathReason string `json:"death_reason"`
}

type jobRow struct {
	JobID      string `json:"job_id"`
	State      string `json:"state"`
	DriverPid  int    `json:"driver_pid"`
	BinaryPath string `json:"binary_path"`
}

type taskRow struct {
	TaskID   string `json:"task_id"`
	Function string `json:"function"`
	State    string `json:"state"`
}

type objectRow struct {
	ObjectID string `json:"object_id"`
	State    string `json:"state"`
	Size     int64  `json:"size"`
	Where    string `json:"where"`
}

// holdState is what `testjob hold` writes to DIR/ready.
type holdState struct {
	ActorPid int    `json:"actor_pid"`
	SmallID  string `json:"small_id"`
	BigID    string `json:"big_id"`
	TaskRef  string `json:"task_ref"`
}

// TestListWhileJobRuns: `goray list actors|tasks|objects --json` show a
// running job's named actor (ALIVE), its running task and its objects; once
// the driver exits the actor is DEAD and its process gone.
func TestListWhileJobRuns(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := startHead(t, ctx)
	dir := shortTempDir(t)
	const name = "acceptance-holder"
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "hold", dir, name)
	var st holdState
	if err := json.Unmarshal([]byte(waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready"))), &st); err != nil {
		t.Fatal(err)
	}

	findActor := func() (actorRow, bool) {
		for _, a := range list[actorRow](h, ctx, "actors") {
			if a.Name == name {
				return a, true
			}
		}
		return actorRow{}, false
	}
	a, ok := findActor()
	if !ok {
		t.Fatalf("goray list actors does not show actor %q", name)
	}
	if a.State != "ALIVE" || a.ClassName != "main.Holder" || a.Pid != st.ActorPid || !alive(a.Pid) {
		t.Errorf("actor row %+v: want ALIVE main.Holder in live pid %d", a, st.ActorPid)
	}

	// Task states come from the task events processes report every 500 ms.
	var tasks, running []taskRow
	waitFor(t, 10*time.Second, "main.waitForFile RUNNING in goray list tasks", func() bool {
		tasks, running = list[taskRow](h, ctx, "tasks"), nil
		for _, k := range tasks {
			if k.Function == "main.waitForFile" && k.State == "RUNNING" {
				running = append(running, k)
			}
		}
		return len(running) > 0
	})
	if len(running) != 1 {
		t.Errorf("goray list tasks: want main.waitForFile RUNNING once, got %+v", tasks)
	}

	objs := list[objectRow](h, ctx, "objects")
	byID := map[string]objectRow{}
	for _, o := range objs {
		byID[o.ObjectID] = o
	}
	if o, ok := byID[st.BigID]; !ok || o.Where != "store" || o.Size < 1<<20 || o.State != "READY" {
		t.Errorf("the 1 MiB object %s: got %+v (found %v), want READY in the store; all: %+v", st.BigID, o, ok, objs)
	}
	if o, ok := byID[st.SmallID]; !ok || o.Where != "inline" || o.State != "READY" {
		t.Errorf("the small object %s: got %+v (found %v), want READY inline; all: %+v", st.SmallID, o, ok, objs)
	}
	if o, ok := byID[st.TaskRef]; !ok || o.State != "PENDING" {
		t.Errorf("the running task's result %s: got %+v (found %v), want PENDING", st.TaskRef, o, ok)
	}

	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := j.wait(ctx); code != 0 || !strings.Contains(out, "PASS hold") {
		t.Fatalf("testjob hold exited %d:\n%s", code, out)
	}
	waitFor(t, 15*time.Second, "actor "+name+" to be DEAD after its job ended", func() bool {
		a, ok := findActor()
		return ok && a.State == "DEAD"
	})
	waitFor(t, 10*time.Second, "the dead actor's process to exit", func() bool { return !alive(st.ActorPid) })
}
