package acceptance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// where a job runs: against a node started with the CLI, or on an embedded
// node inside the driver.
var placements = []string{"node", "embedded"}

// jobPlacement returns how to run a job in placement p (starting a head for
// "node") and the head, if any.
func jobPlacement(t *testing.T, ctx context.Context, p string) (jobOptions, *head) {
	t.Helper()
	o := jobOptions{tmpDir: shortTempDir(t)}
	if p == "node" {
		h := startHead(t, ctx)
		o.addr = h.addr
		return o, h
	}
	return o, nil
}

// checkJobGone asserts that the job's processes exit and, for an embedded
// node, that its session dir is gone from the job's TMPDIR.
func checkJobGone(t *testing.T, j *job, o jobOptions) {
	t.Helper()
	waitNoProcs(t, 10*time.Second, "the job's driver and workers", func(p proc) bool { return p.hasEnv(markerEnv + "=" + j.marker) })
	if o.addr != "" {
		return
	}
	left, err := os.ReadDir(o.tmpDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("the embedded node left %s behind", filepath.Join(o.tmpDir, e.Name()))
	}
}

// TestWorkerKilledMidTask kills a worker running a task: the task is
// retried and succeeds; a task with MaxRetries(1) whose both attempts are
// killed fails with WorkerCrashedError after 2 attempts.
func TestWorkerKilledMidTask(t *testing.T) {
	t.Parallel()
	for _, place := range placements {
		t.Run(place, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			o, h := jobPlacement(t, ctx, place)
			dir := shortTempDir(t)
			j := startJob(t, o, testjobBin, "retry", dir)

			first := readPid(t, waitFile(t, j, 30*time.Second, filepath.Join(dir, "first.0.pid")))
			p, _ := readProc(first)
			session := envValue(p.env, "GORAY_SESSION_DIR")
			switch {
			case h != nil && session != h.session:
				t.Errorf("worker %d runs in session %q, want the started node's %s", first, session, h.session)
			case h == nil && !strings.HasPrefix(session, o.tmpDir+"/"):
				t.Errorf("worker %d of the embedded node runs in session %q, want one under the job's TMPDIR %s", first, session, o.tmpDir)
			}
			killWorker(t, j, first)

			// Both attempts of the second task are killed.
			s0 := readPid(t, waitFile(t, j, 30*time.Second, filepath.Join(dir, "second.0.pid")))
			if s0 == first {
				t.Fatalf("the second task runs in the killed worker's pid %d", first)
			}
			killWorker(t, j, s0)
			s1 := readPid(t, waitFile(t, j, 30*time.Second, filepath.Join(dir, "second.1.pid")))
			if s1 == s0 {
				t.Fatalf("the retry runs in the killed worker's pid %d", s0)
			}
			killWorker(t, j, s1)

			code, out := j.wait(ctx)
			if code != 0 {
				t.Fatalf("testjob retry exited %d:\n%s", code, out)
			}
			wantLines(t, out,
				"first attempt: 1",
				"second attempts: 2",
				"second is ErrWorkerCrashed: true",
				"worker crashed on all 2 attempts",
				"PASS retry")
			if _, err := os.Stat(filepath.Join(dir, "second.2.pid")); err == nil {
				t.Errorf("the second task ran a third attempt despite MaxRetries(1)")
			}
			checkJobGone(t, j, o)
		})
	}
}

// TestTaskErrors covers errors a driver sees: a remote panic, a Get that
// times out, and a function the workers do not have.
func TestTaskErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode  string
		want  []string
		check func(t *testing.T, out string)
	}{
		{
			mode: "panic",
			want: []string{
				"is ErrPanic: true",
				"is ErrTaskFailed: true",
				"message: acceptance panic: the fuse was lit",
				"function: main.explodeInTask",
			},
			check: func(t *testing.T, out string) {
				_, stack, ok := strings.Cut(out, "\nstack:\n")
				if !ok {
					t.Fatalf("no remote stack printed:\n%s", out)
				}
				for _, fn := range []string{"main.detonate(", "main.explodeInTask("} {
					if !strings.Contains(stack, fn) {
						t.Errorf("remote stack does not mention %s:\n%s", fn, stack)
					}
				}
				if errLine := lineWith(out, "error: "); !strings.Contains(errLine, "the fuse was lit") {
					t.Errorf("error message lacks the panic message: %q", errLine)
				}
			},
		},
		{
			mode: "timeout",
			want: []string{"is ErrGetTimeout: true", "is DeadlineExceeded: true"},
			check: func(t *testing.T, out string) {
				ms, err := strconv.Atoi(strings.TrimPrefix(lineWith(out, "elapsed ms: "), "elapsed ms: "))
				if err != nil {
					t.Fatalf("no elapsed time printed:\n%s", out)
				}
				if ms < 190 || ms > 5000 {
					t.Errorf("Get with a 200 ms deadline returned after %d ms", ms)
				}
			},
		},
		{
			mode: "missing",
			want: []string{"is ErrFunctionNotFound: true", "name: main.lateTask"},
			check: func(t *testing.T, out string) {
				if errLine := lineWith(out, "error: "); !strings.Contains(errLine, "main.lateTask") {
					t.Errorf("the error does not name the missing function: %q", errLine)
				}
			},
		},
	}
	for _, place := range placements {
		for _, c := range cases {
			t.Run(place+"/"+c.mode, func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				o, _ := jobPlacement(t, ctx, place)
				j := startJob(t, o, testjobBin, c.mode)
				// The timeout job leaves a 30 s task running: its driver
				// must still exit promptly.
				code, out := j.waitExit(20 * time.Second)
				if code != 0 {
					t.Fatalf("testjob %s exited %d:\n%s", c.mode, code, out)
				}
				wantLines(t, out, append(c.want, "PASS "+c.mode)...)
				c.check(t, out)
				checkJobGone(t, j, o)
			})
		}
	}
}

