// Package acceptance runs goray end to end: it builds the real goray CLI,
// the quickstart example and a test driver (internal/testjob), starts real
// nodes with the CLI, runs real jobs against them and checks their
// results, the cluster's state and that nothing is left behind.
package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/freeport"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// Binaries built once by TestMain.
var (
	gorayBin      string
	quickstartBin string
	testjobBin    string
	clusterBin    string
	// pluginDir holds the plugin binaries built for the tests.
	pluginDir string
	// tokenPath is the cluster token file of every node, job and command
	// the tests start (GORAY_AUTH_TOKEN_PATH), so that the tests never use
	// or create the user's ~/.goray/auth_token. The first head creates it.
	tokenPath string
)

// markerEnv is set, with a value unique to each run, in the environment of
// every job the tests start, and forwarded to its workers
// ($GORAY_FORWARD_ENV), so it finds a job's driver and workers in /proc.
const markerEnv = "ACCEPTANCE_RUN_ID"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gab")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := filepath.Abs("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	gorayBin = filepath.Join(dir, "goray")
	quickstartBin = filepath.Join(dir, "quickstart")
	testjobBin = filepath.Join(dir, "testjob")
	clusterBin = filepath.Join(dir, "cluster")
	pluginDir = filepath.Join(dir, "plugins")
	tokenPath = filepath.Join(dir, "auth", "auth_token")
	allreduceBin = filepath.Join(dir, "allreduce")
	weightSyncBin = filepath.Join(dir, "weight-sync")
	for _, b := range []struct{ out, pkg string }{
		{gorayBin, "./cmd/goray"},
		{quickstartBin, "./examples/quickstart"},
		{testjobBin, "./acceptance/internal/testjob"},
		{clusterBin, "./examples/cluster"},
		{filepath.Join(pluginDir, "goray-transport-shm"), "./plugins/shm"},
		{filepath.Join(pluginDir, "goray-transport-collective"), "./plugins/collective"},
		{filepath.Join(pluginDir, "goray-transport-onesided"), "./plugins/onesided"},
		{filepath.Join(pluginDir, "goray-provider-local"), "./plugins/local"},
		{filepath.Join(pluginDir, "goray-provider-aws"), "./plugins/aws"},
		{filepath.Join(pluginDir, "goray-provider-ssh"), "./plugins/ssh"},
		{filepath.Join(pluginDir, "goray-storage-fs"), "./plugins/fs"},
		{allreduceBin, "./examples/allreduce"},
		{weightSyncBin, "./examples/weight-sync"},
	} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", b.pkg, err, out)
			return 1
		}
	}
	return m.Run()
}

// testTimeout bounds every test.
const testTimeout = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// shortTempDir makes a temp dir with a short path (unix socket paths under
// it must stay below 108 bytes) and removes it when the test ends.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "ga")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	addTestDir(t, d)
	return d
}

// freePort is a loopback port free now, for a server a test starts.
func freePort(t *testing.T) int {
	t.Helper()
	// Outside the ephemeral range: a port found free there and closed is
	// soon taken by the sockets of the tests beside this one.
	port, err := freeport.Outside("")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// refusedPort is a loopback port where connections are refused until the
// test ends (freeport.Refused): a closed free port may be taken meanwhile
// by a server of a test running beside it.
func refusedPort(t *testing.T) int {
	t.Helper()
	port, closer, err := freeport.Refused("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closer() })
	return port
}

// baseEnv is this process's environment without GORAY_* variables, so a
// GORAY_ADDRESS of the caller cannot leak into the commands, plus the
// tests' own token file.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GORAY_") {
			env = append(env, kv)
		}
	}
	// A head's dashboard takes a free port unless a test names one: test
	// packages run at once, and a taken default port (8265) is an error.
	return append(env, "GORAY_AUTH_TOKEN_PATH="+tokenPath, "GORAY_DASHBOARD_PORT=-1")
}

// cliResult is what one goray invocation did.
type cliResult struct {
	code           int
	stdout, stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runGoray runs the goray CLI and waits for it.
func runGoray(t *testing.T, ctx context.Context, args ...string) cliResult {
	t.Helper()
	return runGorayEnv(t, ctx, nil, args...)
}

// runGorayEnv runs the goray CLI with env added to its environment.
func runGorayEnv(t *testing.T, ctx context.Context, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.CommandContext(ctx, gorayBin, args...)
	cmd.Env = append(append(baseEnv(), env...), testMarkerEnv+"="+testMarker(t))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running goray %q: %v", args, err)
	}
	return r
}

