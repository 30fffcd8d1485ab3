// Package raylet implements the per-node raylet: the local scheduler that
// leases worker processes to task owners, the worker pool that starts the
// job's binary in worker mode, and the gRPC front of the node's shared-memory
// object store.
//
// Owners lease a worker with RequestWorkerLease and then push tasks directly
// to the worker's CoreWorker address; the raylet is not on the per-task path.
//
// # Components
//
// The raylet is split along Ray's lines; each component is a type with its
// own state, its own lock and a small API, in a file named after it:
//
//   - scheduler (scheduler.go): scheduling classes and their queue, the
//     granted leases, the total and available resources and pending
//     demand; the placement group bundles held on the node (prepared or
//     committed, bundles.go) and the groups removed, since bundles change
//     the total and available resources under the same lock; the policies
//     themselves are pure functions in internal/policy.
//   - workerPool (workerpool.go): spawning, reusing and reaping worker
//     processes, and their deaths.
//   - objectManager (objectmanager.go): object ownership, creating objects
//     and making room, eviction of copies, pulls from other nodes, the data
//     plane (internal/dataplane) and the spiller (internal/spill).
//   - clusterView (clusterview.go): the other nodes as the GCS reports
//     them, node deaths and connections to other raylets.
//   - deathNotifier (deaths.go): the deaths of local drivers and workers,
//     sent in batches to the other nodes of the view.
//   - jobTable (jobs.go): the job table; checked job binaries are cached by
//     internal/binaries.
//   - drainer (drain.go): the node's drain before it is terminated
//     (DrainRaylet): whether it drains and its background loop spilling
//     every primary copy to shared storage; the scheduler stops granting
//     leases while it drains.
//   - memoryMonitor (memmonitor.go): reads the node's memory (readers and
//     the killing policy in internal/memory) and kills a worker when it
//     is above the threshold; keeps the kills for owners and status.
//   - logForwarder (logforward.go) and logHub (loghub.go): workers'
//     stdout and stderr, read from their pipes into their log files and
//     pushed to the raylet of their job's driver; the batches waiting for
//     this node's drivers (logs.go serves WorkerLogs, logfiles.go
//     LogFiles; see docs/logs.md).
//
// Raylet (raylet.go) composes them and runs the node's lifecycle (New, Run,
// Shutdown, registration, heartbeats); the few operations that span
// components (a lease request, a worker's death, a job's end, a node's
// death, the cancellation of placement group bundles and the GCS's sweep
// of those it does not use) are Raylet methods in operations.go; starting
// and ending a drain are in drain.go. The gRPC layer (rpc.go) decodes a
// request, calls one component or one such Raylet method, and encodes the
// reply; it takes no lock itself.
//
// # Lock rule
//
// No component calls another while holding its own lock, nor holds it
// across a gRPC or network call, a store call that may wait, or a channel
// send that may block. Events from one component to another (a worker
// died, a node died, objects freed, resources released) are delivered
// after the sender unlocked. A component that needs another declares the
// small interface it uses (workerBinder, poolEvents, binarySource,
// peerDirectory, spill.Store, spill.Objects, dataplane.Source), so that
// each can be tested with a fake. Each type's doc comment says what its
// lock guards.
//
// Granting a lease therefore takes two steps: the scheduler picks the
// requests that fit and reserves their resources under its lock, the
// worker pool binds idle workers to them under its own, and the scheduler
// then grants the bound ones (and puts the others back) under its lock
// again. A request cancelled, or a worker dead, in between is noticed in
// the last step.
//
// # GCS outages
//
// The link to the GCS is Run's (gcslink.go). Registration at start is
// retried with backoff (github.com/cenkalti/backoff) while the GCS cannot
// be reached, since a node may start before its head. The node remembers
// the cluster id the GCS answers and sends it whenever it registers again.
// While heartbeats fail the node keeps serving (leases, objects and
// workers go on), retries with backoff, and logs the outage once when it
// starts and once when it ends. A GCS that answers NotFound (restarted
// without the node's record) gets the node registered again, with the
// same node id and cluster id. The node stops itself (Done, with the
// reason in Err) when the GCS refuses it as another cluster's
// (OtherClusterError), declares it dead (DeclaredDeadError), or when no
// call to the GCS succeeded for Config.GCSReconnectTimeout (default 60s,
// GCSUnreachableError); Shutdown then makes no call to a GCS it gave up on.
package raylet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/logrotate"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/recvseg"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/raylet/internal/binaries"
)

