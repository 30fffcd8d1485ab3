package raylet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

var testworkerSum = sync.OnceValues(func() (string, error) { return digest.FileSHA256(testworkerBin) })

// testworkerSHA returns the sha256 of the test worker binary.
func testworkerSHA(t testing.TB) string {
	t.Helper()
	sum, err := testworkerSum()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// registerDriver opens a driver session for info as process pid and
// returns the driver, or the registration's error.
func (h *harness) registerDriver(info *gorayv1.JobInfo, pid int32) (*testDriver, error) {
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	stream, err := h.cl.DriverSession(ctx)
	if err != nil {
		return nil, err
	}
	d := &testDriver{id: ids.New(), stream: stream, cancel: cancel}
	d.addr = &gorayv1.Address{UnixPath: filepath.Join(h.dir, "driver.sock"), WorkerId: d.id.Bytes()}
	if err := stream.Send(&gorayv1.DriverMessage{Job: info, Address: d.addr, Pid: pid}); err != nil {
		return nil, err
	}
	reg, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	d.reg = reg
	d.job = ids.MustFromBytes(reg.GetJobId())
	return d, nil
}

// markerScript writes an executable shell script to path that creates
// marker when it runs (what a hijacked worker start would do).
func markerScript(t *testing.T, path, marker string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) workerCount() int {
	h.r.pool.mu.Lock()
	defer h.r.pool.mu.Unlock()
	return len(h.r.pool.workers)
}

// TestDriverMustNameBinaryHash: a driver whose job does not name its
// binary's sha256, or names one the binary does not have, is refused
// before the job reaches the GCS, and no worker ever starts.
func TestDriverMustNameBinaryHash(t *testing.T) {
	h := newHarness(t, nil)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	evil := filepath.Join(dir, "evil")
	markerScript(t, evil, marker)
	for _, tc := range []struct{ name, path, sum, want string }{
		{"empty sha256", evil, "", "binary_sha256"},
		{"malformed sha256", evil, "abc", "binary_sha256"},
		{"another binary's sha256", evil, testworkerSHA(t), "not running it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.registerDriver(&gorayv1.JobInfo{BinaryPath: tc.path, BinarySha256: tc.sum}, int32(os.Getpid()))
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("registration: %v, want InvalidArgument naming %q", err, tc.want)
			}
		})
	}
	if len(h.gcs.jobs) != 0 {
		t.Errorf("refused jobs reached the GCS: %v", h.gcs.jobs)
	}
	if n := h.workerCount(); n != 0 {
		t.Errorf("%d workers started for refused jobs", n)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the refused job's binary ran")
	}
}

// TestRemoteJobMustNameBinaryHash: the exploit of a job added to the GCS
// with an empty sha256 (once accepted as "an older driver") and a binary
// path of the caller's choosing, then a worker lease: the lease fails and
// the program never runs. A sha256 the path does not have fails the same.
func TestRemoteJobMustNameBinaryHash(t *testing.T) {
	h := newHarness(t, nil)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	evil := filepath.Join(dir, "evil")
	markerScript(t, evil, marker)
	other := ids.New()
	for _, tc := range []struct{ name, sum, want string }{
		{"empty sha256", "", "binary_sha256"},
		{"sha256 the path does not have", testworkerSHA(t), "fetching binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := ids.New()
			h.gcs.mu.Lock()
			h.gcs.jobs = append(h.gcs.jobs, &gorayv1.JobInfo{JobId: job.Bytes(), BinaryPath: evil, BinarySha256: tc.sum,
				DriverNodeId: other.Bytes(), State: "RUNNING"})
			h.gcs.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
			defer cancel()
			_, err := h.lease(ctx, job, cpus(1), ids.Nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("lease for the job: %v, want an error naming %q", err, tc.want)
			}
		})
	}
	if n := h.workerCount(); n != 0 {
		t.Errorf("%d workers started", n)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the job's binary ran")
	}
}

// TestReplacedBinaryIsNotRun: a job's binary replaced after the raylet
// checked it is checked again before a worker starts; the new content is
// not the job's, so it never runs.
func TestReplacedBinaryIsNotRun(t *testing.T) {
	h := newHarness(t, nil)
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	copyExecutable(t, testworkerBin, bin)
	d, err := h.registerDriver(&gorayv1.JobInfo{BinaryPath: bin, BinarySha256: testworkerSHA(t)}, int32(os.Getpid()))
	if err != nil {
		t.Fatalf("registration: %v", err)
	}
	marker := filepath.Join(dir, "ran")
	markerScript(t, bin+".new", marker)
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	if _, err := h.lease(ctx, d.job, cpus(1), ids.Nil); err == nil || !strings.Contains(err.Error(), "not running it") {
		t.Fatalf("lease after the binary was replaced: %v, want a sha256 error", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the replaced binary ran")
	}
}

// TestLocalBinaryFromRunningDriver: a driver whose binary file is removed
// after it registered still gets workers: the raylet copies the running
// driver's executable (/proc/<pid>/exe) into its binary cache, checking
// the sha256 on the way. The cache, the logs and the workers' log files
// are private (0700 directories, 0600 logs, 0700 binaries).
func TestLocalBinaryFromRunningDriver(t *testing.T) {
	h := newHarness(t, nil)
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	copyExecutable(t, testworkerBin, bin)
	// The "driver": a process of that binary (the test worker, idling).
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), EnvWorker+"=1", "TESTWORKER_MODE=noregister")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sum := testworkerSHA(t)
	d, err := h.registerDriver(&gorayv1.JobInfo{BinaryPath: bin, BinarySha256: sum}, int32(cmd.Process.Pid))
	if err != nil {
		t.Fatalf("registration: %v", err)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	l := h.mustLease(d.job, cpus(1))
	cached := filepath.Join(h.dir, "binaries", sum)
	for path, want := range map[string]os.FileMode{
		filepath.Join(h.dir, "binaries"): 0o700,
		cached:                           0o700,
		filepath.Join(h.dir, "logs"):     0o700,
		filepath.Join(h.dir, "sockets"):  0o700,
	} {
		if st, err := os.Stat(path); err != nil {
			t.Error(err)
		} else if st.Mode().Perm() != want {
			t.Errorf("%s has mode %o, want %o", path, st.Mode().Perm(), want)
		}
	}
	wid := ids.MustFromBytes(l.GetWorker().GetWorkerId())
	for _, ext := range []string{"out", "err"} {
		p := filepath.Join(h.dir, "logs", "worker-"+wid.String()+"."+ext)
		if st, err := os.Stat(p); err != nil {
			t.Error(err)
		} else if st.Mode().Perm() != 0o600 {
			t.Errorf("worker log %s has mode %o, want 600", p, st.Mode().Perm())
		}
	}
	w := h.workerByID(l.GetWorker().GetWorkerId())
	h.r.pool.mu.Lock()
	pid := w.pid
	h.r.pool.mu.Unlock()
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err != nil || exe != cached {
		t.Errorf("the worker runs %q (%v), want the checked copy %s", exe, err, cached)
	}
	h.returnLease(l, false)
}

