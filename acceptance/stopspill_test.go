package acceptance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stopSpillStoreHCL is the node config of a head whose 32 MiB store spills to
// local disk (the default: <session>/spill) in files of 4 MiB and more.
const stopSpillStoreHCL = `
object_store {
  memory = "32MiB"
}
spilling {
  min_file_size = "4MiB"
}
`

// sessionSpillFiles lists the spill files under a session's spill directory.
func sessionSpillFiles(session string) []string {
	var out []string
	_ = filepath.WalkDir(filepath.Join(session, "spill"), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".spill") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// killedNodeFiles are the files a killed head leaves in its session that
// goray stop and goray down remove (relative to the session).
var killedNodeFiles = []string{"spill", "node.json", "sockets", "gcs.json", filepath.Join("metrics", "prometheus_sd.json")}

// spillThenKill runs the spill job on h until its node spilled to local
// disk and its state files are written, then kills the node and its GCS
// with SIGKILL (the job is left waiting; it ends with the test).
func spillThenKill(t *testing.T, h *head) {
	t.Helper()
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "spill", dir, "30", "4")
	waitFile(t, j, 60*time.Second, filepath.Join(dir, "third"))
	waitFor(t, 60*time.Second, "the head to spill to "+filepath.Join(h.session, "spill")+" and write its state files", func() bool {
		for _, f := range killedNodeFiles {
			if !pathExists(filepath.Join(h.session, f)) {
				return false
			}
		}
		return len(sessionSpillFiles(h.session)) > 0
	})
	killHead(t, h)
}

// TestStopDownRemoveKilledNodeFiles: a head started with goray start and
// one started with goray up, each under a temp dir of its own with a small
// store spilling to local disk, are killed with SIGKILL after they
// spilled. goray down removes its cluster's killed head's spill files and
// state files (gcs.json, prometheus_sd.json, node.json, sockets) and
// nothing of another temp dir's dead node; goray stop --temp-dir does the
// same for its own. Logs stay. Before, both left the spill files (86 MB in
// one run), gcs.json and prometheus_sd.json, and goray down did not clean
// at all when the head was already dead.
func TestStopDownRemoveKilledNodeFiles(t *testing.T) {
	ctx := testCtx(t)
	a := startHead(t, ctx, "--config", writeConfig(t, shortTempDir(t), stopSpillStoreHCL), "--num-cpus", "1")

	dir := shortTempDir(t)
	c := &head{t: t, tempDir: filepath.Join(dir, "h"), port: freePort(t)}
	c.addr = "127.0.0.1:" + strconv.Itoa(c.port)
	file := filepath.Join(dir, "cluster.hcl")
	src := fmt.Sprintf(`
cluster_name   = "stopspill"
head_node_type = "head"
max_workers    = 0
temp_dir       = %q
plugin_dir     = %q
%s
provider "local" {
  config {
    state_dir = %q
    ip_range  = "127.0.61.1-127.0.61.2"
  }
}

node_type "head" {
  resources = { CPU = 1 }
}
`, c.tempDir, pluginDir, stopSpillStoreHCL, filepath.Join(dir, "s"))
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		runGoray(t, ctx, "stop", "--temp-dir", c.tempDir, "--force")
	})
	if r := runGoray(t, ctx, "up", "--port", strconv.Itoa(c.port), file); r.code != 0 {
		t.Fatalf("goray up: %s", r)
	}
	latest, err := filepath.EvalSymlinks(filepath.Join(c.tempDir, "session_latest"))
	if err != nil {
		t.Fatal(err)
	}
	c.session = latest
	c.pid = readNodeJSON(t, latest).Pid

	spillThenKill(t, a)
	spillThenKill(t, c)
	// A copy of a's dead session under a third temp dir: neither command
	// may touch it.
	other := shortTempDir(t)
	otherSession := filepath.Join(other, filepath.Base(a.session))
	if out, err := exec.Command("cp", "-a", a.session, otherSession).CombinedOutput(); err != nil {
		t.Fatalf("copying %s: %v\n%s", a.session, err, out)
	}

	checkCleaned := func(what string, session string, out string) {
		t.Helper()
		for _, f := range killedNodeFiles {
			if p := filepath.Join(session, f); pathExists(p) {
				t.Errorf("%s left %s", what, p)
			}
		}
		if p := filepath.Join(session, "logs", "node.log"); !pathExists(p) {
			t.Errorf("%s removed the log %s", what, p)
		}
		wantLines(t, out, "Removed the spill files (", "of 1 dead node: "+session)
	}
	checkKept := func(what string, sessions ...string) {
		t.Helper()
		for _, s := range sessions {
			for _, f := range killedNodeFiles {
				if p := filepath.Join(s, f); !pathExists(p) {
					t.Errorf("%s removed %s, of another temp dir", what, p)
				}
			}
			if len(sessionSpillFiles(s)) == 0 {
				t.Errorf("%s removed the spill files of %s, of another temp dir", what, s)
			}
		}
	}

	r := runGoray(t, ctx, "down", file)
	if r.code != 0 {
		t.Fatalf("goray down: %s", r)
	}
	checkCleaned("goray down", c.session, r.stdout)
	checkKept("goray down", a.session, otherSession)

	r = runGoray(t, ctx, "stop", "--temp-dir", a.tempDir)
	if r.code != 0 {
		t.Fatalf("goray stop --temp-dir %s: %s", a.tempDir, r)
	}
	checkCleaned("goray stop", a.session, r.stdout)
	checkKept("goray stop", otherSession)
}