// Default worker pool settings (see config.WorkerPool).
const (
	DefaultIdleTimeout     = 60 * time.Second
	DefaultStartTimeout    = 30 * time.Second
	DefaultHeartbeatPeriod = time.Second
)

// killGrace is how long a worker has to exit after SIGTERM before it gets
// SIGKILL.
const killGrace = 2 * time.Second

// gcsTimeout bounds GCS calls made outside any caller's context.
const gcsTimeout = 5 * time.Second

// Cancelled lease request ids that were not known when cancelled are
// remembered this long (and at most this many), so that a request arriving
// after its cancellation is refused.
const (
	tombstoneTTL  = 5 * time.Minute
	maxTombstones = 10000
)

// maxStartFailures is how many workers of a job may exit before registering,
// in a row, before the job's waiting lease requests fail.
const maxStartFailures = 3

// Config configures a Raylet.
type Config struct {
	// NodeID identifies the node; a random id is used when nil.
	NodeID ids.ID
	// NodeName is a human name for the node.
	NodeName string
	// SessionDir holds sockets (SessionDir/sockets) and logs
	// (SessionDir/logs, where worker-<id>.out and .err are written).
	SessionDir string
	// TCPAddress is where the raylet serves other nodes (host:port; empty
	// in single-node unit tests).
	TCPAddress string
	// ObjectAddress is where ServeData serves objects to other nodes
	// (host:port).
	ObjectAddress string
	// NodeIP is the address workers listen on for other nodes (default
	// 127.0.0.1).
	NodeIP string
	// BinaryCacheDir holds job binaries fetched from other nodes, by
	// sha256 (default SessionDir/binaries).
	BinaryCacheDir string
	// SocketPath is the raylet's unix socket. The caller creates the
	// grpc.Server and the listener and calls Register; workers are told
	// this path.
	SocketPath string
	// Resources is the node's total capacity.
	Resources resources.Set
	// Labels are reported with the node.
	Labels map[string]string
	// Store is the node's object store (required).
	Store ObjectStore
	// InlineLimit is sent to clients in StoreInfo.
	InlineLimit int64
	// GCS is the cluster control plane; nil skips node registration,
	// heartbeats and job and actor bookkeeping (unit tests).
	GCS gorayv1.GcsClient
	// GCSAddress (host:port) is passed to drivers and workers in their
	// REGISTERED reply, for cluster metadata lookups.
	GCSAddress string
	// IsHead marks the head node.
	IsHead bool
	// Pool configures the worker pool; zero values take defaults:
	// Prestart min(2, CPUs), MaxIdle CPUs, IdleTimeout 60s, StartTimeout
	// 30s.
	Pool config.WorkerPool
	// HeartbeatPeriod between heartbeats (default 1s; the GCS may override
	// it when the node registers).
	HeartbeatPeriod time.Duration
	// GCSReconnectTimeout is how long the node goes on without any
	// successful call to the GCS (registering at start, heartbeats during
	// an outage) before it stops itself (default
	// DefaultGCSReconnectTimeout, 60s, as Ray's
	// gcs_rpc_server_reconnect_timeout_s).
	GCSReconnectTimeout time.Duration
	// Logger receives the raylet's logs; nil discards them.
	Logger hclog.Logger
	// LogLevel is passed to workers as GORAY_LOG_LEVEL.
	LogLevel string
	// LogLimits bound each worker's .out and .err files: they rotate at
	// LogLimits.MaxFileSize and keep LogLimits.MaxFiles rotated copies
	// (zero: internal/logrotate's defaults, Ray's).
	LogLimits logrotate.Limits
	// WorkerOutput, when set, also receives every line workers print on
	// stdout and stderr, prefixed with "(worker <short id> pid=N) " (a
	// copy for tests; drivers get their workers' lines by subscribing,
	// see docs/logs.md).
	WorkerOutput io.Writer
	// Plugins reports the node's plugins for GetNodeStats (nil: none).
	Plugins func() []*gorayv1.PluginStatus
	// Transports connects to the node's transport plugins for
	// TransportInvoke (nil: the node has none).
	Transports TransportConnFunc
	// TransportEndpoints says how the node's processes call its transport
	// plugins directly, for TransportEndpoint (nil: only through
	// TransportInvoke).
	TransportEndpoints TransportEndpointFunc
	// Auth is the cluster's credentials: presented to other raylets and
	// data planes, required of this node's data-plane clients, and handed
	// to workers in their environment (nil: none, for unit tests).
	Auth *auth.Credentials
	// Spill configures spilling objects to storage (off when
	// Spill.Storage is nil).
	Spill SpillConfig
	// MetricsAddress is the node's Prometheus endpoint (host:port), told
	// to the GCS when the node registers ("": metrics are off).
	MetricsAddress string
	// DashboardAddress is the head's dashboard and job API (host:port),
	// told to the GCS when the node registers ("" elsewhere).
	DashboardAddress string
	// MemoryMonitor configures the memory monitor (memmonitor.go); a zero
	// RefreshInterval turns it off.
	MemoryMonitor config.MemoryMonitor
	// TensorPool is the node's pool of freed tensor segments
	// (tensorpool.go); a nil Pool: none.
	TensorPool TensorPoolConfig
}