// lineWith returns the first line of out containing s, or "".
func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// TestNodeKilled kills -9 the node process under a running job: its workers
// must exit, the driver must fail, and `goray stop` removes the rest.
func TestNodeKilled(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	shm := watchShm(t)
	h := startHead(t, ctx)
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "long", dir)
	wpid := readPid(t, waitFile(t, j, 30*time.Second, filepath.Join(dir, "long.0.pid")))
	inSession := func(p proc) bool { return p.hasEnv("GORAY_SESSION_DIR=" + h.session) }
	workers := findProcs(inSession)
	found := false
	for _, p := range workers {
		found = found || p.pid == wpid
	}
	if !found {
		t.Fatalf("the task's worker %d is not among the node's workers %v", wpid, workers)
	}

	node, ok := readProc(h.pid)
	if !ok || !node.mentions(h.tempDir) || !slices.Contains(node.cmdline, "start") {
		t.Fatalf("pid %d from node.json is not the node of %s: %v", h.pid, h.tempDir, node)
	}
	// The node's tensor segment pool, which its SIGKILL leaves behind.
	pools, _ := filepath.Glob(fmt.Sprintf("/dev/shm/goray-pool-%d-*", h.pid))
	if len(pools) != 1 {
		t.Fatalf("the node (pid %d) has tensor segment pools %v, want one", h.pid, pools)
	}
	if err := syscall.Kill(h.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the killed node to exit", func() bool { return !alive(h.pid) })
	waitNoProcs(t, 10*time.Second, fmt.Sprintf("workers of the killed node (%d before the kill)", len(workers)), inSession)

	code, out := j.waitExit(30 * time.Second)
	if code == 0 {
		t.Fatalf("the driver exited 0 after its node was killed:\n%s", out)
	}
	wantLines(t, out, "FAIL")
	t.Logf("driver after the node was killed (exit %d):\n%s", code, out)

	// The dead node's sockets are stale until stop removes them.
	if _, err := os.Stat(filepath.Join(h.session, "sockets")); err != nil {
		t.Fatalf("sockets dir of the killed node: %v", err)
	}
	r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir)
	if r.code != 0 {
		t.Fatalf("goray stop after the node was killed: %s", r)
	}
	if !regexp.MustCompile(`Removed stale sockets .*` + regexp.QuoteMeta(h.session)).MatchString(r.stdout) {
		t.Errorf("goray stop did not report removing the stale sockets of %s:\n%s", h.session, r)
	}
	// Any `goray stop` on the machine removes dead nodes' pools (another
	// test's may have run first): the pool must be gone either way.
	if _, err := os.Stat(pools[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the killed node's tensor segment pool %s is still there after goray stop (%v):\n%s", pools[0], err, r)
	}
	checkCleanAfterStop(t, h, shm)
}

// TestStoreArgOnFreshWorkers passes a 1 MiB object (in the shared-memory
// store) to tasks that each start a fresh worker of a started node: every
// task must read it. Several jobs run in turn since each starts new
// workers.
func TestStoreArgOnFreshWorkers(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := startHead(t, ctx)
	for i := 0; i < 10; i++ {
		j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "bigargs")
		code, out := j.wait(ctx)
		if code != 0 {
			t.Fatalf("job %d: testjob bigargs exited %d:\n%s", i+1, code, out)
		}
		wantLines(t, out, "failed tasks: 0", "PASS bigargs")
	}
}
