// Package sshprovider is goray's SSH provider: its instances are goray
// nodes on a fixed list of hosts (on-prem machines, VMs you already have)
// reached over SSH, one node per host — Ray's "local" cluster launcher.
// Command goray-provider-ssh serves it as a plugin.
//
// Launching an instance picks a free host (one with no live node of any
// cluster of this provider) and, asynchronously: checks the host's key
// against known_hosts (a host missing from it, or with another key, is
// refused), copies the goray binary to remote_dir/bin/<sha256>/goray
// unless it is there already, writes the cluster token to a file only the
// SSH user can read, writes the host's instance record, runs the cluster's
// setup commands and starts the node with `goray start --address <head>
// --node-ip <host> --temp-dir <remote_dir>/n --auth-token-file ...`, which
// returns once the node serves (it runs detached, in a session of its
// own). Terminating runs `goray stop` on the node's temp dir and removes
// its files. Failures after a launch was accepted, naming the host, are
// reported by PollErrors.
//
// What was asked for is kept on this machine (state_dir: request ids,
// instances, errors, written atomically under a lock, so a restarted
// provider never launches a request twice and resumes launches and
// terminations in flight); what runs is kept on each host (its instance
// record), so List checks every host each time and a provider that lost
// its state_dir finds the running nodes again from the hosts alone.
package sshprovider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/semaphore"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/statedir"
)

// Name is the provider's name: the binary is goray-provider-ssh.
const Name = "ssh"

// scanInterval is how long a host scan is reused by List before the host
// is asked again.
const scanInterval = 500 * time.Millisecond

// stopRetry is how long a failed stop waits before it is tried again.
const stopRetry = 5 * time.Second

// envAuthMode is the variable of goray's auth mode, passed on to the
// nodes ("disabled" for a cluster without a token).
const envAuthMode = "GORAY_AUTH_MODE"

// liveOwners are the Provider objects of this process that are open, by
// owner id: an instance recorded as driven by one of them is not resumed
// by another.
var liveOwners sync.Map

// Provider is the SSH provider. Create it with New and configure it
// (Configure, or Open) before use. Methods may be called concurrently.
type Provider struct {
	// sem serialises the calls of this Provider (a one-slot semaphore, so
	// that waiting for it honours the caller's context); it guards log and
	// cfg. The state_dir lock serialises them with other providers on the
	// same state_dir.
	sem *semaphore.Weighted
	log hclog.Logger
	cfg *settings
	me  worker

	hashes binaryHash
	scans  scanCache

	// mu guards the fields below.
	mu sync.Mutex
	// ctx ends when the drivers must stop (Close, a new Configure).
	ctx    context.Context
	cancel context.CancelFunc
	// drivers are the instances this Provider drives, by cluster/id, with
	// the cancel of the launch in progress (nil when none).
	drivers map[string]context.CancelFunc
	// tokens are the clusters' tokens, to redact from what hosts print.
	tokens map[string]string
	// hostFailed holds when connecting to a host last failed: launches
	// prefer the hosts that did not fail.
	hostFailed map[string]time.Time
	wg         sync.WaitGroup
}

