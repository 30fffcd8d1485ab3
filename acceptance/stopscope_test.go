package acceptance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// poolsOf returns the segment pools in /dev/shm that process pid made.
func poolsOf(t *testing.T, pid int) []string {
	t.Helper()
	pools, err := filepath.Glob(filepath.Join(shmem.Dir, fmt.Sprintf("%s%d-*", shmem.PoolPrefix, pid)))
	if err != nil {
		t.Fatal(err)
	}
	return pools
}

func pathExists(p string) bool {
	_, err := os.Lstat(p)
	return !errors.Is(err, os.ErrNotExist)
}

// killNode SIGKILLs a head's node process and waits until it is gone.
func killNode(t *testing.T, h *head) {
	t.Helper()
	if err := syscall.Kill(h.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("the killed node (pid %d) to be gone", h.pid), func() bool { return !alive(h.pid) })
}

// TestStopScopedToTempDir: two heads, each under a temp dir of its own,
// killed with SIGKILL, leave their segment pools in /dev/shm; `goray stop
// --temp-dir A` removes A's and leaves B's, and a pool of a dead process no
// session of A recorded (another temp dir's, another user's) stays through
// the heads' starts and both stops. Before, every node start and every
// `goray stop` removed the pool of every dead pid on the machine.
func TestStopScopedToTempDir(t *testing.T) {
	ctx := testCtx(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stranger := filepath.Join(shmem.Dir, fmt.Sprintf("%s%d-%s", shmem.PoolPrefix, gone.Process.Pid, shmem.NewName("")[:16]))
	if err := os.Mkdir(stranger, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(stranger) })

	a := startHead(t, ctx, "--num-cpus", "1")
	b := startHead(t, ctx, "--num-cpus", "1")
	poolA, poolB := poolsOf(t, a.pid), poolsOf(t, b.pid)
	if len(poolA) != 1 || len(poolB) != 1 {
		t.Fatalf("want one segment pool per head, got %v (pid %d) and %v (pid %d)", poolA, a.pid, poolB, b.pid)
	}
	killNode(t, a)
	killNode(t, b)
	t.Cleanup(func() { _ = os.RemoveAll(poolB[0]) })
	if !pathExists(poolA[0]) || !pathExists(poolB[0]) {
		t.Fatalf("the killed heads' pools %s, %s are gone before any stop", poolA[0], poolB[0])
	}

	r := runGoray(t, ctx, "stop", "--temp-dir", a.tempDir)
	if r.code != 0 {
		t.Fatalf("goray stop --temp-dir %s: %s", a.tempDir, r)
	}
	if pathExists(poolA[0]) || !strings.Contains(r.stdout, poolA[0]) {
		t.Errorf("goray stop --temp-dir %s did not remove its dead head's pool %s:\n%s", a.tempDir, poolA[0], r)
	}
	for _, kept := range []string{poolB[0], stranger} {
		if !pathExists(kept) {
			t.Errorf("goray stop --temp-dir %s removed %s, which no session of its temp dir made:\n%s", a.tempDir, kept, r)
		}
	}
	if !pathExists(filepath.Join(b.session, "node.json")) {
		t.Errorf("goray stop --temp-dir %s cleaned %s's session", a.tempDir, b.tempDir)
	}

	r = runGoray(t, ctx, "stop", "--temp-dir", b.tempDir)
	if r.code != 0 {
		t.Fatalf("goray stop --temp-dir %s: %s", b.tempDir, r)
	}
	if pathExists(poolB[0]) {
		t.Errorf("goray stop --temp-dir %s left its dead head's pool %s:\n%s", b.tempDir, poolB[0], r)
	}
	if !pathExists(stranger) {
		t.Errorf("goray stop --temp-dir %s removed %s", b.tempDir, stranger)
	}
}

