package scale

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/rpc"
)

// simCPUs is what each simulated node says it has: a small cloud instance.
const simCPUs = 4

// fleet is the simulated nodes: each registers with the GCS under its own
// id and raylet address, reports its load every period and refreshes its
// view of the cluster as a raylet does (raylet/gcslink.go tick: a
// heartbeat, then GetAllNodes), and answers the calls a raylet gets from
// other raylets and the GCS (frees, worker deaths, lease requests,
// placement group bundles) without running anything.
//
// Goroutines are bounded whatever the number of nodes: one dispatcher
// ticks slots of the period and hands the nodes whose turn it is to a
// fixed pool of reporters; a node whose previous report is still under way
// skips its turn (as a raylet's ticker drops ticks while its loop is
// busy). Connections: one per node to the GCS and one listener per node
// for its raylet service, as real nodes have, when the process's
// descriptor limit allows; else a pool of each shared by several nodes
// (see connPlan).
type fleet struct {
	creds   *auth.Credentials
	gcsAddr string
	period  time.Duration
	// timeout bounds each heartbeat and refresh (see callTimeout).
	timeout time.Duration

	nodes []*simNode
	conns []*grpc.ClientConn
	lis   []net.Listener
	srv   *grpc.Server
	// byAddr maps a listener's address to the node it serves (only when
	// each node has its own).
	byAddr   map[string]*simNode
	perNode  bool
	spillTo  atomic.Pointer[spillTarget]
	counters counters

	// watch is the node whose death the others look for in their views.
	watch atomic.Pointer[deathWatch]

	stopOnce sync.Once
	stopped  chan struct{}
	wg       sync.WaitGroup

	// refreshes are the refreshes asked by heartbeats, run by their own
	// goroutines (as a raylet's run apart from its heartbeats).
	refreshQ chan *simNode
}

// spillTarget is where a simulated node sends the lease requests it gets.
type spillTarget struct {
	node []byte
	addr string
}

// simNode is one simulated node.
type simNode struct {
	idx  int
	id   ids.ID
	info *gorayv1.NodeInfo
	gcs  *grpc.ClientConn
	// reporting: registered and not killed; busy: a report is under way.
	reporting atomic.Bool
	busy      atomic.Bool
	killed    atomic.Bool
	lastHB    atomic.Int64 // unix nanoseconds of its last heartbeat the GCS took
	frees     atomic.Int32 // FreeObjects calls received
	deaths    atomic.Int32 // WorkersDied calls received
	deathIDs  atomic.Int32 // worker ids those calls carried

	// viewEpoch and viewVersion are those of the last GetAllNodes reply:
	// the next refresh asks for the changes since, as a raylet does.
	viewEpoch   atomic.Pointer[string]
	viewVersion atomic.Uint64
	refreshing  atomic.Bool // a refresh is asked for or under way
}

// counters are what the simulated nodes sent and received, in total.
type counters struct {
	heartbeats, heartbeatErrs   atomic.Int64
	refreshes, refreshErrs      atomic.Int64
	refreshBytes, heartbeatByte atomic.Int64
	fullRefreshes               atomic.Int64 // refreshes answered with the whole table
	refreshSkipped              atomic.Int64 // not asked: the node's previous refresh was still under way
	skipped                     atomic.Int64 // turns skipped: the previous report was still under way
	declaredDead                atomic.Int64 // heartbeats answered "dead"

	frees, freeBytes       atomic.Int64
	died, diedBytes        atomic.Int64
	leases                 atomic.Int64
	prepares, commits      atomic.Int64
	cancels, releases      atomic.Int64
	drains, otherReceived  atomic.Int64
	logDrains              atomic.Int64 // a job's end: the driver's raylet drains every node's logs
	reportNanos, reportMax atomic.Int64
}

// fdReserve is the descriptors connPlan leaves for the rest of the
// process: the GCS's own, the real nodes, their workers and the driver.
const fdReserve = 2000

