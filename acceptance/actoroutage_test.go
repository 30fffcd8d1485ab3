package acceptance

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// outageHealth keeps the head through a GCS frozen for minutes. A resumed
// GCS that has read no heartbeat for twice its limit declares every node
// dead (gcs/health.go), and a node that has not reached the GCS for
// gcs.reconnect_timeout exits; neither is what this test is about, and on
// a busy machine the freeze may last long.
const outageHealth = `
health_check {
  period            = "1s"
  failure_threshold = 300
}
gcs {
  reconnect_timeout = "10m"
}
`

// TestActorCreationDuringGCSOutage: with the head's GCS process stopped
// (SIGSTOP; the node process runs on), a driver creates an unnamed actor:
// Remote returns its handle at once (before, it waited for the GCS for the
// whole outage), and a task given the handle and a call on the handle are
// submitted without waiting either. Once the GCS runs again the actor is
// registered and created, and both calls answer. A named actor, which
// registers before Remote returns, works as well afterwards.
func TestActorCreationDuringGCSOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cfg := writeConfig(t, shortTempDir(t), outageHealth)
	h := startHead(t, ctx, "--config", cfg, "--num-cpus", "2", "--node-name", "head")
	dumpHeadLogs(t, h)
	gcsPid := h.gcsInfo(t).GCSPid
	if gcsPid == 0 || gcsPid == h.pid {
		t.Fatalf("GCS pid %d, head node pid %d: the GCS must be its own process", gcsPid, h.pid)
	}
	if p, ok := readProc(gcsPid); !ok || !strings.Contains(strings.Join(p.cmdline, " "), "gcs-server") {
		t.Fatalf("pid %d is not the head's goray gcs-server: %v", gcsPid, p)
	}

	dir := shortTempDir(t)
	// The job's deadline outlasts every wait here: before the change,
	// Remote waited for the GCS until the job's context ended.
	j := startJob(t, jobOptions{addr: h.addr, env: []string{"TESTJOB_TIMEOUT=5m"}}, testjobBin, "actor-outage", dir)
	waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready"))

	// Only the GCS process stops; SIGCONT when the test ends, whatever
	// happens.
	stopProcs(t, gcsPid)
	waitFor(t, 10*time.Second, "the GCS stopped (state T)", func() bool { return procState(gcsPid) == "T" })
	if st := procState(h.pid); st == "T" || st == "" {
		t.Fatalf("the head node process %d is in state %q: only the GCS may be stopped", h.pid, st)
	}
	if err := os.WriteFile(filepath.Join(dir, "frozen"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// Remote and both submissions return while the GCS is stopped.
	waitFile(t, j, 10*time.Second, filepath.Join(dir, "created"))
	waitFile(t, j, 10*time.Second, filepath.Join(dir, "submitted"))
	if st := procState(gcsPid); st != "T" {
		t.Fatalf("the GCS is in state %q, not stopped, after the job created the actor: something continued it", st)
	}
	if !alive(h.pid) {
		t.Fatal("the head node process ended during the outage")
	}

	contProcs(gcsPid)
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("job exited %d:\n%s", code, out)
	}
	wantLines(t, out, "created and submitted while the GCS was stopped",
		"direct call: 101", "task via handle: 120", "named actor: 8", "PASS actor-outage")
	t.Logf("job output:\n%s", out)
}
