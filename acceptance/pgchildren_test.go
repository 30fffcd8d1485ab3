package acceptance

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nodeCPUs is a node's total and available CPUs in `goray status --json`.
type nodeCPUs struct {
	total, available float64
	ok               bool
}

// cpusOf reads every alive node's CPUs from `goray status --json`, by node
// id; ok is false when the command failed.
func cpusOf(t *testing.T, ctx context.Context, h *head) (map[string]nodeCPUs, bool) {
	t.Helper()
	r := runGoray(t, ctx, "status", "--json", "--temp-dir", h.tempDir)
	if r.code != 0 {
		return nil, false
	}
	var s struct {
		Nodes []struct {
			NodeID    string             `json:"node_id"`
			State     string             `json:"state"`
			Total     map[string]float64 `json:"resources_total"`
			Available map[string]float64 `json:"resources_available"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("goray status --json: %v\n%s", err, r.stdout)
	}
	out := map[string]nodeCPUs{}
	for _, n := range s.Nodes {
		if n.State == "ALIVE" {
			out[n.NodeID] = nodeCPUs{total: n.Total["CPU"], available: n.Available["CPU"], ok: true}
		}
	}
	return out, true
}

// pidNode reads a "pid node" file the job's tasks write.
func pidNode(t *testing.T, s string) (int, string) {
	t.Helper()
	f := strings.Fields(s)
	if len(f) != 2 {
		t.Fatalf("want \"pid node\", got %q", s)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		t.Fatalf("bad pid in %q", s)
	}
	return pid, f[1]
}

// TestPlacementGroupRemovalFreesChildLeases: a task in a placement group
// on the head submits a child outside the group to a second node; removing
// the group kills the parent's worker, and the second node then ends the
// child's lease (its holder died on another node) and kills its worker,
// so the second node's CPU is available again while the driver still
// runs. Before, the child's worker stayed LEASED, holding the CPU, until
// the job ended.
func TestPlacementGroupRemovalFreesChildLeases(t *testing.T) {
	// Every wait below is generous (minWait); the context outlives them.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg := writeConfig(t, shortTempDir(t), fastHealth)
	// Only the head has pghome: the group's bundle lands there.
	h := startHead(t, ctx, "--config", cfg, "--num-cpus", "2", "--node-name", "head", "--resources", "pghome=1")
	n2 := joinNode(t, ctx, h, "127.0.0.2", "")
	headID := readNodeJSON(t, h.session).NodeID
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr, env: []string{"TESTJOB_TIMEOUT=7m"}}, testjobBin, "pg-children", dir, headID, n2.id)

	parentPid, parentNode := pidNode(t, waitFile(t, j, time.Minute, filepath.Join(dir, "parent")))
	childPid, childNode := pidNode(t, waitFile(t, j, time.Minute, filepath.Join(dir, "child")))
	if parentNode != headID {
		t.Fatalf("the parent runs on %s, want the head %s", parentNode, headID)
	}
	if childNode != n2.id {
		t.Fatalf("the child runs on %s, want the second node %s", childNode, n2.id)
	}
	for _, pid := range []int{parentPid, childPid} {
		p, ok := readProc(pid)
		if !ok || !p.hasEnv("GORAY_WORKER=1") || !p.hasEnv(markerEnv+"="+j.marker) {
			t.Fatalf("pid %d is not a live goray worker of the job: %v", pid, p)
		}
	}
	// The child's lease holds one of the second node's CPUs.
	waitFor(t, 30*time.Second, "the child's lease holding a CPU of the second node", func() bool {
		c, ok := cpusOf(t, ctx, h)
		return ok && c[n2.id].ok && c[n2.id].total == 2 && c[n2.id].available == 1
	})

	if err := os.WriteFile(filepath.Join(dir, "remove"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, j, time.Minute, filepath.Join(dir, "removed"))
	waitFor(t, 10*time.Second, "the parent's worker to be killed with its group", func() bool { return !alive(parentPid) })
	waitFor(t, 30*time.Second, "the second node's CPUs all available again, the driver still running", func() bool {
		c, ok := cpusOf(t, ctx, h)
		return ok && c[n2.id].ok && c[n2.id].available == c[n2.id].total
	})
	waitFor(t, 10*time.Second, "the child's worker to be killed", func() bool { return !alive(childPid) })
	// Every resource is back: the head's CPUs too (the group's bundle).
	waitFor(t, 30*time.Second, "every node's CPUs available", func() bool {
		c, ok := cpusOf(t, ctx, h)
		if !ok || len(c) != 2 {
			return false
		}
		for _, n := range c {
			if n.available != n.total {
				return false
			}
		}
		return true
	})
	select {
	case <-j.done:
		t.Fatalf("the job exited before it was told to; output:\n%s", j.out.String())
	default:
	}

	if err := os.WriteFile(filepath.Join(dir, "finish"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := j.waitExit(minWait)
	if code != 0 {
		t.Fatalf("pg-children exited %d:\n%s", code, out)
	}
	wantLines(t, out, "group created on the head", "child running", "group removed", "parent error:", "PASS pg-children")
}

// TestNodeDeathEndsItsHoldersLeases: a task on the second node submits a
// child to the head, whose lease the task's worker holds. When the second
// node is killed (and declared dead), the head ends the leases processes
// of that node held: the child's worker is stopped and its CPU is back
// while the driver still runs. Before, the CPU stayed held until the job
// ended.
func TestNodeDeathEndsItsHoldersLeases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg := writeConfig(t, shortTempDir(t), fastHealth)
	h := startHead(t, ctx, "--config", cfg, "--num-cpus", "2", "--node-name", "head")
	n2 := joinNode(t, ctx, h, "127.0.0.2", "")
	headID := readNodeJSON(t, h.session).NodeID
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr, env: []string{"TESTJOB_TIMEOUT=7m"}}, testjobBin, "holder-node", dir, headID, n2.id)

	_, parentNode := pidNode(t, waitFile(t, j, time.Minute, filepath.Join(dir, "parent")))
	childPid, childNode := pidNode(t, waitFile(t, j, time.Minute, filepath.Join(dir, "child")))
	if parentNode != n2.id || childNode != headID {
		t.Fatalf("the parent runs on %s and the child on %s; want %s and the head %s", parentNode, childNode, n2.id, headID)
	}
	waitFor(t, 30*time.Second, "the child's lease holding a CPU of the head", func() bool {
		c, ok := cpusOf(t, ctx, h)
		return ok && c[headID].ok && c[headID].total == 2 && c[headID].available == 1
	})

	if err := syscall.Kill(n2.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitNodeState(t, ctx, h, n2.id, "DEAD", 30*time.Second)
	waitFor(t, 30*time.Second, "the child's worker to be stopped", func() bool { return !alive(childPid) })
	waitFor(t, 30*time.Second, "the head's CPUs all available again, the driver still running", func() bool {
		c, ok := cpusOf(t, ctx, h)
		return ok && c[headID].ok && c[headID].available == c[headID].total
	})
	select {
	case <-j.done:
		t.Fatalf("the job exited before it was told to; output:\n%s", j.out.String())
	default:
	}
	if err := os.WriteFile(filepath.Join(dir, "finish"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := j.waitExit(minWait)
	if code != 0 {
		t.Fatalf("holder-node exited %d:\n%s", code, out)
	}
	wantLines(t, out, "child running", "parent error:", "PASS holder-node")
}