// fdPerNode is what one simulated node with its own connection and
// listener costs in descriptors: its connection to the GCS (both ends, in
// this process), its listener, and the connections real raylets and the
// GCS open to it (both ends).
const fdPerNode = 6

// connPlan decides how many GCS connections and raylet listeners n
// simulated nodes get, given the process's descriptor limit and a cap
// (maxConns; 0: none): one each per node when the limit leaves
// fdPerNode descriptors per node beyond fdReserve and the cap allows,
// else as many as fit, shared by the nodes (perNode false).
func connPlan(n int, limit uint64, maxConns int) (pool int, perNode bool) {
	fit := 1
	if limit > fdReserve+fdPerNode {
		fit = int((limit - fdReserve) / fdPerNode)
	}
	if maxConns > 0 {
		fit = min(fit, maxConns)
	}
	if fit >= n {
		return n, true
	}
	return max(fit, 1), false
}

// callTimeout bounds a simulated node's heartbeat and refresh: 10 s (a
// raylet's is 5 s) or the report period if longer, plus 2 ms per node, so
// that a node's first view (the whole table, about 400 bytes per node:
// 4 MB at 10,000 nodes) can arrive while thousands of nodes ask for theirs
// at once during a join; a refresh given up is asked again from scratch.
func callTimeout(n int, period time.Duration) time.Duration {
	return max(period, 10*time.Second) + time.Duration(n)*2*time.Millisecond
}

// warmTimeout bounds the wait for every node's first view before the
// steady state is measured: 20 report periods plus 10 ms per node.
func warmTimeout(n int, period time.Duration) time.Duration {
	return 20*period + time.Duration(n)*10*time.Millisecond
}

// newFleet prepares n simulated nodes (nothing registered yet): their
// listeners on distinct loopback addresses 127.1.x.y and their GCS
// connections (at most maxConns of each, shared, when it is not 0).
func newFleet(n int, gcsAddr string, creds *auth.Credentials, period time.Duration, maxConns int) (*fleet, error) {
	pool, perNode := connPlan(n, fdLimit(), maxConns)
	f := &fleet{creds: creds, gcsAddr: gcsAddr, period: period, timeout: callTimeout(n, period), perNode: perNode, byAddr: map[string]*simNode{}, stopped: make(chan struct{})}
	f.srv = grpc.NewServer(rpc.ServerOptions(creds)...)
	gorayv1.RegisterRayletServer(f.srv, &simRaylet{f: f})
	gorayv1.RegisterWorkerLogsServer(f.srv, &simLogs{f: f})
	fail := func(err error) (*fleet, error) {
		f.close()
		return nil, err
	}
	for i := range pool {
		ip := fmt.Sprintf("127.1.%d.%d", (i/250)%250, i%250+1)
		lis, err := net.Listen("tcp", ip+":0")
		if err != nil {
			return fail(fmt.Errorf("scale: simulated node %d cannot listen on %s: %w", i, ip, err))
		}
		f.lis = append(f.lis, lis)
		// The client side is the simulation's: small buffers, so that
		// thousands of connections cost the harness little (the GCS's
		// side keeps the servers' options of internal/rpc).
		cc, err := rpc.Dial(gcsAddr, creds, grpc.WithReadBufferSize(16<<10), grpc.WithWriteBufferSize(16<<10))
		if err != nil {
			return fail(err)
		}
		f.conns = append(f.conns, cc)
	}
	host, _ := os.Hostname()
	for i := range n {
		id := ids.New()
		addr := f.lis[i%pool].Addr().String()
		total := map[string]int64{
			resources.CPU:               simCPUs * resources.Unit,
			resources.Memory:            8 << 30 * resources.Unit,
			resources.ObjectStoreMemory: 2 << 30 * resources.Unit,
		}
		nd := &simNode{idx: i, id: id, gcs: f.conns[i%pool], info: &gorayv1.NodeInfo{
			NodeId:      id.Bytes(),
			NodeName:    fmt.Sprintf("sim-%05d", i),
			RayletUnix:  fmt.Sprintf("/tmp/goray/session_sim_%05d/sockets/raylet.sock", i),
			RayletTcp:   addr,
			ObjectAddr:  addr,
			MetricsAddr: addr,
			Total:       &gorayv1.Resources{Amounts: total},
			Labels:      map[string]string{"goray.io/simulated": "true"},
			State:       "ALIVE",
			Pid:         int32(100000 + i),
			SessionDir:  fmt.Sprintf("/tmp/goray/session_sim_%05d", i),
			Hostname:    host,
		}}
		f.nodes = append(f.nodes, nd)
		if perNode {
			f.byAddr[addr] = nd
		}
	}
	pprof.Do(context.Background(), pprof.Labels(labelPart, partSim), func(context.Context) {
		for _, lis := range f.lis {
			f.wg.Add(1)
			go func() { defer f.wg.Done(); _ = f.srv.Serve(lis) }()
		}
	})
	return f, nil
}

