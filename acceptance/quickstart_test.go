package acceptance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestQuickstartEmbedded runs the quickstart with no GORAY_ADDRESS: it
// starts an embedded node, passes its checks, and leaves no process,
// session directory or shared memory behind.
func TestQuickstartEmbedded(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	shm := watchShm(t)
	// The embedded node makes its session dir under $TMPDIR; a private one
	// tells exactly what this run left behind.
	tmp := shortTempDir(t)
	j := startJob(t, jobOptions{tmpDir: tmp}, quickstartBin)
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("quickstart exited %d:\n%s", code, out)
	}
	wantLines(t, out, "goray is running on an embedded node", "all checks passed")
	waitNoProcs(t, 5*time.Second, "processes of the quickstart (driver or workers)", func(p proc) bool { return p.hasEnv(markerEnv + "=" + j.marker) })
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("the embedded node left %s in $TMPDIR", filepath.Join(tmp, e.Name()))
	}
	checkNoNewShm(t, shm)
}

// TestQuickstartOnStartedNode runs the quickstart against a node started
// with `goray start --head`, checks that the job's workers go away when it
// ends, and that `goray stop` leaves no process, socket or shared memory.
func TestQuickstartOnStartedNode(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	shm := watchShm(t)
	h := startHead(t, ctx)
	checkOneAliveNode(t, h)

	j := startJob(t, jobOptions{addr: h.addr}, quickstartBin)
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("quickstart against %s exited %d:\n%s", h.addr, code, out)
	}
	wantLines(t, out, "goray is running on the cluster at "+h.addr, "all checks passed")
	// The job's workers exit with it; the node stays up.
	waitNoProcs(t, 10*time.Second, "workers of the finished quickstart job", func(p proc) bool {
		return p.hasEnv(markerEnv+"="+j.marker) || p.hasEnv("GORAY_SESSION_DIR="+h.session)
	})
	checkOneAliveNode(t, h)
	jobs := list[jobRow](h, ctx, "jobs")
	if len(jobs) != 1 || jobs[0].State != "FINISHED" || jobs[0].DriverPid != j.cmd.Process.Pid || jobs[0].BinaryPath != quickstartBin {
		t.Errorf("goray list jobs: want the quickstart job (driver pid %d, %s) FINISHED, got %+v", j.cmd.Process.Pid, quickstartBin, jobs)
	}

	stopAndCheckClean(t, h, shm)
}

// checkOneAliveNode asserts that `goray status --json` shows h's node, alive.
func checkOneAliveNode(t *testing.T, h *head) {
	t.Helper()
	st, r := h.status(testCtx(t))
	if r.code != 0 {
		t.Fatalf("goray status: %s", r)
	}
	if st.AliveNodes != 1 || st.DeadNodes != 0 || len(st.Nodes) != 1 {
		t.Fatalf("status: %d alive, %d dead, %d nodes; want exactly 1 alive:\n%s", st.AliveNodes, st.DeadNodes, len(st.Nodes), r.stdout)
	}
	n := st.Nodes[0]
	if n.State != "ALIVE" || !n.IsHead || n.Pid != h.pid || n.SessionDir != h.session {
		t.Fatalf("status node = %+v, want the alive head pid %d session %s", n, h.pid, h.session)
	}
}

// stopAndCheckClean runs `goray stop` on the head's temp dir and checks that
// no process of it, no socket and no shared memory is left.
func stopAndCheckClean(t *testing.T, h *head, shm *shmWatch) {
	t.Helper()
	r := runGoray(t, testCtx(t), "stop", "--temp-dir", h.tempDir)
	if r.code != 0 {
		t.Fatalf("goray stop: %s", r)
	}
	if !strings.Contains(r.stdout, "Stopped goray head node") && !strings.Contains(r.stdout, "Removed stale sockets") {
		t.Errorf("goray stop did not report what it did:\n%s", r)
	}
	checkCleanAfterStop(t, h, shm)
}

// checkCleanAfterStop asserts that nothing of h's temp dir runs or is left
// but logs.
func checkCleanAfterStop(t *testing.T, h *head, shm *shmWatch) {
	t.Helper()
	// stop has waited for the node; nothing may be left, give or take the
	// kernel reaping.
	waitNoProcs(t, 5*time.Second, "processes of "+h.tempDir, func(p proc) bool { return p.mentions(h.tempDir) })
	if alive(h.pid) {
		t.Errorf("node process %d still runs after stop", h.pid)
	}
	for _, p := range []string{filepath.Join(h.session, "sockets"), filepath.Join(h.session, "node.json")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is left after stop", p)
		}
	}
	var socks []string
	_ = filepath.WalkDir(h.tempDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Type()&os.ModeSocket != 0 {
			socks = append(socks, path)
		}
		return nil
	})
	if len(socks) > 0 {
		t.Errorf("sockets left under %s: %v", h.tempDir, socks)
	}
	checkNoNewShm(t, shm)
}
