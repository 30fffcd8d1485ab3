package raylet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/logrotate"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/workerenv"
)

// workerState is where a worker is in its life.
type workerState int

const (
	stateStarting workerState = iota
	stateIdle
	stateLeased
	stateActor
	stateDead
)

func (s workerState) String() string {
	switch s {
	case stateStarting:
		return "STARTING"
	case stateIdle:
		return "IDLE"
	case stateLeased:
		return "LEASED"
	case stateActor:
		return "ACTOR"
	default:
		return "DEAD"
	}
}

// worker is one worker process. id, job, out and exited never change;
// the other fields are guarded by workerPool.mu.
type worker struct {
	id         ids.ID
	job        *job
	state      workerState
	pid        int
	addr       *gorayv1.Address
	actorID    ids.ID
	lease      *lease
	idleSince  time.Time
	killing    bool
	killReason string
	// memoryKilled: the memory monitor killed it (memmonitor.go); its
	// actor may restart.
	memoryKilled bool
	// sessionReason says why the worker's session ended, when that (not
	// the raylet) ended it.
	sessionReason string
	// killedStarting is set when the raylet killed a starting worker for a
	// reason other than a failed start (job end, shutdown).
	killedStarting bool
	reaped         bool
	startTimer     *time.Timer
	// ownsObjects is the latest owns_objects the worker reported: it owns
	// objects and must not be reaped as idle.
	ownsObjects bool
	// spec is what it was started with beyond its job (the variables and
	// working dir of a task's or actor's lease): it serves only leases
	// asking for the same.
	spec workerSpec

	out    *outbox       // to the worker's session stream
	exited chan struct{} // closed once the process is reaped (or failed to start)
}

// registered reports whether w has completed its session registration and
// has not died.
func (w *worker) registered() bool {
	switch w.state {
	case stateIdle, stateLeased, stateActor:
		return true
	}
	return false
}

// workerSpec is what a worker is started with beyond its job's: the
// variables (LeaseRequest.env_vars joined by NUL; "" for none) and the
// working dir (working_dir_sha256, "" for the job's; dirNode is the node
// whose raylet has the archive) of the leases it serves.
type workerSpec struct {
	env     string
	dir     string
	dirNode ids.ID
}

// poolKey names the workers that can serve one another's leases: those of
// one job started with one set of variables and one working dir.
type poolKey struct {
	job      ids.ID
	env, dir string
}

func keyFor(j *job, s workerSpec) poolKey { return poolKey{j.id, s.env, s.dir} }

func keyOf(w *worker) poolKey { return keyFor(w.job, w.spec) }

// envList is the variables a worker key's env names.
func envList(env string) []string {
	if env == "" {
		return nil
	}
	return strings.Split(env, "\x00")
}

// poolJob is the pool's state of one job's workers with one set of
// variables.
type poolJob struct {
	workers       map[ids.ID]*worker
	idle          []*worker // oldest first
	starting      int
	startFailures int
	lastStartErr  error
}

func (pj *poolJob) removeIdle(w *worker) {
	if i := slices.Index(pj.idle, w); i >= 0 {
		pj.idle = slices.Delete(pj.idle, i, i+1)
	}
}

// poolSettings are the resolved worker pool settings.
type poolSettings struct {
	prestart     int
	maxIdle      int
	idleTimeout  time.Duration
	startTimeout time.Duration
	maxStarting  int
}

func resolvePool(p config.WorkerPool, total resources.Set) poolSettings {
	cpus := int(math.Floor(total.Get(resources.CPU)))
	s := poolSettings{
		prestart:     min(2, cpus),
		maxIdle:      cpus,
		idleTimeout:  p.IdleTimeout,
		startTimeout: p.StartTimeout,
		maxStarting:  max(2, cpus),
	}
	if p.Prestart != nil {
		s.prestart = max(0, *p.Prestart)
	}
	if p.MaxIdle != nil {
		s.maxIdle = max(0, *p.MaxIdle)
	}
	if s.idleTimeout <= 0 {
		s.idleTimeout = DefaultIdleTimeout
	}
	if s.startTimeout <= 0 {
		s.startTimeout = DefaultStartTimeout
	}
	return s
}