// TestStopLeavesNoStartFiles: `goray start` keeps goray-start-<pid>.out and
// .ready in the temp dir while its node starts; after a start and a stop
// none is left, even when the starting command was killed (SIGKILL) before
// it could remove them.
func TestStopLeavesNoStartFiles(t *testing.T) {
	ctx := testCtx(t)
	h := startHead(t, ctx, "--num-cpus", "1")
	startFiles := func(root string) []string {
		m, err := filepath.Glob(filepath.Join(root, "goray-start-*"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
		t.Fatalf("goray stop: %s", r)
	}
	if left := startFiles(h.tempDir); len(left) != 0 {
		t.Errorf("start and stop left %v", left)
	}

	// The starter killed while its node starts: the node goes on and
	// writes its ready file, nobody removes it or the output file.
	dir := shortTempDir(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		runGoray(t, ctx, "stop", "--temp-dir", dir, "--force")
	})
	starter := exec.CommandContext(ctx, gorayBin, "start", "--head", "--port", strconv.Itoa(freePort(t)), "--temp-dir", dir, "--dashboard-port", "-1", "--num-cpus", "1")
	starter.Env = append(baseEnv(), testMarkerEnv+"="+testMarker(t))
	if err := starter.Start(); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, fmt.Sprintf("goray-start-%d", starter.Process.Pid))
	// The starter creates .out before it starts the node process: wait
	// for the node's own session dir, so the kill comes after the node
	// runs (killed between the two, no node starts at all).
	waitFor(t, 60*time.Second, "the node's session dir in "+dir, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "session_2*"))
		return len(m) > 0 && pathExists(base+".out")
	})
	_ = starter.Process.Kill()
	_ = starter.Wait()
	waitFor(t, 60*time.Second, "the node to serve ("+base+".ready)", func() bool { return pathExists(base + ".ready") })
	if r := runGoray(t, ctx, "stop", "--temp-dir", dir); r.code != 0 || !strings.Contains(r.stdout, "Stopped goray head node") {
		t.Fatalf("goray stop: %s", r)
	}
	if left := startFiles(dir); len(left) != 0 {
		t.Errorf("stop left %v of the killed goray start", left)
	}
}

// TestHeadGCSOnNodeIP: a head started with --node-ip IP --port P serves
// its GCS on IP:P, and a node that joins IP:P, as the flag suggests,
// joins. Before, the GCS listened on 127.0.0.1:P and the node waited 30 s
// and failed.
func TestHeadGCSOnNodeIP(t *testing.T) {
	ctx := testCtx(t)
	const ip = "127.0.31.1"
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	headDir, nodeDir := shortTempDir(t), shortTempDir(t)
	for _, d := range []string{nodeDir, headDir} {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			runGoray(t, ctx, "stop", "--temp-dir", d, "--force")
		})
	}
	r := runGoray(t, ctx, "start", "--head", "--node-ip", ip, "--port", strconv.Itoa(port), "--temp-dir", headDir, "--dashboard-port", "-1", "--num-cpus", "1")
	if r.code != 0 {
		t.Fatalf("goray start --head --node-ip %s: %s", ip, r)
	}
	latest, err := filepath.EvalSymlinks(filepath.Join(headDir, "session_latest"))
	if err != nil {
		t.Fatal(err)
	}
	if info := readNodeJSON(t, latest); info.GCSAddress != addr {
		t.Errorf("the head's GCS is at %s, want %s (--node-ip, --port)", info.GCSAddress, addr)
	}
	if !strings.Contains(r.stdout, "export GORAY_ADDRESS="+addr) {
		t.Errorf("goray start does not name %s:\n%s", addr, r)
	}
	r = runGoray(t, ctx, "start", "--address", addr, "--node-ip", "127.0.31.2", "--temp-dir", nodeDir, "--num-cpus", "1")
	if r.code != 0 {
		t.Fatalf("goray start --address %s: %s", addr, r)
	}
	r = runGoray(t, ctx, "status", "--json", "--address", addr)
	var st statusJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || st.AliveNodes != 2 || st.GCSAddress != addr {
		t.Errorf("goray status --address %s: want two alive nodes, got %+v from %s", addr, st, r)
	}
}

