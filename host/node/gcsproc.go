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
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/spawn"
	"github.com/hashicorp/go-hclog"
)

// gcsStartTimeout bounds one start of the GCS process: opening its storage
// and listening.
const gcsStartTimeout = gcsOpenTimeout + 10*time.Second

// gcsProcess runs the head's GCS as a child process and restarts it when it
// dies, on the same address and storage, until the node stops. The child
// dies with the node (Pdeathsig), so a node killed with -9 leaves no GCS
// behind holding the port and the bbolt lock.
type gcsProcess struct {
	argv    []string
	spec    GCSSpec
	env     []string
	log     hclog.Logger
	started func(GCSReady) // after every (re)start

	ctx    context.Context // ends when the node stops the GCS
	cancel context.CancelFunc
	done   chan struct{} // closed when supervise returns

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd exits
	restarts int
}

// startGCSProcess starts the GCS process and waits until it serves; the
// error is the child's own (a storage it cannot open, an address in use).
// From then on the process is supervised.
func startGCSProcess(ctx context.Context, argv []string, spec GCSSpec, redisPassword string, creds *auth.Credentials, log hclog.Logger, started func(GCSReady)) (*gcsProcess, GCSReady, error) {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == EnvGCSSpec || name == config.EnvGCSRedisPassword || slices.Contains(auth.EnvNames, name)
	})
	env = append(env, creds.Env()...)
	if redisPassword != "" {
		env = append(env, config.EnvGCSRedisPassword+"="+redisPassword)
	}
	p := &gcsProcess{argv: argv, spec: spec, env: env, log: log, started: started, done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	ready, err := p.launch(ctx)
	if err != nil {
		p.cancel()
		close(p.done)
		return nil, ready, err
	}
	// A restarted GCS resumes the cluster: only the first start is fresh.
	p.spec.Storage.Fresh = false
	p.spec.Address = ready.Address
	go p.supervise()
	return p, ready, nil
}

// launch starts one GCS process and waits for its ready file.
func (p *gcsProcess) launch(ctx context.Context) (GCSReady, error) {
	_ = os.Remove(p.spec.ReadyFile)
	specJSON, err := json.Marshal(p.spec)
	if err != nil {
		return GCSReady{}, err
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(slices.Clone(p.env), EnvGCSSpec+"="+string(specJSON))
	out, err := os.OpenFile(p.spec.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return GCSReady{}, fmt.Errorf("opening the GCS log %s: %w", p.spec.LogFile, err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out // a panic lands in the GCS log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn.Start(cmd); err != nil {
		return GCSReady{}, fmt.Errorf("starting the GCS process %s: %w", p.argv[0], err)
	}
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
		ready, ok := readGCSReady(p.spec.ReadyFile)
		if ok && ready.Error == "" {
			return ready, nil
		}
		if ok { // it failed and says why
			<-exited
			if ready.PortInUse {
				return ready, &PortInUseError{Address: p.spec.Address, Err: errors.New(ready.Error)}
			}
			return ready, errors.New(ready.Error)
		}
		select {
		case <-exited:
			if ready, ok := readGCSReady(p.spec.ReadyFile); ok && ready.Error != "" {
				return ready, errors.New(ready.Error)
			}
			return GCSReady{}, fmt.Errorf("the GCS process exited before serving (%s); see %s", cmd.ProcessState, p.spec.LogFile)
		case <-ctx.Done():
			killGroup(cmd)
			<-exited
			return GCSReady{}, fmt.Errorf("the GCS process did not start serving: %w (see %s)", ctx.Err(), p.spec.LogFile)
		case <-tick.C:
		}
	}
}

// readGCSReady reads the ready file; ok is false until it is complete.
func readGCSReady(path string) (GCSReady, bool) {
	var r GCSReady
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &r) != nil || r.Pid == 0 {
		return r, false
	}
	return r, true
}

// supervise restarts the GCS process whenever it exits, with backoff, until
// the node stops it.
func (p *gcsProcess) supervise() {
	defer close(p.done)
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
		p.log.Warn("the GCS process exited; restarting it on the same storage", "pid", cmd.Process.Pid, "status", cmd.ProcessState.String())
		b := backoff.NewExponentialBackOff()
		b.InitialInterval, b.MaxInterval = 200*time.Millisecond, 5*time.Second
		ready, err := backoff.Retry(p.ctx, func() (GCSReady, error) {
			r, err := p.launch(p.ctx)
			if err != nil {
				p.log.Warn("the GCS did not restart; trying again", "error", err)
			}
			return r, err
		}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
		if err != nil { // the node is stopping
			return
		}
		p.mu.Lock()
		p.restarts++
		p.mu.Unlock()
		p.log.Info("GCS restarted", "pid", ready.Pid, "cluster", ready.ClusterID, "restored", ready.Restored)
		if p.started != nil {
			p.started(ready)
		}
	}
}

// Restarts is how often the GCS process was restarted.
func (p *gcsProcess) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// stop stops the GCS process: SIGTERM, then SIGKILL of its process group
// when it has not exited by ctx's end (or 10s).
func (p *gcsProcess) stop(ctx context.Context) {
	p.cancel()
	<-p.done
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped (frozen) GCS handles it too
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-exited:
		return
	case <-ctx.Done():
	case <-t.C:
	}
	killGroup(cmd)
	<-exited
}

// killGroup kills cmd's process group (the GCS and anything it started).
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
