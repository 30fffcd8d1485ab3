package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/redistest"
)

// gcsHealth gives a node 5 s (10 checks of 500 ms) without a heartbeat
// before the GCS declares it dead, and so to a node of a restored GCS to come
// back: the GCS process restarts in about a second, and the nodes' reconnect
// backoff starts at one.
const gcsHealth = `
health_check {
  period            = "500ms"
  failure_threshold = 10
}
`

// ftTimeout bounds a GCS fault tolerance test (a cluster of three nodes, a
// job and a GCS restart).
const ftTimeout = 150 * time.Second

// ftCluster is a head and two more nodes.
type ftCluster struct {
	h     *head
	nodes []*clusterNode
}

// startFTCluster starts a head whose config is gcsHealth plus extra (env
// added to its environment), and two nodes that join it.
func startFTCluster(t *testing.T, ctx context.Context, extra string, env ...string) *ftCluster {
	t.Helper()
	cfg := writeConfig(t, shortTempDir(t), gcsHealth+extra)
	c := &ftCluster{h: startHeadEnv(t, ctx, env, "--config", cfg, "--num-cpus", "2", "--node-name", "head")}
	dumpHeadLogs(t, c.h)
	c.nodes = append(c.nodes, joinNode(t, ctx, c.h, "127.0.0.2", ""), joinNode(t, ctx, c.h, "127.0.0.3", ""))
	return c
}

// headInfo is the GCS part of the head's node.json.
type headInfo struct {
	ClusterID   string `json:"cluster_id"`
	GCSStorage  string `json:"gcs_storage"`
	GCSRestored bool   `json:"gcs_restored"`
	GCSPid      int    `json:"gcs_pid"`
	GCSLogFile  string `json:"gcs_log_file"`
	// GCSDiscarded is the stored cluster the GCS discarded for a new one.
	GCSDiscarded string `json:"gcs_discarded"`
}

func (h *head) gcsInfo(t *testing.T) headInfo {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.session, "node.json"))
	if err != nil {
		t.Fatal(err)
	}
	var i headInfo
	if err := json.Unmarshal(b, &i); err != nil {
		t.Fatalf("node.json: %v\n%s", err, b)
	}
	return i
}

// gcsStatusJSON is the gcs part of `goray status --json`.
type gcsStatusJSON struct {
	GCS struct {
		ClusterID     string  `json:"cluster_id"`
		Storage       string  `json:"storage"`
		StorageError  string  `json:"storage_error"`
		Healthy       bool    `json:"healthy"`
		UptimeSeconds float64 `json:"uptime_seconds"`
		Restored      bool    `json:"restored"`
		Pid           int     `json:"pid"`
	} `json:"gcs"`
}

func (h *head) gcsStatus(ctx context.Context) (gcsStatusJSON, cliResult) {
	h.t.Helper()
	r := runGoray(h.t, ctx, "status", "--json", "--temp-dir", h.tempDir)
	var s gcsStatusJSON
	if r.code == 0 {
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			h.t.Fatalf("goray status --json: %v\n%s", err, r)
		}
	}
	return s, r
}

// aliveIDs returns the ids of the alive nodes `goray status` shows, sorted.
func aliveIDs(s statusJSON) []string {
	var ids []string
	for _, n := range s.Nodes {
		if n.State == "ALIVE" {
			ids = append(ids, n.NodeID)
		}
	}
	slices.Sort(ids)
	return ids
}