// join registers every node with the GCS, at most inFlight at once, and
// starts its reports once registered. It returns when all are registered
// (or the first error).
func (f *fleet) join(ctx context.Context, inFlight int) error {
	sem := make(chan struct{}, inFlight)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	pprof.Do(ctx, pprof.Labels(labelPart, partSim), func(ctx context.Context) {
		for _, nd := range f.nodes {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				_, err := gorayv1.NewGcsClient(nd.gcs).RegisterNode(cctx, &gorayv1.RegisterNodeRequest{Node: nd.info})
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("scale: registering simulated node %s: %w", nd.info.GetNodeName(), err)
					}
					mu.Unlock()
					return
				}
				nd.reporting.Store(true)
			}()
		}
	})
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// run ticks the reports until stop: the period is cut into slots, node i
// reports in slot i mod slots, by one of workers reporters.
func (f *fleet) run(workers int) {
	const slots = 50
	work := make(chan *simNode, workers*4)
	f.refreshQ = make(chan *simNode, workers*4)
	pprof.Do(context.Background(), pprof.Labels(labelPart, partSim), func(ctx context.Context) {
		for range workers {
			f.wg.Add(2)
			go func() {
				defer f.wg.Done()
				for nd := range work {
					f.report(nd)
					nd.busy.Store(false)
				}
			}()
			go func() {
				defer f.wg.Done()
				for {
					select {
					case <-f.stopped:
						return
					case nd := <-f.refreshQ:
						f.refresh(nd)
						nd.refreshing.Store(false)
					}
				}
			}()
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer close(work)
			t := time.NewTicker(f.period / slots)
			defer t.Stop()
			slot := 0
			for {
				select {
				case <-f.stopped:
					return
				case <-t.C:
				}
				for i := slot; i < len(f.nodes); i += slots {
					nd := f.nodes[i]
					if !nd.reporting.Load() || nd.killed.Load() {
						continue
					}
					if !nd.busy.CompareAndSwap(false, true) {
						f.counters.skipped.Add(1)
						continue
					}
					select {
					case work <- nd:
					default: // every reporter is busy: the turn is lost
						nd.busy.Store(false)
						f.counters.skipped.Add(1)
					}
				}
				slot = (slot + 1) % slots
			}
		}()
	})
}