// head is a head node started with `goray start --head`.
type head struct {
	t       *testing.T
	tempDir string
	port    int
	addr    string
	session string
	pid     int
}

// startHead starts a head node under a fresh temp dir and stops it (and
// removes the dir) when the test ends.
func startHead(t *testing.T, ctx context.Context, extra ...string) *head {
	t.Helper()
	return startHeadEnv(t, ctx, nil, extra...)
}

// startHeadEnv is startHead with env added to `goray start`'s environment.
func startHeadEnv(t *testing.T, ctx context.Context, env []string, extra ...string) *head {
	t.Helper()
	h := &head{t: t, tempDir: shortTempDir(t), port: freePort(t)}
	h.addr = "127.0.0.1:" + strconv.Itoa(h.port)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir, "--force"); r.code != 0 {
			t.Logf("cleanup: goray stop: %s", r)
		}
	})
	// The dashboard on a free port, never 8265 (extra may name another).
	r := runGorayEnv(t, ctx, env, append([]string{"start", "--head", "--port", strconv.Itoa(h.port), "--temp-dir", h.tempDir, "--dashboard-port", "-1"}, extra...)...)
	if r.code != 0 {
		t.Fatalf("goray start --head: %s", r)
	}
	latest, err := filepath.EvalSymlinks(filepath.Join(h.tempDir, "session_latest"))
	if err != nil {
		t.Fatalf("session_latest after start: %v", err)
	}
	h.session = latest
	info := readNodeJSON(t, latest)
	h.pid = info.Pid
	if info.GCSAddress != h.addr {
		t.Fatalf("node.json gcs_address %q, want %q", info.GCSAddress, h.addr)
	}
	return h
}

// nodeJSON is the part of a session's node.json the tests read.
type nodeJSON struct {
	NodeID       string `json:"node_id"`
	GCSAddress   string `json:"gcs_address"`
	RayletSocket string `json:"raylet_socket"`
	SessionDir   string `json:"session_dir"`
	Pid          int    `json:"pid"`
}

func readNodeJSON(t *testing.T, session string) nodeJSON {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(session, "node.json"))
	if err != nil {
		t.Fatal(err)
	}
	var n nodeJSON
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatalf("node.json: %v\n%s", err, b)
	}
	return n
}

// statusJSON is the part of `goray status --json` the tests read.
type statusJSON struct {
	GCSAddress string `json:"gcs_address"`
	AliveNodes int    `json:"alive_nodes"`
	DeadNodes  int    `json:"dead_nodes"`
	Nodes      []struct {
		NodeID     string `json:"node_id"`
		State      string `json:"state"`
		IsHead     bool   `json:"is_head"`
		Pid        int    `json:"pid"`
		SessionDir string `json:"session_dir"`
		// ObjectStoreUsed is in bytes.
		ObjectStoreUsed int64 `json:"object_store_used"`
		Spill           *struct {
			StoredObjects int64 `json:"stored_objects"`
		} `json:"spill"`
	} `json:"nodes"`
}

// status runs `goray status --json` against the head's temp dir.
func (h *head) status(ctx context.Context) (statusJSON, cliResult) {
	h.t.Helper()
	r := runGoray(h.t, ctx, "status", "--json", "--temp-dir", h.tempDir)
	var s statusJSON
	if r.code == 0 {
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			h.t.Fatalf("goray status --json: %v\n%s", err, r)
		}
	}
	return s, r
}

// list runs `goray list KIND --json` against the head and decodes the
// array under key KIND.
func list[T any](h *head, ctx context.Context, kind string) []T {
	h.t.Helper()
	r := runGoray(h.t, ctx, "list", kind, "--json", "--address", h.addr)
	if r.code != 0 {
		h.t.Fatalf("goray list %s: %s", kind, r)
	}
	var m map[string][]T
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		h.t.Fatalf("goray list %s --json: %v\n%s", kind, err, r.stdout)
	}
	rows, ok := m[kind]
	if !ok {
		h.t.Fatalf("goray list %s --json has no %q key:\n%s", kind, kind, r.stdout)
	}
	return rows
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// job is a driver program running in the background.
type job struct {
	t      *testing.T
	cmd    *exec.Cmd
	marker string
	out    syncBuffer // stdout and stderr
	done   chan struct{}
	code   int
}