// Raylet is the node's local scheduler, worker pool and object store front.
// It implements gorayv1.RayletServer. It composes the components (see the
// package doc). Its one lock, reportsMu, guards only the bookkeeping of
// the reports to the GCS it retries in the background (reportsClosed and
// reports.Add); its other fields are set in New, or are channels, Once
// values and atomics.
type Raylet struct {
	gorayv1.UnimplementedRayletServer

	cfg       Config
	log       hclog.Logger
	hbPeriod  time.Duration
	startTime time.Time
	hostname  string

	closing chan struct{} // closed when Shutdown starts
	// reports counts reports to the GCS tried again in the background
	// (tellGCS); Shutdown sets reportsClosed (no more of them) and waits
	// for them to end. reportsMu guards reportsClosed and reports.Add.
	reports       sync.WaitGroup
	reportsMu     sync.Mutex
	reportsClosed bool
	closingOnce   sync.Once
	done          chan struct{} // closed when the node is asked to stop
	doneOnce      sync.Once

	shutdownOnce sync.Once
	shutdownErr  error

	stopping   atomic.Bool // Shutdown has started
	registered atomic.Bool // node registered with the GCS
	// registering is set when Run starts registering the node; regDone is
	// closed when that attempt is over (Shutdown waits for it, so that a
	// registration the GCS took is always undone).
	registering atomic.Bool
	regDone     chan struct{}
	// regUnanswered is set while a RegisterNode call has no answer, and
	// stays set when the call was cancelled (Shutdown started): the GCS
	// may have taken it, so Shutdown unregisters the node all the same.
	regUnanswered atomic.Bool

	reconnectTimeout time.Duration
	clusterID        atomic.Pointer[string] // from the GCS's RegisterNodeReply
	lastContact      atomic.Int64           // unix ns of the last successful GCS call
	stopErr          atomic.Pointer[errBox] // why the node stopped itself (Err)

	jobs    *jobTable
	sched   *scheduler
	pool    *workerPool
	objects *objectManager
	cluster *clusterView
	drainer *drainer
	logs    *logForwarder  // workers' output, to their drivers (logforward.go)
	logHub  *logHub        // the output of this node's drivers' jobs (loghub.go)
	memory  *memoryMonitor // kills workers when the node is low on memory
	tensors *tensorPool    // the node's pool of freed tensor segments
}

