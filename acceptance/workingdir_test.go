package acceptance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorkingDirShipped: ray.WorkingDir ships a directory to every node
// that runs the job's workers (Ray's runtime_env working_dir): a worker on
// the head and one on another node (its own session and cache) both start
// in their node's unpacked copy and read the driver's files by relative
// path; excluded files stay behind; the driver's archive is gone once Init
// returned. A missing directory fails Init with an error naming it.
func TestWorkingDirShipped(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	n1 := joinNode(t, ctx, h, "127.0.0.2", "")
	src := t.TempDir()
	for p, c := range map[string]string{
		"config.txt":       "from-the-driver",
		"data/nested.txt":  "nested-file",
		"data/huge.bin":    "left-out",
		"scratch/note.txt": "left-out-too",
	} {
		full := filepath.Join(src, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("data/nested.txt", filepath.Join(src, "alias.txt")); err != nil {
		t.Fatal(err)
	}
	jobTmp := t.TempDir()
	j := startJob(t, jobOptions{addr: h.addr, tmpDir: jobTmp, env: []string{"TESTJOB_WORKING_DIR=" + src + ",*.bin,scratch"}},
		testjobBin, "files", "config.txt", "data/nested.txt", "alias.txt", "data/huge.bin", "scratch/note.txt")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("files job exited %d:\n%s", code, out)
	}
	cwd := map[string]string{}
	files := map[string]map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.SplitN(l, " ", 4)
		switch {
		case len(f) == 3 && f[0] == "cwd":
			cwd[f[1]] = f[2]
		case len(f) == 4 && f[0] == "file":
			if files[f[1]] == nil {
				files[f[1]] = map[string]string{}
			}
			files[f[1]][f[2]] = f[3]
		}
	}
	if len(cwd) != 2 || cwd[n1.id] == "" {
		t.Fatalf("want reports from the head and node %s:\n%s", n1.id[:8], out)
	}
	for id, dir := range cwd {
		home := h.tempDir
		if id == n1.id {
			home = n1.tempDir
		}
		// Each node's own unpacked copy, in its own session's cache.
		if !strings.HasPrefix(dir, home+string(filepath.Separator)) || !strings.Contains(dir, string(filepath.Separator)+"working_dirs"+string(filepath.Separator)) {
			t.Errorf("node %s: a worker starts in %s, want a working_dirs copy under the node's temp dir %s", id[:8], dir, home)
		}
		for name, want := range map[string]string{
			"config.txt":       "from-the-driver",
			"data/nested.txt":  "nested-file",
			"alias.txt":        "nested-file",
			"data/huge.bin":    "missing",
			"scratch/note.txt": "missing",
		} {
			if got := files[id][name]; got != want {
				t.Errorf("node %s: %s reads %q, want %q", id[:8], name, got, want)
			}
		}
	}
	// `goray list jobs` shows what the job ships.
	if r := runGoray(t, ctx, "list", "jobs", "--json", "--address", h.addr); !strings.Contains(r.stdout, `"working_dir_sha256": "`) {
		t.Errorf("list jobs does not show the job's working dir:\n%s", r.stdout)
	}
	if left, _ := filepath.Glob(filepath.Join(jobTmp, "goray-working-dir-*")); len(left) != 0 {
		t.Errorf("the driver left its archive behind: %v", left)
	}

	// A directory that does not exist: Init fails and says which.
	missing := filepath.Join(src, "no-such-dir")
	j = startJob(t, jobOptions{addr: h.addr, env: []string{"TESTJOB_WORKING_DIR=" + missing}}, testjobBin, "files")
	code, out = j.wait(ctx)
	if code == 0 || !strings.Contains(out, "FAIL: init: goray: working dir: stat "+missing+": no such file or directory") {
		t.Errorf("job with a missing working dir exited %d:\n%s", code, out)
	}
}

// TestWorkerEnvPerCall: ray.WorkerEnv sets a task's or actor's variables
// (Ray's runtime_env env_vars in .options()): they win over the job's
// EnvVars, a call without them runs on a worker without them, and what a
// task submits inherits them.
func TestWorkerEnvPerCall(t *testing.T) {
	ctx := testCtx(t)
	j := startJob(t, jobOptions{env: []string{"TESTJOB_ENV_VARS=JOBVAR=job,SHARED=job"}}, testjobBin, "worker-env")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("worker-env job exited %d:\n%s", code, out)
	}
	got := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "worker-env "); ok {
			call, vals, _ := strings.Cut(rest, " ")
			got[call] = vals
		}
	}
	for call, want := range map[string]string{
		"plain":       "JOBVAR=job SHARED=job TASKVAR unset ACTORVAR unset",
		"task":        "JOBVAR=job SHARED=task TASKVAR=task ACTORVAR unset",
		"plain-again": "JOBVAR=job SHARED=job TASKVAR unset ACTORVAR unset",
		"parent":      "JOBVAR=job SHARED=job TASKVAR=parent ACTORVAR unset",
		"child":       "JOBVAR=job SHARED=job TASKVAR=parent ACTORVAR unset",
		"actor":       "JOBVAR=job SHARED=job TASKVAR unset ACTORVAR=actor",
	} {
		if got[call] != want {
			t.Errorf("%s: the worker sees %q, want %q", call, got[call], want)
		}
	}
	if t.Failed() {
		t.Logf("job output:\n%s", out)
	}
}

// TestWorkerDirPerCall: ray.WorkerDir gives a task or actor its own working
// dir (Ray's runtime_env working_dir in .options()): on the head and on
// another node its worker starts in its node's copy; a call without it does
// not; a child task inherits it; an actor gets it; a missing directory
// fails the call, naming it.
func TestWorkerDirPerCall(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	n1 := joinNode(t, ctx, h, "127.0.0.2", "")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "config.txt"), []byte("per-call"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "worker-dir", src)
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("worker-dir job exited %d:\n%s", code, out)
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.SplitN(l, " ", 4)
		if len(f) < 3 || f[0] != "worker-dir" {
			continue
		}
		if f[1] == "missing:" {
			seen["missing"] = true
			if !strings.Contains(l, "WorkerDir: working dir: stat "+filepath.Join(src, "missing")+": no such file or directory") {
				t.Errorf("a call with a missing WorkerDir: %s", l)
			}
			continue
		}
		call, node, rest := f[1], f[2], f[3]
		seen[call+" "+node] = true
		want := "file config.txt per-call"
		if call == "without" {
			want = "file config.txt missing"
		}
		if !strings.Contains(rest, want) {
			t.Errorf("%s on %s: %s, want %q", call, node, rest, want)
		}
		if call != "without" && !strings.Contains(rest, string(filepath.Separator)+"working_dirs"+string(filepath.Separator)) {
			t.Errorf("%s on %s: the worker does not start in a working_dirs copy: %s", call, node, rest)
		}
	}
	for _, k := range []string{"with " + n1.id, "without " + n1.id, "parent -", "child -", "actor -", "missing"} {
		if !seen[k] {
			t.Errorf("no report of %q:\n%s", k, out)
		}
	}
}