// jobOptions say how to run a job.
type jobOptions struct {
	// addr is the cluster address (GORAY_ADDRESS); empty runs an embedded
	// node.
	addr string
	// tmpDir is the job's TMPDIR (where an embedded node puts its session).
	tmpDir string
	// env is added to the job's environment.
	env []string
	// stdout, when set, also receives the job's stdout alone.
	stdout io.Writer
}

// startJob starts bin with args in the background. The job and whatever it
// leaves behind are killed when the test ends.
func startJob(t *testing.T, o jobOptions, bin string, args ...string) *job {
	t.Helper()
	j := &job{t: t, marker: fmt.Sprintf("%s-%d-%d", t.Name(), os.Getpid(), time.Now().UnixNano()), done: make(chan struct{})}
	j.cmd = exec.Command(bin, args...)
	j.cmd.Env = append(append(baseEnv(), o.env...), markerEnv+"="+j.marker, "GORAY_FORWARD_ENV="+markerEnv, testMarkerEnv+"="+testMarker(t))
	if o.addr != "" {
		j.cmd.Env = append(j.cmd.Env, "GORAY_ADDRESS="+o.addr)
	}
	if o.tmpDir != "" {
		j.cmd.Env = append(j.cmd.Env, "TMPDIR="+o.tmpDir)
	}
	j.cmd.Stdout, j.cmd.Stderr = &j.out, &j.out
	if o.stdout != nil {
		j.cmd.Stdout = io.MultiWriter(&j.out, o.stdout)
	}
	if err := j.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() {
		err := j.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			j.code = ee.ExitCode()
		case err != nil:
			j.code = -1
		}
		close(j.done)
	}()
	t.Cleanup(func() {
		select {
		case <-j.done:
		default:
			_ = j.cmd.Process.Kill()
			<-j.done
		}
		for _, p := range j.procs() {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	return j
}

// wait waits for the job to exit and returns its exit code and output.
func (j *job) wait(ctx context.Context) (int, string) {
	j.t.Helper()
	select {
	case <-j.done:
		return j.code, j.out.String()
	case <-ctx.Done():
		j.t.Fatalf("job %v did not exit: %v\noutput so far:\n%s", j.cmd.Args, ctx.Err(), j.out.String())
		return 0, ""
	}
}

// waitExit waits up to d for the job to exit.
func (j *job) waitExit(d time.Duration) (int, string) {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return j.wait(ctx)
}

// procs returns the live processes of the job: its driver and workers.
func (j *job) procs() []proc {
	return findProcs(func(p proc) bool { return p.hasEnv(markerEnv + "=" + j.marker) })
}

// proc is a live (non-zombie) process.
type proc struct {
	pid     int
	ppid    int
	cmdline []string
	env     []string
}

func (p proc) hasEnv(kv string) bool { return slices.Contains(p.env, kv) }

func (p proc) String() string {
	return fmt.Sprintf("pid %d (parent %d) %q", p.pid, p.ppid, strings.Join(p.cmdline, " "))
}

// mentions reports whether the directory dir, or a path under it, occurs
// in the process's command line or environment ("/tmp/ga1" does not match
// "/tmp/ga12").
func (p proc) mentions(dir string) bool {
	for _, x := range append(slices.Clone(p.cmdline), p.env...) {
		if strings.HasSuffix(x, dir) || strings.Contains(x, dir+"/") {
			return true
		}
	}
	return false
}

// findProcs returns the live processes other than this one that match.
func findProcs(match func(proc) bool) []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		p, ok := readProc(pid)
		if ok && match(p) {
			out = append(out, p)
		}
	}
	return out
}

// outermost drops the processes whose parent is among ps. A process that
// starts another (os/exec, a shell) has a child that, between its clone
// and its exec, shows the parent's command line: it is the same program
// starting something, not a second one.
func outermost(ps []proc) []proc {
	pids := map[int]bool{}
	for _, p := range ps {
		pids[p.pid] = true
	}
	return slices.DeleteFunc(ps, func(p proc) bool { return pids[p.ppid] })
}

// readProc reads a process; ok is false for gone and zombie processes.
func readProc(pid int) (proc, bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return proc{}, false
	}
	// The state follows the parenthesised command name.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return proc{}, false
	}
	p := proc{pid: pid}
	if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 1 {
		p.ppid, _ = strconv.Atoi(f[1])
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		p.cmdline = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
		p.env = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	}
	return p, true
}