// TestBusyDefaultDashboardPort: a head whose dashboard port (the default,
// 8265, when none is given) is taken fails, naming the address and the
// flag, as a taken --port does; it no longer moves the dashboard to a port
// nobody announced. The test holds 8265 for the one start when it is free;
// when another program holds it already the start must fail just the same,
// but that program may let it go at any moment, so the test then takes a
// free port of its own and names it with --dashboard-port (the same
// listener code: the default is no longer treated apart).
func TestBusyDefaultDashboardPort(t *testing.T) {
	ctx := testCtx(t)
	dir := shortTempDir(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		runGoray(t, ctx, "stop", "--temp-dir", dir, "--force")
	})
	args := []string{"start", "--head", "--port", strconv.Itoa(freePort(t)), "--temp-dir", dir, "--num-cpus", "1"}
	busy, err := net.Listen("tcp", "127.0.0.1:8265")
	if err != nil {
		t.Logf("127.0.0.1:8265 is taken by another program (%v): taking another port and naming it", err)
		if busy, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--dashboard-port", strconv.Itoa(busy.Addr().(*net.TCPAddr).Port))
	}
	// Without baseEnv's $GORAY_DASHBOARD_PORT=-1: the default port.
	r := runGorayEnv(t, ctx, []string{"GORAY_DASHBOARD_PORT="}, args...)
	_ = busy.Close()
	if r.code != 1 {
		t.Fatalf("goray start --head with its dashboard port taken: want exit 1, got %s", r)
	}
	wantLines(t, r.stderr, busy.Addr().String()+" is already in use", "--dashboard-port")
	if strings.Count(r.stderr, "Error") != 1 || len(r.stderr) > 2000 {
		t.Errorf("want one short, clear error, got:\n%s", r.stderr)
	}
	if procs := findProcs(func(p proc) bool { return p.mentions(dir) }); len(procs) > 0 {
		waitNoProcs(t, 30*time.Second, "the failed head's processes", func(p proc) bool { return p.mentions(dir) })
	}
}

// TestKilledEmbeddedNodePool: the segment pool of an embedded node (a
// driver running its own node) killed with SIGKILL is recorded in its
// session, a goray-* directory in its TMPDIR, and the next embedded node
// there removes it; nothing else would, since no temp dir holds that
// session.
func TestKilledEmbeddedNodePool(t *testing.T) {
	tmp := shortTempDir(t)
	j := startJob(t, jobOptions{tmpDir: tmp}, testjobBin, "long", t.TempDir())
	var pool string
	waitFor(t, 60*time.Second, "the embedded node's pool and its record", func() bool {
		records, _ := filepath.Glob(filepath.Join(tmp, "goray-*", "tensor_pool"))
		if len(records) != 1 {
			return false
		}
		b, err := os.ReadFile(records[0])
		pool = strings.TrimSpace(string(b))
		return err == nil && pathExists(pool)
	})
	if pools := poolsOf(t, j.cmd.Process.Pid); len(pools) != 1 || pools[0] != pool {
		t.Fatalf("the driver (pid %d) made the pools %v, its session records %s", j.cmd.Process.Pid, pools, pool)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pool) })
	_ = j.cmd.Process.Kill()
	<-j.done
	for _, p := range j.procs() {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	if !pathExists(pool) {
		t.Fatalf("the killed driver's pool %s is gone already", pool)
	}
	next := startJob(t, jobOptions{tmpDir: tmp}, quickstartBin)
	if code, out := next.wait(testCtx(t)); code != 0 {
		t.Fatalf("quickstart exited %d:\n%s", code, out)
	}
	if pathExists(pool) {
		t.Errorf("the next embedded node in %s left the killed driver's pool %s", tmp, pool)
	}
}