// report is one turn of a node: the heartbeat a raylet sends
// (raylet/raylet.go heartbeat) and, when it succeeded, asking for the
// refresh of its cluster view, which runs apart (raylet/gcslink.go
// refreshLoop) unless the node's previous one is still under way.
func (f *fleet) report(nd *simNode) {
	start := time.Now()
	defer func() {
		d := time.Since(start).Nanoseconds()
		f.counters.reportNanos.Add(d)
		for {
			m := f.counters.reportMax.Load()
			if d <= m || f.counters.reportMax.CompareAndSwap(m, d) {
				break
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	req := &gorayv1.HeartbeatRequest{
		NodeId:        nd.id.Bytes(),
		Available:     nd.info.GetTotal(),
		StoreCapacity: 2 << 30,
		Spill:         &gorayv1.SpillStats{},
		Memory:        &gorayv1.MemoryMonitorStats{},
	}
	rep, err := gorayv1.NewGcsClient(nd.gcs).ReportHeartbeat(ctx, req)
	if err != nil {
		f.counters.heartbeatErrs.Add(1)
		return
	}
	f.counters.heartbeats.Add(1)
	nd.lastHB.Store(time.Now().UnixNano())
	f.counters.heartbeatByte.Add(int64(proto.Size(req)))
	if rep.GetDead() {
		// Declared dead (its reports came too late): a raylet stops then.
		f.counters.declaredDead.Add(1)
		nd.killed.Store(true)
		return
	}
	if !nd.refreshing.CompareAndSwap(false, true) {
		f.counters.refreshSkipped.Add(1)
		return
	}
	select {
	case f.refreshQ <- nd:
	default: // every refresher is busy
		nd.refreshing.Store(false)
		f.counters.refreshSkipped.Add(1)
	}
}

// refresh is a node's refresh of its cluster view
// (raylet/clusterview.go refresh): the changes since its view's version.
func (f *fleet) refresh(nd *simNode) {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	raw := &rawReply{}
	if w := f.watch.Load(); w != nil && !w.seen[nd.idx].Load() {
		raw.watch = w.id[:]
	}
	refresh := &gorayv1.GetAllNodesRequest{SinceVersion: nd.viewVersion.Load()}
	if e := nd.viewEpoch.Load(); e != nil {
		refresh.SinceEpoch = *e
	}
	err := nd.gcs.Invoke(ctx, gorayv1.Gcs_GetAllNodes_FullMethodName, refresh, raw, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		f.counters.refreshErrs.Add(1)
		return
	}
	f.counters.refreshes.Add(1)
	if !raw.delta {
		f.counters.fullRefreshes.Add(1)
	}
	nd.viewEpoch.Store(&raw.epoch)
	nd.viewVersion.Store(raw.version)
	f.counters.refreshBytes.Add(int64(raw.n))
	if raw.dead {
		f.watch.Load().saw(nd.idx)
	}
}

// warm waits until every reporting node has a view (its first refresh,
// the whole table, is done), or until ctx ends: the steady state is
// measured after. It returns how many nodes still had none.
func (f *fleet) warm(ctx context.Context) int {
	t := time.NewTicker(f.period / 10)
	defer t.Stop()
	for {
		cold := 0
		for _, nd := range f.nodes {
			if nd.reporting.Load() && !nd.killed.Load() && nd.viewEpoch.Load() == nil {
				cold++
			}
		}
		if cold == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return cold
		case <-t.C:
		}
	}
}

// kill stops node i's reports (as if its machine vanished) and returns it.
func (f *fleet) kill(i int) *simNode {
	nd := f.nodes[i]
	nd.killed.Store(true)
	return nd
}

// alive counts the nodes still reporting.
func (f *fleet) alive() int {
	n := 0
	for _, nd := range f.nodes {
		if nd.reporting.Load() && !nd.killed.Load() {
			n++
		}
	}
	return n
}

func (f *fleet) stop() {
	f.stopOnce.Do(func() { close(f.stopped) })
}

// close stops the reports and the servers and closes every connection.
func (f *fleet) close() {
	f.stop()
	if f.srv != nil {
		f.srv.Stop()
	}
	for _, lis := range f.lis {
		_ = lis.Close()
	}
	f.wg.Wait()
	for _, cc := range f.conns {
		_ = cc.Close()
	}
}

// deathWatch records when each simulated node first saw node id dead in
// its view of the cluster.
type deathWatch struct {
	id    ids.ID
	seen  []atomic.Bool
	left  atomic.Int64 // nodes that have not seen it yet
	all   chan struct{}
	last  atomic.Int64 // unix nanoseconds of the latest first sighting
	first atomic.Int64
	once  sync.Once
	// watchers is how many nodes were to see it.
	watchers int
}

func newDeathWatch(id ids.ID, n int, watchers int) *deathWatch {
	w := &deathWatch{id: id, seen: make([]atomic.Bool, n), all: make(chan struct{}), watchers: watchers}
	w.left.Store(int64(watchers))
	return w
}

func (w *deathWatch) saw(i int) {
	if w.seen[i].Swap(true) {
		return
	}
	now := time.Now().UnixNano()
	w.first.CompareAndSwap(0, now)
	w.last.Store(now)
	if w.left.Add(-1) <= 0 {
		w.once.Do(func() { close(w.all) })
	}
}

// rawReply receives a GetAllNodes reply without decoding it: its size,
// its epoch, version and whether it is a delta, and whether the watched
// node is DEAD in it (a protowire scan). A simulated node does not need
// the table, and decoding thousands of entries per report would take the
// CPU the GCS is measured with.
type rawReply struct {
	n       int
	watch   []byte
	dead    bool
	epoch   string
	version uint64
	delta   bool
}

// rawCodec encodes requests as protobuf and keeps replies raw.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("scale: cannot encode %T", v)
	}
	return proto.Marshal(m)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	r, ok := v.(*rawReply)
	if !ok {
		return fmt.Errorf("scale: cannot decode into %T", v)
	}
	r.n = len(data)
	if r.watch != nil {
		r.dead = nodeDeadIn(data, r.watch)
	}
	r.epoch, r.version, r.delta = replyVersion(data)
	return nil
}

