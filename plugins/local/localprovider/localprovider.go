// Package localprovider is goray's local provider: its instances are real
// goray nodes started as processes on this machine, each with a loopback
// address of its own (from ip_range) and a temp dir of its own under
// state_dir — how Ray tests autoscaling on one machine, and handy for
// development. Command goray-provider-local serves it as a plugin.
//
// A node is `goray start --address <head> --node-ip <ip> --temp-dir <dir>
// --block ...` (after the setup commands, through /bin/sh, when there are
// any), started detached in a session of its own with the cluster token in
// its environment (GORAY_AUTH_TOKEN), so that it outlives a restart of the
// provider. Each cluster's state — the request ids served, the instances
// with their pids, the errors not yet polled — is a file in state_dir
// written atomically under a lock, so a restarted provider (or `goray
// down` running next to the head's) finds the instances again and never
// launches a request twice.
package localprovider

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/semaphore"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/statedir"
)

// Name is the provider's name: the binary is goray-provider-local.
const Name = "local"

// DefaultIPRange is the default ip_range.
const DefaultIPRange = "127.0.1.1-127.0.1.254"

// Config is the provider's config block:
//
//	provider "local" {
//	  config {
//	    state_dir    = "/var/tmp/goray-local"   # required, absolute, at most 29 bytes
//	    goray_binary = "/usr/local/bin/goray"   # default: the head's goray, else next to the plugin, else PATH
//	    ip_range     = "127.0.1.1-127.0.1.254"  # the nodes' addresses
//	    stop_timeout = "10s"                    # SIGTERM to SIGKILL
//	  }
//	}
type Config struct {
	// StateDir holds the clusters' state files and the instances' temp
	// dirs.
	StateDir string `hcl:"state_dir" doc:"Directory of the provider's state and of its instances' temp dirs (absolute; at most 29 bytes, as the nodes' unix sockets live under it; default $TMPDIR/goray-local). Created if missing."`
	// GorayBinary is the goray the nodes run.
	GorayBinary string `hcl:"goray_binary" doc:"The goray binary the nodes run (default: the goray running the head, else goray next to the plugin binary, else on PATH). A launch's NodeSpec.GorayBinary overrides it."`
	// IPRange holds the nodes' addresses.
	IPRange string `hcl:"ip_range" default:"127.0.1.1-127.0.1.254" doc:"Loopback addresses the nodes get, one each: first-last (inclusive) or one address."`
	// StopTimeout is how long a node may take to stop before SIGKILL.
	StopTimeout time.Duration `hcl:"stop_timeout" default:"10s" doc:"How long a terminated node may take to stop after SIGTERM before it gets SIGKILL."`
}

// NodeConfig is a node type's node_config block.
type NodeConfig struct {
	// ExtraArgs are further `goray start` flags.
	ExtraArgs []string `hcl:"extra_args" doc:"Further flags for goray start, e.g. [\"--log-level\", \"debug\"]."`
}

// maxStateDir bounds the length of state_dir: an instance's unix sockets
// live at state_dir/_<n>/session_<date>_<pid>/sockets/worker-<16 hex>.sock,
// about 78 bytes more, and socket paths must stay within 107 bytes.
const maxStateDir = 107 - 78

// Provider is the local provider. Create it with New and configure it
// (Configure, or Open) before use. Methods may be called concurrently.
type Provider struct {
	// sem serialises the calls of this Provider (a one-slot semaphore, so
	// that waiting for it honours the caller's context); it guards the
	// fields below. The state_dir lock serialises them with other
	// providers on the same state_dir.
	sem *semaphore.Weighted
	log hclog.Logger
	cfg *settings

	// children are the nodes this Provider started, by instance dir.
	children map[string]*child
	// stopping are the instance dirs this Provider is stopping.
	stopping map[string]bool
	// stopFailed holds when stopping an instance dir last failed: it is
	// tried again after stopRetry.
	stopFailed map[string]time.Time
	// tokens are the clusters' tokens this Provider was given, to redact
	// from the nodes' output it quotes.
	tokens map[string]string
	// stops counts the stop goroutines.
	stops sync.WaitGroup
}