// gcsFTRun runs `testjob gcs-ft` with its driver on the node at
// 127.0.0.2: the test freezes the GCS (SIGSTOP) while the job works
// without it, then kills it with SIGKILL; duringRestart runs then (before
// the GCS is expected back). The GCS must come back on the same storage
// with the same nodes, and the job must finish with every result right.
func gcsFTRun(t *testing.T, ctx context.Context, c *ftCluster, duringRestart func(oldPid int)) {
	t.Helper()
	h := c.h
	s, r := h.status(ctx)
	if r.code != 0 || s.AliveNodes != 3 {
		t.Fatalf("status before the job: %d alive\n%s", s.AliveNodes, r)
	}
	before := aliveIDs(s)
	gs, r := h.gcsStatus(ctx)
	if r.code != 0 || !gs.GCS.Healthy || gs.GCS.Restored {
		t.Fatalf("GCS before the restart: %+v\n%s", gs.GCS, r)
	}
	info := h.gcsInfo(t)
	if info.GCSPid == 0 || info.GCSPid != gs.GCS.Pid || info.GCSPid == h.pid {
		t.Fatalf("GCS pid: node.json %d, status %d, head node %d: the GCS must be its own process", info.GCSPid, gs.GCS.Pid, h.pid)
	}

	dir := t.TempDir()
	j := startJob(t, jobOptions{addr: h.addr, env: []string{"GORAY_NODE_IP=127.0.0.2"}}, testjobBin, "gcs-ft", dir)
	waitFile(t, j, 60*time.Second, filepath.Join(dir, "phase1"))
	if !strings.Contains(j.out.String(), "node: "+c.nodes[0].id) {
		t.Fatalf("the driver is not on node %s:\n%s", c.nodes[0].id[:8], j.out.String())
	}

	// The GCS stops answering: the job's tasks, actor calls and object
	// reads go on; an actor created now waits.
	old := info.GCSPid
	if err := syscall.Kill(old, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the GCS stopped (state T)", func() bool { return procState(old) == "T" })
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := waitFile(t, j, 60*time.Second, filepath.Join(dir, "outage"))
	if st := procState(old); st != "T" {
		t.Fatalf("the frozen GCS is in state %q, not stopped: something continued it", st)
	}
	if got != "pending" {
		t.Errorf("the actor created while the GCS was frozen: %s, want still pending", got)
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if duringRestart != nil {
		duringRestart(old)
	}

	// The head restarts the GCS on the same storage; it takes the nodes
	// back under their ids.
	waitFor(t, 30*time.Second, "the GCS restarted with every node back", func() bool {
		i := h.gcsInfo(t)
		if i.GCSPid == old || i.GCSPid == 0 || !alive(i.GCSPid) {
			return false
		}
		gs, r := h.gcsStatus(ctx)
		if r.code != 0 || !gs.GCS.Restored || gs.GCS.Pid != i.GCSPid || gs.GCS.ClusterID != info.ClusterID {
			return false
		}
		s, r := h.status(ctx)
		return r.code == 0 && slices.Equal(aliveIDs(s), before) && s.DeadNodes == 0
	})
	if err := os.WriteFile(filepath.Join(dir, "back"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("job exited %d:\n%s", code, out)
	}
	wantLines(t, out, "PASS gcs-ft", "late actor 5")
	t.Logf("job output:\n%s", out)

	// The same nodes, none lost; the GCS says it was restored and how
	// long it has been up.
	s, r = h.status(ctx)
	if r.code != 0 || !slices.Equal(aliveIDs(s), before) || s.DeadNodes != 0 {
		t.Fatalf("status after the job: alive %v (want %v), %d dead\n%s", aliveIDs(s), before, s.DeadNodes, r)
	}
	text := runGoray(t, ctx, "status", "--temp-dir", h.tempDir)
	if text.code != 0 || !strings.Contains(text.stdout, "restored from storage") || !strings.Contains(text.stdout, "storage "+info.GCSStorage+" (healthy)") {
		t.Errorf("goray status does not show the restored GCS and its storage %q:\n%s", info.GCSStorage, text)
	}
	if !strings.Contains(readFile(t, h.session, "logs", "node.log"), "restarting it on the same storage") {
		t.Errorf("the head's log does not say it restarted the GCS")
	}
}

// dumpHeadLogs logs the tails of the head's node and GCS logs when t
// fails (registered before the head's own cleanup removes them).
func dumpHeadLogs(t *testing.T, h *head) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, name := range []string{"node.log", "gcs.log"} {
			s := readFile(t, h.session, "logs", name)
			if len(s) > 6000 {
				s = s[len(s)-6000:]
			}
			t.Logf("head %s (tail):\n%s", name, s)
		}
	})
}

