package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/goray-dev/goray/internal/testservers/miniotest"
	"github.com/goray-dev/goray/internal/waitfor"
)

// Binaries of the spill tests, built once on first use.
var (
	spillBuild     sync.Once
	spillBuildErr  error
	spillExample   string
	spillPluginDir string
)

// buildSpillBinaries builds them into the directory of TestMain's binaries,
// which it removes when the tests end.
func buildSpillBinaries(t *testing.T) {
	t.Helper()
	spillBuild.Do(func() {
		dir := filepath.Join(filepath.Dir(gorayBin), "spill")
		spillExample = filepath.Join(dir, "spill-s3")
		spillPluginDir = filepath.Join(dir, "plugins")
		for _, b := range []struct{ out, pkg string }{
			{spillExample, "./examples/spill-s3"},
			{filepath.Join(spillPluginDir, "goray-storage-s3"), "./plugins/s3"},
		} {
			cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
			cmd.Dir = ".."
			if out, err := cmd.CombinedOutput(); err != nil {
				spillBuildErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
	})
	if spillBuildErr != nil {
		t.Fatal(spillBuildErr)
	}
}

// spillHead starts MinIO with a bucket and a head whose 256 MiB store
// spills to it.
func spillHead(t *testing.T, ctx context.Context, secret string) (*head, *miniotest.Server, string) {
	t.Helper()
	buildSpillBinaries(t)
	srv := miniotest.Start(t)
	bucket := "spill"
	srv.CreateBucket(t, bucket)
	if secret == "" {
		secret = srv.SecretKey
	}
	cfg := s3SpillConfig(t, srv, bucket, secret, "256MiB", "64MiB", "")
	if secret != srv.SecretKey {
		return nil, srv, cfg
	}
	return startHead(t, ctx, "--config", cfg), srv, bucket
}

// s3SpillConfig writes a node config whose store of memory bytes spills
// to bucket on srv through the s3 plugin (with secret as the secret key),
// plus extra HCL, and returns its path. The s3 plugin block starts on
// line 6 (TestSpillWrongCredentials names it).
func s3SpillConfig(t *testing.T, srv *miniotest.Server, bucket, secret, memory, minFile, extra string) string {
	t.Helper()
	return writeConfig(t, shortTempDir(t), fmt.Sprintf(`
object_store {
  memory = %q
}
plugin_dir = %q
plugin "storage" "s3" {
  config {
    endpoint   = %q
    bucket     = %q
    prefix     = "goray"
    tls        = false
    access_key = %q
    secret_key = %q
    timeout    = "2s"
  }
}
spilling {
  storage       = "s3"
  min_file_size = %q
  wait          = "40s"
}
%s`, memory, spillPluginDir, srv.Endpoint, bucket, srv.AccessKey, secret, minFile, extra))
}

// bucketFiles lists the stored spill files (name → size).
func bucketFiles(t *testing.T, srv *miniotest.Server, bucket string) map[string]int64 {
	t.Helper()
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	out := map[string]int64{}
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			return nil
		}
		out[o.Key] = o.Size
	}
	return out
}