// settings is a validated Config.
type settings struct {
	stateDir    string
	goray       string // "" when none was found: launches without NodeSpec.GorayBinary fail
	ips         ipRange
	stopTimeout time.Duration
	state       *statedir.Dir
}

// child is a node process this Provider started; exited is closed once it
// has been reaped, after status is set.
type child struct {
	pid    int
	exited chan struct{}
	status string
}

// New returns an unconfigured Provider.
func New() *Provider {
	return &Provider{
		sem:        semaphore.NewWeighted(1),
		log:        hclog.NewNullLogger(),
		children:   map[string]*child{},
		stopping:   map[string]bool{},
		stopFailed: map[string]time.Time{},
		tokens:     map[string]string{},
	}
}

// Open returns a Provider configured with cfg, as Configure would.
func Open(ctx context.Context, cfg Config) (*Provider, error) {
	p := New()
	if err := p.Configure(ctx, cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// Name implements provider.Named.
func (p *Provider) Name() string { return Name }

// SetLogger implements plugin.LoggerSetter.
func (p *Provider) SetLogger(l hclog.Logger) {
	_ = p.sem.Acquire(context.Background(), 1)
	p.log = l
	p.sem.Release(1)
}

// ConfigSpec implements plugin.Configurable: the block is Config.
func (p *Provider) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(p.Configure) }

// Configure checks cfg, creates state_dir and finds the goray binary. It
// may be called again (the host does after every restart of the plugin).
func (p *Provider) Configure(ctx context.Context, cfg Config) error {
	s, err := newSettings(cfg)
	if err != nil {
		return err
	}
	if err := p.sem.Acquire(ctx, 1); err != nil {
		_ = s.state.Close()
		return err
	}
	old := p.cfg
	if old != nil && old.stateDir != s.stateDir {
		// Another state_dir: let the terminations in progress finish on
		// the old one first (they need the semaphore at their end).
		p.sem.Release(1)
		p.stops.Wait()
		if err := p.sem.Acquire(ctx, 1); err != nil {
			_ = s.state.Close()
			return err
		}
		old = p.cfg
	}
	defer p.sem.Release(1)
	if old != nil {
		if old.stateDir == s.stateDir {
			_ = s.state.Close()
			s.state = old.state // terminations in progress hold it
		} else {
			_ = old.state.Close()
		}
	}
	p.cfg = s
	p.log.Info("configured", "state_dir", s.stateDir, "goray", s.goray, "ip_range", cfg.IPRange)
	return nil
}

// DefaultStateDir is state_dir when the config leaves it out:
// $TMPDIR/goray-local.
func DefaultStateDir() string { return filepath.Join(os.TempDir(), "goray-local") }

func newSettings(cfg Config) (*settings, error) {
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir()
	}
	dir := filepath.Clean(cfg.StateDir)
	switch {
	case !filepath.IsAbs(dir):
		return nil, fmt.Errorf("state_dir %q is not an absolute path", cfg.StateDir)
	case len(dir) > maxStateDir:
		return nil, fmt.Errorf("state_dir %q is %d bytes long; the nodes' unix sockets live under it and their paths must stay within 107 bytes, so use a state_dir of at most %d bytes", dir, len(dir), maxStateDir)
	}
	if cfg.IPRange == "" {
		cfg.IPRange = DefaultIPRange
	}
	ips, err := parseIPRange(cfg.IPRange)
	if err != nil {
		return nil, err
	}
	if cfg.StopTimeout <= 0 {
		return nil, fmt.Errorf("stop_timeout %v is not positive", cfg.StopTimeout)
	}
	goray, err := findGoray(cfg.GorayBinary)
	if err != nil {
		return nil, err
	}
	state, err := statedir.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	return &settings{stateDir: dir, goray: goray, ips: ips, stopTimeout: cfg.StopTimeout, state: state}, nil
}