// procState is the state letter of process pid (/proc/pid/stat: R, S, T,
// Z, ...), "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// readFile reads a file under dir, "" when it is missing.
func readFile(t *testing.T, parts ...string) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(parts...))
	return string(b)
}

// TestGCSRestartMidJob: a head's GCS on its default storage (bbolt in the
// data directory) frozen and then killed with SIGKILL in the middle of a
// job comes back on its own; the job finishes with every result right.
func TestGCSRestartMidJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), ftTimeout)
	defer cancel()
	c := startFTCluster(t, ctx, "")
	info := c.h.gcsInfo(t)
	if want := filepath.Join(c.h.tempDir, "data", "gcs.db"); info.GCSStorage != "bolt "+want {
		t.Fatalf("default storage %q, want bolt %s", info.GCSStorage, want)
	}
	gcsFTRun(t, ctx, c, nil)
}

// redisGCS is the gcs block of a head keeping its tables in Redis at addr
// (the password comes from $GORAY_GCS_REDIS_PASSWORD).
func redisGCS(addr string, extra string) string {
	return fmt.Sprintf("gcs {\n  storage = \"redis\"\n%s  redis {\n    address = %q\n    prefix  = \"ft\"\n  }\n}\n", extra, addr)
}

// TestGCSRestartMidJobRedis: the same with the GCS's tables in a real
// redis-server, which is also killed with SIGKILL while the GCS is down:
// the GCS cannot come back until Redis does, then restores the cluster
// from it. A Redis restart under a running GCS is survived as well.
func TestGCSRestartMidJobRedis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), ftTimeout)
	defer cancel()
	rs := redistest.Start(t)
	c := startFTCluster(t, ctx, redisGCS(rs.Address, ""), "GORAY_GCS_REDIS_PASSWORD="+rs.Password)
	info := c.h.gcsInfo(t)
	if info.GCSStorage != "redis "+rs.Address {
		t.Fatalf("storage %q, want redis %s", info.GCSStorage, rs.Address)
	}
	gcsFTRun(t, ctx, c, func(old int) {
		// The job's workers on the head run now: none got the password.
		checkPasswordInProcs(t, c.h, rs.Password, 1)
		// Redis dies too: the GCS cannot restart without its tables.
		rs.Kill()
		waitFor(t, 30*time.Second, "the head to try restarting the GCS and fail to reach Redis", func() bool {
			return strings.Contains(readFile(t, info.GCSLogFile), rs.Address) && strings.Contains(readFile(t, c.h.session, "logs", "node.log"), "did not restart")
		})
		if i := c.h.gcsInfo(t); i.GCSPid != old {
			t.Fatalf("a GCS (pid %d) came up without its storage", i.GCSPid)
		}
		rs.Restart()
	})

	// Redis restarts under a running GCS: the GCS reconnects, and what it
	// writes afterwards (a new job, its actors) is kept.
	rs.Restart()
	waitFor(t, 30*time.Second, "the GCS's storage healthy after the Redis restart", func() bool {
		gs, r := c.h.gcsStatus(ctx)
		return r.code == 0 && gs.GCS.Healthy
	})
	j := startJob(t, jobOptions{addr: c.h.addr}, quickstartBin)
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("a job after the Redis restart exited %d:\n%s", code, out)
	}

	// The password reached the GCS and nothing else: no log, no file of
	// the session, no status, no command line, no other process's
	// environment (workers and plugins inherit the node's).
	status := runGoray(t, ctx, "status", "--json", "--temp-dir", c.h.tempDir)
	seen := status.stdout + status.stderr
	for _, dir := range []string{c.h.tempDir, c.nodes[0].tempDir, c.nodes[1].tempDir} {
		_ = filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() && e.Type().IsRegular() {
				if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), rs.Password) {
					t.Errorf("the Redis password is in %s", path)
				}
			}
			return nil
		})
	}
	if strings.Contains(seen, rs.Password) {
		t.Error("goray status shows the Redis password")
	}
	checkPasswordInProcs(t, c.h, rs.Password, 0)
}

