// Package scale is goray's scale harness (`goray scale`): a real GCS in
// this process, N simulated nodes that speak the real protocol to it over
// real gRPC (register, report at the real period, refresh their view of
// the cluster as raylets do, answer frees, worker deaths, lease requests
// and placement group bundles) but run nothing, and beside them two real
// nodes and a real driver, so real tasks, actors and placement groups are
// scheduled in a cluster view of N nodes. See docs/scale.md.
//
// Workers are the driver's binary re-executed: a binary that calls Run
// must let ray.Init serve in worker mode (`if ray.IsWorker() {
// ray.Init(ctx) }`) before anything else, as cmd/goray does.
package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/host/node"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/sdk/ray"
	"google.golang.org/protobuf/proto"
)

// Defaults of Options.
const (
	DefaultReportPeriod     = 500 * time.Millisecond // a raylet's report period (raylet/clusterview.go maxReportPeriod)
	DefaultDuration         = 10 * time.Second
	DefaultHealthPeriod     = gcs.DefaultHeartbeatPeriod
	DefaultFailureThreshold = gcs.DefaultFailureThreshold
)

// Options configures Run.
type Options struct {
	// Nodes are the cluster sizes to measure, one run each (simulated
	// nodes; two real nodes come on top).
	Nodes []int
	// ReportPeriod is how often each simulated node reports and refreshes
	// its view (default DefaultReportPeriod, as raylets).
	ReportPeriod time.Duration
	// Duration is the steady-state window CPU is measured over.
	Duration time.Duration
	// HealthPeriod and FailureThreshold are the GCS's health checks.
	HealthPeriod     time.Duration
	FailureThreshold int
	// Events is how many tasks, actors and placement groups the scheduling
	// measurements create (default 10).
	Events int
	// BurstQuiet is how long the burst of worker deaths is counted after
	// its last delivery before the count ends with nodes that did not get
	// every id (default 2 s). A test that asserts every node got every id
	// sets it as long as the whole wait (a minute): on a loaded machine
	// deliveries pause longer than 2 s, and a count ended early is no loss.
	BurstQuiet time.Duration
	// Connections caps the GCS connections and raylet listeners the
	// simulated nodes get (0: one each per node when the descriptor limit
	// allows, else as many as it allows, shared). A cap below the node
	// count shares them, which measures what a connection costs the GCS
	// apart from what a node costs it.
	Connections int
	// Log receives progress lines (nil: none).
	Log io.Writer
	// Logger receives the runtime's logs (nil: discarded).
	Logger hclog.Logger
}

