package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The autoscaler end to end: `goray up` on the local provider, whose
// instances are real goray nodes on loopback addresses, real jobs that
// make demand, `goray status` and `goray down`.

// autoscaleTimeout bounds each autoscaler test: nodes start, work, go idle
// and are terminated.
const autoscaleTimeout = 3 * time.Minute

// asCluster is a cluster started with `goray up`.
type asCluster struct {
	*head
	file     string // the cluster file
	stateDir string // the local provider's state_dir
	env      []string
}

// asStatusJSON is the autoscaler part of `goray status --json`.
type asStatusJSON struct {
	Autoscaler *struct {
		At      time.Time      `json:"at"`
		Active  map[string]int `json:"active"`
		Pending []struct {
			ID       string `json:"id"`
			NodeType string `json:"node_type"`
		} `json:"pending"`
		Failures []struct {
			Message string `json:"message"`
		} `json:"failures"`
		Demands []struct {
			Resources  map[string]float64 `json:"resources"`
			Count      int                `json:"count"`
			Infeasible bool               `json:"infeasible"`
			Request    bool               `json:"request"`
		} `json:"demands"`
		Launched map[string]int `json:"launched"`
	} `json:"autoscaler"`
}

// upCluster writes a cluster file with the node types given (HCL) and
// starts it with `goray up`; it is torn down with `goray down` when the
// test ends. ips is the local provider's ip_range.
func upCluster(t *testing.T, ctx context.Context, name, ips string, maxWorkers int, idle string, nodeTypes string) *asCluster {
	t.Helper()
	dir := shortTempDir(t)
	c := &asCluster{head: &head{t: t, tempDir: filepath.Join(dir, "h"), port: freePort(t)}, stateDir: filepath.Join(dir, "s")}
	c.addr = "127.0.0.1:" + strconv.Itoa(c.port)
	c.file = filepath.Join(dir, "cluster.hcl")
	src := fmt.Sprintf(`
cluster_name   = %q
head_node_type = "head"
max_workers    = %d
idle_timeout   = %q
temp_dir       = %q
plugin_dir     = %q

provider "local" {
  config {
    state_dir    = %q
    ip_range     = %q
    stop_timeout = "5s"
  }
}

node_type "head" {
  resources = { CPU = 1 }
}
%s
`, name, maxWorkers, idle, c.tempDir, pluginDir, c.stateDir, ips, nodeTypes)
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
		for _, p := range findProcs(func(p proc) bool { return p.mentions(dir) }) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	r := runGorayEnv(t, ctx, c.env, "up", "--port", strconv.Itoa(c.port), c.file)
	if r.code != 0 {
		t.Fatalf("goray up: %s", r)
	}
	wantLines(t, r.stdout, "Started goray head node", fmt.Sprintf("Cluster %q: provider \"local\"", name), "goray down "+c.file)
	for _, l := range strings.Split(r.stdout, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "session dir:"); ok {
			c.session = strings.TrimSpace(s)
		}
	}
	return c
}

// autoscaler returns the autoscaler section of `goray status --json`
// (nil until the autoscaler published one).
func (c *asCluster) autoscaler(ctx context.Context) (asStatusJSON, statusJSON) {
	c.t.Helper()
	r := runGoray(c.t, ctx, "status", "--json", "--address", c.addr)
	var a asStatusJSON
	var s statusJSON
	if r.code != 0 {
		return a, s
	}
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil {
		c.t.Fatalf("goray status --json: %v\n%s", err, r)
	}
	_ = json.Unmarshal([]byte(r.stdout), &s)
	return a, s
}

// instances returns the pids of the live instance nodes: `goray start`
// processes under the provider's state_dir.
func (c *asCluster) instances() []int {
	var pids []int
	for _, p := range c.instanceProcs() {
		pids = append(pids, p.pid)
	}
	return pids
}

// instanceProcs returns the instance nodes' processes: `goray start`
// under the provider's state dir, children caught starting left out.
func (c *asCluster) instanceProcs() []proc {
	return outermost(findProcs(func(p proc) bool {
		return len(p.cmdline) > 1 && p.cmdline[1] == "start" && p.mentions(c.stateDir)
	}))
}