// spillStats reads the head's spill counters from `goray status --json`.
func spillStats(t *testing.T, ctx context.Context, h *head) (spilled, restored int64, failing string) {
	t.Helper()
	r := runGoray(t, ctx, "status", "--json", "--temp-dir", h.tempDir)
	var s struct {
		Nodes []struct {
			Spill *struct {
				SpilledBytes  int64  `json:"spilled_bytes"`
				RestoredBytes int64  `json:"restored_bytes"`
				Failing       string `json:"failing"`
			} `json:"spill"`
		} `json:"nodes"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &s) != nil {
		return 0, 0, ""
	}
	for _, n := range s.Nodes {
		if n.Spill != nil {
			return n.Spill.SpilledBytes, n.Spill.RestoredBytes, n.Spill.Failing
		}
	}
	return 0, 0, ""
}

// TestSpillToS3: a job 3× larger than the store completes with every value
// correct; the bucket holds fused files while they are needed and none
// after; status shows the spilled and restored bytes.
func TestSpillToS3(t *testing.T) {
	ctx := testCtx(t)
	h, srv, bucket := spillHead(t, ctx, "")
	j := startJob(t, jobOptions{addr: h.addr}, spillExample, "--objects", "24", "--size-mib", "32")
	var fused int64
	waitFor(t, 40*time.Second, "fused spill files in the bucket", func() bool {
		for _, size := range bucketFiles(t, srv, bucket) {
			fused = max(fused, size)
		}
		return fused >= 64<<20
	})
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("spill-s3 exited %d:\n%s", code, out)
	}
	wantLines(t, out, "every value read back correctly", "OK")
	spilled, restored, _ := spillStats(t, ctx, h)
	if spilled < 512<<20 || restored == 0 {
		t.Errorf("status: spilled %d, restored %d bytes; want >= 512 MiB spilled and some restored", spilled, restored)
	}
	r := runGoray(t, ctx, "status", "--temp-dir", h.tempDir)
	if !strings.Contains(r.stdout, "Spilling on") || !strings.Contains(r.stdout, "s3://") {
		t.Errorf("goray status does not show spilling:\n%s", r)
	}
	waitFor(t, 15*time.Second, "no spill file left once the job's objects are gone", func() bool {
		return len(bucketFiles(t, srv, bucket)) == 0
	})
}

// TestSpillSurvivesS3Outage: MinIO stops mid-job; no object is lost, status
// reports the failure, and the job finishes once MinIO is back.
func TestSpillSurvivesS3Outage(t *testing.T) {
	ctx := testCtx(t)
	h, srv, _ := spillHead(t, ctx, "")
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "spill", dir, "24", "32")
	waitFile(t, j, 30*time.Second, filepath.Join(dir, "third"))
	srv.Stop()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "status to report spilling failing", func() bool {
		_, _, failing := spillStats(t, ctx, h)
		return failing != ""
	})
	srv.Restart()
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("spill job exited %d after MinIO came back:\n%s", code, out)
	}
	wantLines(t, out, "every value read back correctly", "PASS spill")
}

// TestSpillPluginKilled: the s3 plugin is killed mid-spill; the host
// restarts it, the spill is retried and nothing is lost.
func TestSpillPluginKilled(t *testing.T) {
	ctx := testCtx(t)
	h, _, _ := spillHead(t, ctx, "")
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "spill", dir, "24", "32")
	waitFile(t, j, 30*time.Second, filepath.Join(dir, "third"))
	plugins := findProcs(func(p proc) bool {
		return len(p.cmdline) > 0 && strings.HasSuffix(p.cmdline[0], "goray-storage-s3") && strings.HasPrefix(p.cmdline[0], spillPluginDir)
	})
	var victim int
	for _, p := range plugins {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.pid)); err == nil && strings.Contains(string(b), fmt.Sprintf("GORAY_PLUGIN_HOST_PID=%d", h.pid)) {
			victim = p.pid
		}
	}
	if victim == 0 {
		t.Fatalf("no s3 plugin process of the head (pid %d) among %v", h.pid, plugins)
	}
	// Kill it while the rest of the puts make the store spill.
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("spill job exited %d after the plugin was killed:\n%s", code, out)
	}
	wantLines(t, out, "every value read back correctly", "PASS spill")
	var restarts int
	for _, p := range h.plugins(t) {
		if p.Kind == "storage" {
			restarts = p.Restarts
		}
	}
	if restarts < 1 {
		t.Errorf("the storage plugin shows %d restarts, want at least 1", restarts)
	}
}

// TestSpillWrongCredentials: a node whose s3 plugin has wrong credentials
// does not start, and the error names the config line and the access key.
func TestSpillWrongCredentials(t *testing.T) {
	ctx := testCtx(t)
	_, srv, cfg := spillHead(t, ctx, "not-the-secret")
	r := runGoray(t, ctx, "start", "--head", "--port", fmt.Sprint(freePort(t)), "--temp-dir", shortTempDir(t), "--config", cfg)
	if r.code == 0 {
		t.Fatalf("goray start with wrong S3 credentials succeeded:\n%s", r)
	}
	msg := r.stdout + r.stderr
	if !strings.Contains(msg, filepath.Base(cfg)+":6") || !strings.Contains(msg, srv.AccessKey) || strings.Contains(msg, "not-the-secret") {
		t.Fatalf("the error should name %s:6 and the access key (never the secret):\n%s", filepath.Base(cfg), r)
	}
}

// TestSpillRestoredAfterNodeDeath: objects a node spilled to S3 outlive
// the node. A head and two nodes spill to one bucket; a node holding a
// driver's objects, several of them spilled, is killed; once the cluster
// declares it dead a task on the other node and the driver read them: the
// spilled ones come back (restored from the dead node's files through the
// GCS's spill records), the ones only in its memory are ErrObjectLost.
func TestSpillRestoredAfterNodeDeath(t *testing.T) {
	ctx := testCtx(t)
	buildSpillBinaries(t)
	srv := miniotest.Start(t)
	bucket := "spill"
	srv.CreateBucket(t, bucket)
	cfg := s3SpillConfig(t, srv, bucket, srv.SecretKey, "64MiB", "32MiB", fastHealth)
	h := startHead(t, ctx, "--config", cfg, "--num-cpus", "2", "--node-name", "head")
	other := joinNode(t, ctx, h, "127.0.0.2", "", "--config", cfg)
	victim := joinNode(t, ctx, h, "127.0.0.3", "", "--config", cfg)
	dir := shortTempDir(t)
	const objects = 8
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "spill-nodekill", dir, victim.id, other.id, fmt.Sprint(objects), "16")
	waitFile(t, j, 40*time.Second, filepath.Join(dir, "ready"))
	var stored int64
	waitFor(t, 20*time.Second, "the victim to spill some of the objects", func() bool {
		s, r := h.status(ctx)
		if r.code != 0 {
			return false
		}
		for _, n := range s.Nodes {
			if n.NodeID == victim.id && n.Spill != nil {
				stored = n.Spill.StoredObjects
			}
		}
		return stored >= 3
	})
	killNodeThenGo(t, ctx, h, victim, dir)
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("spill-nodekill exited %d:\n%s", code, out)
	}
	wantLines(t, out, "object 0 read by a task on another node", "PASS spill-nodekill")
	var restored, lost int
	if _, err := fmt.Sscanf(strings.TrimSpace(lineWith(out, "restored ")), "restored %d lost %d", &restored, &lost); err != nil {
		t.Fatalf("no restored/lost counts in the job's output: %v\n%s", err, out)
	}
	t.Logf("restored %d, lost %d of %d objects; the victim had %d stored in S3 when it was killed", restored, lost, objects, stored)
	if restored < int(stored) || restored+lost != objects {
		t.Errorf("restored %d, lost %d of %d objects; the victim had %d stored in S3 when it was killed", restored, lost, objects, stored)
	}
}