// checkPasswordInProcs fails when a process of the head other than the
// node process itself and the GCS has the Redis password in its
// environment, or any has it on its command line; it returns how many
// workers it checked.
func checkPasswordInProcs(t *testing.T, h *head, password string, wantWorkers int) {
	t.Helper()
	gcsPid := h.gcsInfo(t).GCSPid
	workers := 0
	for _, p := range findProcs(func(p proc) bool { return p.mentions(h.tempDir) || p.pid == h.pid }) {
		if strings.Contains(strings.Join(p.cmdline, " "), password) {
			t.Errorf("the Redis password is on the command line of %v", p)
		}
		if p.hasEnv("GORAY_WORKER=1") {
			workers++
		}
		if p.pid != gcsPid && p.pid != h.pid && slices.ContainsFunc(p.env, func(kv string) bool { return strings.Contains(kv, password) }) {
			t.Errorf("process %v has the Redis password in its environment", p)
		}
	}
	if workers < wantWorkers {
		t.Errorf("checked %d workers of the head, want at least %d", workers, wantWorkers)
	}
}

// TestGCSDownPastReconnectLimit: with the GCS gone for longer than
// gcs.reconnect_timeout (its storage, Redis, down too, so it cannot come
// back), every node exits on its own, says why, and leaves no process or
// shared-memory segment behind.
func TestGCSDownPastReconnectLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), ftTimeout)
	defer cancel()
	shm := watchShm(t)
	rs := redistest.Start(t)
	cfg := writeConfig(t, shortTempDir(t), gcsHealth+redisGCS(rs.Address, "  reconnect_timeout = \"3s\"\n"))
	h := startHeadEnv(t, ctx, []string{"GORAY_GCS_REDIS_PASSWORD=" + rs.Password}, "--config", cfg, "--num-cpus", "1")
	nodeCfg := writeConfig(t, shortTempDir(t), "gcs {\n  reconnect_timeout = \"3s\"\n}\n")
	n := joinNode(t, ctx, h, "127.0.0.2", "", "--config", nodeCfg)
	gcsPid := h.gcsInfo(t).GCSPid

	rs.Kill()
	if err := syscall.Kill(gcsPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, 30*time.Second, "every node to exit", func() bool {
		return !alive(h.pid) && !alive(n.pid)
	})
	// A node counts from its last heartbeat (every 500ms) that got through.
	if d := time.Since(start); d < 3*time.Second-500*time.Millisecond {
		t.Errorf("the nodes exited %s after the GCS died, before the 3s reconnect limit", d)
	}
	for _, sess := range []string{h.session, n.session} {
		log := readFile(t, sess, "logs", "node.log")
		if !strings.Contains(log, "has been unreachable for") || !strings.Contains(log, "stopping the node") {
			t.Errorf("%s/logs/node.log does not say the node stopped because the GCS was unreachable:\n%s", sess, log)
		}
	}
	waitNoProcs(t, 15*time.Second, "processes of the cluster", func(p proc) bool {
		return p.mentions(h.tempDir) || p.mentions(n.tempDir)
	})
	checkNoNewShm(t, shm)
	if r := runGoray(t, ctx, "status", "--temp-dir", h.tempDir); r.code == 0 {
		t.Errorf("goray status after the cluster exited:\n%s", r)
	}
}

