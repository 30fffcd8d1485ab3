package acceptance

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// restartTimeout bounds the actor restart tests: with the default health
// checks (3s × 5) the head declares a silent node dead 15 to 18 seconds
// after it went quiet, on top of starting two nodes and a job.
const restartTimeout = 90 * time.Second

// startRestartCluster starts a head with the DEFAULT health checks (not
// fastHealth: the owner must follow the failure detector however long it
// takes) and a node to fail, and a job whose restartable actor runs there
// (mode restart or restart-frozen). It returns once the job wrote
// DIR/ready, with the first instance's pid.
func startRestartCluster(t *testing.T, ctx context.Context, mode string) (h *head, victim *clusterNode, j *job, dir string, pid int) {
	t.Helper()
	h = startHead(t, ctx, "--num-cpus", "2", "--node-name", "head")
	victim = joinNode(t, ctx, h, "127.0.0.2", "")
	dir = shortTempDir(t)
	j = startJob(t, jobOptions{addr: h.addr}, testjobBin, mode, dir, victim.id)
	pid = readPid(t, waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready")))
	if p, ok := readProc(pid); !ok || !p.hasEnv(markerEnv+"="+j.marker) || !p.mentions(victim.session) {
		t.Fatalf("the first instance (pid %d) is not a live worker of the job on the victim: %v", pid, p)
	}
	return h, victim, j, dir, pid
}

// TestActorRestartsAfterNodeKilled: kill -9 of the node running a
// MaxRestarts actor. The owner sees the connection drop at once, but the
// GCS only declares the node dead after its health timeout (~15 s with the
// defaults): the owner follows the GCS and the actor comes back on another
// node, however long detection takes.
func TestActorRestartsAfterNodeKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), restartTimeout)
	defer cancel()
	h, victim, j, _, _ := startRestartCluster(t, ctx, "restart")
	killed := time.Now()
	if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("restart job exited %d:\n%s", code, out)
	}
	wantLines(t, out, "restartable actor restarted on another node: ok", "PASS restart")
	t.Logf("the actor answered from its new node %s after the kill", time.Since(killed).Round(time.Second))
	waitNodeState(t, ctx, h, victim.id, "DEAD", 10*time.Second)
}

// TestActorRestartsAfterNodeStopped: `goray stop` of the node running a
// MaxRestarts actor is a node failure to the actor, not a kill: it comes
// back on another node.
func TestActorRestartsAfterNodeStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), restartTimeout)
	defer cancel()
	h, victim, j, _, _ := startRestartCluster(t, ctx, "restart")
	if r := runGoray(t, ctx, "stop", "--temp-dir", victim.tempDir); r.code != 0 {
		t.Fatalf("goray stop of the victim: %s", r)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("restart job exited %d:\n%s", code, out)
	}
	wantLines(t, out, "restartable actor restarted on another node: ok", "PASS restart")
	waitNodeState(t, ctx, h, victim.id, "DEAD", 10*time.Second)
}

// TestActorRestartsAfterNodeFrozen: the node running a MaxRestarts actor
// stops reporting (SIGSTOP of its node process, longer than the health
// timeout) while the actor's worker lives on. The GCS declares the node
// dead, the actor restarts on another node, and the old instance, which
// would still answer, ends itself. When the node runs again it learns it
// was declared dead and stops; every call reaches the new instance.
func TestActorRestartsAfterNodeFrozen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), restartTimeout)
	defer cancel()
	h, victim, j, dir, old := startRestartCluster(t, ctx, "restart-frozen")
	if err := syscall.Kill(victim.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(victim.pid, syscall.SIGCONT) })
	frozen := time.Now()
	newPid := readPid(t, waitFile(t, j, 40*time.Second, filepath.Join(dir, "restarted")))
	t.Logf("the actor answered from its new instance (pid %d) %s after the freeze", newPid, time.Since(frozen).Round(time.Second))
	if newPid == old {
		t.Fatalf("the new instance has the old one's pid %d", old)
	}
	// The superseded instance ended itself: its node, still frozen, cannot
	// even reap it (a zombie counts as gone).
	waitFor(t, 10*time.Second, "the old instance to exit while its node is frozen", func() bool { return !alive(old) })
	if !alive(victim.pid) {
		t.Fatal("the frozen node process is gone before SIGCONT")
	}
	waitNodeState(t, ctx, h, victim.id, "DEAD", 5*time.Second)
	if err := syscall.Kill(victim.pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Back, it is told it was declared dead, and stops.
	waitFor(t, 20*time.Second, "the node to stop once it runs again", func() bool { return !alive(victim.pid) })
	if err := os.WriteFile(filepath.Join(dir, "continued"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("restart-frozen job exited %d:\n%s", code, out)
	}
	wantLines(t, out, "restartable actor restarted on another node: ok",
		"calls after the old node came back reach the new instance only: ok", "PASS restart-frozen")
	waitNoProcs(t, 10*time.Second, "processes of the node declared dead", func(p proc) bool { return p.mentions(victim.session) })
}