// alive reports whether pid is a live, non-zombie process.
func alive(pid int) bool {
	_, ok := readProc(pid)
	return ok
}

// minWait is the shortest deadline of any wait here (see
// waitfor.Generous); the d a test passes says what it expects on a quiet
// machine.
const minWait = waitfor.Generous

// waitFor polls cond until it holds; it fails the test after d, or
// minWait if longer.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	waitfor.Cond(t, max(d, minWait), what, cond)
}

// waitNoProcs waits until no live process matches.
func waitNoProcs(t *testing.T, d time.Duration, what string, match func(proc) bool) {
	t.Helper()
	var left []proc
	d = max(d, minWait)
	deadline := time.Now().Add(d)
	for {
		left = findProcs(match)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %s still run: %v", d, what, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFile waits for path to exist and returns its content.
func waitFile(t *testing.T, j *job, d time.Duration, path string) string {
	t.Helper()
	var b []byte
	waitFor(t, d, path+" to be written by the job", func() bool {
		var err error
		b, err = os.ReadFile(path)
		if err == nil {
			return true
		}
		select {
		case <-j.done:
			t.Fatalf("job exited (code %d) before writing %s; output:\n%s", j.code, path, j.out.String())
		default:
		}
		return false
	})
	return string(b)
}

// otherTestsShmPrefix marks /dev/shm segments made by the transport
// packages' own unit tests (sdk/transport, plugins/...), which `go test ./...`
// may run at the same time as this package. They are checked there; here they
// are not ours.
const otherTestsShmPrefix = "goray-t-tt-"

// shmEntries lists /dev/shm, less other packages' test segments.
func shmEntries(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Fatalf("reading /dev/shm: %v", err)
	}
	var names []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), otherTestsShmPrefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// testMarkerEnv is set in the environment of every goray command and job
// a test starts, to testMarker(t); the nodes, GCS, plugins and embedded
// drivers those start inherit it, so a /dev/shm segment pool can be traced
// to the test whose process made it.
const testMarkerEnv = "ACCEPTANCE_TEST"

// testMarker is t's top-level test and this process: subtests share their
// test's marker.
func testMarker(t *testing.T) string {
	top, _, _ := strings.Cut(t.Name(), "/")
	return fmt.Sprintf("%d/%s", os.Getpid(), top)
}

// testDirs are the directories shortTempDir made, by testMarker.
var (
	testDirsMu sync.Mutex
	testDirs   = map[string][]string{}
)

func addTestDir(t *testing.T, dir string) {
	testDirsMu.Lock()
	defer testDirsMu.Unlock()
	testDirs[testMarker(t)] = append(testDirs[testMarker(t)], dir)
}

func testDirsOf(marker string) []string {
	testDirsMu.Lock()
	defer testDirsMu.Unlock()
	return slices.Clone(testDirs[marker])
}

// poolOwner returns the pid in a segment pool's name
// (shmem.PoolPrefix + "<pid>-<random>").
func poolOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, shmem.PoolPrefix)
	if !ok {
		return 0, false
	}
	pidStr, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	return pid, err == nil && pid > 0
}

// shmWatch is what a test's /dev/shm held before it started anything,
// and whose the segment pools made since are: a pool is named after the
// process that made it, and while that process lives its environment
// (testMarkerEnv) or command line (a directory of the test) says which
// test it belongs to. `go test ./...` runs other packages alongside, and
// this package's parallel tests run alongside each other; a node of
// theirs killed with SIGKILL leaves its pool until something cleans it
// up, which must not count as this test's leak.
type shmWatch struct {
	marker string
	before []string
	stop   chan struct{}
	done   chan struct{}

	mu    sync.Mutex
	pools map[string]bool // pools seen while their maker ran: whether it was this test's
}

// watchShm takes the snapshot a test takes before it starts anything, and
// watches the pools made until checkNoNewShm (or the test's end).
func watchShm(t *testing.T) *shmWatch {
	t.Helper()
	w := &shmWatch{
		marker: testMarker(t),
		before: shmEntries(t),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		pools:  map[string]bool{},
	}
	go w.run()
	t.Cleanup(w.close)
	return w
}

func (w *shmWatch) run() {
	defer close(w.done)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		w.classify()
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
	}
}