// New validates cfg, creates the session's sockets and logs directories and
// starts the process spawner. Call Shutdown to release it.
func New(cfg Config) (*Raylet, error) {
	if cfg.Store == nil {
		return nil, errors.New("raylet: Config.Store is required")
	}
	if cfg.SessionDir == "" {
		return nil, errors.New("raylet: Config.SessionDir is required")
	}
	if cfg.SocketPath == "" {
		return nil, errors.New("raylet: Config.SocketPath is required")
	}
	if cfg.NodeID.IsNil() {
		cfg.NodeID = ids.New()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Resources == nil {
		cfg.Resources = resources.Set{}
	}
	if cfg.BinaryCacheDir == "" {
		cfg.BinaryCacheDir = filepath.Join(cfg.SessionDir, "binaries")
	}
	for name, v := range cfg.Resources {
		if v < 0 {
			return nil, fmt.Errorf("raylet: resource %q has negative total %s", name, resources.FormatAmount(name, v))
		}
	}
	for _, d := range []string{"sockets", "logs"} {
		if err := os.MkdirAll(filepath.Join(cfg.SessionDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("raylet: creating session directory: %w", err)
		}
	}
	host, _ := os.Hostname()
	r := &Raylet{
		cfg:       cfg,
		log:       cfg.Logger.Named("raylet"),
		hbPeriod:  cfg.HeartbeatPeriod,
		startTime: time.Now(),
		hostname:  host,
		closing:   make(chan struct{}),
		regDone:   make(chan struct{}),
		done:      make(chan struct{}),
	}
	if r.hbPeriod <= 0 {
		r.hbPeriod = DefaultHeartbeatPeriod
	}
	r.reconnectTimeout = cfg.GCSReconnectTimeout
	if r.reconnectTimeout <= 0 {
		r.reconnectTimeout = DefaultGCSReconnectTimeout
	}
	r.cluster = newClusterView(cfg.NodeID, cfg.GCS, cfg.Auth, r.log)
	bins := binaries.New(cfg.BinaryCacheDir, cfg.NodeID, r.log, func(node ids.ID) (gorayv1.RayletClient, error) {
		cli, _, err := r.peerClient(node)
		return cli, err
	})
	r.jobs = newJobTable(cfg.NodeID, r.log, bins)
	r.pool = newWorkerPool(cfg, r.log, r.closing, r.jobs, r)
	// The cache never prunes a working dir a job ships or a worker was
	// started in.
	bins.SetInUse(func(sum string) bool { return r.jobs.usesWorkingDir(sum) || r.pool.usesDir(sum) })
	r.sched = newScheduler(cfg.NodeID, cfg.Resources, r.log, r.pool)
	r.objects = newObjectManager(cfg, r.log, r.closing, r)
	r.drainer = newDrainer(r.closing)
	r.logHub = newLogHub()
	r.logs = newLogForwarder(cfg, r.log, r)
	r.tensors = newTensorPool(cfg.TensorPool, r.log.Named("tensor-pool"))
	r.memory = newMemoryMonitor(cfg, r.log, r.pool)
	r.memory.release = r.tensors.release
	r.pool.output = r.logs
	return r, nil
}

func nodeIP(cfg Config) string {
	if cfg.NodeIP != "" {
		return cfg.NodeIP
	}
	return "127.0.0.1"
}

// NodeID returns the node's id.
func (r *Raylet) NodeID() ids.ID { return r.cfg.NodeID }

// Register registers the Raylet service on g.
func (r *Raylet) Register(g *grpc.Server) {
	gorayv1.RegisterRayletServer(g, r)
	r.registerLogServices(g)
	r.registerObjectCopies(g)
}

// Done is closed when the node is asked to stop: by the ShutdownNode RPC,
// or by the node itself when the GCS declared it dead, refuses it (another
// cluster's GCS) or stays unreachable for Config.GCSReconnectTimeout; Err
// then says why. The node host watches it and calls Shutdown.
func (r *Raylet) Done() <-chan struct{} { return r.done }

func (r *Raylet) closeDone() { r.doneOnce.Do(func() { close(r.done) }) }

// Run registers the node with the GCS (when configured), then heartbeats
// every period with the available resources, store usage and pending
// demand, and kills surplus idle workers. It returns nil when ctx is done or
// Shutdown starts.
//
// Registration is retried with backoff while the GCS cannot be reached,
// for at most Config.GCSReconnectTimeout; Run fails (and closes Done, with
// the reason in Err) when that passes or the GCS refuses the node. Once
// registered, the node keeps serving through GCS outages (see the package
// doc, "GCS outages").
func (r *Raylet) Run(ctx context.Context) error {
	var (
		hb   <-chan time.Time
		link *gcsLink
	)
	if r.cfg.GCS != nil {
		r.registering.Store(true)
		reply, err := r.registerAtStart(ctx)
		if err == nil {
			r.registered.Store(true)
		}
		close(r.regDone)
		if err != nil {
			if ctx.Err() != nil || r.stopping.Load() {
				return nil
			}
			r.stopWith(err)
			return fmt.Errorf("raylet: registering node %s with the GCS: %w", r.cfg.NodeID, err)
		}
		period := r.hbPeriod
		if ms := reply.GetHeartbeatPeriodMs(); ms > 0 {
			period = time.Duration(ms) * time.Millisecond
		}
		// Report (and refresh the cluster view) at least every
		// maxReportPeriod: the GCS only declares a node dead after
		// FailureThreshold whole periods, but schedulers want fresh load.
		every := min(period, maxReportPeriod)
		t := time.NewTicker(every)
		defer t.Stop()
		hb = t.C
		link = newGCSLink(every)
		r.log.Info("node registered", "node_id", r.cfg.NodeID, "cluster", reply.GetClusterId(), "heartbeat_period", period)
		rctx, stopRefresh := context.WithCancel(ctx)
		refreshDone := make(chan struct{})
		go func() { defer close(refreshDone); r.refreshLoop(rctx, link) }()
		defer func() { stopRefresh(); <-refreshDone }()
		link.askRefresh()
	}
	memDone := make(chan struct{})
	go func() { defer close(memDone); r.memory.run(ctx, r.closing) }()
	defer func() { <-memDone }()
	poolDone := make(chan struct{})
	go func() { defer close(poolDone); r.tensors.run(ctx, r.closing) }()
	defer func() { <-poolDone }()
	if r.objects.spill.Enabled() {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-r.closing:
				cancel()
			case <-sctx.Done():
			}
		}()
		go r.objects.spill.Run(sctx)
	}
	reapEvery := min(r.pool.settings.idleTimeout/4, time.Second)
	reapEvery = max(reapEvery, 10*time.Millisecond)
	reap := time.NewTicker(reapEvery)
	defer reap.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.closing:
			return nil
		case <-hb:
			r.tick(ctx, link)
		case now := <-reap.C:
			r.reapIdle(now)
		}
	}
}