// replyVersion reads a GetAllNodesReply's epoch (2), version (3) and
// delta (4), skipping its nodes.
func replyVersion(b []byte) (epoch string, version uint64, delta bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", 0, false
		}
		b = b[n:]
		switch {
		case num == 2 && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			epoch, n = string(v), m
		case num == 3 && typ == protowire.VarintType:
			version, n = protowire.ConsumeVarint(b)
		case num == 4 && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			delta = v != 0
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return "", 0, false
		}
		b = b[n:]
	}
	return epoch, version, delta
}

// Name is "proto": the server decodes the request with its usual codec.
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

// nodeDeadIn reports whether the GetAllNodesReply in b lists node id as
// DEAD (nodes = 1 → NodeView.info = 1 → NodeInfo.node_id = 1, state = 7).
func nodeDeadIn(b, id []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return false
			}
			b = b[n:]
			continue
		}
		view, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if info := field(view, 1); info != nil {
			if nid := field(info, 1); string(nid) == string(id) {
				return string(field(info, 7)) == "DEAD"
			}
		}
	}
	return false
}

// field returns the bytes of the first length-delimited field num of b.
func field(b []byte, want protowire.Number) []byte {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == want && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			return v
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil
		}
		b = b[n:]
	}
	return nil
}

// simRaylet answers, for every simulated node, the calls a raylet gets
// from other raylets, drivers and the GCS. It runs nothing: lease requests
// are spilled back to a real node, bundles are accepted and forgotten.
type simRaylet struct {
	gorayv1.UnimplementedRayletServer
	f *fleet
}

// node returns the simulated node a call reached (nil when listeners are
// shared by several nodes).
func (s *simRaylet) node(ctx context.Context) *simNode {
	p, ok := peer.FromContext(ctx)
	if !ok || p.LocalAddr == nil || !s.f.perNode {
		return nil
	}
	return s.f.byAddr[p.LocalAddr.String()]
}