// findGoray returns the goray binary: configured (which must exist), else
// the goray running the node that started this plugin
// (plugin.EnvGorayBinary), else goray next to this executable, else on
// PATH, else "" (a launch must then name one).
func findGoray(configured string) (string, error) {
	if configured != "" {
		path, err := exec.LookPath(configured)
		if err != nil {
			return "", fmt.Errorf("goray_binary %q: %w", configured, err)
		}
		return filepath.Abs(path)
	}
	if env := os.Getenv(plugin.EnvGorayBinary); env != "" {
		if st, err := os.Stat(env); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return env, nil
		}
	}
	if exe, err := os.Executable(); err == nil {
		next := filepath.Join(filepath.Dir(exe), "goray")
		if st, err := os.Stat(next); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return next, nil
		}
	}
	if path, err := exec.LookPath("goray"); err == nil {
		return filepath.Abs(path)
	}
	return "", nil
}

// Health implements plugin.HealthChecker: the provider is configured and
// its state_dir is there.
func (p *Provider) Health(ctx context.Context) error {
	if err := p.sem.Acquire(ctx, 1); err != nil {
		return err
	}
	cfg := p.cfg
	p.sem.Release(1)
	if cfg == nil {
		return errors.New("the local provider is not configured yet")
	}
	if _, err := os.Stat(filepath.Join(cfg.stateDir, statedir.LockFile)); err != nil {
		return fmt.Errorf("state_dir: %w", err)
	}
	return nil
}

// Close waits for the terminations in progress and releases state_dir.
// The nodes keep running: another Provider on the same state_dir finds
// them.
func (p *Provider) Close() error {
	p.stops.Wait()
	_ = p.sem.Acquire(context.Background(), 1)
	defer p.sem.Release(1)
	if p.cfg != nil {
		err := p.cfg.state.Close()
		p.cfg = nil
		return err
	}
	return nil
}

// withState runs fn on the state of state_dir under its lock and saves
// what fn changed (also when fn fails).
func (p *Provider) withState(ctx context.Context, fn func(cfg *settings, st *state) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := p.sem.Acquire(ctx, 1); err != nil {
		return err
	}
	defer p.sem.Release(1)
	cfg := p.cfg
	if cfg == nil {
		return fmt.Errorf("%w: the local provider is not configured yet", provider.ErrUnavailable)
	}
	return statedir.Update(ctx, cfg.state, loadState, (*state).save, func(st *state) error { return fn(cfg, st) })
}

// NodeConfigSchema implements provider.Provider: the block is NodeConfig.
func (p *Provider) NodeConfigSchema(ctx context.Context, _ *provider.NodeConfigSchemaRequest) (*provider.NodeConfigSchemaResponse, error) {
	return provider.NodeConfigSchemaOf[NodeConfig](ctx)
}