// waitInstances waits until exactly n instance nodes run and the GCS
// lists n+1 alive nodes (the head and them).
func (c *asCluster) waitInstances(ctx context.Context, n int, d time.Duration, why string) {
	c.t.Helper()
	waitFor(c.t, d, fmt.Sprintf("%d instance nodes (%s)", n, why), func() bool {
		if len(c.instances()) != n {
			return false
		}
		_, s := c.autoscaler(ctx)
		return s.AliveNodes == n+1
	})
}

// peak samples the number of instance nodes until stop is called, and
// returns the highest seen with the processes seen then.
func (c *asCluster) peak() (stop func() (int, []proc)) {
	var mu sync.Mutex
	high := 0
	var at []proc
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			ps := c.instanceProcs()
			mu.Lock()
			if len(ps) > high {
				high, at = len(ps), ps
			}
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() (int, []proc) {
		close(done)
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return high, at
	}
}

// waitRoundAfter waits for a status the autoscaler published after t
// (its rounds are 300 ms apart) and returns it.
func (c *asCluster) waitRoundAfter(ctx context.Context, t time.Time) asStatusJSON {
	c.t.Helper()
	var a asStatusJSON
	waitFor(c.t, 30*time.Second, "an autoscaler round after "+t.Format(time.StampMilli), func() bool {
		a, _ = c.autoscaler(ctx)
		return a.Autoscaler != nil && a.Autoscaler.At.After(t)
	})
	return a
}

func (c *asCluster) headLog() string {
	b, _ := os.ReadFile(filepath.Join(c.session, "logs", "node.log"))
	return string(b)
}

func asCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), autoscaleTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestAutoscaleBurst: a burst of one-CPU tasks on a cluster with no
// workers launches worker nodes, never more than max_workers; the tasks
// run on them; idle, the workers are terminated down to zero, and their
// processes are gone.
func TestAutoscaleBurst(t *testing.T) {
	ctx := asCtx(t)
	c := upCluster(t, ctx, "burst", "127.0.1.1-127.0.1.20", 2, "3s", `
node_type "cpu" {
  resources   = { CPU = 2 }
  max_workers = 5 # the cluster's max_workers (2) caps it
}
`)
	shm := watchShm(t)
	stop := c.peak()
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
	c.waitInstances(ctx, 0, 90*time.Second, "idle workers terminated")
	if high, at := stop(); high != 2 {
		t.Fatalf("at most %d instance nodes ran at once; want max_workers = 2 (the burst wants more); then: %v", high, at)
	}
	if log := c.headLog(); !strings.Contains(log, `reason="idle for 3s and drained"`) {
		t.Fatalf("the head's log does not say the workers were idle:\n%s", log)
	}
	r := runGorayEnv(t, ctx, c.env, "down", c.file)
	if r.code != 0 {
		t.Fatalf("goray down: %s", r)
	}
	wantLines(t, r.stdout, `Stopped the head of cluster "burst"`, `Cluster "burst" has no instances.`)
	waitNoProcs(t, 10*time.Second, "processes of the cluster", func(p proc) bool { return p.mentions(filepath.Dir(c.file)) })
	checkNoNewShm(t, shm)
	checkNoSockets(t, filepath.Dir(c.file))
}

// checkNoSockets fails when a unix socket is left under dir.
func checkNoSockets(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Type()&os.ModeSocket != 0 {
			t.Errorf("socket left behind: %s", path)
		}
		return nil
	})
}

