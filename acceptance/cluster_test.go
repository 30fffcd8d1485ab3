package acceptance

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fastHealth makes the head declare a silent node dead after about five
// seconds (10 missed checks of 500ms) instead of Ray's 15. Two seconds
// were too few on a loaded machine: a live node whose heartbeats were
// starved for 2 s was declared dead (a hog run: the node holding a
// lineage test's gate task, while the test waited for another node's
// death).
const fastHealth = `
health_check {
  period            = "500ms"
  failure_threshold = 10
}
`

// clusterNode is a non-head node started with `goray start --address`.
type clusterNode struct {
	tempDir string
	ip      string
	id      string
	pid     int
	session string
}

// startClusterHead starts a head with fast health checks and 2 CPUs.
func startClusterHead(t *testing.T, ctx context.Context) *head {
	t.Helper()
	cfg := writeConfig(t, shortTempDir(t), fastHealth)
	return startHead(t, ctx, "--config", cfg, "--num-cpus", "2", "--node-name", "head")
}

// joinNode starts a node that joins h's cluster, listening on ip (a
// distinct loopback address per node), and stops it when the test ends.
func joinNode(t *testing.T, ctx context.Context, h *head, ip, tempDir string, extra ...string) *clusterNode {
	t.Helper()
	n := &clusterNode{tempDir: tempDir, ip: ip}
	if n.tempDir == "" {
		n.tempDir = shortTempDir(t)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		runGoray(t, ctx, "stop", "--temp-dir", n.tempDir, "--force")
	})
	args := append([]string{"start", "--address", h.addr, "--temp-dir", n.tempDir, "--node-ip", ip, "--num-cpus", "2"}, extra...)
	r := runGoray(t, ctx, args...)
	if r.code != 0 {
		t.Fatalf("goray start --address: %s", r)
	}
	field := func(name string) string {
		return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lineWith(r.stdout, name)), name))
	}
	n.id, n.session = field("node id:"), field("session dir:")
	if addr := field("raylet address:"); !strings.HasPrefix(addr, ip+":") {
		t.Fatalf("raylet listens on %q, want %s:*\n%s", addr, ip, r)
	}
	n.pid = readNodeJSON(t, n.session).Pid
	return n
}

// waitNodeState waits until `goray status` shows node id in state.
func waitNodeState(t *testing.T, ctx context.Context, h *head, id, state string, d time.Duration) {
	t.Helper()
	waitFor(t, d, "node "+id[:8]+" "+state, func() bool {
		s, r := h.status(ctx)
		if r.code != 0 {
			return false
		}
		for _, n := range s.Nodes {
			if n.NodeID == id {
				return n.State == state
			}
		}
		return false
	})
}