// binarySource is what the worker pool needs from the job table: the
// checked binary of a job, and the directory its workers start in.
type binarySource interface {
	binaryPath(ctx context.Context, info *gorayv1.JobInfo) (string, error)
	// workingDir is the directory unpacked from the job's shipped working
	// dir, or "" when it ships none.
	workingDir(ctx context.Context, info *gorayv1.JobInfo) (string, error)
	// leaseDir is the directory unpacked from a lease's working dir (sum,
	// on the raylet of node from).
	leaseDir(ctx context.Context, sum string, from ids.ID) (string, error)
}

// poolEvents receives the worker pool's events, delivered with the pool's
// lock released.
type poolEvents interface {
	// workerDied is called once per worker, after it was reaped (or could
	// not be started).
	workerDied(d workerDeath)
}

// workerDeath describes a worker that died.
type workerDeath struct {
	w *worker
	// lease is the lease it was running under, if any.
	lease *lease
	// registered: it had an address (other processes may know it).
	registered bool
	actorID    ids.ID
	pid        int
	reason     string
	// permanent: killed on purpose (its actor must not restart).
	permanent bool
	// jobFailed, when set, fails the job's waiting requests (its workers
	// keep failing to start).
	jobFailed error
	// closed: the pool was shutting down.
	closed bool
	// memoryKilled: the node's memory monitor killed it.
	memoryKilled bool
}

// outputReader reads a worker's stdout and stderr pipes (rd) into its log
// files and to its job's driver (logForwarder.attach).
type outputReader interface {
	attach(job, driverNode, worker ids.ID, pid int, rd [2]*os.File, files [2]io.WriteCloser) (*workerStreams, error)
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// workerPool starts worker processes for jobs, keeps the idle ones for
// reuse, reaps surplus idle workers and reports deaths.
//
// mu guards closed, workers, jobs (the per-job idle lists and start
// counters), starting and every worker's mutable fields. The pool never
// calls another component with mu held: deaths go to events after
// unlocking.
type workerPool struct {
	cfg      Config
	settings poolSettings
	log      hclog.Logger
	logDir   string
	closing  <-chan struct{}
	bins     binarySource
	events   poolEvents

	spawnCh   chan spawnRequest
	spawnStop chan struct{}
	spawnDone chan struct{}

	wg sync.WaitGroup // worker goroutines and kill timers
	// output reads workers' stdout and stderr (logForwarder; set once
	// before the first worker starts; nil: straight to the log files).
	output outputReader

	mu       sync.Mutex
	closed   bool
	workers  map[ids.ID]*worker
	jobs     map[poolKey]*poolJob
	starting int
}

func newWorkerPool(cfg Config, log hclog.Logger, closing <-chan struct{}, bins binarySource, events poolEvents) *workerPool {
	p := &workerPool{
		cfg: cfg, settings: resolvePool(cfg.Pool, cfg.Resources), log: log,
		logDir: filepath.Join(cfg.SessionDir, "logs"), closing: closing, bins: bins, events: events,
		spawnCh: make(chan spawnRequest), spawnStop: make(chan struct{}), spawnDone: make(chan struct{}),
		workers: map[ids.ID]*worker{}, jobs: map[poolKey]*poolJob{},
	}
	go p.spawnLoop()
	return p
}

// spawnLoop starts every worker process from one locked OS thread, so that
// Pdeathsig (delivered when the thread that forked the child exits) fires
// only when the raylet process dies. It returns after Shutdown has reaped
// every worker.
func (p *workerPool) spawnLoop() {
	runtime.LockOSThread()
	// Never unlocked: the thread exits with the goroutine, once no worker is
	// left.
	defer close(p.spawnDone)
	for {
		select {
		case req := <-p.spawnCh:
			req.done <- req.cmd.Start()
		case <-p.spawnStop:
			return
		}
	}
}

func (p *workerPool) spawn(cmd *exec.Cmd) error {
	req := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	select {
	case p.spawnCh <- req:
		return <-req.done
	case <-p.spawnDone:
		return ErrShuttingDown
	}
}

func (p *workerPool) jobLocked(j *job, spec workerSpec) *poolJob {
	k := keyFor(j, spec)
	pj := p.jobs[k]
	if pj == nil {
		pj = &poolJob{workers: map[ids.ID]*worker{}}
		p.jobs[k] = pj
	}
	return pj
}

// prestart starts the configured number of workers for a new job.
func (p *workerPool) prestart(j *job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	for range p.settings.prestart {
		p.startWorkerLocked(j, workerSpec{})
	}
}

// startWorkerLocked records a new worker of j started with spec and
// starts its process in the background.
func (p *workerPool) startWorkerLocked(j *job, spec workerSpec) {
	w := &worker{
		id:     ids.New(),
		job:    j,
		spec:   spec,
		state:  stateStarting,
		out:    newOutbox(),
		exited: make(chan struct{}),
	}
	pj := p.jobLocked(j, spec)
	pj.workers[w.id] = w
	pj.starting++
	p.workers[w.id] = w
	p.starting++
	timeout := p.settings.startTimeout
	w.startTimer = time.AfterFunc(timeout, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if w.state == stateStarting {
			p.killWorkerLocked(w, fmt.Sprintf("worker did not register within %s", timeout), true)
		}
	})
	p.wg.Add(1)
	go p.runWorker(w)
}

