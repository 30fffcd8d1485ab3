package acceptance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The driver of these tests (acceptance/internal/lineagejob), built once
// on first use into the directory of TestMain's binaries.
var (
	lineageBuild    sync.Once
	lineageBuildErr error
	lineagejobBin   string
)

func buildLineageJob(t *testing.T) {
	t.Helper()
	lineageBuild.Do(func() {
		lineagejobBin = filepath.Join(filepath.Dir(gorayBin), "lineage", "lineagejob")
		cmd := exec.Command("go", "build", "-o", lineagejobBin, "./acceptance/internal/lineagejob")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			lineageBuildErr = fmt.Errorf("go build ./acceptance/internal/lineagejob: %v\n%s", err, out)
		}
	})
	if lineageBuildErr != nil {
		t.Fatal(lineageBuildErr)
	}
}

// lineageWait bounds each wait of these tests: generous, for a loaded
// machine; on a quiet one each takes seconds.
const lineageWait = 3 * time.Minute

// rerunLog is what an owner logs when it re-runs a task to rebuild an
// object lost with its node.
const rerunLog = "re-running the task that made it"

// lineageKill runs lineagejob MODE on a head and two nodes B and C (each
// started with nodeArgs), kills B with SIGKILL once the job made its
// objects, lets the job go on once the cluster declared B dead, and
// returns the job's output; the job must pass.
func lineageKill(t *testing.T, mode string, nodeArgs ...string) string {
	t.Helper()
	buildLineageJob(t)
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	b := joinNode(t, ctx, h, "127.0.0.2", "", nodeArgs...)
	c := joinNode(t, ctx, h, "127.0.0.3", "", nodeArgs...)
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, lineagejobBin, mode, dir, b.id, c.id)
	waitFile(t, j, lineageWait, filepath.Join(dir, "ready"))
	if err := syscall.Kill(b.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitNodeState(t, ctx, h, b.id, "DEAD", lineageWait)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("lineagejob %s exited %d:\n%s", mode, code, out)
	}
	return out
}

// TestLineageLiveCopySurvives: kill -9 of the node holding an object's
// primary copy while a secondary copy lives on another node (a task there
// read it): the owner's Get and a task taking the object read it from that
// copy, with no re-run — the task that made it may not run again
// (MaxRetries 0). Before, the owner went straight to re-running the task,
// which failed: the object was lost although a good copy existed.
func TestLineageLiveCopySurvives(t *testing.T) {
	out := lineageKill(t, "livecopy")
	wantLines(t, out, "livecopy: the object survived its node's death", "PASS livecopy")
	if strings.Contains(out, rerunLog) {
		t.Errorf("the owner re-ran the task although a live copy existed:\n%s", out)
	}
}

// TestLineageRerunLandsOnCopyNode: the same with a task that may be
// re-run and whose re-run can only land on the node holding the copy
// (resource "xy" on B and C only): the object survives, read with the
// right bytes by a Get and a task. Before, the re-run landed on C, whose
// store refused the id (AlreadyExists: the pulled copy was there), and the
// owner recorded the object as lost for good (issue 37, reproduced 2 of 2).
func TestLineageRerunLandsOnCopyNode(t *testing.T) {
	out := lineageKill(t, "oncopy", "--resources", "xy=1")
	wantLines(t, out, "oncopy: the object survived its node's death", "PASS oncopy")
}

// TestLineageArgumentNodeDies: a task whose by-reference argument was
// resolved while its node lived, and is read by the task's executor after
// the node died (the task waited for another argument): its owner rebuilds
// the argument and sends the task again, which reads the right bytes.
// Before, the task failed (object lost) although its owner could rebuild
// the argument.
func TestLineageArgumentNodeDies(t *testing.T) {
	out := lineageKill(t, "argdies")
	wantLines(t, out, "argdies: the task read its argument, rebuilt after its node died", "PASS argdies",
		"an argument of a task was lost with its node; sending the task again")
}

// slowHealth declares a silent node dead only after ten minutes: a
// frozen node stays alive in the GCS for the whole test.
const slowHealth = `
health_check {
  period            = "1s"
  failure_threshold = 600
}
`

// pullRetryLog is what a process logs when a pull from a node not
// reported dead failed and is tried again.
const pullRetryLog = "its node is not reported dead, so trying again"

// TestLineageSlowPullRetried: a Get of an object whose node is frozen
// (SIGSTOP of its node process: it accepts connections and answers
// nothing, and the GCS does not declare it dead) waits: the pull fails
// (the 10 s handshake timeout) and is tried again, not taken as a loss;
// once the node is resumed the Get reads the object. The task that made it
// may not run again (MaxRetries 0), so a loss would fail the Get. Before,
// the first failed pull started a re-run at once (here: failed for good,
// ErrObjectLost).
func TestLineageSlowPullRetried(t *testing.T) {
	buildLineageJob(t)
	ctx := testCtx(t)
	cfg := writeConfig(t, shortTempDir(t), slowHealth)
	h := startHead(t, ctx, "--config", cfg, "--num-cpus", "2", "--node-name", "head")
	b := joinNode(t, ctx, h, "127.0.0.2", "")
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, lineagejobBin, "slowpull", dir, b.id, b.id)
	waitFile(t, j, lineageWait, filepath.Join(dir, "ready"))

	if err := syscall.Kill(b.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(b.pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume) // before the node's goray stop
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, lineageWait, "the driver to retry its pull from the frozen node", func() bool {
		select {
		case <-j.done:
			t.Fatalf("the job ended while the object's node was frozen (code %d):\n%s", j.code, j.out.String())
		default:
		}
		return strings.Contains(j.out.String(), pullRetryLog)
	})
	s, r := h.status(ctx)
	if r.code != 0 {
		t.Fatalf("goray status: %s", r)
	}
	for _, n := range s.Nodes {
		if n.NodeID == b.id && n.State != "ALIVE" {
			t.Fatalf("the frozen node is %s, want ALIVE (the test's premise: not declared dead)", n.State)
		}
	}
	resume()
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("lineagejob slowpull exited %d:\n%s", code, out)
	}
	wantLines(t, out, "slowpull: the object was read once its node answered again", "PASS slowpull")
	if strings.Contains(out, rerunLog) {
		t.Errorf("the owner re-ran the task while the object's node was only frozen:\n%s", out)
	}
}
