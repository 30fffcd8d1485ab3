package sshprovider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/sdk/provider"
)

// scanCache holds the latest scan of every host and the scans in flight,
// so that concurrent Lists share one and a List within scanInterval of
// the last reuses it.
type scanCache struct {
	mu       sync.Mutex
	latest   map[string]*scanResult
	inflight map[string]chan struct{}
}

// last returns the host's latest scan (nil: none yet).
func (c *scanCache) last(key string) *scanResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest[key]
}

// forget forgets the host's latest scan (what it runs changed).
func (c *scanCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.latest, key)
}

// reset forgets every scan (new settings).
func (c *scanCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latest = nil
}

// scanTimeout bounds a scan once connected.
const scanTimeout = 30 * time.Second

// scanHosts returns a scan of every host in hosts, no older than
// scanInterval, scanning them in parallel. A host that cannot be scanned
// has a result with err set; only ctx ending is an error.
func (p *Provider) scanHosts(ctx context.Context, cfg *settings, hosts []*host) (map[string]*scanResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(map[string]*scanResult, len(hosts))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(func() {
			r := p.scanHost(ctx, cfg, h)
			mu.Lock()
			out[h.key] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// scanHost returns a scan of h no older than scanInterval.
func (p *Provider) scanHost(ctx context.Context, cfg *settings, h *host) *scanResult {
	c := &p.scans
	for {
		c.mu.Lock()
		if r := c.latest[h.key]; r != nil && time.Since(r.at) < scanInterval {
			c.mu.Unlock()
			return r
		}
		if ch, ok := c.inflight[h.key]; ok {
			c.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return &scanResult{at: time.Now(), err: ctx.Err()}
			}
		}
		ch := make(chan struct{})
		if c.inflight == nil {
			c.inflight = map[string]chan struct{}{}
		}
		c.inflight[h.key] = ch
		c.mu.Unlock()

		r := &scanResult{at: time.Now()}
		sctx, cancel := context.WithTimeout(ctx, cfg.timeout+scanTimeout)
		out, err := cfg.conns.run(sctx, cfg, h, scanScript(h.dir), nil, true)
		cancel()
		if err == nil {
			var parsed *scanResult
			if parsed, err = parseScan(out); err == nil {
				parsed.at = r.at
				r = parsed
			}
		}
		if err != nil {
			r.err = hostErr(h.key, "reading what the host runs", err)
		}
		c.mu.Lock()
		delete(c.inflight, h.key)
		if ctx.Err() == nil {
			if c.latest == nil {
				c.latest = map[string]*scanResult{}
			}
			c.latest[h.key] = r
		}
		close(ch)
		c.mu.Unlock()
		if r.err != nil && ctx.Err() == nil {
			p.hostFailure(h.key)
		}
		return r
	}
}

// hostErr wraps err as a *HostError of host, unless it already names it.
func hostErr(host, op string, err error) error {
	var he *HostError
	var ke *HostKeyError
	if errors.As(err, &he) || errors.As(err, &ke) {
		return err
	}
	return &HostError{Host: host, Op: op, Err: err}
}

// hostFailure records that connecting to or using the host failed now.
func (p *Provider) hostFailure(key string) {
	p.mu.Lock()
	p.hostFailed[key] = time.Now()
	p.mu.Unlock()
}

func (p *Provider) hostOK(key string) {
	p.mu.Lock()
	delete(p.hostFailed, key)
	p.mu.Unlock()
}

// observe updates the cluster's instances with what the hosts run:
// running instances whose node is gone are terminated (what they left on
// their host is removed, then they are dropped), live nodes of the
// cluster it has no record of are adopted, and hosts of its instances
// that cannot be reached are reported (once per outage).
func (p *Provider) observe(cfg *settings, c *clusterState, scans map[string]*scanResult, now time.Time) {
	for _, h := range cfg.hosts {
		r := scans[h.key]
		if r == nil {
			continue
		}
		if r.err != nil {
			p.outage(c, h, r.err, now)
			continue
		}
		p.hostOK(h.key)
		if _, ok := c.Outages[h.key]; ok {
			delete(c.Outages, h.key)
			c.dirty = true
			p.log.Info("a host answers again", "host", h.key)
		}
		rec := r.record
		for _, in := range append([]*instanceRecord(nil), c.Instances...) {
			if in.Host != h.key || in.State != provider.StateRunning || p.driving(c.Cluster, in.ID) || r.at.Before(in.StartedAt) {
				continue
			}
			if rec != nil && rec.ID == in.ID && r.node == nodeAlive {
				continue
			}
			what := "its host has no instance record any more"
			switch {
			case rec != nil && rec.ID != in.ID:
				what = fmt.Sprintf("its host now runs instance %s of cluster %q", rec.ID, rec.Cluster)
			case rec != nil:
				what = fmt.Sprintf("its node (pid %d) is gone", in.Pid)
			}
			// Stopped and dropped like a terminated instance, so that
			// what it left on the host (its token, its temp dir) goes too.
			p.log.Warn("an instance's node exited by itself; cleaning up after it", "instance", in.ID, "host", h.key, "why", what)
			in.State, in.Worker = provider.StateTerminating, nil
			c.dirty = true
		}
		if rec != nil && rec.Cluster == c.Cluster && r.node == nodeAlive && c.instance(rec.ID) == nil {
			if _, gone := c.Removed[rec.ID]; gone {
				continue
			}
			c.Instances = append(c.Instances, &instanceRecord{ID: rec.ID, NodeType: rec.NodeType, RequestID: rec.RequestID,
				State: provider.StateRunning, Host: h.key, Dir: h.dir, LaunchedAt: rec.LaunchedAt, Pid: r.pid, StartedAt: r.at, Goray: rec.Goray})
			if _, ok := c.Requests[rec.RequestID]; !ok && rec.RequestID != "" {
				c.Requests[rec.RequestID] = requestRecord{NodeType: rec.NodeType, Count: 1, At: rec.LaunchedAt}
			}
			c.noteID(rec.ID)
			c.dirty = true
			p.log.Info("adopted a running node found on its host", "instance", rec.ID, "host", h.key, "pid", r.pid)
		}
	}
}

// outage reports, once until it answers again, that a host of the
// cluster's instances cannot be reached; its instances stay as last seen.
func (p *Provider) outage(c *clusterState, h *host, err error, now time.Time) {
	var affected []*instanceRecord
	for _, in := range c.Instances {
		if in.Host == h.key && in.State != provider.StatePending {
			affected = append(affected, in)
		}
	}
	if len(affected) == 0 {
		return
	}
	if _, reported := c.Outages[h.key]; reported {
		return
	}
	if c.Outages == nil {
		c.Outages = map[string]time.Time{}
	}
	c.Outages[h.key] = now
	in := affected[0]
	msg := p.redact(c.Cluster, fmt.Sprintf("host %s cannot be reached: %v; instance %s (%s) is listed as last seen until the host answers again", h.key, err, in.ID, in.State))
	p.log.Warn("a host cannot be reached", "host", h.key, "instance", in.ID, "error", err)
	c.addError(provider.LaunchError{Op: provider.ErrorOpLaunch, RequestID: in.RequestID, NodeType: in.NodeType, InstanceID: in.ID, Message: msg, At: now})
}

// driverKey names an instance among the drivers.
func driverKey(cluster, id string) string { return cluster + "/" + id }

// driving reports whether this Provider drives the instance.
func (p *Provider) driving(cluster, id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.drivers[driverKey(cluster, id)]
	return ok
}

// cancelLaunch cancels the launch this Provider runs for the instance, if
// any (it is being terminated).
func (p *Provider) cancelLaunch(cluster, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cancel := p.drivers[driverKey(cluster, id)]; cancel != nil {
		cancel()
	}
}

// workerAlive reports whether the provider w still runs (and so still
// drives the instance it is recorded for).
func (p *Provider) workerAlive(w *worker) bool {
	if w == nil {
		return false
	}
	if w.Owner == p.me.Owner {
		return false // this Provider: its drivers map says
	}
	if w.Pid == p.me.Pid {
		_, ok := liveOwners.Load(w.Owner)
		return ok
	}
	start, ok := procStart(w.Pid)
	return ok && start == w.Start
}

// reconcile starts a driver for every instance of the cluster that must
// be launched or stopped and that no live provider drives (one that died
// mid-way, or this one after a restart); a failed stop is tried again
// after stopRetry. The state lock is held.
func (p *Provider) reconcile(cfg *settings, st *state, c *clusterState) {
	now := time.Now()
	for _, in := range c.Instances {
		switch in.State {
		case provider.StatePending:
		case provider.StateTerminating:
			if now.Sub(in.StopFailedAt) < stopRetry {
				continue
			}
		default:
			continue
		}
		if p.driving(c.Cluster, in.ID) || p.workerAlive(in.Worker) {
			continue
		}
		token, err := st.readToken(c.Cluster)
		if err != nil {
			p.log.Warn("reading the cluster token from state_dir", "cluster", c.Cluster, "error", err)
		}
		p.rememberToken(c.Cluster, token)
		w := p.me
		in.Worker = &w
		c.dirty = true
		p.startDriver(cfg, c.Cluster, in.ID)
	}
}

// startDriver starts the goroutine that drives an instance until it runs
// or is gone.
func (p *Provider) startDriver(cfg *settings, cluster, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx := p.ctx
	if ctx.Err() != nil {
		return
	}
	p.drivers[driverKey(cluster, id)] = nil
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() {
			p.mu.Lock()
			delete(p.drivers, driverKey(cluster, id))
			p.mu.Unlock()
		}()
		p.drive(ctx, cfg, cluster, id)
	}()
}

// drive brings an instance to where it must be: a pending instance is
// launched (then it runs, or it is dropped and its failure reported), a
// terminating one stopped and dropped (a failure is reported and tried
// again later). ctx ending (Close, Configure) leaves the state for the
// next provider to resume.
func (p *Provider) drive(ctx context.Context, cfg *settings, cluster, id string) {
	for {
		var in instanceRecord
		var token string
		found := false
		err := p.withState(ctx, func(_ *settings, st *state) error {
			c, ok := st.clusters[cluster]
			if !ok {
				return nil
			}
			if cur := c.instance(id); cur != nil {
				in, found = *cur, true
			}
			var err error
			token, err = st.readToken(cluster)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				p.log.Error("reading the state of an instance", "instance", id, "error", err)
			}
			return
		}
		if !found {
			return
		}
		switch in.State {
		case provider.StatePending:
			if !p.launch(ctx, cfg, cluster, &in, token) {
				return
			}
		case provider.StateTerminating:
			p.stop(ctx, cfg, cluster, &in)
			return
		default:
			return
		}
	}
}

// record runs fn on the instance's current record under the state lock
// (not when it is gone). The provider's own context may have ended: the
// outcome of what was done is recorded all the same.
func (p *Provider) record(cluster, id string, fn func(c *clusterState, in *instanceRecord)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := p.withState(ctx, func(_ *settings, st *state) error {
		c, ok := st.clusters[cluster]
		if !ok {
			return nil
		}
		if in := c.instance(id); in != nil {
			fn(c, in)
			c.dirty = true
		}
		return nil
	})
	if err != nil {
		p.log.Error("recording what happened to an instance", "instance", id, "error", err)
	}
}

// launch launches the instance and records the outcome; it reports
// whether the driver goes on (the instance was terminated meanwhile).
func (p *Provider) launch(ctx context.Context, cfg *settings, cluster string, in *instanceRecord, token string) bool {
	actx, cancel := context.WithCancel(ctx)
	p.mu.Lock()
	p.drivers[driverKey(cluster, in.ID)] = cancel
	p.mu.Unlock()
	started := time.Now()
	pid, goray, err := p.launchOn(actx, cfg, cluster, in, token)
	p.mu.Lock()
	p.drivers[driverKey(cluster, in.ID)] = nil
	p.mu.Unlock()
	cancel()
	if err != nil && ctx.Err() != nil {
		return false // closing: a provider on this state_dir resumes it
	}
	terminating := false
	p.record(cluster, in.ID, func(_ *clusterState, cur *instanceRecord) {
		if goray != "" {
			cur.Goray = goray
		}
		terminating = cur.State == provider.StateTerminating
		if err == nil {
			cur.Pid = pid
			if cur.State == provider.StatePending {
				cur.State, cur.StartedAt = provider.StateRunning, time.Now()
				cur.Worker = nil // driven no more: any provider may stop it
			}
		}
	})
	if err == nil {
		p.log.Info("launched an instance", "instance", in.ID, "host", in.Host, "pid", pid, "took", time.Since(started).Round(time.Millisecond).String())
		return terminating
	}
	if terminating {
		return true // its stop cleans up
	}
	msg := p.redact(cluster, describe("launching", in, err))
	p.log.Warn("a launch failed", "instance", in.ID, "host", in.Host, "error", msg)
	if unreachable(err) {
		p.hostFailure(in.Host)
	} else {
		// Leave the host clean before it is free again.
		sctx, scancel := context.WithTimeout(context.Background(), cfg.timeout+cfg.stopTimeout+time.Minute)
		if _, serr := cfg.conns.run(sctx, cfg, hostOf(cfg, in), stopScript(in.Dir, in.ID, goray, cfg.stopTimeout), nil, false); serr != nil {
			p.log.Warn("cleaning up after a failed launch", "instance", in.ID, "host", in.Host, "error", p.redact(cluster, serr.Error()))
		}
		scancel()
	}
	p.record(cluster, in.ID, func(c *clusterState, cur *instanceRecord) {
		if cur.State == provider.StateTerminating {
			return // terminated meanwhile: its driver stops it
		}
		c.remove(in.ID, time.Now())
		c.addError(provider.LaunchError{Op: provider.ErrorOpLaunch, RequestID: in.RequestID, NodeType: in.NodeType, Count: 1, InstanceID: in.ID,
			Message: msg, At: time.Now()})
	})
	return false
}

// describe says what failed for the instance, naming its host.
func describe(what string, in *instanceRecord, err error) string {
	var he *HostError
	var ke *HostKeyError
	if errors.As(err, &he) || errors.As(err, &ke) {
		return fmt.Sprintf("%s instance %s: %v", what, in.ID, err)
	}
	return fmt.Sprintf("%s instance %s on host %s: %v", what, in.ID, in.Host, err)
}

// unreachable reports whether err is a failure to connect or log in.
func unreachable(err error) bool {
	var he *HostError
	var ke *HostKeyError
	return errors.As(err, &ke) || errors.As(err, &he) && he.Op == "connecting"
}

// hostOf returns the configured host of an instance, or one made from its
// record when the config no longer lists it.
func hostOf(cfg *settings, in *instanceRecord) *host {
	if h := cfg.byKey[in.Host]; h != nil && h.dir == in.Dir {
		return h
	}
	h, err := parseHost(in.Host, 22)
	if err != nil {
		h = &host{key: in.Host, name: in.Host}
	}
	h.dir = in.Dir
	return h
}

// launchOn does a launch's work on the host: prepare remote_dir, upload
// the goray binary unless it is there, write the token and the record,
// run the setup commands, start the node. It returns the node's pid and
// the goray binary on the host (known once the host was prepared).
func (p *Provider) launchOn(ctx context.Context, cfg *settings, cluster string, in *instanceRecord, token string) (pid int, goray string, err error) {
	h := cfg.byKey[in.Host]
	if h == nil || h.dir != in.Dir {
		return 0, "", fmt.Errorf("host %s (remote_dir %s) is no longer one of the provider's hosts", in.Host, in.Dir)
	}
	spec := in.Spec
	if spec == nil {
		return 0, "", errors.New("the instance has no launch spec (it was adopted from its host, not launched)")
	}
	goray = spec.Node.GorayBinary
	if goray == "" {
		goray = binPath(h.dir, spec.SHA256)
	}
	out, err := cfg.conns.run(ctx, cfg, h, prepareScript(h.dir, goray), nil, false)
	if err != nil {
		return 0, "", hostErr(h.key, "preparing remote_dir "+h.dir, err)
	}
	p.hostOK(h.key)
	r, err := parseScan(out)
	if err != nil {
		return 0, "", hostErr(h.key, "preparing remote_dir "+h.dir, err)
	}
	if rec := r.record; rec != nil && r.node == nodeAlive {
		if rec.ID == in.ID {
			return r.pid, rec.Goray, nil // started by a provider that died before it recorded so
		}
		return 0, "", &HostError{Host: h.key, Op: "checking it is free", Err: fmt.Errorf("it runs instance %s of cluster %q (pid %d) already: one node per host", rec.ID, rec.Cluster, r.pid)}
	}
	if !r.binary {
		if spec.Local == "" {
			return 0, goray, &HostError{Host: h.key, Op: "finding goray", Err: fmt.Errorf("the node spec's goray binary %s is not there", goray)}
		}
		f, err := os.Open(spec.Local)
		if err != nil {
			return 0, "", fmt.Errorf("the local goray binary: %w", err)
		}
		_, err = cfg.conns.run(ctx, cfg, h, uploadScript(h.dir, spec.SHA256, spec.Size), f, false)
		f.Close()
		if err != nil {
			return 0, "", hostErr(h.key, fmt.Sprintf("copying the goray binary (%s, sha256 %s) to %s", spec.Local, spec.SHA256, goray), err)
		}
		p.log.Info("copied the goray binary to a host", "host", h.key, "path", goray, "bytes", strconv.FormatInt(spec.Size, 10))
	}
	rec := &hostRecord{Version: recordVersion, Cluster: cluster, ID: in.ID, RequestID: in.RequestID, NodeType: in.NodeType, LaunchedAt: in.LaunchedAt, Goray: goray}
	script, err := installScript(h.dir, rec, spec.SHA256)
	if err != nil {
		return 0, goray, err
	}
	if _, err := cfg.conns.run(ctx, cfg, h, script, strings.NewReader(token), false); err != nil {
		return 0, goray, hostErr(h.key, "writing the token and the instance record", err)
	}
	if len(spec.Node.SetupCommands) > 0 {
		if _, err := cfg.conns.run(ctx, cfg, h, setupScript(spec.Node.SetupCommands), nil, false); err != nil {
			return 0, goray, hostErr(h.key, "running the setup commands", err)
		}
	}
	_, ip, err := cfg.conns.client(ctx, cfg, h, false)
	if err != nil {
		return 0, goray, err
	}
	opts := provider.StartOptions{Goray: goray, NodeIP: ip, TempDir: nodeDir(h.dir), InstanceID: in.ID, Extra: spec.Extra}
	mode := os.Getenv(envAuthMode)
	if token != "" {
		opts.TokenFile = h.dir + "/" + tokenFileName
	} else if mode == "" {
		mode = "disabled"
	}
	argv, err := spec.Node.StartArgs(opts)
	if err != nil {
		return 0, goray, err
	}
	out, err = cfg.conns.run(ctx, cfg, h, startScript(h.dir, argv, mode), nil, false)
	if err != nil {
		return 0, goray, hostErr(h.key, "starting the node (goray start)", err)
	}
	pid, ok := parseStarted(out)
	if !ok {
		return 0, goray, &HostError{Host: h.key, Op: "starting the node (goray start)", Err: fmt.Errorf("it did not say the node's pid: %q", lastLines(out, 5))}
	}
	return pid, goray, nil
}

// stopTimeoutExtra is how much longer than stop_timeout a stop may take
// (connecting, goray stop's SIGKILL and wait).
const stopTimeoutExtra = time.Minute

// stop stops the instance's node and drops it, or records why it could
// not (tried again after stopRetry).
func (p *Provider) stop(ctx context.Context, cfg *settings, cluster string, in *instanceRecord) {
	h := hostOf(cfg, in)
	goray := in.Goray
	sctx, cancel := context.WithTimeout(ctx, cfg.timeout+cfg.stopTimeout+stopTimeoutExtra)
	out, err := cfg.conns.run(sctx, cfg, h, stopScript(h.dir, in.ID, goray, cfg.stopTimeout), nil, false)
	cancel()
	if err != nil && ctx.Err() != nil {
		return // closing: a provider on this state_dir resumes it
	}
	if err == nil && !strings.Contains(out, markStop) {
		err = fmt.Errorf("the stop printed no %s line: %q", markStop, lastLines(out, 5))
	}
	if err != nil {
		err = hostErr(h.key, "stopping the node", err)
		msg := p.redact(cluster, describe("terminating", in, err))
		p.log.Warn("a terminate failed", "instance", in.ID, "host", in.Host, "error", msg)
		if unreachable(err) {
			p.hostFailure(h.key)
		}
		p.record(cluster, in.ID, func(c *clusterState, cur *instanceRecord) {
			cur.StopFailedAt = time.Now()
			cur.Worker = nil // any provider may try again
			c.addError(provider.LaunchError{Op: provider.ErrorOpTerminate, RequestID: in.RequestID, NodeType: in.NodeType, Count: 1, InstanceID: in.ID,
				Message: msg, At: time.Now()})
		})
		return
	}
	p.log.Info("terminated an instance", "instance", in.ID, "host", in.Host)
	p.scans.forget(h.key)
	p.record(cluster, in.ID, func(c *clusterState, _ *instanceRecord) { c.remove(in.ID, time.Now()) })
}