func (w *shmWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// classify looks at the pools not seen yet whose maker still runs.
func (w *shmWatch) classify() {
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		pid, ok := poolOwner(name)
		if !ok || slices.Contains(w.before, name) {
			continue
		}
		w.mu.Lock()
		_, done := w.pools[name]
		w.mu.Unlock()
		if done {
			continue
		}
		p, ok := readProc(pid)
		if !ok {
			continue // gone before it was seen: it stays a suspect
		}
		mine := p.hasEnv(testMarkerEnv + "=" + w.marker)
		for _, d := range testDirsOf(w.marker) {
			mine = mine || p.mentions(d)
		}
		w.mu.Lock()
		w.pools[name] = mine
		w.mu.Unlock()
	}
}

// checkNoNewShm fails when /dev/shm keeps entries that were not there when
// watchShm ran. Other packages' tests create and remove their own
// segments; an entry that goes away within a few seconds is theirs, one
// that stays is a leak. The segment pool of a live process is not a leak
// (a node keeps its pool as long as it runs), nor is one whose maker was
// seen running as another test's; a stopped or killed node's pool of this
// test is, and so is one whose maker was never seen.
func checkNoNewShm(t *testing.T, w *shmWatch) {
	t.Helper()
	if left := w.stays(t, 5*time.Second); len(left) > 0 {
		t.Errorf("new /dev/shm entries that stay: %v", left)
	}
}

// stays stops the watch and returns the entries that count as this test's
// and are still there after wait.
func (w *shmWatch) stays(t *testing.T, wait time.Duration) []string {
	t.Helper()
	w.classify()
	w.close()
	added := func() []string {
		var out []string
		for _, n := range shmEntries(t) {
			if slices.Contains(w.before, n) {
				continue
			}
			if pid, ok := poolOwner(n); ok {
				w.mu.Lock()
				mine, seen := w.pools[n]
				w.mu.Unlock()
				other := seen && !mine
				if other || alive(pid) {
					continue
				}
			}
			out = append(out, n)
		}
		return out
	}
	suspects := added()
	deadline := time.Now().Add(wait)
	for len(suspects) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		now := added()
		suspects = slices.DeleteFunc(suspects, func(n string) bool { return !slices.Contains(now, n) })
	}
	return suspects
}

// killWorker SIGKILLs pid after checking that it is a goray worker of the
// job (so a stale or wrong pid never kills anything else).
func killWorker(t *testing.T, j *job, pid int) {
	t.Helper()
	p, ok := readProc(pid)
	if !ok {
		t.Fatalf("worker pid %d is not running", pid)
	}
	if !p.hasEnv("GORAY_WORKER=1") || !p.hasEnv(markerEnv+"="+j.marker) {
		t.Fatalf("pid %d is not a goray worker of this job: %v", pid, p)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	waitFor(t, 10*time.Second, fmt.Sprintf("killed worker %d to exit", pid), func() bool { return !alive(pid) })
}

// readPid reads a pid file.
func readPid(t *testing.T, s string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || pid <= 0 {
		t.Fatalf("bad pid file content %q", s)
	}
	return pid
}

// envValue returns the value of name in env.
func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// wantLines fails when out lacks any of the substrings.
func wantLines(t *testing.T, out string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q; output:\n%s", s, out)
		}
	}
}

// TestOutermost: a child whose parent is in the set (a process caught
// between its clone and its exec, with its parent's command line) is
// dropped; a process whose parent is not, kept.
func TestOutermost(t *testing.T) {
	tests := []struct {
		name string
		in   []proc
		want []int
	}{
		{"none", nil, nil},
		{"two nodes", []proc{{pid: 10, ppid: 1}, {pid: 20, ppid: 1}}, []int{10, 20}},
		{"a node starting a worker", []proc{{pid: 10, ppid: 1}, {pid: 11, ppid: 10}, {pid: 20, ppid: 2}}, []int{10, 20}},
		{"the child alone, its parent gone", []proc{{pid: 11, ppid: 10}}, []int{11}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			for _, p := range outermost(tt.in) {
				got = append(got, p.pid)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("outermost = %v, want %v", got, tt.want)
			}
		})
	}
	// readProc reads the parent: this test's process is its child's.
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if p, ok := readProc(cmd.Process.Pid); !ok || p.ppid != os.Getpid() {
		t.Fatalf("readProc(%d) = %+v, %v; want ppid %d", cmd.Process.Pid, p, ok, os.Getpid())
	}
}