// TestAutoscaleDemands: min_workers are kept without demand; a shape no
// node type can hold is reported infeasible and launches nothing; actors
// that do not fit launch nodes; an explicit request launches nodes with no
// work and, cleared, lets them go back to the minimum; a pending
// STRICT_SPREAD placement group gets a node per bundle.
func TestAutoscaleDemands(t *testing.T) {
	ctx := asCtx(t)
	c := upCluster(t, ctx, "demands", "127.0.1.21-127.0.1.40", 3, "3s", `
node_type "cpu" {
  resources   = { CPU = 2 }
  min_workers = 1
  max_workers = 3
}
`)
	c.waitInstances(ctx, 1, 60*time.Second, "min_workers")

	// Infeasible: 64 CPUs.
	dir := shortTempDir(t)
	inf := startJob(t, jobOptions{addr: c.addr, env: []string{"TESTJOB_TIMEOUT=150s"}}, testjobBin, "as-infeasible", dir)
	waitFile(t, inf, 30*time.Second, filepath.Join(dir, "submitted"))
	waitFor(t, 30*time.Second, "the 64-CPU demand reported infeasible", func() bool {
		a, _ := c.autoscaler(ctx)
		if a.Autoscaler == nil {
			return false
		}
		for _, d := range a.Autoscaler.Demands {
			if d.Resources["CPU"] == 64 && d.Infeasible {
				return true
			}
		}
		return false
	})
	a, _ := c.autoscaler(ctx)
	if len(a.Autoscaler.Pending) != 0 || len(c.instances()) != 1 {
		t.Fatalf("an infeasible demand launched nodes: pending %+v, %d instances", a.Autoscaler.Pending, len(c.instances()))
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := inf.wait(ctx); code != 0 {
		t.Fatalf("infeasible job: exit %d\n%s", code, out)
	}

	// Pending actors: three of 2 CPUs; the min worker holds one.
	adir := shortTempDir(t)
	actors := startJob(t, jobOptions{addr: c.addr, env: []string{"TESTJOB_TIMEOUT=150s"}}, testjobBin, "as-actors", "3", adir)
	waitFile(t, actors, 90*time.Second, filepath.Join(adir, "alive.3"))
	if n := len(c.instances()); n != 3 {
		t.Fatalf("%d instance nodes for three 2-CPU actors, want 3", n)
	}
	if err := os.WriteFile(filepath.Join(adir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := actors.wait(ctx); code != 0 {
		t.Fatalf("actors job: exit %d\n%s", code, out)
	}
	c.waitInstances(ctx, 1, 60*time.Second, "back to min_workers after the actors")

	// An explicit request of 7 CPUs: the head (1) and the worker (2) hold
	// 3, so two more workers, with no work at all.
	if code, out := startJob(t, jobOptions{addr: c.addr}, testjobBin, "as-request", "7").wait(ctx); code != 0 {
		t.Fatalf("request job: exit %d\n%s", code, out)
	}
	c.waitInstances(ctx, 3, 60*time.Second, "an explicit request of 7 CPUs")
	a, _ = c.autoscaler(ctx)
	found := false
	for _, d := range a.Autoscaler.Demands {
		found = found || d.Request && d.Count == 7 && d.Resources["CPU"] == 1
	}
	if !found {
		t.Fatalf("status demands %+v: want the request of 7 × {CPU: 1}", a.Autoscaler.Demands)
	}
	// The request stands: the idle nodes stay past the idle timeout (3s).
	c.waitRoundAfter(ctx, time.Now().Add(5*time.Second))
	if n := len(c.instances()); n != 3 {
		t.Fatalf("%d instance nodes 5s after they joined idle, want 3: the request stands", n)
	}
	if code, out := startJob(t, jobOptions{addr: c.addr}, testjobBin, "as-request", "0").wait(ctx); code != 0 {
		t.Fatalf("clearing the request: exit %d\n%s", code, out)
	}
	c.waitInstances(ctx, 1, 60*time.Second, "back to min_workers after the request was cleared")

	// A pending STRICT_SPREAD group of three {CPU: 2} bundles: one node
	// per bundle, and the head has 1 CPU, so two more workers.
	pg := startJob(t, jobOptions{addr: c.addr, env: []string{"TESTJOB_TIMEOUT=150s"}}, testjobBin, "as-pg", "3")
	code, out := pg.wait(ctx)
	if code != 0 {
		t.Fatalf("placement group job: exit %d\n%s", code, out)
	}
	wantLines(t, out, "pg-nodes: 3", "PASS as-pg")
	c.waitInstances(ctx, 1, 60*time.Second, "back to min_workers after the group was removed")
}

// TestAutoscaleProviderCrashAndHeadRestart: the provider plugin is killed
// with SIGKILL while the minimum workers are being launched (their setup
// commands hold them until the test lets them go); the head restarts it,
// the restarted provider finds the instances in flight, and exactly
// min_workers instances come up: the provider's instance counter says
// none was launched twice. The head is then stopped
// and started again with `goray up`: the new autoscaler adopts the
// running instances and launches none. `goray down` leaves nothing.
func TestAutoscaleProviderCrashAndHeadRestart(t *testing.T) {
	ctx := asCtx(t)
	shm := watchShm(t)
	gate := filepath.Join(shortTempDir(t), "go")
	c := upCluster(t, ctx, "crash", "127.0.1.41-127.0.1.60", 2, "1m", `
setup_commands = ["while [ ! -e `+gate+` ]; do sleep 0.05; done"]

node_type "cpu" {
  resources   = { CPU = 2 }
  min_workers = 2
  max_workers = 2
}
`)
	providerProcs := func() []proc {
		return findProcs(func(p proc) bool {
			return len(p.cmdline) > 0 && filepath.Base(p.cmdline[0]) == "goray-provider-local" && p.hasEnv("GORAY_GCS_ADDRESS="+c.addr)
		})
	}
	state := filepath.Join(c.stateDir, "crash", "instances.json")
	type stateFile struct {
		Next      int `json:"next"`
		Instances []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"instances"`
	}
	readState := func() stateFile {
		var st stateFile
		b, err := os.ReadFile(state)
		if err == nil {
			_ = json.Unmarshal(b, &st)
		}
		return st
	}
	waitFor(t, 30*time.Second, "both instances launched and held in their setup", func() bool {
		st := readState()
		return len(st.Instances) == 2 && st.Instances[0].State == "pending" && st.Instances[1].State == "pending"
	})
	// One provider process (a child it is forking shows the provider's
	// command line and environment until it execs: wait that out).
	var ps []proc
	waitFor(t, 10*time.Second, "exactly one provider plugin process", func() bool {
		ps = providerProcs()
		return len(ps) == 1
	})
	if err := syscall.Kill(ps[0].pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the head to restart the provider", func() bool {
		return strings.Contains(c.headLog(), "plugin restarted: plugin=provider/local")
	})
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.waitInstances(ctx, 2, 60*time.Second, "min_workers after the provider crashed")
	if st := readState(); st.Next != 2 {
		t.Fatalf("the provider numbered %d instances for min_workers = 2: one was launched twice", st.Next)
	}
	waitFor(t, 30*time.Second, "a new provider process", func() bool {
		ps := providerProcs()
		return len(ps) == 1 && ps[0].pid != 0
	})
	first := c.instances()
	// Rounds later: still exactly two (nothing launched twice).
	a := c.waitRoundAfter(ctx, time.Now().Add(2*time.Second))
	if n := len(c.instances()); n != 2 {
		t.Fatalf("%d instance nodes 2s after min_workers came up, want 2", n)
	}
	if a.Autoscaler == nil || a.Autoscaler.Active["cpu"] != 2 || len(a.Autoscaler.Pending) != 0 {
		t.Fatalf("status after the provider crash: %+v", a.Autoscaler)
	}

	if n := strings.Count(c.headLog(), "launching instances"); n != 1 {
		t.Fatalf("the autoscaler launched %d times for min_workers; want once:\n%s", n, c.headLog())
	}

	// Restart the head: the workers keep running (the GCS comes back from
	// its data dir: goray up --resume, as goray stop ended the cluster)
	// and the new autoscaler adopts them.
	if r := runGoray(t, ctx, "stop", "--temp-dir", c.tempDir); r.code != 0 {
		t.Fatalf("goray stop (the head): %s", r)
	}
	if got := c.instances(); len(got) != 2 {
		t.Fatalf("stopping the head stopped instance nodes: %v left of %v", got, first)
	}
	r := runGorayEnv(t, ctx, c.env, "up", "--resume", "--port", strconv.Itoa(c.port), c.file)
	if r.code != 0 {
		t.Fatalf("goray up again: %s", r)
	}
	wantLines(t, r.stdout, "resumed cluster")
	for _, l := range strings.Split(r.stdout, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "session dir:"); ok {
			c.session = strings.TrimSpace(s)
		}
	}
	waitFor(t, 60*time.Second, "the restarted autoscaler to adopt both instances", func() bool {
		return strings.Count(c.headLog(), "adopted a running instance") == 2
	})
	c.waitInstances(ctx, 2, 60*time.Second, "the adopted workers rejoined")
	if got := c.instances(); fmt.Sprint(got) != fmt.Sprint(first) {
		t.Fatalf("instance nodes after the head restart %v, want the same %v", got, first)
	}
	if strings.Contains(c.headLog(), "launching instances") {
		t.Fatalf("the restarted autoscaler launched instances:\n%s", c.headLog())
	}

	r = runGorayEnv(t, ctx, c.env, "down", c.file)
	if r.code != 0 {
		t.Fatalf("goray down: %s", r)
	}
	wantLines(t, r.stdout, `Stopped the head of cluster "crash"`, `Terminating 2 instances of cluster "crash"`, `All instances of cluster "crash" are terminated.`)
	waitNoProcs(t, 10*time.Second, "processes of the cluster", func(p proc) bool { return p.mentions(filepath.Dir(c.file)) })
	checkNoNewShm(t, shm)
	checkNoSockets(t, filepath.Dir(c.file))
	// down again: nothing to do.
	r = runGorayEnv(t, ctx, c.env, "down", c.file)
	if r.code != 0 {
		t.Fatalf("goray down again: %s", r)
	}
	wantLines(t, r.stdout, `Cluster "crash" has no instances.`)
}

// TestAutoscaleObjectOnIdleNode: a task that needs more CPUs than the
// head has runs on a worker node the autoscaler launches for it, and its
// 4 MiB result stays there, the only copy, owned by the driver. Idle, the
// node is drained (the object goes to the shared spill storage, recorded
// in the GCS) and only then terminated; the driver then reads the object
// intact.
func TestAutoscaleObjectOnIdleNode(t *testing.T) {
	ctx := asCtx(t)
	dir := shortTempDir(t)
	worker := filepath.Join(dir, "worker.hcl")
	spill := filepath.Join(dir, "spill")
	if err := os.WriteFile(worker, []byte(fmt.Sprintf(`
plugin_dir = %q
plugin "storage" "fs" {
  config {
    directory = %q
  }
}
spilling {
  storage = "fs"
}
`, pluginDir, spill)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Every node, the head too, has the shared storage: the head's raylet
	// restores the object from the worker's spilled file.
	c := upCluster(t, ctx, "object", "127.0.1.61-127.0.1.80", 1, "2s", fmt.Sprintf(`
plugin "storage" "fs" {
  config {
    directory = %q
  }
}
spilling {
  storage = "fs"
}

node_type "cpu" {
  resources   = { CPU = 2 }
  max_workers = 1
  node_config {
    extra_args = ["--config", %q]
  }
}
`, spill, worker))
	j := startJob(t, jobOptions{addr: c.addr, env: []string{"TESTJOB_TIMEOUT=150s"}}, testjobBin, "as-object", dir)
	madeOn := waitFile(t, j, 90*time.Second, filepath.Join(dir, "made"))
	_, s := c.autoscaler(ctx)
	onWorker := false
	for _, n := range s.Nodes {
		onWorker = onWorker || n.NodeID == madeOn && !n.IsHead && n.State == "ALIVE"
	}
	if !onWorker {
		t.Fatalf("the object was made on %s, not on an alive worker node: %+v", madeOn, s.Nodes)
	}
	c.waitInstances(ctx, 0, 90*time.Second, "the idle worker drained and terminated")
	log := c.headLog()
	if !strings.Contains(log, "and drained") {
		t.Fatalf("the head's log does not say the worker was drained before it was terminated:\n%s", log)
	}
	files, _ := os.ReadDir(spill)
	if len(files) == 0 {
		t.Fatalf("nothing in the shared spill storage %s after the drain", spill)
	}
	if err := os.WriteFile(filepath.Join(dir, "read"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("object job: exit %d\n%s", code, out)
	}
	wantLines(t, out, "object: read back intact", "PASS as-object")
	if again, _ := os.ReadFile(filepath.Join(dir, "made")); string(again) != madeOn {
		t.Fatalf("the task ran again (on %s): the object was rebuilt, not kept", again)
	}
}
