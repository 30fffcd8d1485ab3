package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/logrotate"
	"github.com/goray-dev/goray/internal/spawn"
	"github.com/hashicorp/go-hclog"
)

// Timing of the GCS process's supervision.
const (
	// gcsStartTimeout bounds one start: opening the storage and listening.
	gcsStartTimeout = gcsOpenTimeout + 10*time.Second
	// gcsStopGrace is how long a stopping GCS may take to write out its
	// journal before it is killed.
	gcsStopGrace = 10 * time.Second
	// gcsStableAfter: a GCS that served this long before it died is
	// restarted at once; one that keeps dying sooner is restarted with a
	// growing delay (up to gcsRestartMax), not in a hot loop.
	gcsStableAfter = 30 * time.Second
	gcsRestartMin  = 200 * time.Millisecond
	gcsRestartMax  = 10 * time.Second
)

// gcsProcess runs the head's GCS as a child process and restarts it when it
// dies, on the same address and storage, until the node stops. The child
// dies with the node (Pdeathsig), so a node killed with -9 leaves no GCS
// behind holding the port and the bbolt lock.
//
// A GCS whose storage is memory is not restarted: a new one would be
// another cluster (new id, empty tables), which every node refuses. lost
// is called instead, once.
type gcsProcess struct {
	argv    []string
	spec    GCSSpec
	env     []string
	log     hclog.Logger
	started func(GCSReady) // after every restart
	lost    func(error)    // the GCS died and is not restarted

	ctx    context.Context // ends when the node stops the GCS
	cancel context.CancelFunc
	done   chan struct{} // closed when supervise returns

	// out is the GCS's log file (spec.LogFile, rotating): each process's
	// stdout and stderr are a pipe that a goroutine (copies) copies into
	// it, so that one writer, this one, writes the file.
	out    *logrotate.Writer
	copies sync.WaitGroup

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd exits
}

// startGCSProcess starts the GCS process and waits until it serves; the
// error is the child's own (a storage it cannot open, an address in use).
// From then on the process is supervised. extraEnv is added to the child's
// environment, and the Redis password of spec.Storage travels in
// config.EnvGCSRedisPassword (never on the command line or in the spec).
func startGCSProcess(ctx context.Context, argv []string, spec GCSSpec, creds *auth.Credentials, extraEnv []string, log hclog.Logger, started func(GCSReady), lost func(error)) (*gcsProcess, GCSReady, error) {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == EnvGCSSpec || name == config.EnvGCSRedisPassword || slices.Contains(auth.EnvNames, name)
	})
	env = append(append(env, creds.Env()...), extraEnv...)
	if pw := spec.Storage.RedisPassword; pw != "" {
		env = append(env, config.EnvGCSRedisPassword+"="+pw)
	}
	p := &gcsProcess{argv: argv, spec: spec, env: env, log: log, started: started, lost: lost, done: make(chan struct{})}
	p.out = logrotate.Open(spec.LogFile, spec.LogLimits)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	ready, err := p.launch(ctx)
	if err != nil {
		p.cancel()
		close(p.done)
		p.closeLog()
		return nil, ready, err
	}
	// A restarted GCS resumes the cluster, whatever the first start was
	// told: its GCS died, the cluster did not end (gcs/lifecycle.go).
	p.spec.Storage.Fresh, p.spec.Storage.Resume = false, true
	p.spec.Address = ready.Address
	go p.supervise()
	return p, ready, nil
}