// usesDir tells whether a worker was started in the lease working dir
// with sha256 sum.
func (p *workerPool) usesDir(sum string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.jobs {
		if k.dir == sum {
			return true
		}
	}
	return false
}

// bindIdle implements workerBinder: it binds idle workers to the picked
// requests and starts the workers the waiting requests need.
func (p *workerPool) bindIdle(rd *dispatchRound) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rd.ended != nil {
		p.leaseEndedLocked(rd.ended, rd.disconnect)
	}
	for _, c := range rd.cands {
		pj := p.jobs[keyFor(c.job, c.spec)]
		if pj == nil || len(pj.idle) == 0 {
			rd.addNeed(c.job, c.spec)
			continue
		}
		w := pj.idle[len(pj.idle)-1] // most recently used
		pj.idle = pj.idle[:len(pj.idle)-1]
		l := c.cand
		l.worker, l.addr, l.pid = w, w.addr, w.pid
		w.lease = l
		w.state = stateLeased
		if !l.actorID.IsNil() {
			w.state = stateActor
			w.actorID = l.actorID
		}
	}
	if p.closed || p.starting >= p.settings.maxStarting {
		return
	}
	for _, n := range rd.need {
		j := n.job
		if j.finished.Load() {
			continue
		}
		pj := p.jobLocked(j, n.spec)
		if pj.startFailures >= maxStartFailures && pj.starting > 0 {
			continue
		}
		for deficit := n.n - len(pj.idle) - pj.starting; deficit > 0 && p.starting < p.settings.maxStarting; deficit-- {
			p.startWorkerLocked(j, n.spec)
		}
	}
}

// unbind implements workerBinder: workers bound to leases that were not
// granted become idle again.
func (p *workerPool) unbind(ls []*lease) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range ls {
		w := l.worker
		if w.lease != l {
			continue
		}
		w.lease = nil
		w.actorID = ids.Nil
		if w.state == stateDead || w.killing {
			continue
		}
		w.state = stateIdle
		pj := p.jobLocked(w.job, w.spec)
		pj.idle = append(pj.idle, w)
	}
}

// leaseEndedLocked makes the worker of an ended lease idle, or kills it
// when disconnect is set, it hosted an actor or its job has finished.
func (p *workerPool) leaseEndedLocked(l *lease, disconnect bool) {
	w := l.worker
	if w.lease == l {
		w.lease = nil
	}
	switch {
	case w.state == stateDead || w.killing:
	case disconnect:
		p.killWorkerLocked(w, "lease returned with disconnect_worker", false)
	case w.state == stateActor:
		p.killWorkerLocked(w, "actor lease returned", false)
	case w.job.finished.Load():
		p.killWorkerLocked(w, "job finished", false)
	default:
		w.state = stateIdle
		w.idleSince = time.Now()
		pj := p.jobLocked(w.job, w.spec)
		pj.idle = append(pj.idle, w)
	}
}

