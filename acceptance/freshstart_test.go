package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/redistest"
)

// A clean `goray stop` (or `goray down`) ends a cluster, and the next head
// on the same storage starts a new one; a head that died resumes its
// cluster; --resume and --fresh override either way; a cluster file's
// cluster_name is the cluster's identity (gcs/lifecycle.go). Before, every
// head resumed the stored cluster, whatever ended it and whatever its
// name: `goray status` listed the dead nodes of every earlier session and
// `goray up` of another cluster file said "resumed cluster" of this one.

// startHeadAgain starts h's head again on its port and temp dir with
// extra flags (env added to the environment) and returns its node.json's
// GCS part and what goray start said.
func startHeadAgain(t *testing.T, ctx context.Context, h *head, env []string, extra ...string) (headInfo, cliResult) {
	t.Helper()
	r := runGorayEnv(t, ctx, env, append([]string{"start", "--head", "--port", strconv.Itoa(h.port), "--temp-dir", h.tempDir, "--dashboard-port", "-1", "--num-cpus", "1"}, extra...)...)
	if r.code != 0 {
		t.Fatalf("goray start --head %s: %s", strings.Join(extra, " "), r)
	}
	latest, err := filepath.EvalSymlinks(filepath.Join(h.tempDir, "session_latest"))
	if err != nil {
		t.Fatal(err)
	}
	h.session = latest
	h.pid = readNodeJSON(t, latest).Pid
	return h.gcsInfo(t), r
}

// killHead kills h's head with SIGKILL, as a crash would, and waits until
// it and its GCS process (which dies with it) are gone.
func killHead(t *testing.T, h *head) {
	t.Helper()
	gcsPid := h.gcsInfo(t).GCSPid
	if err := syscall.Kill(h.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the killed head and its GCS process gone", func() bool {
		return !alive(h.pid) && (gcsPid == 0 || !alive(gcsPid))
	})
}

// stopHead stops everything under h's temp dir with `goray stop`.
func stopHead(t *testing.T, ctx context.Context, h *head) {
	t.Helper()
	if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
		t.Fatalf("goray stop: %s", r)
	}
}

// listRows returns the rows of `goray list KIND --json` (kind "jobs",
// "actors", "nodes") of the head under h's temp dir.
func listRows(t *testing.T, ctx context.Context, h *head, kind string) []map[string]any {
	t.Helper()
	r := runGoray(t, ctx, "list", kind, "--json", "--temp-dir", h.tempDir)
	if r.code != 0 {
		t.Fatalf("goray list %s: %s", kind, r)
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("goray list %s --json: %v\n%s", kind, err, r)
	}
	var rows []map[string]any
	if raw, ok := out[kind]; ok {
		if err := json.Unmarshal(raw, &rows); err != nil {
			t.Fatalf("goray list %s --json: %v\n%s", kind, err, r)
		}
	}
	return rows
}

// runQuickstart runs the quickstart (a job with an actor) on h.
func runQuickstart(t *testing.T, ctx context.Context, h *head) {
	t.Helper()
	j := startJob(t, jobOptions{addr: h.addr}, quickstartBin)
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("quickstart exited %d:\n%s", code, out)
	}
}