// reapIdle has the pool kill surplus idle workers that hold no lease.
func (r *Raylet) reapIdle(now time.Time) {
	r.pool.reap(now, r.sched.holders())
}

// heartbeat reports the node's load (and whether it drains) to the GCS.
// It returns the call's error; a GCS that declared the node dead makes it
// stop itself.
func (r *Raylet) heartbeat(ctx context.Context) error {
	req := &gorayv1.HeartbeatRequest{
		NodeId:    r.cfg.NodeID.Bytes(),
		Available: resourcesProto(nonNegative(r.sched.availableResources())),
		Pending:   r.sched.pendingDemand(),
		Draining:  r.sched.isDraining(),
	}
	u := r.cfg.Store.Usage()
	req.StoreUsed, req.StoreCapacity = u.Used, u.Capacity
	req.Spill = r.objects.spill.Stats()
	req.Memory = r.memory.stats()
	ctx, cancel := context.WithTimeout(ctx, max(r.hbPeriod, gcsTimeout))
	defer cancel()
	reply, err := r.cfg.GCS.ReportHeartbeat(ctx, req)
	if err != nil {
		return err
	}
	r.contacted(time.Now())
	if reply.GetDead() {
		r.stopWith(&DeclaredDeadError{Address: r.gcsAddress(), Node: r.cfg.NodeID})
	}
	return nil
}

// Shutdown kills every worker (SIGTERM to its process group, SIGKILL after a
// short grace or when ctx ends), waits for them to exit, ends driver
// sessions, fails waiting lease requests and unregisters the node from the
// GCS. It is idempotent: later calls return the first call's result.
func (r *Raylet) Shutdown(ctx context.Context) error {
	r.shutdownOnce.Do(func() { r.shutdownErr = r.shutdown(ctx) })
	return r.shutdownErr
}