// TestWorkerEnv: a worker gets the node's environment plus what the job
// forwards (which wins); the runtime's own variables cannot be forwarded
// over.
func TestWorkerEnv(t *testing.T) {
	pool, err := shmem.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Remove()
	h := newHarness(t, func(c *Config) { c.TensorPool.Pool = pool })
	t.Setenv("GORAY_TEST_NODE_VAR", "node")
	t.Setenv(EnvShmPool, "/dev/shm/goray-pool-1-inherited")
	t.Setenv("GORAY_TEST_SHARED", "node")
	jobID := ids.New()
	w := &worker{id: ids.New(), job: &job{id: jobID}}
	env := h.r.pool.workerEnv(w, []string{"GORAY_TEST_FWD=job", "GORAY_TEST_SHARED=job", EnvWorkerID + "=forged", EnvJobID + "=forged"})
	// What exec.Cmd does with duplicates: the last value wins.
	get := func(name string) (string, bool) {
		v, ok := "", false
		for _, kv := range env {
			if n, val, _ := strings.Cut(kv, "="); n == name {
				v, ok = val, true
			}
		}
		return v, ok
	}
	for name, want := range map[string]string{
		"GORAY_TEST_NODE_VAR": "node",
		"GORAY_TEST_FWD":      "job",
		"GORAY_TEST_SHARED":   "job",
		EnvWorkerID:           w.id.String(),
		EnvJobID:              jobID.String(),
		EnvShmPool:            pool.Dir(),
	} {
		if got, ok := get(name); !ok || got != want {
			t.Errorf("%s = %q (set %v), want %q", name, got, ok, want)
		}
	}
	if slices.Contains(env, EnvWorkerID+"=forged") {
		t.Errorf("a forwarded %s reached the worker: %q", EnvWorkerID, env)
	}
}

// TestFetchBinaryRefusesPaths: FetchBinary names a cached file by its
// sha256, so anything else (a path climbing out of the cache) is refused
// before a file is opened.
func TestFetchBinaryRefusesPaths(t *testing.T) {
	h := newHarness(t, nil)
	for _, sum := range []string{"../../../../dev/zero", "", strings.Repeat("A", 64), strings.Repeat("a", 63) + "/"} {
		err := h.r.FetchBinary(&gorayv1.FetchBinaryRequest{Sha256: sum}, nil)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not a sha256") {
			t.Errorf("FetchBinary(%q) = %v; want InvalidArgument saying it is not a sha256", sum, err)
		}
	}
}

// TestLeaseWorkingDirAndVarsChecked: a lease's variables and working dir
// are checked before it is queued (InvalidArgument naming the field), and
// InstallWorkingDir installs only a file whose content has the sha256 it
// is named by.
func TestLeaseWorkingDirAndVarsChecked(t *testing.T) {
	h := newHarness(t, nil)
	job := ids.New().Bytes()
	good := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name string
		req  *gorayv1.LeaseRequest
		want string
	}{
		{"GORAY_ variable", &gorayv1.LeaseRequest{JobId: job, EnvVars: []string{"GORAY_WORKER=1"}}, "GORAY_ variables are the runtime's own"},
		{"unsorted variables", &gorayv1.LeaseRequest{JobId: job, EnvVars: []string{"B=1", "A=1"}}, "out of order"},
		{"a path for a sha256", &gorayv1.LeaseRequest{JobId: job, WorkingDirSha256: "../../etc"}, "working_dir_sha256 \"../../etc\" is not a sha256"},
		{"no node", &gorayv1.LeaseRequest{JobId: job, WorkingDirSha256: good}, "working_dir_node: the node whose raylet has working dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.r.RequestWorkerLease(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RequestWorkerLease = %v; want InvalidArgument with %q", err, tc.want)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "archive")
	if err := os.WriteFile(path, []byte("not what the sha256 says"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sum := range []string{good, "../x"} {
		_, err := h.r.InstallWorkingDir(context.Background(), &gorayv1.InstallWorkingDirRequest{Sha256: sum, Path: path})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("InstallWorkingDir(%q) of a file with other content = %v; want InvalidArgument", sum, err)
		}
	}
}
