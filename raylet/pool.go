package raylet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/recvseg"
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

// job is a registered driver and its workers.
type job struct {
	id         ids.ID
	info       *gorayv1.JobInfo
	driverID   ids.ID
	driverAddr *gorayv1.Address
	driverPID  int32
	ready      bool // registered with the GCS and answered
	finished   bool
	// remote marks the job of a driver on another node: it has no session
	// here and ends when the GCS says it finished.
	remote bool
	out    *outbox // to the driver's session stream

	workers       map[ids.ID]*worker
	idle          []*worker // oldest first
	starting      int
	startFailures int
	lastStartErr  error
}

func (j *job) removeIdle(w *worker) {
	if i := slices.Index(j.idle, w); i >= 0 {
		j.idle = slices.Delete(j.idle, i, i+1)
	}
}

// worker is one worker process. Fields other than the channels are guarded
// by Raylet.mu.
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

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// spawnLoop starts every worker process from one locked OS thread, so that
// Pdeathsig (delivered when the thread that forked the child exits) fires
// only when the raylet process dies. It returns after Shutdown has reaped
// every worker.
func (r *Raylet) spawnLoop() {
	runtime.LockOSThread()
	// Never unlocked: the thread exits with the goroutine, once no worker is
	// left.
	defer close(r.spawnDone)
	for {
		select {
		case req := <-r.spawnCh:
			req.done <- req.cmd.Start()
		case <-r.spawnStop:
			return
		}
	}
}

func (r *Raylet) spawn(cmd *exec.Cmd) error {
	req := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	select {
	case r.spawnCh <- req:
		return <-req.done
	case <-r.spawnDone:
		return ErrShuttingDown
	}
}

// startWorkerLocked records a new worker of j and starts its process in the
// background.
func (r *Raylet) startWorkerLocked(j *job) {
	w := &worker{
		id:     ids.New(),
		job:    j,
		state:  stateStarting,
		out:    newOutbox(),
		exited: make(chan struct{}),
	}
	j.workers[w.id] = w
	j.starting++
	r.workers[w.id] = w
	r.starting++
	timeout := r.pool.startTimeout
	w.startTimer = time.AfterFunc(timeout, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if w.state == stateStarting {
			r.killWorkerLocked(w, fmt.Sprintf("worker did not register within %s", timeout), true)
		}
	})
	r.wg.Add(1)
	go r.runWorker(w)
}