// TestGCSStorageUnavailableAtStart: a head whose storage cannot be opened
// or reached does not start, and says which path or address.
func TestGCSStorageUnavailableAtStart(t *testing.T) {
	ctx := testCtx(t)
	dir := shortTempDir(t)
	notDir := filepath.Join(dir, "a-file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	closed := fmt.Sprintf("127.0.0.1:%d", refusedPort(t))
	held := startHead(t, ctx, "--num-cpus", "1")
	for _, tc := range []struct {
		name string
		args []string
		hcl  string
		want []string
	}{
		{"data dir is a file", []string{"--data-dir", notDir}, "", []string{notDir}},
		{"redis unreachable", nil, redisGCS(closed, ""), []string{"redis", closed}},
		{"bolt file held by a running head", []string{"--data-dir", filepath.Join(held.tempDir, "data")}, "", []string{filepath.Join(held.tempDir, "data", "gcs.db"), "lock"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := shortTempDir(t)
			args := []string{"start", "--head", "--port", fmt.Sprint(freePort(t)), "--temp-dir", tmp, "--num-cpus", "1"}
			if tc.hcl != "" {
				args = append(args, "--config", writeConfig(t, tmp, tc.hcl))
			}
			r := runGoray(t, ctx, append(args, tc.args...)...)
			if r.code == 0 {
				runGoray(t, ctx, "stop", "--temp-dir", tmp, "--force")
				t.Fatalf("the head started:\n%s", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("the error does not name %q:\n%s", w, r)
				}
			}
			waitNoProcs(t, 10*time.Second, "processes of the failed head", func(p proc) bool { return p.mentions(tmp) })
		})
	}
}

// TestGCSFreshAndResume: a head started again on the same data directory
// after goray stop with --resume resumes the cluster (same id, its jobs),
// and --fresh starts a new one.
func TestGCSFreshAndResume(t *testing.T) {
	ctx := testCtx(t)
	h := startHead(t, ctx, "--num-cpus", "1")
	first := h.gcsInfo(t)
	if first.GCSRestored {
		t.Fatalf("a first start says it restored: %+v", first)
	}
	j := startJob(t, jobOptions{addr: h.addr}, quickstartBin)
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("quickstart exited %d:\n%s", code, out)
	}
	restart := func(extra ...string) (headInfo, cliResult) {
		if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
			t.Fatalf("goray stop: %s", r)
		}
		r := runGoray(t, ctx, append([]string{"start", "--head", "--port", fmt.Sprint(h.port), "--temp-dir", h.tempDir, "--dashboard-port", "-1", "--num-cpus", "1"}, extra...)...)
		if r.code != 0 {
			t.Fatalf("goray start again: %s", r)
		}
		latest, err := filepath.EvalSymlinks(filepath.Join(h.tempDir, "session_latest"))
		if err != nil {
			t.Fatal(err)
		}
		h.session = latest
		return h.gcsInfo(t), r
	}
	// After a clean goray stop, --resume resumes the cluster (without it
	// the head starts a new one: freshstart_test.go).
	again, r := restart("--resume")
	if !again.GCSRestored || again.ClusterID != first.ClusterID {
		t.Fatalf("restarted head: %+v, want cluster %s restored", again, first.ClusterID)
	}
	if !strings.Contains(r.stdout, "resumed cluster "+first.ClusterID[:8]) {
		t.Errorf("goray start does not say it resumed the cluster:\n%s", r)
	}
	if jobs := runGoray(t, ctx, "list", "jobs", "--temp-dir", h.tempDir); !strings.Contains(jobs.stdout, "FINISHED") {
		t.Errorf("the resumed cluster lost its finished job:\n%s", jobs)
	}
	fresh, r := restart("--fresh")
	if fresh.GCSRestored || fresh.ClusterID == first.ClusterID {
		t.Fatalf("--fresh: %+v, want a new cluster", fresh)
	}
	if jobs := runGoray(t, ctx, "list", "jobs", "--temp-dir", h.tempDir); strings.Contains(jobs.stdout, "FINISHED") {
		t.Errorf("the fresh cluster has the old job:\n%s", jobs)
	}
}