// TestStopThenStartIsFresh, with the GCS in the head's data directory
// (bbolt) and in a real redis-server: a cluster of a head and one more
// node runs a job with an actor; `goray stop` on both machines, then `goray
// start --head` with the same flags starts a new cluster: a new id, the
// old one reported discarded, and no job, actor or node of the old one,
// dead or alive (before, it resumed the old cluster: its finished job and
// actor, and both old nodes dead beside the new head).
func TestStopThenStartIsFresh(t *testing.T) {
	for _, backend := range []string{"bolt", "redis"} {
		t.Run(backend, func(t *testing.T) {
			ctx := testCtx(t)
			var env, extra []string
			if backend == "redis" {
				rs := redistest.Start(t)
				env = []string{"GORAY_GCS_REDIS_PASSWORD=" + rs.Password}
				extra = []string{"--config", writeConfig(t, shortTempDir(t), redisGCS(rs.Address, ""))}
			}
			h := startHeadEnv(t, ctx, env, append([]string{"--num-cpus", "1"}, extra...)...)
			dumpHeadLogs(t, h)
			first := h.gcsInfo(t)
			n := joinNode(t, ctx, h, "127.0.0.2", "")
			runQuickstart(t, ctx, h)
			if rows := listRows(t, ctx, h, "actors"); len(rows) == 0 {
				t.Fatal("the quickstart's actor is not listed")
			}

			if r := runGoray(t, ctx, "stop", "--temp-dir", n.tempDir); r.code != 0 {
				t.Fatalf("goray stop (the node): %s", r)
			}
			stopHead(t, ctx, h)
			again, r := startHeadAgain(t, ctx, h, env, extra...)
			if again.GCSRestored || again.ClusterID == first.ClusterID || again.GCSDiscarded != first.ClusterID {
				t.Fatalf("after goray stop: %+v, want a new cluster that discarded %s", again, first.ClusterID)
			}
			wantLines(t, r.stdout, "new cluster "+again.ClusterID[:8], "the stored cluster "+first.ClusterID[:8]+" is discarded")
			if rows := listRows(t, ctx, h, "jobs"); len(rows) != 0 {
				t.Errorf("the new cluster lists the old cluster's jobs: %v", rows)
			}
			if rows := listRows(t, ctx, h, "actors"); len(rows) != 0 {
				t.Errorf("the new cluster lists the old cluster's actors: %v", rows)
			}
			nodes := listRows(t, ctx, h, "nodes")
			if len(nodes) != 1 || nodes[0]["state"] != "ALIVE" || nodes[0]["is_head"] != true {
				t.Errorf("the new cluster's nodes: %v, want its head alone", nodes)
			}
			if s, r := h.status(ctx); r.code != 0 || s.AliveNodes != 1 || s.DeadNodes != 0 {
				t.Errorf("goray status of the new cluster: %d alive, %d dead, want 1 and 0\n%s", s.AliveNodes, s.DeadNodes, r)
			}
		})
	}
}

// TestCrashResumesAndFlagsOverride: a head killed with SIGKILL resumes its
// cluster when started again (same id, its finished job listed); --resume
// after a clean stop resumes it too; --fresh after a crash starts a new
// one; and --resume with nothing stored fails saying so.
func TestCrashResumesAndFlagsOverride(t *testing.T) {
	ctx := testCtx(t)
	h := startHead(t, ctx, "--num-cpus", "1")
	dumpHeadLogs(t, h)
	first := h.gcsInfo(t)
	runQuickstart(t, ctx, h)
	finished := func() bool {
		for _, j := range listRows(t, ctx, h, "jobs") {
			if j["state"] == "FINISHED" {
				return true
			}
		}
		return false
	}
	if !finished() {
		t.Fatalf("no finished job listed: %v", listRows(t, ctx, h, "jobs"))
	}

	killHead(t, h)
	again, r := startHeadAgain(t, ctx, h, nil)
	if !again.GCSRestored || again.ClusterID != first.ClusterID {
		t.Fatalf("after kill -9: %+v, want cluster %s resumed", again, first.ClusterID)
	}
	wantLines(t, r.stdout, "resumed cluster "+first.ClusterID[:8])
	if !finished() {
		t.Errorf("the resumed cluster lost its finished job: %v", listRows(t, ctx, h, "jobs"))
	}

	stopHead(t, ctx, h)
	again, _ = startHeadAgain(t, ctx, h, nil, "--resume")
	if !again.GCSRestored || again.ClusterID != first.ClusterID {
		t.Fatalf("--resume after goray stop: %+v, want cluster %s resumed", again, first.ClusterID)
	}
	if !finished() {
		t.Errorf("the cluster resumed with --resume lost its finished job: %v", listRows(t, ctx, h, "jobs"))
	}

	killHead(t, h)
	again, _ = startHeadAgain(t, ctx, h, nil, "--fresh")
	if again.GCSRestored || again.ClusterID == first.ClusterID || again.GCSDiscarded != first.ClusterID {
		t.Fatalf("--fresh after kill -9: %+v, want a new cluster", again)
	}
	if rows := listRows(t, ctx, h, "jobs"); len(rows) != 0 {
		t.Errorf("the fresh cluster lists the old jobs: %v", rows)
	}

	// Nothing to resume: a clear error, and no head left running.
	tmp := shortTempDir(t)
	r = runGoray(t, ctx, "start", "--head", "--resume", "--port", strconv.Itoa(freePort(t)), "--temp-dir", tmp, "--dashboard-port", "-1", "--num-cpus", "1")
	if r.code == 0 {
		runGoray(t, ctx, "stop", "--temp-dir", tmp, "--force")
		t.Fatalf("--resume on an empty data directory started:\n%s", r)
	}
	wantLines(t, r.stderr, "--resume", "holds no cluster to resume", filepath.Join(tmp, "data", "gcs.db"))
	if r := runGoray(t, ctx, "start", "--head", "--resume", "--fresh", "--temp-dir", tmp); r.code == 0 || !strings.Contains(r.stderr, "give one of them") {
		t.Errorf("--resume with --fresh: %s", r)
	}
}