func (r *Raylet) shutdown(ctx context.Context) error {
	defer r.objects.closeConns()
	defer r.cluster.close()
	r.stopping.Store(true)
	r.jobs.close()
	r.sched.close()
	ws, hadActors := r.pool.close()
	// Only now wake the sessions and Run: waiting requests must learn of
	// the shutdown, not of their job ending as a consequence.
	r.closingOnce.Do(func() { close(r.closing) })
	r.reportsMu.Lock()
	r.reportsClosed = true
	r.reportsMu.Unlock()
	// They end with closing: the node-wide reports below cover the actors,
	// and the GCS finishes the jobs of a node that is gone.
	r.reports.Wait()

	// Grace: wait for SIGTERM to work, then SIGKILL whatever is left.
	grace := time.NewTimer(killGrace)
	defer grace.Stop()
	for _, w := range ws {
		select {
		case <-w.exited:
		case <-grace.C:
		case <-ctx.Done():
		}
	}
	for _, w := range ws {
		r.pool.sigkill(w)
	}
	r.pool.stop()
	r.logs.close()
	r.drainer.close() // before DeleteAll: a drain's spilling is over
	r.objects.spill.DeleteAll(ctx)
	if _, err := recvseg.SweepAll(r.cfg.SessionDir); err != nil {
		r.log.Warn("unlinking received tensor segments at shutdown failed", "error", err)
	}

	// A node leaving the cluster is a node failure to its actors, not a
	// kill: those with restarts left restart on other nodes (the GCS kills
	// those whose owner was on this node when the node is unregistered).
	// A node that gave up on the GCS does not call it any more.
	gcsUp := r.cfg.GCS != nil && !r.gcsGivenUp()
	if gcsUp && hadActors {
		fctx, cancel := context.WithTimeout(ctx, gcsTimeout)
		_, err := r.cfg.GCS.ReportWorkerFailure(fctx, &gorayv1.ReportWorkerFailureRequest{
			NodeId: r.cfg.NodeID.Bytes(), Reason: "node shutting down",
		})
		cancel()
		if err != nil {
			r.log.Warn("reporting the node's actors failed to the GCS", "error", err)
		}
	}
	if r.registering.Load() {
		// A registration under way ends with closing; wait for its
		// verdict, so that one the GCS took just now is undone below.
		select {
		case <-r.regDone:
		case <-ctx.Done():
		}
	}
	// A registration cancelled before its answer may still have been
	// taken by the GCS: unregister then too (a GCS that never took it
	// answers NotFound, which is no failure here).
	maybe := !r.registered.Load() && r.regUnanswered.Load()
	if (r.registered.Load() || maybe) && gcsUp {
		uctx, cancel := context.WithTimeout(ctx, gcsTimeout)
		defer cancel()
		if _, err := r.cfg.GCS.UnregisterNode(uctx, &gorayv1.UnregisterNodeRequest{
			NodeId: r.cfg.NodeID.Bytes(), Reason: "node shut down",
		}); err != nil && !(maybe && status.Code(err) == codes.NotFound) {
			return fmt.Errorf("raylet: unregistering node %s: %w", r.cfg.NodeID, err)
		}
	}
	r.log.Info("raylet stopped", "node_id", r.cfg.NodeID)
	return nil
}

func (r *Raylet) nodeInfo() *gorayv1.NodeInfo {
	return &gorayv1.NodeInfo{
		NodeId:        r.cfg.NodeID.Bytes(),
		NodeName:      r.cfg.NodeName,
		RayletUnix:    r.cfg.SocketPath,
		RayletTcp:     r.cfg.TCPAddress,
		ObjectAddr:    r.cfg.ObjectAddress,
		Total:         resourcesProto(r.cfg.Resources),
		Labels:        r.cfg.Labels,
		State:         "ALIVE",
		StartTimeMs:   r.startTime.UnixMilli(),
		IsHead:        r.cfg.IsHead,
		Pid:           int32(os.Getpid()),
		SessionDir:    r.cfg.SessionDir,
		Hostname:      r.hostname,
		MetricsAddr:   r.cfg.MetricsAddress,
		DashboardAddr: r.cfg.DashboardAddress,
	}
}

func (r *Raylet) storeInfo() *gorayv1.StoreInfo {
	return &gorayv1.StoreInfo{
		FdSocket:    r.cfg.Store.SocketPath(),
		Capacity:    r.cfg.Store.Capacity(),
		InlineLimit: r.cfg.InlineLimit,
	}
}

func resourcesProto(s resources.Set) *gorayv1.Resources {
	m := make(map[string]int64, len(s))
	for k, v := range s {
		m[k] = v
	}
	return &gorayv1.Resources{Amounts: m}
}

// nonNegative returns s with negative amounts (CPU oversubscribed by
// workers that resumed after blocking) reported as zero.
func nonNegative(s resources.Set) resources.Set {
	out := make(resources.Set, len(s))
	for k, v := range s {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

func resourcesFromProto(p *gorayv1.Resources) (resources.Set, error) {
	s := resources.Set{}
	for k, v := range p.GetAmounts() {
		if v < 0 {
			return nil, fmt.Errorf("resource %q: amount must be >= 0, got %s", k, resources.FormatAmount(k, v))
		}
		if v > 0 {
			s[k] = v
		}
	}
	return s, nil
}