// leaseOf returns the lease worker id runs under (nil for none); alive is
// false when the pool has no such live worker.
func (p *workerPool) leaseOf(id ids.ID) (l *lease, alive bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.workers[id]
	if w == nil || w.state == stateDead {
		return nil, false
	}
	return w.lease, true
}

// register records the session registration of a starting worker: its
// address (node and worker ids filled in) and pid.
func (p *workerPool) register(id ids.ID, addr *gorayv1.Address, pid int) (*worker, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.workers[id]
	switch {
	case p.closed:
		return nil, ErrShuttingDown
	case w == nil:
		return nil, &registerError{unknown: true, msg: fmt.Sprintf("worker %s was not started by this raylet", id)}
	case w.state != stateStarting || w.killing:
		return nil, &registerError{msg: fmt.Sprintf("worker %s cannot register in state %s", id, w.state)}
	}
	w.addr = addr
	if w.pid == 0 {
		w.pid = pid
	}
	return w, nil
}

// registerError refuses a worker's registration: the worker is unknown,
// or not starting any more.
type registerError struct {
	unknown bool
	msg     string
}

func (e *registerError) Error() string { return e.msg }

// ready makes a registered worker idle once it got its REGISTERED reply;
// it reports false when the worker was killed meanwhile.
func (p *workerPool) ready(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.state != stateStarting || w.killing {
		return false
	}
	w.startTimer.Stop()
	w.state = stateIdle
	w.idleSince = time.Now()
	p.starting--
	pj := p.jobLocked(w.job, w.spec)
	pj.starting--
	pj.startFailures = 0
	pj.idle = append(pj.idle, w)
	p.log.Debug("worker registered", "worker_id", w.id, "job_id", w.job.id, "pid", w.pid, "address", w.addr.GetUnixPath())
	return true
}

// setOwnsObjects records the worker's latest owns_objects report.
func (p *workerPool) setOwnsObjects(w *worker, owns bool) {
	p.mu.Lock()
	w.ownsObjects = owns
	p.mu.Unlock()
}

// kill kills w (see killWorkerLocked); a non-empty sessionReason records
// why its session ended.
func (p *workerPool) kill(w *worker, reason, sessionReason string, startFailure bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sessionReason != "" && w.sessionReason == "" {
		w.sessionReason = sessionReason
	}
	p.killWorkerLocked(w, reason, startFailure)
}

// forceKill kills ws at once (SIGKILL to their process groups, no grace)
// with reason as their death reason: they held leases of placement group
// bundles that were cancelled. Their deaths are reported as usual.
func (p *workerPool) forceKill(ws []*worker, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range ws {
		p.killWorkerLocked(w, reason, false)
		if w.state != stateDead && w.pid > 0 && !w.reaped {
			_ = syscall.Kill(-w.pid, syscall.SIGKILL)
		}
	}
}

// endJob kills the workers of a finished job, but those hosting a
// detached actor: it outlives its job.
func (p *workerPool) endJob(j *job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, pj := range p.jobs {
		if k.job != j.id {
			continue
		}
		for _, w := range pj.workers {
			if w.lease != nil && w.lease.detached && w.state == stateActor {
				continue // a detached actor outlives its job
			}
			p.killWorkerLocked(w, "job finished", false)
		}
		if len(pj.workers) == 0 {
			delete(p.jobs, k)
		}
	}
}

// close kills every worker without escalation (the caller waits and
// escalates) and returns them; hadActors says whether one hosted an actor.
func (p *workerPool) close() (ws []*worker, hadActors bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	ws = make([]*worker, 0, len(p.workers))
	for _, w := range p.workers {
		ws = append(ws, w)
		hadActors = hadActors || !w.actorID.IsNil()
		p.killWorkerLocked(w, "node shutting down", false)
	}
	return ws, hadActors
}

