package acceptance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
)

// logsJob runs `testjob logs NODE DIR MARKER` against h from the node on
// 127.0.0.2 (GORAY_NODE_IP) with env added, and returns the job, its
// stdout alone, and the task's and the actor's pids once they printed.
func logsJob(t *testing.T, h *head, node, dir, marker string, env ...string) (j *job, stdout *syncBuffer, taskPid, actorPid string) {
	t.Helper()
	stdout = &syncBuffer{}
	j = startJob(t, jobOptions{addr: h.addr, env: append([]string{"GORAY_NODE_IP=127.0.0.2"}, env...), stdout: stdout}, testjobBin, "logs", node, dir, marker)
	pids := strings.Fields(waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready")))
	if len(pids) != 2 {
		t.Fatalf("ready file: %q", pids)
	}
	return j, stdout, pids[0], pids[1]
}

// TestLogsAcrossNodes: a driver attached to one node prints, with their
// prefix, the lines a task and a named actor pinned to the other node (the
// head) print, stdout on stdout and stderr on stderr, including a line
// printed just before it shuts down; with GORAY_LOG_TO_DRIVER=0 it prints
// none. From the other node, `goray logs` lists the head's files, prints
// a worker's log by pid, stdout or stderr, and --follow shows a line
// written after it started, then ends on Ctrl-C.
func TestLogsAcrossNodes(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	n := joinNode(t, ctx, h, "127.0.0.2", "")
	headID := readNodeJSON(t, h.session).NodeID
	head8 := headID[:8]
	dir := shortTempDir(t)
	marker := fmt.Sprintf("mark-%d", time.Now().UnixNano())

	j, stdout, taskPid, actorPid := logsJob(t, h, headID, dir, marker)
	wantTask := fmt.Sprintf("(main.printOut pid=%s node=%s ip=127.0.0.1) task-out %s\n", taskPid, head8, marker)
	wantTaskErr := fmt.Sprintf("(main.printOut pid=%s node=%s ip=127.0.0.1) task-err %s\n", taskPid, head8, marker)
	wantActor := fmt.Sprintf("(main.Printer name=printer pid=%s node=%s ip=127.0.0.1) actor-out %s\n", actorPid, head8, marker)
	waitFor(t, 15*time.Second, "the driver to print its workers' lines, prefixed", func() bool {
		s := stdout.String()
		return strings.Contains(s, wantTask) && strings.Contains(s, wantActor) && strings.Contains(j.out.String(), wantTaskErr)
	})
	if strings.Contains(stdout.String(), "task-err") {
		t.Errorf("the worker's stderr line is on the driver's stdout:\n%s", stdout.String())
	}

	// From the other node: the head's files, and a worker's log.
	r := runGoray(t, ctx, "logs", "--temp-dir", n.tempDir)
	if r.code != 0 {
		t.Fatalf("goray logs: %s", r)
	}
	for _, want := range []string{head8, n.id[:8], "gcs.log", "node.log", "worker-"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("goray logs does not list %q:\n%s", want, r.stdout)
		}
	}
	r = runGoray(t, ctx, "logs", "--temp-dir", n.tempDir, "--node", head8, "--pid", taskPid)
	if r.code != 0 || r.stdout != "task-out "+marker+"\n" {
		t.Errorf("goray logs --node %s --pid %s: want exactly the task's line\n%s", head8, taskPid, r)
	}
	r = runGoray(t, ctx, "logs", "--temp-dir", n.tempDir, "--node", head8, "--pid", taskPid, "--err")
	if r.code != 0 || r.stdout != "task-err "+marker+"\n" {
		t.Errorf("goray logs --pid %s --err: want exactly the task's stderr line\n%s", taskPid, r)
	}

	// --follow sees a line written after it started; Ctrl-C ends it.
	var fout, ferr syncBuffer
	follow := exec.Command(gorayBin, "logs", "--temp-dir", n.tempDir, "--node", head8, "--actor", "printer", "--follow")
	follow.Env = baseEnv()
	follow.Stdout, follow.Stderr = &fout, &ferr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- follow.Wait() }()
	t.Cleanup(func() {
		_ = follow.Process.Kill()
		<-exited
	})
	waitFor(t, 10*time.Second, "goray logs --follow to print the actor's line", func() bool {
		return strings.Contains(fout.String(), "actor-out "+marker+"\n")
	})
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "goray logs --follow to print the line written after it started", func() bool {
		return strings.Contains(fout.String(), "actor-out late-"+marker+"\n")
	})
	if err := follow.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Errorf("goray logs --follow after Ctrl-C: %v\nstderr:\n%s", err, ferr.String())
		}
	case <-time.After(waitfor.Generous):
		t.Fatalf("goray logs --follow still runs after Ctrl-C")
	}

	// The line printed last is printed before the driver's Shutdown
	// returns (PASS comes after it).
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("testjob logs exited %d:\n%s", code, out)
	}
	late := fmt.Sprintf("(main.Printer name=printer pid=%s node=%s ip=127.0.0.1) actor-out late-%s\n", actorPid, head8, marker)
	s := stdout.String()
	if i, k := strings.Index(s, late), strings.Index(s, "PASS logs"); i < 0 || k < i {
		t.Errorf("the late line is not printed before Shutdown returned:\n%s", s)
	}

	// Turned off: nothing is printed, the worker's log file has it.
	dir2 := shortTempDir(t)
	marker2 := marker + "-off"
	j2, _, taskPid2, _ := logsJob(t, h, headID, dir2, marker2, "GORAY_LOG_TO_DRIVER=0")
	r = runGoray(t, ctx, "logs", "--temp-dir", n.tempDir, "--node", head8, "--pid", taskPid2)
	if r.code != 0 || !strings.Contains(r.stdout, "task-out "+marker2) {
		t.Errorf("the worker's log file lacks the line the driver does not print:\n%s", r)
	}
	if err := os.WriteFile(filepath.Join(dir2, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := j2.wait(ctx); code != 0 || strings.Contains(out, marker2) {
		t.Errorf("with GORAY_LOG_TO_DRIVER=0 the driver exited %d and printed its workers' lines:\n%s", code, out)
	}
}

// TestLogsEmbedded: an embedded driver (go run) prints its workers' lines
// the same way.
func TestLogsEmbedded(t *testing.T) {
	ctx := testCtx(t)
	dir := shortTempDir(t)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout syncBuffer
	j := startJob(t, jobOptions{tmpDir: shortTempDir(t), stdout: &stdout}, testjobBin, "logs", "-", dir, "emb")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("testjob logs (embedded) exited %d:\n%s", code, out)
	}
	for _, want := range []string{") task-out emb\n", ") actor-out emb\n", ") actor-out late-emb\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("embedded driver's stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(out, ") task-err emb\n") {
		t.Errorf("embedded driver's output lacks the task's stderr line:\n%s", out)
	}
}

// TestDocLogs runs the walk-through of docs/logs.md: a head and a node on
// 127.0.0.2, examples/cluster, whose task's line the driver prints
// prefixed, then `goray logs`.
func TestDocLogs(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 3*time.Minute))
	out := d.runBlock("", "docs/logs.md", "goray start --head --port 6380", 0)
	wantLines(t, out[2].stdout, "OK", "summing 64 MiB made on node ")
	if line := lineWith(out[2].stdout, "summing 64 MiB"); !strings.HasPrefix(line, "(main.sumBlock pid=") || !strings.Contains(line, " ip=127.0.0.") {
		t.Errorf("the task's line is not prefixed with its task, worker and node: %q", line)
	}
	wantLines(t, out[3].stdout, "node.log", "gcs.log", "worker-", "127.0.0.1", "127.0.0.2")
	if n := strings.Count(strings.TrimSpace(out[4].stdout), "\n"); n != 1 {
		t.Errorf("goray logs --tail 2 node.log printed %d lines:\n%s", n+1, out[4].stdout)
	}
	d.checkNothingLeft()
}
