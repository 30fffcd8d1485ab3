package acceptance

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Tasks on a node that freezes, is cut off or whose worker goes silent are
// retried (sdk/ray/internal/core/nodedeath.go). The driver is
// acceptance/internal/freezejob, built once on first use.
var (
	freezeBuild    sync.Once
	freezeBuildErr error
	freezejobBin   string
)

func buildFreezeJob(t *testing.T) {
	t.Helper()
	freezeBuild.Do(func() {
		freezejobBin = filepath.Join(filepath.Dir(gorayBin), "freeze", "freezejob")
		cmd := exec.Command("go", "build", "-o", freezejobBin, "./acceptance/internal/freezejob")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			freezeBuildErr = fmt.Errorf("go build ./acceptance/internal/freezejob: %v\n%s", err, out)
		}
	})
	if freezeBuildErr != nil {
		t.Fatal(freezeBuildErr)
	}
}

// freezeWait bounds each wait of these tests: generous, for a loaded
// machine; on a quiet one each takes seconds.
const freezeWait = 3 * time.Minute

// stopProcs sends SIGSTOP to pids, in order, and SIGCONT to them when the
// test ends (so that goray stop can end them as it usually does).
func stopProcs(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %d: %v", pid, err)
		}
	}
	t.Cleanup(func() { contProcs(pids...) })
}

func contProcs(pids ...int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
}

// nodePids returns the node process of n and every process that names its
// temp dir (workers, plugins), the node first.
func nodePids(n *clusterNode) []int {
	pids := []int{n.pid}
	for range 2 { // a process the node was starting shows on the second pass
		for _, p := range findProcs(func(p proc) bool { return p.mentions(n.tempDir) }) {
			if !slices.Contains(pids, p.pid) {
				pids = append(pids, p.pid)
			}
		}
	}
	return pids
}

// startedOn waits for the first attempts of freezejob's n tasks and
// returns the node and pid of each.
func startedOn(t *testing.T, j *job, dir string, n int) (nodes []string, pids []int) {
	t.Helper()
	for i := range n {
		f := strings.Fields(waitFile(t, j, freezeWait, filepath.Join(dir, fmt.Sprintf("started-%d", i))))
		if len(f) != 2 {
			t.Fatalf("started-%d holds %q, want a node id and a pid", i, f)
		}
		nodes = append(nodes, f[0])
		pids = append(pids, readPid(t, f[1]))
	}
	return nodes, pids
}

var resultLine = regexp.MustCompile(`(?m)^(result|again) (\d+): node=(\S+) attempt=(\d+)$`)

// results waits until the job printed the results of its n tasks and
// returns, per task, the node and attempt that answered.
func results(t *testing.T, j *job, n int) (nodes, attempts []string) {
	t.Helper()
	waitFor(t, freezeWait, "the driver's results", func() bool {
		select {
		case <-j.done:
			t.Fatalf("the driver exited (code %d) before its results:\n%s", j.code, j.out.String())
		default:
		}
		return strings.Contains(j.out.String(), "RESULTS\n")
	})
	nodes, attempts = make([]string, n), make([]string, n)
	for _, m := range resultLine.FindAllStringSubmatch(j.out.String(), -1) {
		var i int
		fmt.Sscan(m[2], &i)
		if m[1] == "result" && i < n {
			nodes[i], attempts[i] = m[3], m[4]
		}
	}
	return nodes, attempts
}

// recheck lets the driver read its results again and waits for it to pass.
func recheck(t *testing.T, j *job, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "recheck"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := j.waitExit(freezeWait); code != 0 || !strings.Contains(out, "PASS freeze") {
		t.Fatalf("the driver (exit %d) after reading its results again:\n%s", code, out)
	}
}