// TestUpDoesNotResumeAnotherCluster: `goray up` of a cluster file whose
// cluster_name is not the stored cluster's does not resume it. The
// storage (a data_dir shared on purpose) holds the default cluster of a
// `goray start --head` that was killed: goray up fails naming both
// clusters and --fresh, and leaves the state for the default cluster's
// head, which resumes it. Once that one ended with `goray stop`, goray up
// starts its own cluster, and after `goray down` the next
// `goray start --head` starts a new default one.
func TestUpDoesNotResumeAnotherCluster(t *testing.T) {
	ctx := testCtx(t)
	dir := shortTempDir(t)
	data := filepath.Join(dir, "data")
	h := startHead(t, ctx, "--num-cpus", "1", "--data-dir", data)
	dumpHeadLogs(t, h)
	first := h.gcsInfo(t)
	runQuickstart(t, ctx, h)
	killHead(t, h)

	up := &head{t: t, tempDir: filepath.Join(dir, "u"), port: freePort(t)}
	up.addr = "127.0.0.1:" + strconv.Itoa(up.port)
	file := filepath.Join(dir, "cluster.hcl")
	src := fmt.Sprintf(`
cluster_name   = "other"
head_node_type = "head"
max_workers    = 0
temp_dir       = %q
data_dir       = %q
plugin_dir     = %q

provider "local" {
  config {
    state_dir = %q
    ip_range  = "127.0.60.1-127.0.60.2"
  }
}

node_type "head" {
  resources = { CPU = 1 }
}
`, up.tempDir, data, pluginDir, filepath.Join(dir, "s"))
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		runGoray(t, ctx, "stop", "--temp-dir", up.tempDir, "--force")
	})
	r := runGoray(t, ctx, "up", "--port", strconv.Itoa(up.port), file)
	if r.code == 0 {
		t.Fatalf("goray up of cluster \"other\" on the default cluster's state started:\n%s", r)
	}
	wantLines(t, r.stderr, `holds cluster "default" (`+first.ClusterID[:8]+")", "did not end cleanly", `a head of cluster "other"`, "--fresh")

	// The default cluster's head still resumes it, and ends it.
	again, _ := startHeadAgain(t, ctx, h, nil, "--data-dir", data)
	if !again.GCSRestored || again.ClusterID != first.ClusterID {
		t.Fatalf("the default head after the refused goray up: %+v, want cluster %s resumed", again, first.ClusterID)
	}
	stopHead(t, ctx, h)

	r = runGoray(t, ctx, "up", "--port", strconv.Itoa(up.port), file)
	if r.code != 0 {
		t.Fatalf("goray up after the default cluster ended: %s", r)
	}
	wantLines(t, r.stdout, "new cluster ", "the stored cluster "+first.ClusterID[:8]+" is discarded")
	latest, err := filepath.EvalSymlinks(filepath.Join(up.tempDir, "session_latest"))
	if err != nil {
		t.Fatal(err)
	}
	up.session = latest
	other := up.gcsInfo(t)
	if rows := listRows(t, ctx, up, "jobs"); len(rows) != 0 {
		t.Errorf("cluster \"other\" lists the default cluster's jobs: %v", rows)
	}
	if r := runGoray(t, ctx, "down", file); r.code != 0 {
		t.Fatalf("goray down: %s", r)
	}
	again, _ = startHeadAgain(t, ctx, h, nil, "--data-dir", data)
	if again.GCSRestored || again.ClusterID == other.ClusterID || again.GCSDiscarded != other.ClusterID {
		t.Fatalf("the default head after goray down of \"other\": %+v, want a new cluster that discarded %s", again, other.ClusterID)
	}
}