// New returns an unconfigured Provider.
func New() *Provider {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	me := worker{Pid: os.Getpid(), Owner: hex.EncodeToString(b)}
	me.Start, _ = procStart(me.Pid)
	p := &Provider{
		sem:        semaphore.NewWeighted(1),
		log:        hclog.NewNullLogger(),
		me:         me,
		drivers:    map[string]context.CancelFunc{},
		tokens:     map[string]string{},
		hostFailed: map[string]time.Time{},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	liveOwners.Store(me.Owner, true)
	return p
}

// Open returns a Provider configured with cfg, as Configure would.
func Open(ctx context.Context, cfg Config) (*Provider, error) {
	p := New()
	if err := p.Configure(ctx, cfg); err != nil {
		_ = p.Close()
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

// Configure checks cfg (the hosts, the known_hosts file, the key, the
// remote_dir of every host), creates state_dir and finds the goray
// binary. It may be called again (the host does after every restart of
// the plugin): launches and terminations in progress stop and resume
// with the new settings.
func (p *Provider) Configure(ctx context.Context, cfg Config) error {
	s, err := newSettings(cfg)
	if err != nil {
		return err
	}
	// Stop the drivers of the old settings first: they need the
	// semaphore to finish.
	p.mu.Lock()
	p.cancel()
	p.mu.Unlock()
	p.wg.Wait()
	if err := p.sem.Acquire(ctx, 1); err != nil {
		_ = s.state.Close()
		return err
	}
	defer p.sem.Release(1)
	if old := p.cfg; old != nil {
		old.conns.closeAll()
		_ = old.state.Close()
	}
	p.mu.Lock()
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.mu.Unlock()
	p.scans.reset()
	p.cfg = s
	p.log.Info("configured", "hosts", len(s.hosts), "user", s.user, "known_hosts", s.knownHosts, "state_dir", s.stateDir, "goray", s.goray)
	return nil
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
		return errors.New("the ssh provider is not configured yet")
	}
	if _, err := os.Stat(filepath.Join(cfg.stateDir, statedir.LockFile)); err != nil {
		return fmt.Errorf("state_dir: %w", err)
	}
	return nil
}

// Close stops the launches and terminations in progress (a provider on
// the same state_dir resumes them), closes the SSH connections and
// releases state_dir. The nodes keep running.
func (p *Provider) Close() error {
	p.mu.Lock()
	p.cancel()
	p.mu.Unlock()
	p.wg.Wait()
	liveOwners.Delete(p.me.Owner)
	_ = p.sem.Acquire(context.Background(), 1)
	defer p.sem.Release(1)
	if p.cfg != nil {
		p.cfg.conns.closeAll()
		err := p.cfg.state.Close()
		p.cfg = nil
		return err
	}
	return nil
}

// settings returns the current settings (nil before Configure).
func (p *Provider) settings(ctx context.Context) (*settings, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := p.sem.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	defer p.sem.Release(1)
	if p.cfg == nil {
		return nil, fmt.Errorf("%w: the ssh provider is not configured yet", provider.ErrUnavailable)
	}
	return p.cfg, nil
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
		return fmt.Errorf("%w: the ssh provider is not configured yet", provider.ErrUnavailable)
	}
	return statedir.Update(ctx, cfg.state, loadState, (*state).save, func(st *state) error { return fn(cfg, st) })
}

// NodeConfigSchema implements provider.Provider: the block is NodeConfig.
func (p *Provider) NodeConfigSchema(ctx context.Context, _ *provider.NodeConfigSchemaRequest) (*provider.NodeConfigSchemaResponse, error) {
	return provider.NodeConfigSchemaOf[NodeConfig](ctx)
}

// Launch implements provider.Provider: it picks free hosts, records the
// request and its instances, and launches them in the background. No
// free host is ErrQuotaExceeded; fewer free hosts than asked for launches
// one instance per free host and reports the rest to PollErrors at once.
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
	if req.Node.HeadAddress == "" {
		return nil, fmt.Errorf("%w: the node spec has no head address", provider.ErrInvalidRequest)
	}
	err = p.withState(ctx, func(cfg *settings, st *state) error {
		c := st.cluster(req.ClusterName)
		p.rememberToken(req.ClusterName, req.Node.AuthToken)
		if _, ok := c.Requests[req.RequestID]; ok {
			p.reconcile(cfg, st, c)
			return nil // served already: launch nothing more
		}
		spec := &launchSpec{Node: req.Node, Extra: nc.ExtraArgs}
		spec.Node.AuthToken = ""
		if spec.Node.GorayBinary == "" {
			if cfg.goray == "" {
				return fmt.Errorf("%w: no goray binary to copy to the hosts: none runs the head, is next to the plugin or on PATH; set goray_binary in the provider's config", provider.ErrInvalidRequest)
			}
			sum, size, err := p.hashes.sum(cfg.goray)
			if err != nil {
				return fmt.Errorf("%w: goray binary %s: %v", provider.ErrInvalidRequest, cfg.goray, err)
			}
			spec.Local, spec.SHA256, spec.Size = cfg.goray, sum, size
		}
		hosts, short, err := p.freeHosts(cfg, st, nc.Hosts, req.Count)
		if err != nil {
			return err
		}
		// The node's command line must be valid before the request is
		// accepted (the host's IP is filled in when it is reached).
		if _, err := spec.Node.StartArgs(provider.StartOptions{InstanceID: "check", Extra: spec.Extra}); err != nil {
			return err
		}
		now := time.Now()
		for i, h := range hosts {
			c.Instances = append(c.Instances, &instanceRecord{
				ID: fmt.Sprintf("%s%d", instancePrefix(req.ClusterName), c.Next+1+i), NodeType: req.NodeType, RequestID: req.RequestID,
				State: provider.StatePending, Host: h.key, Dir: h.dir, LaunchedAt: now, Spec: spec,
			})
		}
		c.Next += len(hosts)
		c.Requests[req.RequestID] = requestRecord{NodeType: req.NodeType, Count: req.Count, At: now}
		nErrors := len(c.Errors)
		if short != "" {
			// What fits is launched; the rest fails now, reported as a
			// launch error (the autoscaler asks again later).
			c.addError(provider.LaunchError{Op: provider.ErrorOpLaunch, RequestID: req.RequestID, NodeType: req.NodeType, Count: req.Count - len(hosts),
				Message: fmt.Sprintf("launching %d of request %s: %s", req.Count-len(hosts), req.RequestID, short), At: now})
		}
		c.dirty = true
		if err := st.saveToken(req.ClusterName, req.Node.AuthToken); err != nil {
			return fmt.Errorf("writing the cluster token into state_dir: %w", err)
		}
		// Accepted: recorded before anything happens on a host, so a
		// provider that dies now launches the instances (once) when it
		// comes back.
		if err := st.save(); err != nil {
			c.Instances = c.Instances[:len(c.Instances)-len(hosts)]
			c.Errors = c.Errors[:nErrors]
			delete(c.Requests, req.RequestID)
			c.Next -= len(hosts)
			return err
		}
		p.reconcile(cfg, st, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &provider.LaunchResponse{}, nil
}

// freeHosts picks n hosts for a launch among allowed (a node type's
// hosts; empty: all): hosts no instance of this state_dir uses and where
// the last scan saw no live node of another, those that did not fail
// lately first. With fewer free (but some), it returns those and says
// why there are not more; with none, the error matches
// ErrQuotaExceeded.
func (p *Provider) freeHosts(cfg *settings, st *state, allowed []string, n int) ([]*host, string, error) {
	candidates := cfg.hosts
	if len(allowed) > 0 {
		candidates = nil
		for _, a := range allowed {
			hs := cfg.lookup(a)
			if len(hs) == 0 {
				return nil, "", fmt.Errorf("%w: node_config hosts: %q is not one of the provider's hosts", provider.ErrInvalidRequest, a)
			}
			for _, h := range hs {
				if !slices.Contains(candidates, h) {
					candidates = append(candidates, h)
				}
			}
		}
	}
	used := st.hostsInUse()
	// Instances of this state_dir, and those it terminated lately (a scan
	// from before may still show them), do not make a host busy.
	ours := map[string]bool{}
	for _, c := range st.clusters {
		for _, in := range c.Instances {
			ours[in.ID] = true
		}
		for id := range c.Removed {
			ours[id] = true
		}
	}
	var free []*host
	busy := 0
	for _, h := range candidates {
		if _, ok := used[h.key]; ok {
			busy++
			continue
		}
		if r := p.scans.last(h.key); r != nil && r.record != nil && r.node == nodeAlive && !ours[r.record.ID] {
			busy++
			continue
		}
		free = append(free, h)
	}
	p.mu.Lock()
	failed := maps.Clone(p.hostFailed)
	p.mu.Unlock()
	sort.SliceStable(free, func(i, j int) bool {
		fi, fj := failed[free[i].key], failed[free[j].key]
		if fi.IsZero() != fj.IsZero() {
			return fi.IsZero()
		}
		return fi.Before(fj)
	})
	if len(free) == 0 {
		return nil, "", fmt.Errorf("%w: no host is free: the %d hosts this node type may use run a node each; %d wanted", provider.ErrQuotaExceeded, len(candidates), n)
	}
	if len(free) < n {
		return free, fmt.Sprintf("only %d of the %d hosts this node type may use are free (%d run a node); %d wanted", len(free), len(candidates), busy, n), nil
	}
	return free[:n], "", nil
}

// rememberToken keeps the cluster's token, to redact it from what hosts
// print.
func (p *Provider) rememberToken(cluster, token string) {
	if token == "" {
		return
	}
	p.mu.Lock()
	p.tokens[cluster] = token
	p.mu.Unlock()
}

func (p *Provider) redact(cluster, s string) string {
	p.mu.Lock()
	token := p.tokens[cluster]
	p.mu.Unlock()
	return provider.RedactToken(s, token)
}

// Terminate implements provider.Provider: it marks the instances
// terminating (a launch in progress is cancelled) and stops their nodes
// in the background.
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
			p.cancelLaunch(req.ClusterName, id)
		}
		// Recorded first: a provider that dies now finishes the job when
		// it comes back.
		if err := st.save(); err != nil {
			return err
		}
		p.reconcile(cfg, st, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &provider.TerminateResponse{}, nil
}

// List implements provider.Provider: the cluster's instances as this
// provider recorded them, checked against what every host runs (a node
// that died is dropped; a node of the cluster this provider had no record
// of is adopted). A host that cannot be reached keeps its instances as
// they were last seen, and is reported by PollErrors (once until it
// answers again).
func (p *Provider) List(ctx context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := provider.CheckClusterName(req.ClusterName); err != nil {
		return nil, err
	}
	cfg, err := p.settings(ctx)
	if err != nil {
		return nil, err
	}
	scans, err := p.scanHosts(ctx, cfg, cfg.hosts)
	if err != nil {
		return nil, err
	}
	out := &provider.ListResponse{}
	err = p.withState(ctx, func(cfg *settings, st *state) error {
		c := st.cluster(req.ClusterName)
		now := time.Now()
		p.observe(cfg, c, scans, now)
		p.reconcile(cfg, st, c)
		c.prune(now)
		for _, in := range c.Instances {
			addr := in.Host
			if h := cfg.byKey[in.Host]; h != nil {
				addr = h.name
			}
			out.Instances = append(out.Instances, provider.Instance{ID: in.ID, NodeType: in.NodeType, RequestID: in.RequestID,
				State: in.State, Address: addr, LaunchedAt: in.LaunchedAt})
		}
		if len(c.Instances) == 0 && len(c.Requests) == 0 && len(c.Errors) == 0 && len(c.Removed) == 0 {
			c.dirty = false // nothing to keep for a cluster this provider never saw
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
		p.reconcile(cfg, st, c)
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
	_ provider.Provider    = (*Provider)(nil)
	_ provider.Named       = (*Provider)(nil)
	_ plugin.Configurable  = (*Provider)(nil)
	_ plugin.LoggerSetter  = (*Provider)(nil)
	_ plugin.HealthChecker = (*Provider)(nil)
)
