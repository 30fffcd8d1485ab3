package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pluginStatus is one row of `goray plugins list --json`.
type pluginStatus struct {
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	State    string `json:"state"`
	Restarts int    `json:"restarts"`
	Pid      int    `json:"pid"`
}

func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "node.hcl")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startShmHead starts a head node whose config loads the shm transport.
func startShmHead(t *testing.T, ctx context.Context) *head {
	t.Helper()
	cfg := writeConfig(t, shortTempDir(t), fmt.Sprintf("plugin_dir = %q\nplugin \"transport\" \"shm\" {}\n", pluginDir))
	return startHead(t, ctx, "--config", cfg)
}

func (h *head) plugins(t *testing.T) []pluginStatus {
	t.Helper()
	r := runGoray(t, testCtx(t), "plugins", "list", "--address", h.addr, "--json")
	if r.code != 0 {
		t.Fatalf("goray plugins list: %s", r)
	}
	var out struct {
		Plugins []pluginStatus `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("plugins list JSON: %v\n%s", err, r.stdout)
	}
	return out.Plugins
}

func TestNodeRunsPluginsFromHCL(t *testing.T) {
	ctx := testCtx(t)
	cfgDir := shortTempDir(t)
	cfg := writeConfig(t, cfgDir, fmt.Sprintf(`
plugin_dir = %q
plugin "transport" "shm" {
  config {
    max_poll = "20ms"
  }
}
`, pluginDir))
	h := startHead(t, ctx, "--config", cfg)
	ps := h.plugins(t)
	if len(ps) != 1 || ps[0].Kind != "transport" || ps[0].Name != "shm" || ps[0].State != "running" || ps[0].Pid == 0 {
		t.Fatalf("plugins after start: %+v", ps)
	}
	first := ps[0].Pid

	// A plugin that crashes is restarted with backoff; the node keeps serving.
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var second int
	waitFor(t, 20*time.Second, "the killed plugin to be restarted", func() bool {
		ps := h.plugins(t)
		if len(ps) == 1 && ps[0].State == "running" && ps[0].Restarts >= 1 && ps[0].Pid != first {
			second = ps[0].Pid
			return true
		}
		return false
	})
	if _, r := h.status(ctx); r.code != 0 {
		t.Fatalf("status after a plugin crash: %s", r)
	}

	// goray stop leaves no plugin process.
	if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
		t.Fatalf("goray stop: %s", r)
	}
	waitFor(t, 20*time.Second, "the plugin to exit after goray stop", func() bool { return !alive(second) })
}

func TestPluginDiesWithKilledNode(t *testing.T) {
	ctx := testCtx(t)
	h := startShmHead(t, ctx)
	ps := h.plugins(t)
	if len(ps) != 1 || ps[0].Pid == 0 {
		t.Fatalf("plugins: %+v", ps)
	}
	pid := ps[0].Pid
	if err := syscall.Kill(h.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the plugin to exit after kill -9 of its node", func() bool { return !alive(pid) })
}

func TestBadPluginBlockNamesTheLine(t *testing.T) {
	ctx := testCtx(t)
	dir := shortTempDir(t)
	cfg := writeConfig(t, dir, fmt.Sprintf(`plugin_dir = %q
plugin "transport" "shm" {
  config {
    max_pol = "20ms"
  }
}
`, pluginDir))
	r := runGoray(t, ctx, "start", "--head", "--port", fmt.Sprint(freePort(t)), "--temp-dir", dir, "--config", cfg)
	if r.code != 1 {
		t.Fatalf("start with a bad plugin block: want exit 1, got %s", r)
	}
	if !strings.Contains(r.stderr, "node.hcl:4") || !strings.Contains(r.stderr, `Did you mean "max_poll"?`) {
		t.Fatalf("the error does not name node.hcl:4 with a suggestion:\n%s", r.stderr)
	}

	cfg = writeConfig(t, dir, fmt.Sprintf("plugin_dir = %q\nplugin \"transport\" \"nope\" {}\n", pluginDir))
	r = runGoray(t, ctx, "start", "--head", "--port", fmt.Sprint(freePort(t)), "--temp-dir", dir, "--config", cfg)
	if r.code != 1 || !strings.Contains(r.stderr, "goray-transport-nope") || !strings.Contains(r.stderr, "node.hcl:2") {
		t.Fatalf("missing plugin binary: want exit 1 naming the binary and the line, got %s", r)
	}
	waitNoProcs(t, 10*time.Second, "processes of failed starts", func(p proc) bool { return p.mentions(dir) })
}

func TestPluginsCheck(t *testing.T) {
	ctx := testCtx(t)
	r := runGoray(t, ctx, "plugins", "check", filepath.Join(pluginDir, "goray-transport-shm"))
	if r.code != 0 || !strings.Contains(r.stdout, "transport/shm") || !strings.Contains(r.stdout, "conformance:  passed") {
		t.Fatalf("goray plugins check: %s", r)
	}
	r = runGoray(t, ctx, "plugins", "check", gorayBin)
	if r.code == 0 {
		t.Fatalf("checking a binary that is not a plugin succeeded: %s", r)
	}
}

func TestTensorsMoveByTransport(t *testing.T) {
	ctx := testCtx(t)
	before := watchShm(t)
	h := startShmHead(t, ctx)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "tensors")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("tensors job failed (exit %d):\n%s", code, out)
	}
	wantLines(t, out, "actor-to-actor: ok, zero copy", "driver get: ok", "driver put: ok", "garbage collection: ok", `transport "nccl" is not registered on node`)
	if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
		t.Fatalf("goray stop: %s", r)
	}
	checkNoNewShm(t, before)
}

func TestTransportPluginKilledMidJob(t *testing.T) {
	ctx := testCtx(t)
	before := watchShm(t)
	h := startShmHead(t, ctx)
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "tensors-restart", dir)
	waitFile(t, j, 20*time.Second, filepath.Join(dir, "ready"))
	ps := h.plugins(t)
	if len(ps) != 1 {
		t.Fatalf("plugins: %+v", ps)
	}
	if err := syscall.Kill(ps[0].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "killed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("job failed (exit %d):\n%s", code, out)
	}
	wantLines(t, out, "after restart: ok")
	if ps := h.plugins(t); len(ps) != 1 || ps[0].Restarts < 1 || ps[0].State != "running" {
		t.Fatalf("plugin after the kill: %+v", ps)
	}
	// Objects extracted before the restart are collected by the new plugin
	// instance from their transport data: nothing is left behind.
	if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
		t.Fatalf("goray stop: %s", r)
	}
	checkNoNewShm(t, before)
}

func TestTransferTimeoutIsTypedAndAborted(t *testing.T) {
	ctx := testCtx(t)
	before := watchShm(t)
	h := startShmHead(t, ctx)
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr, env: []string{"TESTJOB_TRANSFER_TIMEOUT=500ms"}}, testjobBin, "tensors-timeout", dir)
	waitFile(t, j, 20*time.Second, filepath.Join(dir, "ready"))
	// A frozen plugin: calls reach it but nothing answers. The plugin
	// serving now is the one to freeze: a pid the listing still shows of
	// an incarnation that just died (restarted by its supervisor on a
	// loaded machine) takes the SIGSTOP without error while the live
	// plugin answers, so the listing is read again until the process is
	// seen stopped.
	pid := 0
	thawed := false
	thaw := func() {
		if !thawed && pid > 0 {
			thawed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	waitFor(t, 30*time.Second, "the running shm plugin to be stopped by SIGSTOP", func() bool {
		ps := h.plugins(t)
		if len(ps) != 1 || ps[0].State != "running" || ps[0].Pid <= 0 {
			return false
		}
		if ps[0].Pid != pid {
			if pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
			pid = ps[0].Pid
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				return false
			}
		}
		return procState(pid) == "T"
	})
	if err := os.WriteFile(filepath.Join(dir, "frozen"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, j, 20*time.Second, filepath.Join(dir, "timedout"))
	thaw()
	if err := os.WriteFile(filepath.Join(dir, "thawed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("job failed (exit %d):\n%s", code, out)
	}
	wantLines(t, out, "timed out after", "after the timeout: ok")
	if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
		t.Fatalf("goray stop: %s", r)
	}
	checkNoNewShm(t, before)
}

// TestWorkersCallTheirPluginDirectly: workers call their node's transport
// plugin over connections of their own (not through the raylet), and
// connect again to a plugin that restarted. The plugin's connected unix
// sockets are counted: the host's one, plus one per worker calling it.
func TestWorkersCallTheirPluginDirectly(t *testing.T) {
	ctx := testCtx(t)
	before := watchShm(t)
	h := startShmHead(t, ctx)
	ps := h.plugins(t)
	if len(ps) != 1 {
		t.Fatalf("plugins: %+v", ps)
	}
	pid := ps[0].Pid
	hostOnly := connectedUnixSockets(t, pid)
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "tensors-direct", dir)
	waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready"))
	// The producer's and the consumer's workers: two more.
	waitFor(t, 30*time.Second, "the actors' workers to connect to the plugin", func() bool {
		return connectedUnixSockets(t, pid) >= hostOnly+2
	})
	if err := os.WriteFile(filepath.Join(dir, "checked"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, j, 30*time.Second, filepath.Join(dir, "waiting"))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "killed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var restarted int
	waitFor(t, 30*time.Second, "the plugin to restart", func() bool {
		ps := h.plugins(t)
		if len(ps) == 1 && ps[0].State == "running" && ps[0].Pid != pid {
			restarted = ps[0].Pid
			return true
		}
		return false
	})
	waitFor(t, 30*time.Second, "the workers to connect to the restarted plugin", func() bool {
		return connectedUnixSockets(t, restarted) >= hostOnly+2
	})
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("job failed (exit %d):\n%s", code, out)
	}
	wantLines(t, out, "direct after restart: ok")
	if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
		t.Fatalf("goray stop: %s", r)
	}
	checkNoNewShm(t, before)
}

// connectedUnixSockets counts the connected unix sockets process pid holds
// (by its descriptors' inodes in /proc/net/unix, state 03).
func connectedUnixSockets(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1 // gone: a restart, or not yet
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			mine[strings.TrimSuffix(inode, "]")] = true
		}
	}
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// Num RefCount Protocol Flags Type St Inode [Path]
		f := strings.Fields(line)
		if len(f) >= 7 && f[5] == "03" && mine[f[6]] {
			n++
		}
	}
	return n
}
