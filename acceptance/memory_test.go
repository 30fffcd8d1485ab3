package acceptance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Memory of the memory monitor's test: the node's threshold is set this
// far above the machine's use when the test starts (well above what the
// machine's other work moves it by, on a machine shared with other
// tests), and the hog task gives up (failing the test) after hogCapMiB,
// so a broken monitor never takes more than that from the machine.
const (
	oomMarginMiB = 1024
	hogCapMiB    = 3072
)

// hostMemory reads MemTotal and MemTotal − MemAvailable from /proc/meminfo,
// as the node's memory monitor does outside a memory-limited cgroup.
func hostMemory(t *testing.T) (used, total int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	var avail int64 = -1
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			total = v << 10
		case "MemAvailable:":
			avail = v << 10
		}
	}
	if total <= 0 || avail < 0 {
		t.Fatalf("/proc/meminfo has no MemTotal or MemAvailable:\n%s", b)
	}
	return total - avail, total
}

// memoryStatusJSON is the memory monitor part of `goray status --json`.
type memoryStatusJSON struct {
	Nodes []struct {
		NodeID string `json:"node_id"`
		State  string `json:"state"`
		Memory *struct {
			Threshold  float64 `json:"usage_threshold"`
			TotalBytes int64   `json:"total_bytes"`
			Source     string  `json:"source"`
			Kills      int64   `json:"kills"`
			LastKill   *struct {
				Function string `json:"function"`
				Pid      int    `json:"pid"`
				Reason   string `json:"reason"`
			} `json:"last_kill"`
		} `json:"memory_monitor"`
	} `json:"nodes"`
}

func memoryStatus(t *testing.T, ctx context.Context, h *head) memoryStatusJSON {
	t.Helper()
	r := runGoray(t, ctx, "status", "--json", "--temp-dir", h.tempDir)
	if r.code != 0 {
		t.Fatalf("goray status --json: %s", r)
	}
	var s memoryStatusJSON
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("goray status --json: %v\n%s", err, r.stdout)
	}
	if len(s.Nodes) != 1 {
		t.Fatalf("goray status: want one node, got %d:\n%s", len(s.Nodes), r.stdout)
	}
	return s
}

// TestMemoryMonitorKillsHog: a task that allocates without bound is
// killed by its node's memory monitor, retried, killed again and again
// and fails with *ray.OutOfMemoryError naming the node after its
// MaxOOMRetries (2), which its MaxRetries (1) does not limit; the node and a second job
// on it (tasks, an actor, a task running through it all) keep running,
// and `goray status` shows the kills. The node's threshold is the
// machine's use at the start plus oomMarginMiB, so the test does not
// depend on the machine's size and takes at most hogCapMiB from it.
func TestMemoryMonitorKillsHog(t *testing.T) {
	ctx := testCtx(t)
	used, total := hostMemory(t)
	if total-used < 2*hogCapMiB<<20 {
		t.Fatalf("the machine has %d MiB available; this test needs %d MiB", (total-used)>>20, 2*hogCapMiB)
	}
	threshold := float64(used+oomMarginMiB<<20) / float64(total)
	cfgDir := shortTempDir(t)
	cfg := filepath.Join(cfgDir, "node.hcl")
	src := fmt.Sprintf("memory_monitor {\n  usage_threshold  = %.6f\n  refresh_interval = \"50ms\"\n}\n", threshold)
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startHead(t, ctx, "--config", cfg, "--num-cpus", "4")

	// The node measures what the test measured (no cgroup limit here).
	st := memoryStatus(t, ctx, h)
	waitFor(t, 10*time.Second, "the node's first heartbeat with its memory monitor", func() bool {
		st = memoryStatus(t, ctx, h)
		return st.Nodes[0].Memory != nil && st.Nodes[0].Memory.TotalBytes > 0
	})
	if m := st.Nodes[0].Memory; m.TotalBytes != total || m.Source != "/proc/meminfo" || fmt.Sprintf("%.6f", m.Threshold) != fmt.Sprintf("%.6f", threshold) {
		t.Fatalf("the node's memory monitor: %+v; want /proc/meminfo with %d bytes and threshold %.6f", *m, total, threshold)
	}

	dir := shortTempDir(t)
	neighbour := startJob(t, jobOptions{addr: h.addr}, testjobBin, "oom-neighbour", dir)
	waitFile(t, neighbour, 30*time.Second, filepath.Join(dir, "neighbour.running"))

	hog := startJob(t, jobOptions{addr: h.addr}, testjobBin, "oom", dir, strconv.Itoa(hogCapMiB))
	code, out := hog.wait(ctx)
	if code != 0 {
		t.Fatalf("the hog's job exited %d:\n%s", code, out)
	}
	t.Logf("the hog's job:\n%s", out)
	wantLines(t, out, "oom attempts: 3", "oom names the node: true", "oom names the task: true",
		"oom says the usage: true", "oom is not a crash: true", "task after the kills: ok", "PASS oom")
	for attempt := range 3 {
		pid := readPid(t, waitFile(t, hog, time.Second, filepath.Join(dir, fmt.Sprintf("hog.%d.pid", attempt))))
		if alive(pid) {
			t.Errorf("attempt %d's worker (pid %d) is alive", attempt, pid)
		}
	}

	st = memoryStatus(t, ctx, h)
	waitFor(t, 10*time.Second, "goray status to show the three kills", func() bool {
		st = memoryStatus(t, ctx, h)
		m := st.Nodes[0].Memory
		return m != nil && m.Kills >= 3 && m.LastKill != nil
	})
	// The last kill is the hog's unless the machine's other work pushed
	// its use past the threshold since (then the neighbour's long task
	// was killed, and retried).
	n := st.Nodes[0]
	if n.State != "ALIVE" || n.Memory.LastKill.Function == "" || !strings.Contains(n.Memory.LastKill.Reason, "killed by the memory monitor") {
		t.Fatalf("goray status after the kills: node %s %s, memory monitor %+v, last kill %+v", n.NodeID, n.State, *n.Memory, *n.Memory.LastKill)
	}
	r := runGoray(t, ctx, "status", "--temp-dir", h.tempDir)
	if r.code != 0 || !strings.Contains(r.stdout, "workers killed for memory") || !strings.Contains(r.stdout, "  last at ") {
		t.Fatalf("goray status does not show the kills: %s", r)
	}
	t.Logf("goray status:\n%s", r.stdout)

	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out = neighbour.wait(ctx)
	if code != 0 {
		t.Fatalf("the neighbour job exited %d:\n%s", code, out)
	}
	wantLines(t, out, "neighbour survived: ok", "PASS oom-neighbour")
	if s, r := h.status(ctx); r.code != 0 || s.AliveNodes != 1 {
		t.Fatalf("after the test the node is not alive: %s", r)
	}
}