// runWorker starts w's process, waits for it to exit and cleans up.
func (r *Raylet) runWorker(w *worker) {
	defer r.wg.Done()
	defer close(w.exited)

	cmd, out, err := r.buildCmd(w)
	if err == nil {
		err = r.spawn(cmd)
		if err != nil {
			out.closeAll()
		}
	}
	if err != nil {
		r.workerDied(w, "", err)
		return
	}
	out.closeChildEnds()
	pid := cmd.Process.Pid
	r.mu.Lock()
	w.pid = pid
	killNow := w.killing
	r.mu.Unlock()
	if killNow {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	r.log.Debug("worker started", "worker_id", w.id, "job_id", w.job.id, "pid", pid)
	out.startCopiers(r, w.id, pid)

	waitErr := cmd.Wait()
	r.mu.Lock()
	w.reaped = true
	r.mu.Unlock()
	out.finish()

	status := "exit status 0"
	if waitErr != nil {
		status = waitErr.Error()
	}
	r.workerDied(w, "worker process exited: "+status, nil)
}

// workerOutput holds a worker's log files and, with Config.WorkerOutput,
// the pipes copied to both.
type workerOutput struct {
	files    []*os.File // log files
	child    []*os.File // pipe write ends given to the child
	readers  []*os.File // pipe read ends
	copiesWG sync.WaitGroup
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
}

func (o *workerOutput) startCopiers(r *Raylet, id ids.ID, pid int) {
	prefix := fmt.Sprintf("(worker %s pid=%d) ", id.Short(), pid)
	for i, rd := range o.readers {
		o.copiesWG.Add(1)
		go func(rd *os.File, file *os.File) {
			defer o.copiesWG.Done()
			br := bufio.NewReader(rd)
			for {
				line, err := br.ReadString('\n')
				if line != "" {
					_, _ = io.WriteString(file, line)
					if !strings.HasSuffix(line, "\n") {
						line += "\n"
					}
					r.outMu.Lock()
					_, _ = io.WriteString(r.cfg.WorkerOutput, prefix+line)
					r.outMu.Unlock()
				}
				if err != nil {
					return
				}
			}
		}(rd, o.files[i])
	}
}

// finish waits briefly for the output copiers (a grandchild may hold the
// pipes open), then closes everything.
func (o *workerOutput) finish() {
	done := make(chan struct{})
	go func() { o.copiesWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		for _, f := range o.readers {
			f.Close() // unblocks the copiers
		}
		<-done
	}
	o.closeAll()
}

// buildCmd prepares the worker's command line, environment and output.
func (r *Raylet) buildCmd(w *worker) (*exec.Cmd, *workerOutput, error) {
	info := w.job.info
	// Only a binary with the job's sha256, checked by this raylet (once per
	// sha256; afterwards a stat shows the file has not changed since).
	ctx, cancel := context.WithTimeout(context.Background(), r.pool.startTimeout)
	go func() {
		select {
		case <-r.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	bin, err := r.jobBinary(ctx, info)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin)
	cmd.Dir = info.GetWorkingDir()
	cmd.Env = r.workerEnv(w, info.GetEnv())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second

	out := &workerOutput{}
	for _, ext := range []string{"out", "err"} {
		p := filepath.Join(r.logDir, fmt.Sprintf("worker-%s.%s", w.id, ext))
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			out.closeAll()
			return nil, nil, fmt.Errorf("opening worker log: %w", err)
		}
		out.files = append(out.files, f)
	}
	if r.cfg.WorkerOutput == nil {
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
func (r *Raylet) workerEnv(w *worker, forwarded []string) []string {
	base := append(os.Environ(), forwarded...) // exec keeps the last of duplicates
	env := make([]string, 0, len(base)+len(workerEnvNames))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(workerEnvNames, name) && !slices.Contains(auth.EnvNames, name) {
			env = append(env, kv)
		}
	}
	env = append(env, r.cfg.Auth.Env()...)
	return append(env,
		EnvWorker+"=1",
		EnvRayletSocket+"="+r.cfg.SocketPath,
		EnvWorkerID+"="+w.id.String(),
		EnvNodeID+"="+r.cfg.NodeID.String(),
		EnvJobID+"="+w.job.id.String(),
		EnvSessionDir+"="+r.cfg.SessionDir,
		EnvLogLevel+"="+r.cfg.LogLevel,
		EnvNodeIP+"="+r.nodeIP(),
	)
}

// killWorkerLocked asks w to exit (EXIT command and SIGTERM to its process
// group) and sends SIGKILL if it is still alive after killGrace. reason
// becomes the worker's death reason; when empty, the exit status is
// reported instead. With startFailure, a kill of a starting worker counts
// as a failed start.
func (r *Raylet) killWorkerLocked(w *worker, reason string, startFailure bool) {
	if w.state == stateDead || w.killing {
		return
	}
	w.killing = true
	w.killReason = reason
	if reason == "" {
		reason = "worker session ended"
	}
	w.killedStarting = !startFailure && w.state == stateStarting
	w.job.removeIdle(w)
	w.out.push(&gorayv1.RayletCommand{Kind: gorayv1.RayletCommand_EXIT, Reason: reason})
	if w.pid > 0 && !w.reaped {
		_ = syscall.Kill(-w.pid, syscall.SIGTERM)
	}
	r.log.Debug("killing worker", "worker_id", w.id, "pid", w.pid, "reason", reason)
	if r.shuttingDown {
		return // Shutdown escalates itself
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(killGrace)
		defer t.Stop()
		select {
		case <-w.exited:
		case <-t.C:
			r.sigkill(w)
		}
	}()
}

// sigkill kills w's process group unless it has been reaped.
func (r *Raylet) sigkill(w *worker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.pid > 0 && !w.reaped {
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
	}
}

// workerDied cleans up after w: its lease's resources return to the pool,
// as do the leases it held; its store pins and unsealed objects are dropped
// and the objects it owned freed; the node's other sessions are told of
// its death (WORKER_DIED); its stale socket file is removed; and the GCS
// learns of the death of an actor it hosted. startErr is set when the
// process could not be started at all.
func (r *Raylet) workerDied(w *worker, reason string, startErr error) {
	r.mu.Lock()
	if w.state == stateDead {
		r.mu.Unlock()
		return
	}
	// Killed on purpose (ray.Kill, its job or lease holder gone): its actor
	// must not restart. (At shutdown Shutdown reports the node's actors
	// itself, as failed: a node leaving is a node failure to them.)
	permanent := w.killReason != ""
	if w.killReason != "" {
		reason = w.killReason
	} else if w.sessionReason != "" {
		reason += " (" + w.sessionReason + ")"
	}
	if startErr != nil {
		reason = startErr.Error()
	}
	w.startTimer.Stop()
	j := w.job
	wasStarting := w.state == stateStarting
	w.state = stateDead
	j.removeIdle(w)
	delete(j.workers, w.id)
	delete(r.workers, w.id)
	if wasStarting {
		r.starting--
		j.starting--
		if !j.finished && !r.shuttingDown && !w.killedStarting {
			j.startFailures++
			j.lastStartErr = errors.New(reason)
			if startErr != nil {
				j.startFailures = maxStartFailures
				j.lastStartErr = startErr
			}
			if j.startFailures >= maxStartFailures {
				r.failJobLocked(j, &WorkerStartError{Job: j.id, Err: fmt.Errorf("%w (see %s)", j.lastStartErr, filepath.Join(r.logDir, "worker-"+w.id.String()+".err"))})
			}
		}
	}
	if l := w.lease; l != nil {
		r.releaseLeaseLocked(l)
	}
	// Leases this worker held on other workers (it submitted tasks or
	// created actors) would otherwise keep their resources forever.
	var held []*lease
	for _, l := range r.leases {
		if l.holder == w.id {
			held = append(held, l)
		}
	}
	for _, l := range held {
		r.returnLeaseLocked(l, false)
	}
	aborts, frees := r.objectsOfDeadLocked(w.id)
	if w.addr != nil {
		r.broadcastDiedLocked(w.id)
		if !r.shuttingDown {
			defer r.notifyPeersDied(w.id)
		}
	}
	actor, pid := w.actorID, w.pid
	shuttingDown := r.shuttingDown
	if !shuttingDown {
		r.dispatchLocked()
	}
	r.mu.Unlock()

	r.cfg.Store.ReleaseClient(w.id)
	for _, o := range aborts {
		_ = r.cfg.Store.Abort(o)
	}
	if len(frees) > 0 {
		r.freeObjects(frees)
	}
	if w.addr != nil {
		removeStaleSocket(w.addr.GetUnixPath())
	}
	r.sweepReceived(w.id)
	if actor.IsNil() {
		r.log.Debug("worker exited", "worker_id", w.id, "job_id", j.id, "pid", pid, "reason", reason)
		return
	}
	r.log.Info("actor worker died", "worker_id", w.id, "actor_id", actor, "pid", pid, "reason", reason)
	// During Shutdown one node-wide report covers every actor.
	if r.cfg.GCS != nil && !shuttingDown {
		ctx, cancel := context.WithTimeout(context.Background(), gcsTimeout)
		defer cancel()
		if _, err := r.cfg.GCS.ReportWorkerFailure(ctx, &gorayv1.ReportWorkerFailureRequest{
			WorkerId: w.id.Bytes(), NodeId: r.cfg.NodeID.Bytes(), Reason: reason, Permanent: permanent,
		}); err != nil {
			r.log.Warn("reporting worker failure to the GCS", "worker_id", w.id, "error", err)
		}
	}
}

// reapIdleLocked kills idle workers beyond MaxIdle per job that have been
// idle for longer than IdleTimeout, oldest first. A worker that owns
// objects or holds leases (it created an actor or submitted tasks) is
// never reaped: its death would lose the objects or the actor.
func (r *Raylet) reapIdleLocked(now time.Time) {
	holders := map[ids.ID]bool{}
	for _, l := range r.leases {
		if !l.holder.IsNil() {
			holders[l.holder] = true
		}
	}
	for _, j := range r.jobs {
		excess := len(j.idle) - r.pool.maxIdle
		var victims []*worker
		for _, w := range j.idle { // oldest first
			if excess <= 0 || now.Sub(w.idleSince) < r.pool.idleTimeout {
				break
			}
			if w.ownsObjects || holders[w.id] {
				continue
			}
			victims = append(victims, w)
			excess--
		}
		for _, w := range victims {
			r.killWorkerLocked(w, "idle worker reaped", false)
		}
	}
}

// objectsOfDeadLocked forgets the objects of a dead driver or worker:
// it returns the unsealed objects it was creating (to abort) and the other
// objects it owned (to free).
func (r *Raylet) objectsOfDeadLocked(id ids.ID) (aborts, frees []ids.ObjectID) {
	for o, c := range r.creates {
		if c == id {
			aborts = append(aborts, o)
			delete(r.creates, o)
			r.forgetObjectLocked(o)
		}
	}
	for o := range r.owned[id] {
		frees = append(frees, o)
		r.forgetObjectLocked(o)
	}
	return aborts, frees
}

// trackOwnerLocked records that owner (a process of node ownerNode) owns o,
// until o is freed.
func (r *Raylet) trackOwnerLocked(o ids.ObjectID, owner, ownerNode ids.ID) {
	r.forgetObjectLocked(o)
	if owner.IsNil() {
		return
	}
	r.owners[o] = owner
	if !ownerNode.IsNil() && ownerNode != r.cfg.NodeID {
		r.ownerNodes[o] = ownerNode
	}
	objs := r.owned[owner]
	if objs == nil {
		objs = map[ids.ObjectID]struct{}{}
		r.owned[owner] = objs
	}
	objs[o] = struct{}{}
}

// forgetObjectLocked drops o's owner record.
func (r *Raylet) forgetObjectLocked(o ids.ObjectID) {
	owner, ok := r.owners[o]
	if !ok {
		return
	}
	delete(r.owners, o)
	delete(r.ownerNodes, o)
	delete(r.secondary, o)
	if objs := r.owned[owner]; objs != nil {
		delete(objs, o)
		if len(objs) == 0 {
			delete(r.owned, owner)
		}
	}
}

// sweepReceived unlinks the tensor segments receives allocated for a dead
// driver or worker that it never released (see package recvseg).
func (r *Raylet) sweepReceived(id ids.ID) {
	segs, err := recvseg.Sweep(recvseg.Dir(r.cfg.SessionDir, id))
	if err != nil {
		r.log.Warn("unlinking a dead process's tensor segments failed", "worker_id", id, "error", err)
	}
	if len(segs) > 0 {
		r.log.Debug("unlinked a dead process's tensor segments", "worker_id", id, "segments", len(segs))
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