// killNodeThenGo kills node n with SIGKILL, waits until the cluster
// declares it dead, and then lets a waiting job go on (writes dir/go).
func killNodeThenGo(t *testing.T, ctx context.Context, h *head, n *clusterNode, dir string) {
	t.Helper()
	if err := syscall.Kill(n.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitNodeState(t, ctx, h, n.id, "DEAD", 15*time.Second)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestClusterExample runs examples/cluster on a head and two more nodes:
// Spread uses every node, an object made on one node is read on another
// and by the driver, and every node shows in `goray status`.
func TestClusterExample(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	n1 := joinNode(t, ctx, h, "127.0.0.2", "")
	n2 := joinNode(t, ctx, h, "127.0.0.3", "")
	s, r := h.status(ctx)
	if r.code != 0 || s.AliveNodes != 3 {
		t.Fatalf("status after two joins: %d alive\n%s", s.AliveNodes, r)
	}
	// Every node sees the same cluster.
	for _, n := range []*clusterNode{n1, n2} {
		r := runGoray(t, ctx, "status", "--temp-dir", n.tempDir)
		if r.code != 0 || !strings.Contains(r.stdout, "3 nodes alive") {
			t.Fatalf("goray status on node %s:\n%s", n.id[:8], r)
		}
	}
	j := startJob(t, jobOptions{addr: h.addr}, clusterBin, "--min-nodes", "3", "--tasks", "12", "--darts", "200000", "--block-mib", "48")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("examples/cluster exited %d:\n%s", code, out)
	}
	wantLines(t, out, "cluster: 3 alive nodes", "OK")
	for _, id := range []string{n1.id[:8], n2.id[:8]} {
		if !strings.Contains(out, id+" ran ") {
			t.Errorf("no sampling task ran on node %s:\n%s", id, out)
		}
	}
	if !strings.Contains(out, "summed on") || !strings.Contains(out, "locality: ran on the block's node") {
		t.Errorf("block transfer lines missing:\n%s", out)
	}
	// Freed everywhere: no object is left in any store.
	waitFor(t, 10*time.Second, "every store empty after the job", func() bool {
		s, r := h.status(ctx)
		if r.code != 0 {
			return false
		}
		for _, n := range s.Nodes {
			if n.State == "ALIVE" && n.ObjectStoreUsed != 0 {
				return false
			}
		}
		return true
	})
}

// TestClusterShipsBinary: a driver whose executable is gone still gets its
// workers on other nodes, which run a copy fetched by sha256 and cached in
// the node's binary cache.
func TestClusterShipsBinary(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	n1 := joinNode(t, ctx, h, "127.0.0.2", "")
	bin := filepath.Join(shortTempDir(t), "shipjob")
	copyFile(t, testjobBin, bin)
	j := startJob(t, jobOptions{addr: h.addr}, bin, "ship")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("ship job exited %d:\n%s", code, out)
	}
	sum := strings.TrimSpace(strings.TrimPrefix(lineWith(out, "driver sha256:"), "driver sha256:"))
	want := filepath.Join(n1.tempDir, "binaries", sum)
	if !strings.Contains(out, "exe "+n1.id+" "+want+" "+sum) {
		t.Fatalf("the worker on node %s did not run the cached copy %s:\n%s", n1.id[:8], want, out)
	}
	if st, err := os.Stat(want); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("cached binary %s: %v", want, err)
	}
}

