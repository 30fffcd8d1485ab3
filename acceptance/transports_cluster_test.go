package acceptance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Binaries of the transport examples, built by TestMain.
var (
	allreduceBin  string
	weightSyncBin string
)

// transportCluster is a head and two joined nodes running the collective
// and onesided transport plugins: N2's one-sided agent has a fixed name
// (so a restarted plugin is a new incarnation of the same agent) and N3
// reads over TCP even from this machine's other nodes (same_node_shm off);
// the head and N2 read through shared memory.
type transportCluster struct {
	h      *head
	n2, n3 *clusterNode
}

const collectivePlugin = `
plugin "transport" "collective" {
  config {
    timeout = "15s"
  }
}
`

func startTransportCluster(t *testing.T, ctx context.Context) *transportCluster {
	t.Helper()
	dir := func(body string) string {
		return writeConfig(t, shortTempDir(t), fmt.Sprintf("plugin_dir = %q\n", pluginDir)+collectivePlugin+body)
	}
	headCfg := dir(fastHealth + "plugin \"transport\" \"onesided\" {}\n")
	// Only N2 also runs shm (TransportsCheckedWhereTheActorRuns).
	n2Cfg := dir("plugin \"transport\" \"onesided\" {\n  config {\n    name = \"n2-agent\"\n  }\n}\nplugin \"transport\" \"shm\" {}\n")
	n3Cfg := dir("plugin \"transport\" \"onesided\" {\n  config {\n    same_node_shm = false\n  }\n}\n")
	c := &transportCluster{}
	c.h = startHead(t, ctx, "--config", headCfg, "--num-cpus", "2", "--node-name", "head")
	c.n2 = joinNode(t, ctx, c.h, "127.0.0.2", "", "--config", n2Cfg)
	c.n3 = joinNode(t, ctx, c.h, "127.0.0.3", "", "--config", n3Cfg)
	return c
}

// nodePlugin is one row of `goray plugins list --json`, with its node.
type nodePlugin struct {
	Node     string `json:"node_id"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	State    string `json:"state"`
	Restarts int    `json:"restarts"`
	Pid      int    `json:"pid"`
}

func (c *transportCluster) plugins(t *testing.T, ctx context.Context) []nodePlugin {
	t.Helper()
	r := runGoray(t, ctx, "plugins", "list", "--address", c.h.addr, "--json")
	if r.code != 0 {
		t.Fatalf("goray plugins list: %s", r)
	}
	var out struct {
		Plugins []nodePlugin `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("plugins list JSON: %v\n%s", err, r.stdout)
	}
	return out.Plugins
}

// plugin returns node's plugin name (failing the test when it is absent).
func (c *transportCluster) plugin(t *testing.T, ctx context.Context, node, name string) nodePlugin {
	t.Helper()
	for _, p := range c.plugins(t, ctx) {
		if p.Node == node && p.Name == name {
			return p
		}
	}
	t.Fatalf("node %s has no plugin %q", node[:8], name)
	return nodePlugin{}
}

