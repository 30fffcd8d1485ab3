package acceptance

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/sshdtest"
)

// The SSH provider end to end: `goray up` with provider "ssh" over hosts
// that are distinct loopback addresses of this machine, each an address of
// a real sshd (internal/testservers/sshdtest) with its own host key and an
// authorized user key, each host with a remote_dir of its own.

// sshCluster is a cluster started with `goray up` on the SSH provider.
type sshCluster struct {
	*asCluster
	// remote holds the hosts' remote_dirs (remote/<address>).
	remote string
	srv    *sshdtest.Server
}

// upSSHCluster writes a cluster file whose provider is "ssh" over the
// hosts (host:port; the goray binary is the head's), with the node types
// given (HCL), and starts it with `goray up`; it is torn down with `goray
// down` when the test ends. knownHosts is the provider's known_hosts file.
func upSSHCluster(t *testing.T, name string, srv *sshdtest.Server, hosts []string, knownHosts string, maxWorkers int, idle, nodeTypes string) *sshCluster {
	t.Helper()
	ctx := asCtx(t)
	dir := shortTempDir(t)
	remote, err := os.MkdirTemp("", "r")
	if err != nil {
		t.Fatal(err)
	}
	addTestDir(t, remote) // the hosts' nodes run under it, without the test's environment
	c := &sshCluster{asCluster: &asCluster{head: &head{t: t, tempDir: filepath.Join(dir, "h"), port: freePort(t)}, stateDir: remote}, remote: remote, srv: srv}
	c.addr = "127.0.0.1:" + strconv.Itoa(c.port)
	c.file = filepath.Join(dir, "cluster.hcl")
	quoted := make([]string, len(hosts))
	for i, h := range hosts {
		quoted[i] = strconv.Quote(h)
	}
	src := fmt.Sprintf(`
cluster_name   = %q
head_node_type = "head"
max_workers    = %d
idle_timeout   = %q
temp_dir       = %q
plugin_dir     = %q

provider "ssh" {
  config {
    hosts            = [%s]
    user             = %q
    private_key_file = %q
    known_hosts_file = %q
    remote_dir       = %q
    state_dir        = %q
    stop_timeout     = "5s"
  }
}

node_type "head" {
  resources = { CPU = 1 }
}
%s
`, name, maxWorkers, idle, c.tempDir, pluginDir, strings.Join(quoted, ", "), srv.User, srv.KeyFile, knownHosts,
		filepath.Join(remote, "{host}"), filepath.Join(dir, "s"), nodeTypes)
	if err := os.WriteFile(c.file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c.env = []string{"GORAY_AUTOSCALER_INTERVAL=300ms"}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if r := runGorayEnv(t, ctx, c.env, "down", c.file); r.code != 0 {
			t.Logf("cleanup: goray down: %s", r)
		}
		runGoray(t, ctx, "stop", "--temp-dir", c.tempDir, "--force")
		for _, p := range findProcs(func(p proc) bool { return p.mentions(dir) || p.mentions(remote) }) {
			t.Errorf("cleanup: killing a process left behind: %v", p)
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		_ = os.RemoveAll(remote)
	})
	r := runGorayEnv(t, ctx, c.env, "up", "--port", strconv.Itoa(c.port), c.file)
	if r.code != 0 {
		t.Fatalf("goray up: %s", r)
	}
	wantLines(t, r.stdout, "Started goray head node", fmt.Sprintf("Cluster %q: provider \"ssh\"", name), "goray down "+c.file)
	for _, l := range strings.Split(r.stdout, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "session dir:"); ok {
			c.session = strings.TrimSpace(s)
		}
	}
	return c
}

// nodes returns the live instance nodes: `goray start --block` processes
// under the hosts' remote_dirs, by pid, with the host address each listens
// on (--node-ip).
func (c *sshCluster) nodes() map[int]string {
	out := map[int]string{}
	for _, p := range outermost(findProcs(func(p proc) bool {
		return len(p.cmdline) > 1 && p.cmdline[1] == "start" && slices.Contains(p.cmdline, "--block") && p.mentions(c.remote)
	})) {
		if i := slices.Index(p.cmdline, "--node-ip"); i > 0 && i+1 < len(p.cmdline) {
			out[p.pid] = p.cmdline[i+1]
		} else {
			out[p.pid] = "?"
		}
	}
	return out
}