// waitLate waits until the first attempts of freezejob's n tasks on a node
// that came back answered (late-<i>): what they send is late.
func waitLate(t *testing.T, j *job, dir string, n int) {
	t.Helper()
	for i := range n {
		waitFile(t, j, freezeWait, filepath.Join(dir, fmt.Sprintf("late-%d", i)))
	}
}

// TestFrozenNodeTasksRetried: two tasks run on a node that is then frozen
// (SIGSTOP of all its processes: its TCP connections stay open, nothing
// answers). Once the GCS declares the node dead, the driver retries them on
// the other node and gets their results while the node stays frozen (before,
// Get returned only when the node was resumed, with the frozen node's
// results). The driver's keepalive is set to an hour so that only the
// node's death can end its leases. Resumed, the node stops (it was declared
// dead), and its late results change nothing.
func TestFrozenNodeTasksRetried(t *testing.T) {
	t.Parallel()
	buildFreezeJob(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := writeConfig(t, shortTempDir(t), fastHealth)
	h := startHead(t, ctx, "--config", cfg, "--num-cpus", "1", "--node-name", "head")
	frozen := joinNode(t, ctx, h, "127.0.37.2", "", "--config", cfg, "--resources", "slot=2")
	live := joinNode(t, ctx, h, "127.0.37.3", "", "--config", cfg, "--resources", "slot=2")
	dir := shortTempDir(t)
	const n = 2
	j := startJob(t, jobOptions{addr: h.addr, env: []string{"GORAY_GRPC_KEEPALIVE_TIME=1h"}}, freezejobBin, dir, frozen.id, fmt.Sprint(n))
	nodes, _ := startedOn(t, j, dir, n)
	for i, node := range nodes {
		if node != frozen.id {
			t.Fatalf("task %d's first attempt ran on %s, want the node to freeze (%s)", i, node, frozen.id)
		}
	}
	pids := nodePids(frozen)
	stopProcs(t, pids...)
	waitNodeState(t, ctx, h, frozen.id, "DEAD", freezeWait)

	got, attempts := results(t, j, n)
	for i := range n {
		if got[i] != live.id || attempts[i] == "0" {
			t.Fatalf("task %d answered by node %s attempt %s; want a retry on node %s:\n%s", i, got[i], attempts[i], live.id, j.out.String())
		}
	}
	// Resumed, the node learns it was declared dead and stops; the first
	// attempts may answer before it does.
	if err := os.WriteFile(filepath.Join(dir, "resumed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	contProcs(pids...)
	waitFor(t, freezeWait, "the resumed node to stop", func() bool { return !alive(frozen.pid) })
	recheck(t, j, dir)
}

// TestSilentWorkerFoundByKeepalive: the worker running a task stops
// answering while its node lives on and its TCP connection stays open
// (SIGSTOP of the worker alone: the GCS has no reason to declare anything
// dead). The driver's keepalive ping goes unanswered, the connection is
// closed and the task retried on another worker (before, the driver
// waited for ever). The driver's keepalive timeout is 2 s
// ($GORAY_GRPC_KEEPALIVE_TIMEOUT), its ping time the default (10 s).
func TestSilentWorkerFoundByKeepalive(t *testing.T) {
	t.Parallel()
	buildFreezeJob(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := startHead(t, ctx, "--num-cpus", "1", "--node-name", "head")
	node := joinNode(t, ctx, h, "127.0.37.4", "", "--resources", "slot=2")
	dir := shortTempDir(t)
	j := startJob(t, jobOptions{addr: h.addr, env: []string{"GORAY_GRPC_KEEPALIVE_TIMEOUT=2s"}}, freezejobBin, dir, node.id, "1")
	_, pids := startedOn(t, j, dir, 1)
	stopProcs(t, pids[0])

	got, attempts := results(t, j, 1)
	if got[0] != node.id || attempts[0] == "0" {
		t.Fatalf("the task was answered by node %s attempt %s; want a retry on node %s:\n%s", got[0], attempts[0], node.id, j.out.String())
	}
	// The lease of the silent worker was returned as broken: its raylet
	// ends it (SIGKILL reaches a stopped process).
	waitFor(t, freezeWait, "the silent worker to be ended by its raylet", func() bool { return !alive(pids[0]) })
	if err := os.WriteFile(filepath.Join(dir, "resumed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	recheck(t, j, dir)
	s, r := h.status(ctx)
	if r.code != 0 {
		t.Fatalf("goray status: %s", r)
	}
	for _, n := range s.Nodes {
		if n.NodeID == node.id && n.State != "ALIVE" {
			t.Fatalf("node %s is %s; a silent worker must not make its node dead", node.id, n.State)
		}
	}
}

// cutProxy forwards TCP connections to a target until stall: from then
// on it forwards nothing and closes nothing, like a network that went
// silent under open connections.
type cutProxy struct {
	lis     net.Listener
	target  string
	stalled chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
}

func startCutProxy(t *testing.T, ip, target string) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis, target: target, stalled: make(chan struct{}), done: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		select {
		case <-p.stalled:
			// Cut off: a new connection is held, unanswered.
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			continue
		default:
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c)
		go p.pipe(c, s)
	}
}

// pipe copies src to dst until stalled; then it holds what it read until
// the proxy closes.
func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-p.stalled:
				<-p.done
				return
			default:
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *cutProxy) stall() { close(p.stalled) }

func (p *cutProxy) close() {
	_ = p.lis.Close()
	close(p.done)
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestCutOffNodeTasksRetried: a node reaches the GCS through a proxy that
// then stops forwarding without closing anything (a partition between the
// node and the head's GCS), while the driver's connections to the node's
// workers stay open and those workers run on. The GCS declares the node
// dead; the driver then retries its two tasks on the other node at once
// (before, it waited for the cut-off node's workers, for ever: the node
// goes on without the GCS, its reconnect_timeout long). When the cut-off
// node's first attempts answer later, nothing changes.
func TestCutOffNodeTasksRetried(t *testing.T) {
	t.Parallel()
	buildFreezeJob(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := writeConfig(t, shortTempDir(t), fastHealth)
	h := startHead(t, ctx, "--config", cfg, "--num-cpus", "1", "--node-name", "head")
	p := startCutProxy(t, "127.0.37.5", h.addr)
	// The cut-off node goes on without the GCS for longer than the test
	// (by default it stops after 60 s, which would end its workers'
	// connections too).
	cutCfg := writeConfig(t, shortTempDir(t), fastHealth+"gcs {\n  reconnect_timeout = \"1h\"\n}\n")
	cut := joinNode(t, ctx, &head{t: t, addr: p.lis.Addr().String()}, "127.0.37.5", "", "--config", cutCfg, "--resources", "slot=2")
	live := joinNode(t, ctx, h, "127.0.37.6", "", "--config", cfg, "--resources", "slot=2")
	dir := shortTempDir(t)
	const n = 2
	j := startJob(t, jobOptions{addr: h.addr}, freezejobBin, dir, cut.id, fmt.Sprint(n))
	nodes, pids := startedOn(t, j, dir, n)
	for i, node := range nodes {
		if node != cut.id {
			t.Fatalf("task %d's first attempt ran on %s, want the node to cut off (%s)", i, node, cut.id)
		}
	}
	p.stall()
	waitNodeState(t, ctx, h, cut.id, "DEAD", freezeWait)

	got, attempts := results(t, j, n)
	for i := range n {
		if got[i] != live.id || attempts[i] == "0" {
			t.Fatalf("task %d answered by node %s attempt %s; want a retry on node %s:\n%s", i, got[i], attempts[i], live.id, j.out.String())
		}
	}
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("the cut-off node's worker %d ended before the driver had its results: the tasks were retried because the worker's connection ended, not because its node was declared dead", pid)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "resumed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitLate(t, j, dir, n)
	recheck(t, j, dir)
}