// Launch implements provider.Provider: it records the request and its
// instances, then starts their nodes. A failure to start one is reported
// by PollErrors.
func (p *Provider) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := provider.CheckClusterName(req.ClusterName); err != nil {
		return nil, err
	}
	nc, err := provider.DecodeNodeConfig[NodeConfig](req.NodeConfig)
	if err != nil {
		return nil, err
	}
	err = p.withState(ctx, func(cfg *settings, st *state) error {
		c := st.cluster(req.ClusterName)
		p.tokens[req.ClusterName] = req.Node.AuthToken
		p.reconcile(cfg, c)
		if _, ok := c.Requests[req.RequestID]; ok {
			return nil // served already: launch nothing more
		}
		goray := req.Node.GorayBinary
		if goray == "" {
			goray = cfg.goray
		}
		if goray == "" {
			return fmt.Errorf("%w: no goray binary: none is next to the plugin or on PATH; set goray_binary in the provider's config", provider.ErrInvalidRequest)
		}
		if req.Node.HeadAddress == "" {
			return fmt.Errorf("%w: the node spec has no head address", provider.ErrInvalidRequest)
		}
		// Plan every instance first: a request is accepted whole or not
		// at all.
		usedIPs, usedDirs := st.usedIPs(), st.usedDirs()
		if host, _, err := net.SplitHostPort(req.Node.HeadAddress); err == nil {
			usedIPs[host] = true
		}
		now := time.Now()
		planned := make([]*instanceRecord, 0, req.Count)
		for i := range req.Count {
			ip, ok := cfg.ips.free(usedIPs)
			if !ok {
				return fmt.Errorf("%w: every address of ip_range (%d) is taken; %d more needed", provider.ErrQuotaExceeded, cfg.ips.size(), req.Count-i)
			}
			usedIPs[ip] = true
			dir, err := st.freeDir(usedDirs)
			if err != nil {
				return err
			}
			usedDirs[dir] = true
			id := fmt.Sprintf("local-%s-%d", req.ClusterName, c.Next+1+i)
			argv, err := nodeArgs(goray, req.Node, id, ip, dir, nc.ExtraArgs)
			if err != nil {
				return err
			}
			planned = append(planned, &instanceRecord{ID: id, NodeType: req.NodeType, RequestID: req.RequestID, State: provider.StatePending,
				IP: ip, Dir: dir, LaunchedAt: now, Argv: argv})
		}
		for i, in := range planned {
			if err := prepareDir(in, req.Node.AuthToken); err != nil {
				for _, done := range planned[:i+1] {
					_ = os.RemoveAll(done.Dir)
				}
				return fmt.Errorf("preparing the temp dir of instance %s: %w", in.ID, err)
			}
		}
		c.Next += req.Count
		c.Instances = append(c.Instances, planned...)
		c.Requests[req.RequestID] = requestRecord{NodeType: req.NodeType, Count: req.Count, At: now}
		c.dirty = true
		// Accepted: recorded before any node starts, so a provider that
		// dies now starts them (once) when it comes back.
		if err := st.save(); err != nil {
			c.Instances = c.Instances[:len(c.Instances)-len(planned)]
			delete(c.Requests, req.RequestID)
			c.Next -= req.Count
			for _, in := range planned {
				_ = os.RemoveAll(in.Dir)
			}
			return err
		}
		for _, in := range planned {
			p.start(c, in, req.Node.AuthToken)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &provider.LaunchResponse{}, nil
}

// start starts the node of in (recorded, not started); a failure drops the
// instance and is reported by PollErrors.
func (p *Provider) start(c *clusterState, in *instanceRecord, token string) {
	dir := in.Dir
	ch := &child{exited: make(chan struct{})}
	pid, err := startNode(in.Argv, nodeEnv(os.Environ(), token), dir, func(status string) {
		ch.status = status
		close(ch.exited)
	})
	c.dirty = true
	if err != nil {
		p.log.Warn("starting a node failed", "instance", in.ID, "error", err)
		c.remove(in.ID)
		_ = os.RemoveAll(dir)
		c.addError(provider.LaunchError{Op: provider.ErrorOpLaunch, RequestID: in.RequestID, NodeType: in.NodeType, Count: 1, InstanceID: in.ID,
			Message: provider.RedactToken(fmt.Sprintf("starting the node of instance %s: %v", in.ID, err), token), At: time.Now()})
		return
	}
	ch.pid = pid
	p.children[dir] = ch
	in.Pid = pid
	in.StartedAt = time.Now()
	p.log.Info("started a node", "instance", in.ID, "pid", pid, "ip", in.IP, "dir", dir)
}

// reconcile brings the cluster's records up to date with its processes:
// a recorded node that was never started (the provider died in between)
// is found or started, a node that serves is running, a node that died is
// dropped (reported by PollErrors when it died before it served), and an
// instance left terminating by a provider that died is stopped.
func (p *Provider) reconcile(cfg *settings, c *clusterState) {
	for _, in := range append([]*instanceRecord(nil), c.Instances...) {
		if in.State == provider.StateTerminating {
			if in.Pid == 0 {
				in.Pid = findNode(in.Dir)
			}
			p.stop(cfg, c.Cluster, in)
			continue
		}
		if in.Pid == 0 {
			if pid := findNode(in.Dir); pid != 0 {
				in.Pid, in.StartedAt = pid, time.Now()
				c.dirty = true
				p.log.Info("found the node of an instance the provider had not recorded as started", "instance", in.ID, "pid", pid)
				continue
			}
			token, err := readToken(in.Dir)
			if err != nil {
				p.log.Warn("the token of an instance recorded but not started is gone", "instance", in.ID, "error", err)
			}
			p.start(c, in, token)
			continue
		}
		if p.alive(in) {
			if in.State == provider.StatePending {
				if _, err := os.Stat(filepath.Join(in.Dir, readyFileName)); err == nil {
					in.State = provider.StateRunning
					c.dirty = true
				}
			}
			continue
		}
		p.dead(c, in)
	}
}

// alive reports whether the node of in runs.
func (p *Provider) alive(in *instanceRecord) bool {
	if ch, ok := p.children[in.Dir]; ok && ch.pid == in.Pid {
		select {
		case <-ch.exited:
			return false
		default:
			return true
		}
	}
	return procAlive(in.Pid, in.Dir)
}

// dead drops an instance whose node exited by itself.
func (p *Provider) dead(c *clusterState, in *instanceRecord) {
	how := "exited"
	if ch, ok := p.children[in.Dir]; ok && ch.pid == in.Pid {
		how = ch.status
		delete(p.children, in.Dir)
	}
	_, err := os.Stat(filepath.Join(in.Dir, readyFileName))
	served := err == nil
	tail := provider.RedactToken(outputTail(in.Dir), p.tokens[c.Cluster])
	c.remove(in.ID)
	if err := os.RemoveAll(in.Dir); err != nil {
		p.log.Warn("removing the temp dir of a dead node", "instance", in.ID, "dir", in.Dir, "error", err)
	}
	if served {
		p.log.Warn("a node exited by itself", "instance", in.ID, "pid", in.Pid, "how", how, "output", tail)
		return
	}
	msg := fmt.Sprintf("the node of instance %s (pid %d, %s, temp dir %s) %s %v after it was started, before it served",
		in.ID, in.Pid, in.IP, in.Dir, how, time.Since(in.StartedAt).Round(time.Millisecond))
	if tail != "" {
		msg += "; its output ends:\n" + tail
	} else {
		msg += "; it printed nothing"
	}
	c.addError(provider.LaunchError{Op: provider.ErrorOpLaunch, RequestID: in.RequestID, NodeType: in.NodeType, Count: 1,
		InstanceID: in.ID, Message: msg, At: time.Now()})
}

// stopRetry is how long a failed stop waits before it is tried again.
const stopRetry = 30 * time.Second

// stop stops the node of in (marked terminating) in the background, unless
// this Provider already does; when it is gone the instance is dropped.
func (p *Provider) stop(cfg *settings, cluster string, in *instanceRecord) {
	if p.stopping[in.Dir] || time.Since(p.stopFailed[in.Dir]) < stopRetry {
		return
	}
	p.stopping[in.Dir] = true
	var exited <-chan struct{}
	if ch, ok := p.children[in.Dir]; ok && ch.pid == in.Pid {
		exited = ch.exited
	}
	id, pid, dir, reqID, nodeType := in.ID, in.Pid, in.Dir, in.RequestID, in.NodeType
	p.stops.Add(1)
	go func() {
		defer p.stops.Done()
		ctx := context.Background()
		how, err := stopNode(ctx, pid, dir, cfg.stopTimeout, exited)
		if err == nil {
			err = os.RemoveAll(dir)
		}
		// Record the outcome; a later call retries a failed stop.
		_ = p.sem.Acquire(ctx, 1)
		defer p.sem.Release(1)
		delete(p.stopping, dir)
		if err == nil {
			delete(p.children, dir)
			delete(p.stopFailed, dir)
		} else {
			p.stopFailed[dir] = time.Now()
		}
		lerr := statedir.Update(ctx, cfg.state, loadState, (*state).save, func(st *state) error {
			c := st.cluster(cluster)
			if err != nil {
				p.log.Error("terminating an instance failed", "instance", id, "pid", pid, "error", err)
				c.addError(provider.LaunchError{Op: provider.ErrorOpTerminate, RequestID: reqID, NodeType: nodeType, Count: 1, InstanceID: id,
					Message: fmt.Sprintf("stopping the node of instance %s (pid %d, temp dir %s): %v", id, pid, dir, err), At: time.Now()})
			} else {
				p.log.Info("terminated an instance", "instance", id, "pid", pid, "how", how)
				if c.instance(id) != nil {
					c.remove(id)
				}
			}
			return nil
		})
		if lerr != nil {
			p.log.Error("recording a terminated instance", "instance", id, "error", lerr)
		}
	}()
}

// Terminate implements provider.Provider: it marks the instances
// terminating and stops their nodes in the background.
func (p *Provider) Terminate(ctx context.Context, req *provider.TerminateRequest) (*provider.TerminateResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := provider.CheckClusterName(req.ClusterName); err != nil {
		return nil, err
	}
	err := p.withState(ctx, func(cfg *settings, st *state) error {
		c, ok := st.clusters[req.ClusterName]
		if !ok {
			return nil
		}
		for _, id := range req.InstanceIDs {
			in := c.instance(id)
			if in == nil || in.State == provider.StateTerminating {
				continue
			}
			in.State = provider.StateTerminating
			c.dirty = true
			if in.Pid == 0 && findNode(in.Dir) == 0 {
				c.remove(id) // never started
				_ = os.RemoveAll(in.Dir)
				continue
			}
		}
		// Recorded first: a provider that dies now finishes the job when
		// it comes back.
		if err := st.save(); err != nil {
			return err
		}
		p.reconcile(cfg, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &provider.TerminateResponse{}, nil
}

// List implements provider.Provider.
func (p *Provider) List(ctx context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := provider.CheckClusterName(req.ClusterName); err != nil {
		return nil, err
	}
	out := &provider.ListResponse{}
	err := p.withState(ctx, func(cfg *settings, st *state) error {
		c, ok := st.clusters[req.ClusterName]
		if !ok {
			return nil
		}
		p.reconcile(cfg, c)
		c.prune(time.Now())
		for _, in := range c.Instances {
			out.Instances = append(out.Instances, provider.Instance{ID: in.ID, NodeType: in.NodeType, RequestID: in.RequestID,
				State: in.State, Address: in.IP, LaunchedAt: in.LaunchedAt})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PollErrors implements provider.Provider.
func (p *Provider) PollErrors(ctx context.Context, req *provider.PollErrorsRequest) (*provider.PollErrorsResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := provider.CheckClusterName(req.ClusterName); err != nil {
		return nil, err
	}
	out := &provider.PollErrorsResponse{}
	err := p.withState(ctx, func(cfg *settings, st *state) error {
		c, ok := st.clusters[req.ClusterName]
		if !ok {
			return nil
		}
		p.reconcile(cfg, c)
		out.Errors = append(out.Errors, c.Errors...)
		if len(c.Errors) > 0 {
			c.Errors = nil
			c.dirty = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

var (
	_ provider.Provider   = (*Provider)(nil)
	_ provider.Named      = (*Provider)(nil)
	_ plugin.Configurable = (*Provider)(nil)
	_ plugin.LoggerSetter = (*Provider)(nil)
)