func (o *Options) defaults() error {
	if len(o.Nodes) == 0 {
		return errors.New("scale: no cluster size given")
	}
	for _, n := range o.Nodes {
		if n < 1 || n > 100000 {
			return fmt.Errorf("scale: %d nodes: want 1 to 100000", n)
		}
	}
	if o.ReportPeriod <= 0 {
		o.ReportPeriod = DefaultReportPeriod
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.HealthPeriod <= 0 {
		o.HealthPeriod = DefaultHealthPeriod
	}
	if o.FailureThreshold <= 0 {
		o.FailureThreshold = DefaultFailureThreshold
	}
	if o.Connections < 0 {
		return fmt.Errorf("scale: %d connections: want 0 (as many as fit) or more", o.Connections)
	}
	if o.BurstQuiet <= 0 {
		o.BurstQuiet = 2 * time.Second
	}
	if o.Events <= 0 {
		o.Events = 10
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return nil
}

// Report is the result of Run: one Result per cluster size.
type Report struct {
	Machine string   `json:"machine"`
	Command string   `json:"command,omitempty"`
	Options Settings `json:"options"`
	Results []Result `json:"results"`
}

// Settings are the options a report was made with.
type Settings struct {
	ReportPeriodMs   int64 `json:"report_period_ms"`
	DurationMs       int64 `json:"duration_ms"`
	HealthPeriodMs   int64 `json:"health_period_ms"`
	FailureThreshold int   `json:"failure_threshold"`
}

// Result is what one cluster size measured. Times are in milliseconds,
// CPU in milliseconds of CPU time, sizes in bytes.
type Result struct {
	Nodes int `json:"nodes"`
	// PerNodeConnections: each simulated node has its own GCS connection
	// and listener (false: a pool of Connections shared).
	PerNodeConnections bool `json:"per_node_connections"`
	Connections        int  `json:"connections"`
	// FDLimit is the process's descriptor limit the plan was made with.
	FDLimit uint64 `json:"fd_limit"`

	JoinMs float64 `json:"join_ms"` // until every simulated node is registered
	// Join is the whole join: from the first registration until every
	// node has its first view of the cluster (or the wait for it ended).
	Join JoinPhase `json:"join"`

	// Heap in use (after GC) added by the simulated nodes joining, and the
	// part of it the heap profile attributes to the GCS.
	HeapPerNode    float64 `json:"heap_per_node"`
	GCSHeapPerNode float64 `json:"gcs_heap_per_node"`

	Steady Steady `json:"steady"`

	Free        Broadcast  `json:"free"`
	WorkerDeath Broadcast  `json:"worker_death"`
	DeathBurst  DeathBurst `json:"death_burst"` // k worker deaths at once (events.go)
	NodeDeath   NodeDeath  `json:"node_death"`

	// Scheduling latency (Remote to Get) of a task that needs a new lease:
	// granted on the driver's node, and spilled back by it to the other
	// real node (the policy picks among N+2 nodes).
	TaskLocalMs Latency `json:"task_local_ms"`
	SpillbackMs Latency `json:"spillback_ms"`

	PlacementGroupsPerSec float64 `json:"placement_groups_per_sec"` // create and wait ready, one-bundle groups
	PGRemovalsPerSec      float64 `json:"pg_removals_per_sec"`
	// Messages the simulated nodes got per group created (prepare and
	// commit) and removed (cancel).
	PGMessages        float64 `json:"pg_messages"`
	PGRemovalMessages float64 `json:"pg_removal_messages"`
	ActorsPerSec      float64 `json:"actors_per_sec"` // create and wait ready (worker processes on the real nodes)

	// EntryBytes is the size of one simulated node's entry in
	// GetAllNodes; RealEntryBytes a real node's.
	EntryBytes     int `json:"entry_bytes"`
	RealEntryBytes int `json:"real_entry_bytes"`

	Errors []string `json:"errors,omitempty"`
}

// Steady is the steady-state window: every simulated node reporting.
type Steady struct {
	WallMs float64 `json:"wall_ms"`
	// ProcessCPUMs is the whole process (getrusage); GCSCPUMs and
	// SimCPUMs its shares by profile label, scaled to it.
	ProcessCPUMs float64            `json:"process_cpu_ms"`
	GCSCPUMs     float64            `json:"gcs_cpu_ms"`
	SimCPUMs     float64            `json:"sim_cpu_ms"`
	GCSCPUByRPC  map[string]float64 `json:"gcs_cpu_by_rpc_ms"`
	// GCSCores is the GCS's CPU per second of wall time.
	GCSCores float64 `json:"gcs_cores"`
	// Heartbeats and Refreshes done in the window, and how many were due
	// (every node, every period): below 1 the GCS did not keep up.
	Heartbeats   int64   `json:"heartbeats"`
	Refreshes    int64   `json:"refreshes"`
	Due          int64   `json:"due"`
	Achieved     float64 `json:"achieved"`
	Skipped      int64   `json:"skipped"`
	Errors       int64   `json:"errors"`
	DeclaredDead int64   `json:"declared_dead"`
	// Per report (a heartbeat and a refresh): the GCS's CPU, and bytes.
	GCSCPUPerReportUs float64 `json:"gcs_cpu_per_report_us"`
	// GCS CPU per node per second (µs of CPU per second per node).
	GCSCPUPerNodeUs   float64 `json:"gcs_cpu_per_node_us"`
	RefreshBytes      float64 `json:"refresh_bytes"`
	HeartbeatBytes    float64 `json:"heartbeat_bytes"`
	RefreshBytesPerS  float64 `json:"refresh_bytes_per_sec"` // all nodes
	ReportLatencyMs   float64 `json:"report_latency_ms"`     // mean of a heartbeat (its refresh runs apart)
	ReportLatencyMaxM float64 `json:"report_latency_max_ms"`

	// GCSCPUPerRefreshUs is the GCS's CPU in GetAllNodes per refresh;
	// FullRefreshes the refreshes answered with the whole table rather
	// than the changes since the caller's version.
	GCSCPUPerRefreshUs float64 `json:"gcs_cpu_per_refresh_us"`
	FullRefreshes      int64   `json:"full_refreshes"`
}

// JoinPhase is what the join cost: every node registering at once, then
// reporting and asking for its first view (a whole table) while the others
// still register.
type JoinPhase struct {
	// ViewMs: from the first registration until every node still alive
	// has its first view; Cold the nodes without one when the wait ended.
	ViewMs float64 `json:"view_ms"`
	Cold   int     `json:"cold"`
	// The GCS's CPU over the join, by RPC method as in Steady.
	ProcessCPUMs float64            `json:"process_cpu_ms"`
	GCSCPUMs     float64            `json:"gcs_cpu_ms"`
	GCSCPUByRPC  map[string]float64 `json:"gcs_cpu_by_rpc_ms"`
	GCSCores     float64            `json:"gcs_cores"`
	// Heartbeats done against every node's heartbeats of every period
	// since the join's start (more than were due while nodes were still
	// registering), heartbeats and refreshes that failed (time-out), and
	// nodes the GCS declared dead during the join.
	Heartbeats   int64   `json:"heartbeats"`
	Achieved     float64 `json:"achieved"`
	Errors       int64   `json:"errors"`
	DeclaredDead int64   `json:"declared_dead"`
	// Refreshes answered, how many with the whole table, and their bytes.
	Refreshes     int64   `json:"refreshes"`
	FullRefreshes int64   `json:"full_refreshes"`
	RefreshMB     float64 `json:"refresh_mb"`
}

// Broadcast is what one event sent to the simulated nodes.
type Broadcast struct {
	Messages int64   `json:"messages"`
	Bytes    int64   `json:"bytes"`
	Reached  int     `json:"reached"` // distinct simulated nodes (per-node listeners only)
	Ms       float64 `json:"ms"`      // until the last message arrived
}

// NodeDeath is a simulated node going silent.
type NodeDeath struct {
	// DetectMs: from its last report until the GCS declared it dead.
	DetectMs float64 `json:"detect_ms"`
	// InformedMs: from the declaration until every other simulated node
	// saw it dead in its view; Informed how many did.
	InformedMs float64 `json:"informed_ms"`
	Informed   int     `json:"informed"`
	// Messages and bytes sent for the event alone: none, each node reads
	// it in its next full refresh (RefreshBytes each).
	Messages int64 `json:"messages"`
}

// Latency sums a few timings.
type Latency struct {
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

func latency(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return Latency{Median: ms(s[len(s)/2]), Max: ms(s[len(s)-1]), N: len(s)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Run measures each cluster size of opts.Nodes in turn. It fails on the
// first error that keeps a size from being measured; errors of single
// measurements are recorded in the result.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if ray.IsWorker() {
		return nil, errors.New("scale: Run called in a worker process")
	}
	// Small heap samples, so that a node's few kilobytes are seen.
	runtime.MemProfileRate = 4096
	rep := &Report{
		Machine: fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU()),
		Options: Settings{ReportPeriodMs: opts.ReportPeriod.Milliseconds(), DurationMs: opts.Duration.Milliseconds(), HealthPeriodMs: opts.HealthPeriod.Milliseconds(), FailureThreshold: opts.FailureThreshold},
	}
	for _, n := range opts.Nodes {
		fmt.Fprintf(opts.Log, "scale: %d simulated nodes\n", n)
		res, err := runOne(ctx, n, opts)
		if err != nil {
			return rep, fmt.Errorf("scale: %d nodes: %w", n, err)
		}
		rep.Results = append(rep.Results, *res)
	}
	return rep, nil
}

// cluster is one size's running pieces.
type cluster struct {
	dir   string
	creds *auth.Credentials
	gcs   *gcsHandle
	fleet *fleet
	real  []*node.Node
	rt    *ray.Runtime
	local string // the driver's node id
	other string // the other real node
}

func (c *cluster) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.rt != nil {
		_ = c.rt.Shutdown(ctx)
	}
	for _, nd := range c.real {
		_ = nd.Stop(ctx)
	}
	if c.fleet != nil {
		c.fleet.close()
	}
	if c.gcs != nil {
		c.gcs.Close()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

func runOne(ctx context.Context, n int, opts Options) (_ *Result, err error) {
	res := &Result{Nodes: n}
	c := &cluster{}
	defer c.close()
	if c.dir, err = os.MkdirTemp("", "goray-scale-"); err != nil {
		return nil, err
	}
	token := auth.GenerateToken()
	if c.creds, err = auth.New(token, nil); err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(c.dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return nil, err
	}
	heap0 := heapInUse()
	if c.gcs, err = startGCS(ctx, "127.0.0.1", c.creds, opts.HealthPeriod, opts.FailureThreshold, opts.Logger.Named("gcs")); err != nil {
		return nil, err
	}
	if c.fleet, err = newFleet(n, c.gcs.Addr(), c.creds, opts.ReportPeriod, opts.Connections); err != nil {
		return nil, err
	}
	res.PerNodeConnections, res.Connections, res.FDLimit = c.fleet.perNode, len(c.fleet.conns), fdLimit()
	fmt.Fprintf(opts.Log, "  %d GCS connections and listeners (one per node: %v; descriptor limit %d)\n", res.Connections, res.PerNodeConnections, res.FDLimit)
	hbase := heapInUse()

	// Join: every node at once (64 registrations in flight), reporting as
	// soon as registered.
	c.fleet.run(min(512, n))
	c0 := snapshotCounters(&c.fleet.counters)
	jprof := startCPUProfile()
	start := time.Now()
	if err := c.fleet.join(ctx, 64); err != nil {
		_, _ = jprof.stop()
		return nil, err
	}
	res.JoinMs = ms(time.Since(start))
	fmt.Fprintf(opts.Log, "  joined in %.0f ms\n", res.JoinMs)
	// Steady state, once every node has its first view (a whole table;
	// later refreshes are the changes since).
	wctx, wcancel := context.WithTimeout(ctx, warmTimeout(n, opts.ReportPeriod))
	res.Join.Cold = c.fleet.warm(wctx)
	wcancel()
	res.Join.ViewMs = ms(time.Since(start))
	jsplit, jerr := jprof.stop()
	if jerr != nil {
		res.Errors = append(res.Errors, jerr.Error())
	}
	res.Join.fill(jsplit, c0, snapshotCounters(&c.fleet.counters), n, opts.ReportPeriod)
	j := res.Join
	fmt.Fprintf(opts.Log, "  first views in %.0f ms (%d without): GCS %.2f cores, %.0f%% of heartbeats done, %d failed calls, %d declared dead, %d whole tables (%.0f MB) of %d refreshes\n",
		j.ViewMs, j.Cold, j.GCSCores, 100*j.Achieved, j.Errors, j.DeclaredDead, j.FullRefreshes, j.RefreshMB, j.Refreshes)
	hs, herr := heapProfile()
	if herr != nil {
		res.Errors = append(res.Errors, herr.Error())
	}
	res.HeapPerNode = (float64(hs.InUse) - float64(hbase)) / float64(n)
	_ = heap0
	res.GCSHeapPerNode = float64(hs.GCS) / float64(n)

	st, err := steady(ctx, c.fleet, n, opts)
	if err != nil {
		return nil, err
	}
	res.Steady = st
	fmt.Fprintf(opts.Log, "  steady: GCS %.2f cores (process %.2f, simulation %.2f), %.0f%% of reports done (%d skipped, %d errors), %.0f µs GCS CPU per report, %.0f bytes per refresh, report %.1f ms (max %.0f)\n",
		st.GCSCores, st.ProcessCPUMs/st.WallMs, st.SimCPUMs/st.WallMs, 100*st.Achieved, st.Skipped, st.Errors, st.GCSCPUPerReportUs, st.RefreshBytes, st.ReportLatencyMs, st.ReportLatencyMaxM)

	// Real nodes and the driver.
	if err := c.startReal(ctx, tokenFile, opts); err != nil {
		return nil, err
	}
	res.EntryBytes, res.RealEntryBytes = entrySizes(c.gcs.srv, c.fleet)
	c.measureEvents(ctx, res, opts)
	c.measureNodeDeath(ctx, res, opts)
	return res, nil
}

// steady measures the GCS's CPU over opts.Duration of reports.
func steady(ctx context.Context, f *fleet, n int, opts Options) (Steady, error) {
	var st Steady
	c0 := snapshotCounters(&f.counters)
	prof := startCPUProfile()
	select {
	case <-ctx.Done():
	case <-time.After(opts.Duration):
	}
	split, err := prof.stop()
	if err != nil {
		return st, err
	}
	if ctx.Err() != nil {
		return st, ctx.Err()
	}
	c1 := snapshotCounters(&f.counters)
	st.WallMs = ms(split.Wall)
	st.ProcessCPUMs = ms(split.Process)
	st.GCSCPUMs, st.SimCPUMs = ms(split.GCSProcess()), ms(split.SimProcess())
	st.GCSCPUByRPC = map[string]float64{}
	for k, v := range split.ByRPC {
		st.GCSCPUByRPC[k] = ms(split.scale(v))
	}
	st.GCSCores = st.GCSCPUMs / st.WallMs
	st.Heartbeats = c1.heartbeats - c0.heartbeats
	st.Refreshes = c1.refreshes - c0.refreshes
	st.Due = int64(float64(n) * float64(split.Wall) / float64(opts.ReportPeriod))
	if st.Due > 0 {
		st.Achieved = float64(st.Heartbeats) / float64(st.Due)
	}
	st.Skipped = c1.skipped - c0.skipped
	st.Errors = (c1.heartbeatErrs - c0.heartbeatErrs) + (c1.refreshErrs - c0.refreshErrs)
	st.DeclaredDead = c1.declaredDead
	if st.Heartbeats > 0 {
		st.GCSCPUPerReportUs = st.GCSCPUMs * 1000 / float64(st.Heartbeats)
		st.HeartbeatBytes = float64(c1.heartbeatByte-c0.heartbeatByte) / float64(st.Heartbeats)
		st.ReportLatencyMs = float64(c1.reportNanos-c0.reportNanos) / 1e6 / float64(st.Heartbeats)
	}
	st.ReportLatencyMaxM = float64(c1.reportMax) / 1e6
	if st.Refreshes > 0 {
		st.RefreshBytes = float64(c1.refreshBytes-c0.refreshBytes) / float64(st.Refreshes)
		st.GCSCPUPerRefreshUs = st.GCSCPUByRPC["GetAllNodes"] * 1000 / float64(st.Refreshes)
	}
	st.FullRefreshes = c1.fullRefreshes - c0.fullRefreshes
	st.RefreshBytesPerS = float64(c1.refreshBytes-c0.refreshBytes) / split.Wall.Seconds()
	st.GCSCPUPerNodeUs = st.GCSCPUMs * 1000 / split.Wall.Seconds() / float64(n)
	return st, nil
}

// fill sets the join's figures from its CPU split and the counters at its
// start and end.
func (j *JoinPhase) fill(split cpuSplit, c0, c1 counterValues, n int, period time.Duration) {
	j.ProcessCPUMs = ms(split.Process)
	j.GCSCPUMs = ms(split.GCSProcess())
	j.GCSCPUByRPC = map[string]float64{}
	for k, v := range split.ByRPC {
		j.GCSCPUByRPC[k] = ms(split.scale(v))
	}
	if split.Wall > 0 {
		j.GCSCores = j.GCSCPUMs / ms(split.Wall)
	}
	j.Heartbeats = c1.heartbeats - c0.heartbeats
	if due := float64(n) * float64(split.Wall) / float64(period); due > 0 {
		j.Achieved = float64(j.Heartbeats) / due
	}
	j.Errors = (c1.heartbeatErrs - c0.heartbeatErrs) + (c1.refreshErrs - c0.refreshErrs)
	j.DeclaredDead = c1.declaredDead - c0.declaredDead
	j.Refreshes = c1.refreshes - c0.refreshes
	j.FullRefreshes = c1.fullRefreshes - c0.fullRefreshes
	j.RefreshMB = float64(c1.refreshBytes-c0.refreshBytes) / 1e6
}

// counterValues is a copy of the fleet's counters.
type counterValues struct {
	heartbeats, heartbeatErrs, refreshes, refreshErrs, refreshBytes, heartbeatByte   int64
	fullRefreshes                                                                    int64
	skipped, declaredDead, frees, freeBytes, died, diedBytes, reportNanos, reportMax int64
}

func snapshotCounters(c *counters) counterValues {
	return counterValues{
		heartbeats: c.heartbeats.Load(), heartbeatErrs: c.heartbeatErrs.Load(), refreshes: c.refreshes.Load(), refreshErrs: c.refreshErrs.Load(),
		refreshBytes: c.refreshBytes.Load(), heartbeatByte: c.heartbeatByte.Load(), skipped: c.skipped.Load(), declaredDead: c.declaredDead.Load(),
		frees: c.frees.Load(), freeBytes: c.freeBytes.Load(), died: c.died.Load(), diedBytes: c.diedBytes.Load(),
		reportNanos: c.reportNanos.Load(), reportMax: c.reportMax.Load(),
		fullRefreshes: c.fullRefreshes.Load(),
	}
}

// realResource is the custom resource each real node has 1000 of, named
// after it, so that a call can ask for a given real node by resource.
func realResource(i int) string { return fmt.Sprintf("scale_real_%d", i) }

// startReal starts two real nodes in this process (on 127.0.0.2 and
// 127.0.0.3, as the benchmark's second node: host/node embedded, joined to
// the GCS) and the driver, attached to the first.
func (c *cluster) startReal(ctx context.Context, tokenFile string, opts Options) error {
	for i := range 2 {
		cfg := config.Default()
		cfg.Head = false
		cfg.Address = c.gcs.Addr()
		cfg.NodeIP = fmt.Sprintf("127.0.0.%d", i+2)
		cpus := 2.0
		cfg.Resources.CPU = &cpus
		cfg.Resources.Custom = map[string]float64{realResource(i): 1000}
		cfg.ObjectStore.Memory = 256 << 20
		cfg.TempDir = filepath.Join(c.dir, fmt.Sprintf("real%d", i))
		cfg.Metrics.Disabled = true
		if err := os.MkdirAll(cfg.TempDir, 0o700); err != nil {
			return err
		}
		nd, err := node.Start(ctx, node.Options{Config: cfg, Embedded: true, Auth: c.creds, Logger: opts.Logger.Named(fmt.Sprintf("real%d", i))})
		if err != nil {
			return fmt.Errorf("starting real node %d: %w", i, err)
		}
		c.real = append(c.real, nd)
		if i == 0 {
			c.fleet.spillTo.Store(&spillTarget{node: nd.ID().Bytes(), addr: nd.Info().RayletAddress})
		}
	}
	rt, err := ray.Init(ctx, ray.Address(c.gcs.Addr()), ray.AuthTokenFile(tokenFile), ray.WithLogger(opts.Logger.Named("driver")))
	if err != nil {
		return fmt.Errorf("starting the driver: %w", err)
	}
	c.rt = rt
	c.local = rt.NodeID()
	for _, nd := range c.real {
		if id := nd.ID().String(); id != c.local {
			c.other = id
		}
	}
	return nil
}

// entrySizes returns the encoded size of a simulated node's entry in
// GetAllNodes and of a real node's.
func entrySizes(srv *gcs.Server, f *fleet) (sim, real int) {
	simIDs := map[string]bool{}
	for _, nd := range f.nodes[:min(len(f.nodes), 1)] {
		simIDs[string(nd.id.Bytes())] = true
	}
	isSim := map[string]bool{}
	for _, nd := range f.nodes {
		isSim[string(nd.id.Bytes())] = true
	}
	for _, v := range srv.Nodes() {
		sz := proto.Size(&gorayv1.GetAllNodesReply{Nodes: []*gorayv1.NodeView{v}})
		switch id := string(v.GetInfo().GetNodeId()); {
		case simIDs[id]:
			sim = sz
		case !isSim[id]:
			real = max(real, sz)
		}
	}
	return sim, real
}

// pollUntil calls cond every 10 ms until it holds or d passes; it reports
// whether it held.
func pollUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// broadcastAfter runs event and waits until the simulated nodes received
// want messages of the counted kind (or nothing more arrived for a while),
// returning what they received.
func (c *cluster) broadcastAfter(ctx context.Context, count func() (msgs, bytes int64), perNode func(*simNode) int32, want int64, event func() error) (Broadcast, error) {
	var b Broadcast
	m0, b0 := count()
	var base []int32
	for _, nd := range c.fleet.nodes {
		base = append(base, perNode(nd))
	}
	start := time.Now()
	if err := event(); err != nil {
		return b, err
	}
	last, lastChange := int64(0), time.Now()
	pollUntil(ctx, 30*time.Second, func() bool {
		m, _ := count()
		if m-m0 != last {
			last, lastChange = m-m0, time.Now()
		}
		// Done when every node got it, or nothing more arrived for 2 s
		// (5 s for a first message: an event sent to no simulated node,
		// such as a free of an object with no copy on them, ends here).
		quiet := 5 * time.Second
		if last > 0 {
			quiet = 2 * time.Second
		}
		return m-m0 >= want || time.Since(lastChange) > quiet
	})
	m1, b1 := count()
	b.Messages, b.Bytes = m1-m0, b1-b0
	b.Ms = ms(lastChange.Sub(start))
	for i, nd := range c.fleet.nodes {
		if perNode(nd) > base[i] {
			b.Reached++
		}
	}
	return b, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// nodeIDOf parses a node id (hex).
func nodeIDOf(s string) (ids.ID, error) { return ids.Parse(s) }