// stop waits for every worker goroutine and stops the spawner.
func (p *workerPool) stop() {
	p.wg.Wait()
	close(p.spawnStop)
	<-p.spawnDone
}

// push queues a command for every registered live worker but skip (make
// builds one message per stream).
func (p *workerPool) push(skip ids.ID, make func() *gorayv1.RayletCommand) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.workers {
		if w.id != skip && !w.killing && w.registered() {
			w.out.push(make())
		}
	}
}

// stats reports the workers, and the addresses of the registered ones.
func (p *workerPool) stats() (ws []*gorayv1.WorkerStats, clients []*gorayv1.Address) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.workers {
		s := &gorayv1.WorkerStats{
			WorkerId: w.id.Bytes(),
			Pid:      int32(w.pid),
			JobId:    w.job.id.Bytes(),
			State:    w.state.String(),
		}
		if !w.actorID.IsNil() {
			s.ActorId = w.actorID.Bytes()
		}
		if w.addr != nil {
			s.Address = proto.Clone(w.addr).(*gorayv1.Address)
			clients = append(clients, proto.Clone(w.addr).(*gorayv1.Address))
		}
		ws = append(ws, s)
	}
	return ws, clients
}

// runWorker starts w's process, waits for it to exit and cleans up.
func (p *workerPool) runWorker(w *worker) {
	defer p.wg.Done()
	defer close(w.exited)

	cmd, out, err := p.buildCmd(w)
	if err == nil {
		err = p.spawn(cmd)
		if err != nil {
			out.closeAll()
		}
	}
	if err != nil {
		p.workerDied(w, "", err)
		return
	}
	out.closeChildEnds()
	pid := cmd.Process.Pid
	p.mu.Lock()
	w.pid = pid
	killNow := w.killing
	p.mu.Unlock()
	if killNow {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	p.log.Debug("worker started", "worker_id", w.id, "job_id", w.job.id, "pid", pid)
	var streams *workerStreams
	if p.output != nil {
		driverNode, _ := ids.FromBytes(w.job.info.GetDriverNodeId())
		streams, err = p.output.attach(w.job.id, driverNode, w.id, pid, [2]*os.File(out.readers), [2]io.WriteCloser(out.files))
		if err != nil {
			p.log.Warn("worker output is not read", "worker_id", w.id, "error", err)
		}
		out.readers, out.files = nil, nil // attach owns them now
	}

	waitErr := cmd.Wait()
	p.mu.Lock()
	w.reaped = true
	p.mu.Unlock()
	if streams != nil {
		streams.finish()
	}
	out.closeAll()

	status := "exit status 0"
	if waitErr != nil {
		status = waitErr.Error()
	}
	p.workerDied(w, "worker process exited: "+status, nil)
}

// workerOutput holds a worker's log files and the pipes of its stdout
// and stderr until the pool's output reader takes them.
type workerOutput struct {
	files   []io.WriteCloser // log files (rotating: internal/logrotate)
	child   []*os.File       // pipe write ends given to the child
	readers []*os.File       // pipe read ends
}

func (o *workerOutput) closeChildEnds() {
	for _, f := range o.child {
		f.Close()
	}
	o.child = nil
}

func (o *workerOutput) closeAll() {
	o.closeChildEnds()
	for _, f := range o.readers {
		f.Close()
	}
	for _, f := range o.files {
		f.Close()
	}
	o.readers, o.files = nil, nil
}

// buildCmd prepares the worker's command line, environment and output.
func (p *workerPool) buildCmd(w *worker) (*exec.Cmd, *workerOutput, error) {
	info := w.job.info
	// Only a binary with the job's sha256, checked by this raylet (once per
	// sha256; afterwards a stat shows the file has not changed since).
	ctx, cancel := context.WithTimeout(context.Background(), p.settings.startTimeout)
	go func() {
		select {
		case <-p.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	bin, err := p.bins.binaryPath(ctx, info)
	var wd string
	switch {
	case err != nil:
	case w.spec.dir != "":
		wd, err = p.bins.leaseDir(ctx, w.spec.dir, w.spec.dirNode)
	default:
		wd, err = p.bins.workingDir(ctx, info)
	}
	cancel()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin)
	cmd.Dir = info.GetWorkingDir()
	if wd != "" {
		cmd.Dir = wd // the shipped working dir (ray.WorkingDir)
	}
	// The lease's variables (a task's or actor's) after the job's: they win.
	cmd.Env = p.workerEnv(w, append(slices.Clip(info.GetEnv()), envList(w.spec.env)...))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second

	out := &workerOutput{}
	for _, ext := range []string{"out", "err"} {
		path := filepath.Join(p.logDir, fmt.Sprintf("worker-%s.%s", w.id, ext))
		f := logrotate.Open(path, p.cfg.LogLimits)
		out.files = append(out.files, f)
		if _, err := f.Write(nil); err != nil { // the file exists from the start
			out.closeAll()
			return nil, nil, fmt.Errorf("opening worker log: %w", err)
		}
	}
	if p.output == nil {
		cmd.Stdout, cmd.Stderr = out.files[0], out.files[1]
		return cmd, out, nil
	}
	for range 2 {
		pr, pw, err := os.Pipe()
		if err != nil {
			out.closeAll()
			return nil, nil, fmt.Errorf("creating worker output pipe: %w", err)
		}
		out.readers = append(out.readers, pr)
		out.child = append(out.child, pw)
	}
	cmd.Stdout, cmd.Stderr = out.child[0], out.child[1]
	return cmd, out, nil
}

// workerEnv returns the node's environment (this raylet's) plus the
// variables the job forwards (JobInfo.env, which win), with the GORAY_*
// worker variables replaced. Nothing else of the driver's environment
// reaches its workers (ray.ForwardEnv).
func (p *workerPool) workerEnv(w *worker, forwarded []string) []string {
	base := append(os.Environ(), forwarded...) // exec keeps the last of duplicates
	env := make([]string, 0, len(base)+len(workerEnvNames))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(workerEnvNames, name) && !slices.Contains(auth.EnvNames, name) {
			env = append(env, kv)
		}
	}
	env = append(env, p.cfg.Auth.Env()...)
	if tp := p.cfg.TensorPool.Pool; tp != nil {
		env = append(env, EnvShmPool+"="+tp.Dir())
	}
	if w.spec.env != "" {
		names := make([]string, 0, strings.Count(w.spec.env, "\x00")+1)
		for _, kv := range envList(w.spec.env) {
			name, _, _ := strings.Cut(kv, "=")
			names = append(names, name)
		}
		env = append(env, workerenv.LeaseEnv+"="+strings.Join(names, ","))
	}
	if w.spec.dir != "" {
		env = append(env, workerenv.LeaseWorkingDir+"="+w.spec.dir+"@"+w.spec.dirNode.String())
	}
	return append(env,
		EnvWorker+"=1",
		EnvRayletSocket+"="+p.cfg.SocketPath,
		EnvWorkerID+"="+w.id.String(),
		EnvNodeID+"="+p.cfg.NodeID.String(),
		EnvJobID+"="+w.job.id.String(),
		EnvSessionDir+"="+p.cfg.SessionDir,
		EnvLogLevel+"="+p.cfg.LogLevel,
		workerenv.LogMaxFileSize+"="+strconv.FormatInt(p.cfg.LogLimits.MaxFileSize, 10),
		workerenv.LogMaxFiles+"="+strconv.Itoa(p.cfg.LogLimits.MaxFiles),
		EnvNodeIP+"="+nodeIP(p.cfg),
	)
}

// killWorkerLocked asks w to exit (EXIT command and SIGTERM to its process
// group) and sends SIGKILL if it is still alive after killGrace. reason
// becomes the worker's death reason; when empty, the exit status is
// reported instead. With startFailure, a kill of a starting worker counts
// as a failed start.
func (p *workerPool) killWorkerLocked(w *worker, reason string, startFailure bool) {
	if w.state == stateDead || w.killing {
		return
	}
	w.killing = true
	w.killReason = reason
	if reason == "" {
		reason = "worker session ended"
	}
	w.killedStarting = !startFailure && w.state == stateStarting
	if pj := p.jobs[keyOf(w)]; pj != nil {
		pj.removeIdle(w)
	}
	w.out.push(&gorayv1.RayletCommand{Kind: gorayv1.RayletCommand_EXIT, Reason: reason})
	if w.pid > 0 && !w.reaped {
		_ = syscall.Kill(-w.pid, syscall.SIGTERM)
	}
	p.log.Debug("killing worker", "worker_id", w.id, "pid", w.pid, "reason", reason)
	if p.closed {
		return // Shutdown escalates itself
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(killGrace)
		defer t.Stop()
		select {
		case <-w.exited:
		case <-t.C:
			p.sigkill(w)
		}
	}()
}

// sigkill kills w's process group unless it has been reaped.
func (p *workerPool) sigkill(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.pid > 0 && !w.reaped {
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
	}
}

// workerDied forgets w and reports its death (events.workerDied) with the
// lock released. startErr is set when the process could not be started at
// all.
func (p *workerPool) workerDied(w *worker, reason string, startErr error) {
	p.mu.Lock()
	if w.state == stateDead {
		p.mu.Unlock()
		return
	}
	// Killed on purpose (ray.Kill, its job or lease holder gone): its actor
	// must not restart. (At shutdown Shutdown reports the node's actors
	// itself, as failed: a node leaving is a node failure to them.)
	d := workerDeath{w: w, permanent: w.killReason != "" && !w.memoryKilled, closed: p.closed, memoryKilled: w.memoryKilled}
	if w.killReason != "" {
		reason = w.killReason
	} else if w.sessionReason != "" {
		reason += " (" + w.sessionReason + ")"
	}
	if startErr != nil {
		reason = startErr.Error()
	}
	d.reason = reason
	w.startTimer.Stop()
	j := w.job
	pj := p.jobLocked(j, w.spec)
	wasStarting := w.state == stateStarting
	w.state = stateDead
	pj.removeIdle(w)
	delete(pj.workers, w.id)
	delete(p.workers, w.id)
	if wasStarting {
		p.starting--
		pj.starting--
		if !j.finished.Load() && !p.closed && !w.killedStarting {
			pj.startFailures++
			pj.lastStartErr = errors.New(reason)
			if startErr != nil {
				pj.startFailures = maxStartFailures
				pj.lastStartErr = startErr
			}
			if pj.startFailures >= maxStartFailures {
				d.jobFailed = &WorkerStartError{Job: j.id, Err: fmt.Errorf("%w (see %s)", pj.lastStartErr, filepath.Join(p.logDir, "worker-"+w.id.String()+".err"))}
			}
		}
	}
	if j.finished.Load() && len(pj.workers) == 0 {
		delete(p.jobs, keyOf(w))
	}
	d.lease, w.lease = w.lease, nil
	d.registered = w.addr != nil
	d.actorID, d.pid = w.actorID, w.pid
	p.mu.Unlock()
	p.events.workerDied(d)
}

// reap kills idle workers beyond MaxIdle per job that have been idle for
// longer than IdleTimeout, oldest first. A worker that owns objects or
// holds leases (holders: it created an actor or submitted tasks) is never
// reaped: its death would lose the objects or the actor.
func (p *workerPool) reap(now time.Time, holders map[ids.ID]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pj := range p.jobs {
		excess := len(pj.idle) - p.settings.maxIdle
		var victims []*worker
		for _, w := range pj.idle { // oldest first
			if excess <= 0 || now.Sub(w.idleSince) < p.settings.idleTimeout {
				break
			}
			if w.ownsObjects || holders[w.id] {
				continue
			}
			victims = append(victims, w)
			excess--
		}
		for _, w := range victims {
			p.killWorkerLocked(w, "idle worker reaped", false)
		}
	}
}

// removeStaleSocket removes a dead worker's unix socket file, when path
// still names a socket.
func removeStaleSocket(path string) {
	if path == "" {
		return
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
}
