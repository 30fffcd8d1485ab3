package acceptance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// holders returns the processes other than this one that have path open.
func holders(path string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join("/proc", e.Name(), "fd", fd.Name())); err == nil && link == path {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// heldFile creates a file whose open descriptors the tests look for.
func heldFile(t *testing.T) (*os.File, string) {
	t.Helper()
	path := filepath.Join(shortTempDir(t), "held")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

// holdJob runs testjob hold against addr (an actor and a waiting task, so
// the node has workers) until the test releases it; it returns the job and
// the actor worker's pid.
func holdJob(t *testing.T, addr string) (*job, int, func()) {
	t.Helper()
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: addr}, testjobBin, "hold", dir, "fd-holder")
	var st holdState
	if err := json.Unmarshal([]byte(waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready"))), &st); err != nil {
		t.Fatal(err)
	}
	release := func() {
		if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return j, st.ActorPid, release
}

// TestStartKeepsNoCallerDescriptor: `goray start` run by a process that
// holds a descriptor without close-on-exec (fd 3 here, as `flock` holds its
// lock) returns with no process of the node holding it: not the node, not
// its plugin, not the workers of a job.
func TestStartKeepsNoCallerDescriptor(t *testing.T) {
	ctx := testCtx(t)
	f, path := heldFile(t)
	cfg := writeConfig(t, shortTempDir(t), fmt.Sprintf("plugin_dir = %q\nplugin \"transport\" \"shm\" {}\n", pluginDir))
	h := &head{t: t, tempDir: shortTempDir(t), port: freePort(t)}
	h.addr = "127.0.0.1:" + strconv.Itoa(h.port)
	t.Cleanup(func() { runGoray(t, context.Background(), "stop", "--temp-dir", h.tempDir, "--force") })
	cmd := exec.CommandContext(ctx, gorayBin, "start", "--head", "--port", strconv.Itoa(h.port), "--temp-dir", h.tempDir, "--config", cfg)
	cmd.Env = baseEnv()
	cmd.ExtraFiles = []*os.File{f} // fd 3 of goray start, without FD_CLOEXEC
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("goray start: %v\n%s", err, out)
	}
	latest, err := filepath.EvalSymlinks(filepath.Join(h.tempDir, "session_latest"))
	if err != nil {
		t.Fatal(err)
	}
	h.session = latest
	h.pid = readNodeJSON(t, latest).Pid
	plugins := h.plugins(t)
	if len(plugins) != 1 || plugins[0].Pid == 0 {
		t.Fatalf("want the shm plugin running, got %+v", plugins)
	}
	j, actorPid, release := holdJob(t, h.addr)
	if got := holders(path); len(got) > 0 {
		t.Errorf("processes %v hold the descriptor the caller of goray start had (node %d, plugin %d, actor worker %d)", got, h.pid, plugins[0].Pid, actorPid)
	}
	release()
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("hold job exited %d:\n%s", code, out)
	}
}

// TestStartUnderFlock: `flock FILE goray start` gives the lock back when
// start returns, while the node it started keeps running.
func TestStartUnderFlock(t *testing.T) {
	ctx := testCtx(t)
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Fatalf("flock (util-linux) is needed: %v", err)
	}
	_, lock := heldFile(t)
	tempDir := shortTempDir(t)
	t.Cleanup(func() { runGoray(t, context.Background(), "stop", "--temp-dir", tempDir, "--force") })
	cmd := exec.CommandContext(ctx, flock, lock, gorayBin, "start", "--head", "--port", strconv.Itoa(freePort(t)), "--temp-dir", tempDir)
	cmd.Env = baseEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("flock %s goray start: %v\n%s", lock, err, out)
	}
	latest, err := filepath.EvalSymlinks(filepath.Join(tempDir, "session_latest"))
	if err != nil {
		t.Fatal(err)
	}
	pid := readNodeJSON(t, latest).Pid
	try := exec.CommandContext(ctx, flock, "--nonblock", lock, "true")
	if out, err := try.CombinedOutput(); err != nil {
		t.Errorf("the lock is still held after goray start returned (holders %v): flock --nonblock: %v %s", holders(lock), err, out)
	}
	if !alive(pid) {
		t.Errorf("the node (pid %d) does not run", pid)
	}
}

// TestStartBlockChildrenKeepNoCallerDescriptor: `goray start --block` runs
// the node in the caller's own process, which keeps what it was given; but
// the plugins and workers it starts do not get the caller's descriptors.
func TestStartBlockChildrenKeepNoCallerDescriptor(t *testing.T) {
	ctx := testCtx(t)
	f, path := heldFile(t)
	cfg := writeConfig(t, shortTempDir(t), fmt.Sprintf("plugin_dir = %q\nplugin \"transport\" \"shm\" {}\n", pluginDir))
	h := &head{t: t, tempDir: shortTempDir(t), port: freePort(t)}
	h.addr = "127.0.0.1:" + strconv.Itoa(h.port)
	cmd := exec.Command(gorayBin, "start", "--head", "--block", "--port", strconv.Itoa(h.port), "--temp-dir", h.tempDir, "--config", cfg)
	cmd.Env = baseEnv()
	cmd.ExtraFiles = []*os.File{f}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	waitFor(t, 30*time.Second, "the node to serve", func() bool {
		select {
		case <-exited:
			t.Fatalf("goray start --block exited: %v\n%s", waitErr, out)
		default:
		}
		_, err := os.Stat(filepath.Join(h.tempDir, "session_latest", "node.json"))
		return err == nil
	})
	plugins := h.plugins(t)
	if len(plugins) != 1 || plugins[0].Pid == 0 {
		t.Fatalf("want the shm plugin running, got %+v", plugins)
	}
	j, actorPid, release := holdJob(t, h.addr)
	got := holders(path)
	if !slices.Contains(got, cmd.Process.Pid) {
		t.Fatalf("the node (pid %d) does not hold the descriptor it was given: holders %v; the check shows nothing", cmd.Process.Pid, got)
	}
	if others := slices.DeleteFunc(got, func(p int) bool { return p == cmd.Process.Pid }); len(others) > 0 {
		t.Errorf("children of the node %v hold the descriptor its caller gave it (plugin %d, actor worker %d)", others, plugins[0].Pid, actorPid)
	}
	release()
	if code, out := j.wait(ctx); code != 0 {
		t.Fatalf("hold job exited %d:\n%s", code, out)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		var ee *exec.ExitError
		if waitErr != nil && !errors.As(waitErr, &ee) {
			t.Fatal(waitErr)
		}
	case <-ctx.Done():
		t.Fatalf("the node did not stop on SIGTERM:\n%s", out)
	}
}