// TestTransportsAcrossNodes runs the collective and onesided transports on
// three nodes: collectives for every op and dtype, send/recv between
// actors on different nodes, a rank killed mid-collective, one-sided reads
// across nodes and within a node (also after the source re-registered and
// after its plugin restarted) and the abort of a pending one-sided read;
// then the two examples. Nothing may be left in /dev/shm.
func TestTransportsAcrossNodes(t *testing.T) {
	ctx := testCtx(t)
	before := watchShm(t)
	c := startTransportCluster(t, ctx)
	ps := c.plugins(t, ctx)
	for _, n := range []string{c.n2.id, c.n3.id} {
		for _, name := range []string{"collective", "onesided"} {
			if !slices.ContainsFunc(ps, func(p nodePlugin) bool {
				return p.Node == n && p.Kind == "transport" && p.Name == name && p.State == "running" && p.Pid > 0
			}) {
				t.Fatalf("node %s does not run transport %q: %+v", n[:8], name, ps)
			}
		}
	}
	if len(ps) != 7 {
		t.Fatalf("want 7 plugins (collective and onesided on each of 3 nodes, shm on N2), got %+v", ps)
	}
	r := runGoray(t, ctx, "plugins", "list", "--address", c.h.addr)
	if r.code != 0 || strings.Count(r.stdout, "collective") != 3 || strings.Count(r.stdout, "onesided") != 3 {
		t.Fatalf("goray plugins list:\n%s", r)
	}
	newJob := func(args ...string) *job {
		return startJob(t, jobOptions{addr: c.h.addr}, testjobBin, args...)
	}
	wait := func(j *job, mode string, lines ...string) {
		t.Helper()
		code, out := j.wait(ctx)
		if code != 0 {
			t.Fatalf("%s failed (exit %d):\n%s", mode, code, out)
		}
		wantLines(t, out, append(lines, "PASS "+mode)...)
		t.Logf("%s:\n%s", mode, out)
	}

	t.Run("CollectiveOps", func(t *testing.T) {
		wait(newJob("coll-ops", c.n2.id, c.n3.id), "coll-ops", "40 all-reduces", "collectives across nodes: ok")
	})
	t.Run("CollectiveSendRecv", func(t *testing.T) {
		wait(newJob("coll-p2p", c.n2.id, c.n3.id), "coll-p2p", "collective send/recv group ranks N2 -> N3: ok",
			"collective send/recv no group N2 -> head: ok", "collective driver get across nodes: ok", "collective garbage collection on the source node: ok")
	})
	t.Run("CollectiveKilledRank", func(t *testing.T) {
		dir := shortTempDir(t)
		j := startJob(t, jobOptions{addr: c.h.addr}, testjobBin, "coll-kill", dir, c.n2.id, c.n3.id)
		pid := readPid(t, waitFile(t, j, 30*time.Second, filepath.Join(dir, "victim")))
		killWorker(t, j, pid)
		if err := os.WriteFile(filepath.Join(dir, "killed"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		wait(j, "coll-kill", "killed rank: typed errors within the timeout", "destroyed and re-created: ok")
		// The killed rank could not free its own tensor: its raylet
		// unlinks it (the segments a process owns are in its ledger).
		waitFor(t, 10*time.Second, "no segment of the ranks left, the killed rank's included", func() bool {
			left, _ := filepath.Glob("/dev/shm/goray-t-kill-*")
			return len(left) == 0
		})
	})
	t.Run("TransportsCheckedWhereTheActorRuns", func(t *testing.T) {
		wait(newJob("transports-where", c.n2.id, c.n3.id), "transports-where", "actor transports checked on the actor's node: ok")
	})
	t.Run("ReceivedSegmentsDieWithTheirProcess", func(t *testing.T) {
		j := newJob("recv-leak", c.n2.id, c.n3.id)
		code, out := j.wait(ctx)
		if code != 0 {
			t.Fatalf("recv-leak failed (exit %d):\n%s", code, out)
		}
		wantLines(t, out, "received segment of a killed worker: unlinked", "PASS recv-leak")
		seg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lineWith(out, "driver segment ")), "driver segment"))
		if seg == "" || strings.Contains(seg, "/") {
			t.Fatalf("no driver segment in the output:\n%s", out)
		}
		if _, err := os.Stat(filepath.Join("/dev/shm", seg)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the driver's received segment %s outlived the driver (stat: %v)", seg, err)
		}
	})
	t.Run("OneSidedReads", func(t *testing.T) {
		dir := shortTempDir(t)
		j := startJob(t, jobOptions{addr: c.h.addr}, testjobBin, "os-reads", dir, c.n2.id, c.n3.id)
		waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready"))
		old := c.plugin(t, ctx, c.n2.id, "onesided")
		if err := syscall.Kill(old.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "N2's onesided plugin to restart", func() bool {
			p := c.plugin(t, ctx, c.n2.id, "onesided")
			return p.State == "running" && p.Pid != old.Pid && p.Restarts > old.Restarts
		})
		if err := os.WriteFile(filepath.Join(dir, "restarted"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		wait(j, "os-reads", "one-sided first read: ok", "one-sided read after the source re-registered: ok",
			"object of the dead agent: typed error", "one-sided read after the source's plugin restarted (stale metadata refreshed): ok")
	})
	t.Run("OneSidedAbort", func(t *testing.T) {
		dir := shortTempDir(t)
		j := startJob(t, jobOptions{addr: c.h.addr, env: []string{"TESTJOB_TRANSFER_TIMEOUT=1s"}}, testjobBin, "os-abort", dir, c.n2.id, c.n3.id)
		waitFile(t, j, 30*time.Second, filepath.Join(dir, "ready"))
		// The agent serving now is the one to freeze: a pid the listing
		// still shows of an incarnation that just died (a zombie takes the
		// SIGSTOP without error, and the live agent would answer the read)
		// is listed again until the process is seen stopped.
		var pid int
		waitFor(t, 30*time.Second, "N2's running onesided plugin to be stopped by SIGSTOP", func() bool {
			p := c.plugin(t, ctx, c.n2.id, "onesided")
			if p.State != "running" || p.Pid <= 0 {
				return false
			}
			if p.Pid != pid {
				if pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGCONT)
				}
				pid = p.Pid
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					return false
				}
			}
			return procState(pid) == "T"
		})
		thawed := false
		thaw := func() {
			if !thawed {
				thawed = true
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
		t.Cleanup(thaw)
		if err := os.WriteFile(filepath.Join(dir, "frozen"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		waitFile(t, j, 30*time.Second, filepath.Join(dir, "timedout"))
		thaw()
		if err := os.WriteFile(filepath.Join(dir, "thawed"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		wait(j, "os-abort", "pending read timed out after", "pending read aborted: ok", "after the thaw: ok")
	})
	t.Run("Examples", func(t *testing.T) {
		for _, ex := range []struct {
			bin  string
			args []string
			want []string
		}{
			{allreduceBin, []string{"-actors", "3", "-mib", "8"}, []string{"allreduce: 3 actors on 3 nodes", "OK"}},
			{weightSyncBin, []string{"-readers", "3", "-mib", "8", "-steps", "3"}, []string{"weight-sync:", "OK"}},
		} {
			j := startJob(t, jobOptions{addr: c.h.addr}, ex.bin, ex.args...)
			code, out := j.wait(ctx)
			if code != 0 {
				t.Fatalf("%s exited %d:\n%s", filepath.Base(ex.bin), code, out)
			}
			wantLines(t, out, ex.want...)
			t.Logf("%s:\n%s", filepath.Base(ex.bin), out)
		}
	})

	for _, n := range []string{c.n3.tempDir, c.n2.tempDir, c.h.tempDir} {
		if r := runGoray(t, ctx, "stop", "--temp-dir", n); r.code != 0 {
			t.Fatalf("goray stop: %s", r)
		}
	}
	checkNoNewShm(t, before)
}