// launch starts one GCS process and waits for its ready file.
func (p *gcsProcess) launch(ctx context.Context) (GCSReady, error) {
	if err := os.Remove(p.spec.ReadyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return GCSReady{}, fmt.Errorf("removing the GCS's old ready file: %w", err)
	}
	child := p.spec
	child.LogStderr = true // into the pipe that p.out's copy reads
	specJSON, err := json.Marshal(child)
	if err != nil {
		return GCSReady{}, err
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(slices.Clone(p.env), EnvGCSSpec+"="+string(specJSON))
	if _, err := p.out.Write(nil); err != nil {
		return GCSReady{}, fmt.Errorf("opening the GCS log %s: %w", p.spec.LogFile, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return GCSReady{}, fmt.Errorf("the GCS log's pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw // its log, and a panic, land in the GCS log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = spawn.Start(cmd)
	_ = pw.Close()
	if err != nil {
		_ = pr.Close()
		return GCSReady{}, fmt.Errorf("starting the GCS process %s: %w", p.argv[0], err)
	}
	p.copies.Go(func() { _ = logrotate.Copy(p.out, pr) })
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, gcsStartTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ready, ok := readGCSReady(p.spec.ReadyFile, cmd.Process.Pid)
		if ok && ready.Error == "" {
			return ready, nil
		}
		if ok { // it failed and says why
			<-exited
			return ready, ready.err(p.spec.Address)
		}
		select {
		case <-exited:
			if ready, ok := readGCSReady(p.spec.ReadyFile, cmd.Process.Pid); ok && ready.Error != "" {
				return ready, ready.err(p.spec.Address)
			}
			return GCSReady{}, fmt.Errorf("the GCS process (%s, storage %s) exited before serving (%s); see %s", p.spec.Address, p.spec.Storage, cmd.ProcessState, p.spec.LogFile)
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-exited
			return GCSReady{}, fmt.Errorf("the GCS process (%s, storage %s) did not start serving: %w; see %s", p.spec.Address, p.spec.Storage, ctx.Err(), p.spec.LogFile)
		case <-tick.C:
		}
	}
}

// err is the error a GCS process reported in its ready file.
func (r GCSReady) err(addr string) error {
	if r.PortInUse {
		return &PortInUseError{Address: addr, Err: errors.New(r.Error)}
	}
	return errors.New(r.Error)
}

// readGCSReady reads the ready file of the process pid; ok is false until
// it is complete (and for a file another process wrote).
func readGCSReady(path string, pid int) (GCSReady, bool) {
	var r GCSReady
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &r) != nil || r.Pid != pid {
		return r, false
	}
	return r, true
}

// supervise restarts the GCS process whenever it exits, until the node
// stops it: at once after a GCS that served for gcsStableAfter, with a
// growing delay while it keeps dying sooner or cannot start (its storage
// unreachable, say).
func (p *gcsProcess) supervise() {
	defer close(p.done)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = gcsRestartMin, gcsRestartMax
	up := time.Now()
	for {
		p.mu.Lock()
		cmd, exited := p.cmd, p.exited
		p.mu.Unlock()
		select {
		case <-exited:
		case <-p.ctx.Done():
			return
		}
		if p.ctx.Err() != nil {
			return
		}
		if p.spec.Storage.Backend == gcs.BackendMemory || p.spec.Storage.Backend == "" {
			err := fmt.Errorf("the GCS process (pid %d) exited (%s) and its storage is memory: the cluster's state is gone, and a new GCS would be another cluster that every node refuses; use gcs { storage = \"bolt\" } or \"redis\" for a head that survives its GCS", cmd.Process.Pid, cmd.ProcessState)
			p.log.Error("the GCS process died; not restarting it", "error", err)
			if p.lost != nil {
				p.lost(err)
			}
			return
		}
		if time.Since(up) >= gcsStableAfter {
			b.Reset()
		}
		wait := b.NextBackOff()
		p.log.Warn("the GCS process exited; restarting it on the same storage", "pid", cmd.Process.Pid, "status", cmd.ProcessState.String(), "in", wait)
		ready, err := p.relaunch(b, wait)
		if err != nil { // the node is stopping
			return
		}
		up = time.Now()
		p.log.Info("GCS restarted", "pid", ready.Pid, "cluster", ready.ClusterID, "restored", ready.Restored)
		if p.started != nil {
			p.started(ready)
		}
	}
}

// relaunch waits first, then starts the GCS until it serves, waiting b's
// next interval after each failed start; it fails only when the node
// stops the GCS.
func (p *gcsProcess) relaunch(b backoff.BackOff, wait time.Duration) (GCSReady, error) {
	for {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
			return GCSReady{}, p.ctx.Err()
		}
		ready, err := p.launch(p.ctx)
		if err == nil {
			return ready, nil
		}
		if p.ctx.Err() != nil {
			return GCSReady{}, p.ctx.Err()
		}
		wait = b.NextBackOff()
		p.log.Warn("the GCS did not restart; trying again", "error", err, "in", wait)
	}
}

// closeLog waits for the copies of the processes' output (each ends when
// its process exited) and closes the log file.
func (p *gcsProcess) closeLog() {
	p.copies.Wait()
	_ = p.out.Close()
}

// stop stops the GCS process: SIGTERM (and SIGCONT, for a stopped one),
// then SIGKILL when it has not exited after gcsStopGrace or by ctx's end.
func (p *gcsProcess) stop(ctx context.Context) {
	p.cancel()
	<-p.done
	defer p.closeLog()
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped (frozen) GCS handles it too
	t := time.NewTimer(gcsStopGrace)
	defer t.Stop()
	select {
	case <-exited:
		return
	case <-ctx.Done():
	case <-t.C:
	}
	_ = cmd.Process.Kill() // by pidfd: never another process reusing the pid
	<-exited
}