// TestClusterPendingDemand: a task asking for a resource no node has waits,
// shows as pending demand, and runs once a node with it joins.
func TestClusterPendingDemand(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "pending", dir)
	waitFile(t, j, 20*time.Second, filepath.Join(dir, "submitted"))
	waitFor(t, 10*time.Second, "pending demand for special in goray status", func() bool {
		r := runGoray(t, ctx, "status", "--json", "--temp-dir", h.tempDir)
		var s struct {
			Pending []struct {
				Resources  map[string]float64 `json:"resources"`
				Count      int                `json:"count"`
				Infeasible bool               `json:"infeasible"`
			} `json:"pending_demand"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &s) != nil {
			return false
		}
		for _, p := range s.Pending {
			if p.Resources["special"] == 1 && p.Count == 1 && p.Infeasible {
				return true
			}
		}
		return false
	})
	r := runGoray(t, ctx, "status", "--temp-dir", h.tempDir)
	if !strings.Contains(r.stdout, "special") {
		t.Errorf("goray status does not show the pending demand:\n%s", r)
	}
	n := joinNode(t, ctx, h, "127.0.0.2", "", "--resources", "special=1")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("pending job exited %d:\n%s", code, out)
	}
	wantLines(t, out, "special ran on: "+n.id)
}

// TestClusterNodeKilled: kill -9 of a node mid-job. Its tasks rerun
// elsewhere, callers of its actor get ActorDiedError, its object is lost
// (typed), a hard affinity to it is unschedulable, and the job finishes.
// The node restarted on the same temp dir rejoins and runs work.
func TestClusterNodeKilled(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	_ = joinNode(t, ctx, h, "127.0.0.2", "")
	victim := joinNode(t, ctx, h, "127.0.0.3", "")
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "nodekill", dir, victim.id)
	waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready"))
	if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("nodekill job exited %d:\n%s", code, out)
	}
	wantLines(t, out, "restartable actor restarted elsewhere: ok", "PASS nodekill")
	waitNodeState(t, ctx, h, victim.id, "DEAD", 10*time.Second)
	// Its workers and plugins died with it.
	waitNoProcs(t, 10*time.Second, "processes of the killed node", func(p proc) bool { return p.mentions(victim.session) })

	// The node restarted on the same temp dir and address rejoins (with a
	// new id) and runs work.
	back := joinNode(t, ctx, h, victim.ip, victim.tempDir)
	if back.id == victim.id {
		t.Fatalf("the restarted node kept the dead node's id %s", back.id)
	}
	waitNodeState(t, ctx, h, back.id, "ALIVE", 10*time.Second)
	j2 := startJob(t, jobOptions{addr: h.addr}, testjobBin, "where", back.id)
	if code, out := j2.wait(ctx); code != 0 {
		t.Fatalf("job on the restarted node exited %d:\n%s", code, out)
	}
}

// TestClusterEvictsSecondaryCopies: a node whose store is smaller than the
// objects it reads from another node evicts the copies it pulled before
// (their primaries live on the head) to make room; every read is exact.
func TestClusterEvictsSecondaryCopies(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	n2 := joinNode(t, ctx, h, "127.0.0.2", "", "--object-store-memory", "64MiB")
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "secondaries", n2.id, "10", "16")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("secondaries job exited %d:\n%s", code, out)
	}
	wantLines(t, out, "10 objects of 16 MiB read on N2: ok", "PASS secondaries")
}

// TestClusterRebuildsLostObjects: objects whose only copy dies with a
// killed node are rebuilt by their owner, which re-runs the tasks that made
// them on the nodes left (lineage reconstruction): a Get and a task's
// argument both read the right bytes. The second of a call's two results
// is rebuilt on its own (the first was freed before), and a generator's
// item by running the generator again.
func TestClusterRebuildsLostObjects(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	victim := joinNode(t, ctx, h, "127.0.0.2", "")
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "lineage", dir, victim.id)
	waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready"))
	killNodeThenGo(t, ctx, h, victim, dir)
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("lineage job exited %d:\n%s", code, out)
	}
	wantLines(t, out, "lineage: both lost objects rebuilt", "lineage: a second result and a generator item rebuilt", "PASS lineage")
	if !strings.Contains(out, "re-running the task that made it") {
		t.Errorf("the driver did not say it rebuilt the objects (were they on the killed node?):\n%s", out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	if err := os.Chmod(to, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestClusterFreesPulledCopies: objects the driver put on the head and
// tasks on another node read (that node pulls a copy of each) leave no
// store once the driver releases them, while the driver still runs: the
// owner's free, sent only to the nodes that may hold a copy, reaches the
// node that pulled them.
// TestWaitFetchLocal: Wait counts an object held in another node's store
// as ready once a copy is on the caller's node (Ray's fetch_local=True,
// its default), also in a loop polling with timeout 0; with
// FetchLocal(false) it leaves the copy to Get.
func TestWaitFetchLocal(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	n2 := joinNode(t, ctx, h, "127.0.0.2", "")
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "fetch-local", n2.id)
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("fetch-local exited %d:\n%s", code, out)
	}
	wantLines(t, out, "copies here after Wait(FetchLocal(false)): 0 <nil>", "copies here after Wait: 1 <nil>",
		"copies here after polling Wait with timeout 0: 2 <nil>", "PASS fetch-local")
}

func TestClusterFreesPulledCopies(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	n2 := joinNode(t, ctx, h, "127.0.0.2", "")
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "copies", dir, n2.id)
	want := strings.Fields(waitFile(t, j, 60*time.Second, filepath.Join(dir, "ids")))
	if len(want) != 4 {
		t.Fatalf("job wrote %d object ids, want 4", len(want))
	}
	var left []string
	waitFor(t, 20*time.Second, "the pulled copies to be freed on every node", func() bool {
		nodes, ok := objectStoreNodes(t, ctx, n2.tempDir)
		left = left[:0]
		for _, id := range want {
			if len(nodes[id]) > 0 {
				left = append(left, id[:8]+" on "+strings.Join(nodes[id], ","))
			}
		}
		return ok && len(left) == 0
	})
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("copies job exited %d:\n%s", code, out)
	}
}