// idle reports whether the head is the only node and the autoscaler has
// no worker instance left in any state (the provider lists none).
func (c *sshCluster) idle(ctx context.Context) bool {
	r := runGoray(c.t, ctx, "status", "--json", "--address", c.addr)
	if r.code != 0 {
		return false
	}
	var s struct {
		AliveNodes int `json:"alive_nodes"`
		Autoscaler *struct {
			Active      map[string]int `json:"active"`
			Pending     []any          `json:"pending"`
			Draining    []any          `json:"draining"`
			Terminating []any          `json:"terminating"`
		} `json:"autoscaler"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		c.t.Fatalf("goray status --json: %v\n%s", err, r)
	}
	a := s.Autoscaler
	return s.AliveNodes == 1 && a != nil && a.Active["cpu"] == 0 && len(a.Pending)+len(a.Draining)+len(a.Terminating) == 0
}

// knownHostsMixed writes a known_hosts file listing the server's key for
// every address but bad, and another key for bad, and returns its path.
func knownHostsMixed(t *testing.T, srv *sshdtest.Server, bad string) string {
	t.Helper()
	lines := func(path string, keep func(string) bool) []string {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var out []string
		s := bufio.NewScanner(f)
		for s.Scan() {
			if keep(s.Text()) {
				out = append(out, s.Text())
			}
		}
		return out
	}
	host, port, err := net.SplitHostPort(bad)
	if err != nil {
		t.Fatal(err)
	}
	badHost := "[" + host + "]:" + port // known_hosts' form of a host on a port other than 22
	isBad := func(l string) bool { return strings.HasPrefix(l, badHost+" ") }
	all := append(lines(srv.KnownHostsFile, func(l string) bool { return !isBad(l) }), lines(srv.WrongKnownHosts(t), isBad)...)
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(path, []byte(strings.Join(all, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSSHAutoscaleBurst: `goray up` with the SSH provider over two hosts;
// a burst of one-CPU tasks launches worker nodes on them (the goray
// binary copied there over SSH), which join and run tasks, never more
// than max_workers, one per host; idle, they are stopped, no process
// left on the hosts; `goray down` leaves nothing.
func TestSSHAutoscaleBurst(t *testing.T) {
	ctx := asCtx(t)
	srv := sshdtest.Start(t, "127.0.6.1", "127.0.6.2")
	c := upSSHCluster(t, "sshburst", srv, srv.Addrs, srv.KnownHostsFile, 2, "3s", `
node_type "cpu" {
  resources   = { CPU = 2 }
  max_workers = 5 # the cluster's max_workers (2) caps it
}
`)
	shm := watchShm(t)
	var mu sync.Mutex
	high, hostsSeen := 0, map[string]bool{}
	var at map[int]string
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			ns := c.nodes()
			mu.Lock()
			if len(ns) > high {
				high, at = len(ns), ns
			}
			for _, h := range ns {
				hostsSeen[h] = true
			}
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	j := startJob(t, jobOptions{addr: c.addr, env: []string{"TESTJOB_TIMEOUT=150s"}}, testjobBin, "as-burst", "12", "2000")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("burst job: exit %d\n%s\nhead log:\n%s", code, out, c.headLog())
	}
	wantLines(t, out, "PASS as-burst")
	if !strings.Contains(out, "worker-nodes: 1") && !strings.Contains(out, "worker-nodes: 2") {
		t.Fatalf("the burst ran on no worker node:\n%s", out)
	}
	a, _ := c.autoscaler(ctx)
	if a.Autoscaler == nil || a.Autoscaler.Active["cpu"] == 0 {
		t.Fatalf("goray status shows no active cpu worker right after the burst: %+v", a.Autoscaler)
	}
	for _, ip := range []string{"127.0.6.1", "127.0.6.2"} {
		bins, _ := filepath.Glob(filepath.Join(c.remote, ip, "bin", "*", "goray"))
		if len(bins) > 1 {
			t.Errorf("host %s has %d goray binaries: %v", ip, len(bins), bins)
		}
	}
	waitFor(t, 90*time.Second, "idle SSH workers stopped", func() bool {
		if len(c.nodes()) != 0 {
			return false
		}
		return c.idle(ctx)
	})
	close(done)
	<-sampled
	mu.Lock()
	if high != 2 || len(hostsSeen) != 2 {
		t.Errorf("at most %d SSH nodes ran at once, on hosts %v; want max_workers = 2, one on each host; then, by pid: %v", high, hostsSeen, at)
	}
	mu.Unlock()
	if log := c.headLog(); !strings.Contains(log, `reason="idle for 3s and drained"`) {
		t.Fatalf("the head's log does not say the workers were idle:\n%s", log)
	}
	for _, ip := range []string{"127.0.6.1", "127.0.6.2"} {
		if _, err := os.Stat(filepath.Join(c.remote, ip, "instance.json")); !os.IsNotExist(err) {
			t.Errorf("host %s still has an instance record after its node was stopped: %v", ip, err)
		}
	}
	r := runGorayEnv(t, ctx, c.env, "down", c.file)
	if r.code != 0 {
		t.Fatalf("goray down: %s", r)
	}
	wantLines(t, r.stdout, `Stopped the head of cluster "sshburst"`, `Cluster "sshburst" has no instances.`)
	waitNoProcs(t, 10*time.Second, "processes of the cluster", func(p proc) bool {
		return p.mentions(filepath.Dir(c.file)) || p.mentions(c.remote)
	})
	checkNoNewShm(t, shm)
	checkNoSockets(t, filepath.Dir(c.file))
	checkNoSockets(t, c.remote)
}

// TestSSHHostFailures: a node type whose only host presents another key
// than known_hosts lists, and one whose host does not answer, fail to
// launch; `goray status --json` shows the autoscaler's failures naming
// the host (and the known_hosts file); nothing runs on the refused host;
// `goray down` leaves nothing.
func TestSSHHostFailures(t *testing.T) {
	ctx := asCtx(t)
	srv := sshdtest.Start(t, "127.0.6.3", "127.0.6.4")
	bad := srv.Addrs[1]
	known := knownHostsMixed(t, srv, bad)
	dead := fmt.Sprintf("127.0.6.9:%d", freePortOn(t, "127.0.6.9"))
	c := upSSHCluster(t, "sshfail", srv, []string{srv.Addrs[0], bad, dead}, known, 3, "1m", fmt.Sprintf(`
node_type "badkey" {
  resources   = { CPU = 1 }
  min_workers = 1
  max_workers = 1
  node_config {
    hosts = [%q]
  }
}

node_type "unreachable" {
  resources   = { CPU = 1 }
  min_workers = 1
  max_workers = 1
  node_config {
    hosts = [%q]
  }
}
`, bad, dead))
	var msgs []string
	waitFor(t, 60*time.Second, "both failures in goray status --json", func() bool {
		a, _ := c.autoscaler(ctx)
		if a.Autoscaler == nil {
			return false
		}
		msgs = msgs[:0]
		keyRefused, unreachable := false, false
		for _, f := range a.Autoscaler.Failures {
			msgs = append(msgs, f.Message)
			keyRefused = keyRefused || strings.Contains(f.Message, "host key of "+bad) && strings.Contains(f.Message, "does not match known_hosts file "+known)
			unreachable = unreachable || strings.Contains(f.Message, "host "+dead) && strings.Contains(f.Message, "connecting")
		}
		return keyRefused && unreachable
	})
	t.Logf("autoscaler failures: %q", msgs)
	badIP, _, _ := strings.Cut(bad, ":")
	if _, err := os.Stat(filepath.Join(c.remote, badIP)); !os.IsNotExist(err) {
		t.Errorf("the provider created its remote_dir on the host it refused: %v", err)
	}
	if ns := c.nodes(); len(ns) != 0 {
		t.Errorf("nodes run: %v", ns)
	}
	r := runGorayEnv(t, ctx, c.env, "down", c.file)
	if r.code != 0 {
		t.Fatalf("goray down: %s", r)
	}
	wantLines(t, r.stdout, `Stopped the head of cluster "sshfail"`)
	waitNoProcs(t, 10*time.Second, "processes of the cluster", func(p proc) bool {
		return p.mentions(filepath.Dir(c.file)) || p.mentions(c.remote)
	})
}

// freePortOn returns a TCP port nothing listens on at ip now.
func freePortOn(t *testing.T, ip string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