func (s *simRaylet) FreeObjects(ctx context.Context, req *gorayv1.FreeObjectsRequest) (*gorayv1.FreeObjectsReply, error) {
	s.f.counters.frees.Add(1)
	s.f.counters.freeBytes.Add(int64(proto.Size(req)))
	if nd := s.node(ctx); nd != nil {
		nd.frees.Add(1)
	}
	return &gorayv1.FreeObjectsReply{}, nil
}

func (s *simRaylet) WorkersDied(ctx context.Context, req *gorayv1.WorkersDiedRequest) (*gorayv1.WorkersDiedReply, error) {
	s.f.counters.died.Add(1)
	s.f.counters.diedBytes.Add(int64(proto.Size(req)))
	if nd := s.node(ctx); nd != nil {
		nd.deaths.Add(1)
		nd.deathIDs.Add(int32(len(req.GetWorkerIds())))
	}
	return &gorayv1.WorkersDiedReply{}, nil
}

// errNoSpillTarget: a lease request reached a simulated node before any
// real node was known to send it to.
var errNoSpillTarget = errors.New("scale: simulated node: no real node to spill back to yet")

func (s *simRaylet) RequestWorkerLease(ctx context.Context, req *gorayv1.LeaseRequest) (*gorayv1.LeaseReply, error) {
	s.f.counters.leases.Add(1)
	t := s.f.spillTo.Load()
	if t == nil {
		return nil, status.Error(codes.Unavailable, errNoSpillTarget.Error())
	}
	return &gorayv1.LeaseReply{SpillbackNodeId: t.node, SpillbackRaylet: t.addr}, nil
}

func (s *simRaylet) CancelWorkerLease(ctx context.Context, req *gorayv1.CancelLeaseRequest) (*gorayv1.CancelLeaseReply, error) {
	s.f.counters.otherReceived.Add(1)
	return &gorayv1.CancelLeaseReply{}, nil
}

func (s *simRaylet) PrepareBundleResources(ctx context.Context, req *gorayv1.PrepareBundlesRequest) (*gorayv1.PrepareBundlesReply, error) {
	s.f.counters.prepares.Add(1)
	return &gorayv1.PrepareBundlesReply{Success: true}, nil
}

func (s *simRaylet) CommitBundleResources(ctx context.Context, req *gorayv1.CommitBundlesRequest) (*gorayv1.CommitBundlesReply, error) {
	s.f.counters.commits.Add(1)
	return &gorayv1.CommitBundlesReply{}, nil
}

func (s *simRaylet) CancelResourceReserve(ctx context.Context, req *gorayv1.CancelReserveRequest) (*gorayv1.CancelReserveReply, error) {
	s.f.counters.cancels.Add(1)
	return &gorayv1.CancelReserveReply{}, nil
}

func (s *simRaylet) ReleaseUnusedBundles(ctx context.Context, req *gorayv1.ReleaseUnusedBundlesRequest) (*gorayv1.ReleaseUnusedBundlesReply, error) {
	s.f.counters.releases.Add(1)
	return &gorayv1.ReleaseUnusedBundlesReply{}, nil
}

func (s *simRaylet) DrainRaylet(ctx context.Context, req *gorayv1.DrainRayletRequest) (*gorayv1.DrainRayletReply, error) {
	s.f.counters.drains.Add(1)
	return &gorayv1.DrainRayletReply{Accepted: false, RejectionReason: "simulated node: never drains"}, nil
}

// simLogs answers a job's log drain (the driver's raylet asks every alive
// node when the driver shuts down): a simulated node has no worker output.
type simLogs struct {
	gorayv1.UnimplementedWorkerLogsServer
	f *fleet
}

func (s *simLogs) Drain(ctx context.Context, req *gorayv1.DrainLogsRequest) (*gorayv1.DrainLogsReply, error) {
	s.f.counters.logDrains.Add(1)
	return &gorayv1.DrainLogsReply{}, nil
}
