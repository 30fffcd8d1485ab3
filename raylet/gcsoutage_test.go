package raylet

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/waitfor"
)

// testGCSPeriod is the heartbeat period the test GCSs hand the raylet.
const testGCSPeriod = 50 * time.Millisecond

// servedGCS is a real GCS served on a loopback TCP address.
type servedGCS struct {
	g      *gcs.Server
	srv    *grpc.Server
	served chan struct{}
}

// serveGCS serves g on addr ("127.0.0.1:0" for a free port; the address
// of a stopped GCS to restart it there) until stop or the test's end.
func serveGCS(t *testing.T, g *gcs.Server, addr string) (*servedGCS, string) {
	t.Helper()
	var lis net.Listener
	waitFor(t, "the GCS address to be free", func() bool {
		var err error
		lis, err = net.Listen("tcp", addr)
		return err == nil
	})
	s := &servedGCS{g: g, srv: grpc.NewServer(rpc.ServerOptions(nil)...), served: make(chan struct{})}
	g.Register(s.srv)
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(lis)
	}()
	t.Cleanup(s.stop)
	return s, lis.Addr().String()
}

func (s *servedGCS) stop() {
	if s.srv == nil {
		return
	}
	s.srv.Stop()
	<-s.served
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	_ = s.g.Close(ctx)
	s.srv = nil
}

func openBoltGCS(t *testing.T, path string) *gcs.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	g, err := gcs.Open(ctx, gcs.Options{HeartbeatPeriod: testGCSPeriod, Storage: gcs.Storage{Backend: gcs.BackendBolt, Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// gcsHarness is a raylet running (Run) against a real GCS at addr, with
// its logs in logs (mods change its Config further).
type gcsHarness struct {
	*harness
	logs    *syncBuffer
	runDone chan error
}

func newGCSHarness(t *testing.T, addr string, limit time.Duration, mods ...func(*Config)) *gcsHarness {
	t.Helper()
	conn, err := rpc.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // after the harness's Shutdown
	logs := &syncBuffer{}
	var out io.Writer = logs
	if os.Getenv("RAYLET_TEST_LOG") != "" {
		out = io.MultiWriter(logs, os.Stderr)
	}
	h := newHarness(t, func(c *Config) {
		c.GCS = gorayv1.NewGcsClient(conn)
		c.GCSAddress = addr
		c.HeartbeatPeriod = testGCSPeriod
		c.GCSReconnectTimeout = limit
		c.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: out})
		for _, m := range mods {
			m(c)
		}
	})
	t.Cleanup(func() { // a failure shows what the raylet did
		if t.Failed() {
			t.Logf("the raylet's logs:\n%s", logs)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	gh := &gcsHarness{harness: h, logs: logs, runDone: make(chan error, 1)}
	go func() { gh.runDone <- h.r.Run(ctx) }()
	t.Cleanup(func() { // before the harness's Shutdown
		cancel()
		<-gh.runDone
	})
	return gh
}

// nodeIn returns the GCS's view of the raylet's node (nil if unknown).
func (h *gcsHarness) nodeIn(g *gcs.Server) *gorayv1.NodeView {
	for _, n := range g.Nodes() {
		if string(n.GetInfo().GetNodeId()) == string(h.r.NodeID().Bytes()) {
			return n
		}
	}
	return nil
}

func (h *gcsHarness) waitAlive(g *gcs.Server, since time.Time) {
	h.t.Helper()
	waitFor(h.t, "the node to be ALIVE in the GCS with a heartbeat", func() bool {
		n := h.nodeIn(g)
		return n != nil && n.GetInfo().GetState() == gcs.StateAlive && n.GetLastHeartbeatMs() > since.UnixMilli()
	})
}

// shutdown shuts the raylet down while the test's GCS still serves (the
// harness's own Shutdown, later, returns the same result).
func (h *gcsHarness) shutdown() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	if err := h.r.Shutdown(ctx); err != nil {
		h.t.Fatalf("Shutdown: %v", err)
	}
}

func (h *gcsHarness) count(s string) int { return strings.Count(h.logs.String(), s) }

func (h *gcsHarness) waitStopped() {
	h.t.Helper()
	select {
	case <-h.r.Done():
	case <-time.After(waitfor.Generous):
		h.t.Fatalf("the node did not stop itself; logs:\n%s", h.logs)
	}
}

const (
	logOutage      = "the GCS is unreachable; the node keeps serving"
	logStill       = "the GCS is still unreachable"
	logBack        = "the GCS is reachable again"
	logReRegist    = "node registered again"
	logFirstRegist = "node registered: "
)

// TestGCSRestartOnDurableStorage: the GCS stops for a few heartbeat
// periods and restarts on the same bolt storage; the raylet serves a lease
// meanwhile, logs the outage once when it starts and once when it ends,
// and is ALIVE in the restarted GCS with the same id, its heartbeats
// accepted once it registered again (the restored GCS knows it only from
// its storage until then).
func TestGCSRestartOnDurableStorage(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gcs.db")
	g1, addr := serveGCS(t, openBoltGCS(t, db), "127.0.0.1:0")
	h := newGCSHarness(t, addr, time.Minute)
	h.waitAlive(g1.g, time.Time{})
	d := h.driver()
	cluster := g1.g.ClusterID()

	g1.stop()
	waitFor(t, "a few failed heartbeats", func() bool { return h.count(logStill) >= 3 })
	l := h.mustLease(d.job, cpus(1))
	h.returnLease(l, false)

	restart := time.Now()
	g2, _ := serveGCS(t, openBoltGCS(t, db), addr)
	if g2.g.ClusterID() != cluster {
		t.Fatalf("restarted GCS has cluster %s, want %s", g2.g.ClusterID(), cluster)
	}
	h.waitAlive(g2.g, restart)
	waitFor(t, "the end of the outage to be logged", func() bool { return h.count(logBack) == 1 })
	if n, m := h.count(logOutage), h.count(logBack); n != 1 || m != 1 {
		t.Errorf("outage logged %d times at its start and %d at its end, want once each; logs:\n%s", n, m, h.logs)
	}
	// The restored GCS knows the node only from its storage: it refuses
	// its heartbeats until the node registers again, once. (The line is
	// logged after the registration's reply, which can come after the GCS
	// shows the node alive.)
	waitFor(t, "the registration to be logged", func() bool { return h.count(logReRegist+":") >= 1 })
	if n := h.count(logReRegist + ":"); n != 1 {
		t.Errorf("the node registered again %d times with the restored GCS, want once; logs:\n%s", n, h.logs)
	}
	select {
	case <-h.r.Done():
		t.Fatalf("the node stopped: %v", h.r.Err())
	default:
	}
	h.shutdown()
	if n := h.nodeIn(g2.g); n.GetInfo().GetState() != gcs.StateDead {
		t.Errorf("the node is %s in the GCS after Shutdown, want DEAD", n.GetInfo().GetState())
	}
}

// TestGCSWithoutTheNodeRegistersItAgain: a GCS of the same cluster that
// lost the node's record (restarted on storage saved before the node
// joined) answers NotFound; the raylet registers again with its id.
func TestGCSWithoutTheNodeRegistersItAgain(t *testing.T) {
	dir := t.TempDir()
	db, before := filepath.Join(dir, "gcs.db"), filepath.Join(dir, "before.db")
	g0 := openBoltGCS(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	if err := g0.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(before, b, 0o600); err != nil {
		t.Fatal(err)
	}
	g1, addr := serveGCS(t, openBoltGCS(t, db), "127.0.0.1:0")
	h := newGCSHarness(t, addr, time.Minute)
	h.waitAlive(g1.g, time.Time{})
	// The raylet itself saw its first registration through (a first try
	// whose reply was lost would otherwise land on the restarted GCS as a
	// first registration, not as a registration again).
	waitFor(t, "the first registration to be logged", func() bool { return h.count(logFirstRegist) == 1 })
	g1.stop()

	restart := time.Now()
	g2, _ := serveGCS(t, openBoltGCS(t, before), addr)
	if g2.g.ClusterID() != g1.g.ClusterID() {
		t.Fatalf("the GCS's cluster changed")
	}
	h.waitAlive(g2.g, restart)
	waitFor(t, "the registration to be logged", func() bool { return h.count(logReRegist) == 1 })
	h.shutdown()
}

// TestGCSOfAnotherClusterStopsTheNode: a GCS started afresh (memory, a new
// cluster id) refuses the node as another cluster's; the node stops.
func TestGCSOfAnotherClusterStopsTheNode(t *testing.T) {
	g1, addr := serveGCS(t, gcs.New(gcs.Options{HeartbeatPeriod: testGCSPeriod}), "127.0.0.1:0")
	h := newGCSHarness(t, addr, time.Minute)
	h.waitAlive(g1.g, time.Time{})
	waitFor(t, "the first registration to be logged", func() bool { return h.count(logFirstRegist) == 1 })
	g1.stop()
	g2, _ := serveGCS(t, gcs.New(gcs.Options{HeartbeatPeriod: testGCSPeriod}), addr)
	h.waitStopped()
	var oc *OtherClusterError
	if err := h.r.Err(); !errors.As(err, &oc) || !strings.Contains(err.Error(), "the GCS at "+addr+" belongs to another cluster") {
		t.Fatalf("Err() = %v, want an OtherClusterError naming the GCS at %s", err, addr)
	}
	if n := h.nodeIn(g2.g); n != nil {
		t.Errorf("the other cluster's GCS took the node: %v", n)
	}
}

// TestGCSUnreachableStopsTheNode: with no GCS for longer than the limit the
// node stops itself with a message saying so, and its Shutdown (no GCS to
// tell) leaves no worker process; a node whose GCS never answers fails to
// start within the limit.
func TestGCSUnreachableStopsTheNode(t *testing.T) {
	t.Run("outage longer than the limit", func(t *testing.T) {
		g, addr := serveGCS(t, gcs.New(gcs.Options{HeartbeatPeriod: testGCSPeriod}), "127.0.0.1:0")
		h := newGCSHarness(t, addr, time.Second)
		h.waitAlive(g.g, time.Time{})
		d := h.driver()
		l := h.mustLease(d.job, cpus(1))
		pid := l.GetWorkerPid()
		g.stop()
		h.waitStopped()
		var gu *GCSUnreachableError
		if err := h.r.Err(); !errors.As(err, &gu) || !strings.Contains(err.Error(), "the GCS at "+addr+" has been unreachable for") || gu.For < time.Second {
			t.Fatalf("Err() = %v, want a GCSUnreachableError naming the GCS at %s", err, addr)
		}
		h.shutdown()
		waitFor(t, "the worker process to be gone", func() bool { return processGone(pid) })
	})
	t.Run("never reachable", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		lis.Close()
		h := newGCSHarness(t, addr, 500*time.Millisecond)
		var err2 error
		select {
		case err2 = <-h.runDone:
			h.runDone <- err2 // for the cleanup
		case <-time.After(waitfor.Generous):
			t.Fatal("Run did not give up registering")
		}
		var gu *GCSUnreachableError
		if !errors.As(err2, &gu) || !errors.As(h.r.Err(), &gu) {
			t.Fatalf("Run = %v, Err() = %v; want GCSUnreachableError", err2, h.r.Err())
		}
		h.waitStopped()
	})
}

// cutReserver is a GCS's reserver on the real raylets, with the
// reservation cut short by the GCS's death: until killed is closed its
// commits wait (afterCommit: once the raylet committed), and from then on
// nothing it sends reaches a raylet. With refusePrepares its prepares are
// answered "no" without reaching the raylet (a GCS that does not place
// the group again).
type cutReserver struct {
	*gcs.RayletReserver
	afterCommit    bool
	refusePrepares bool
	killed         chan struct{}
	// logs are the logs of the GCS that reserves with it
	// (openReservingGCS).
	logs *syncBuffer
}

var errGCSKilled = errors.New("the GCS was killed")

func newCutReserver(t *testing.T) *cutReserver {
	r := &cutReserver{
		RayletReserver: gcs.NewRayletReserver(func(target string) (*grpc.ClientConn, error) { return rpc.Dial(target, nil) }),
		killed:         make(chan struct{}),
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func (r *cutReserver) dead() bool {
	select {
	case <-r.killed:
		return true
	default:
		return false
	}
}

func (r *cutReserver) Prepare(ctx context.Context, n *gorayv1.NodeInfo, g ids.ID, b []*gorayv1.Bundle) (*gorayv1.PrepareBundlesReply, error) {
	switch {
	case r.dead():
		return nil, errGCSKilled
	case r.refusePrepares:
		return &gorayv1.PrepareBundlesReply{Reason: "prepares refused by the test"}, nil
	}
	return r.RayletReserver.Prepare(ctx, n, g, b)
}

func (r *cutReserver) Commit(ctx context.Context, n *gorayv1.NodeInfo, g ids.ID, idx []int32) (*gorayv1.CommitBundlesReply, error) {
	if r.afterCommit && !r.dead() {
		if _, err := r.RayletReserver.Commit(ctx, n, g, idx); err != nil {
			return nil, err
		}
	}
	select {
	case <-r.killed:
		return nil, errGCSKilled
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *cutReserver) Cancel(ctx context.Context, n *gorayv1.NodeInfo, g ids.ID, idx []int32, reason string) (*gorayv1.CancelReserveReply, error) {
	if r.dead() {
		return nil, errGCSKilled
	}
	return r.RayletReserver.Cancel(ctx, n, g, idx, reason)
}

func (r *cutReserver) ReleaseUnused(ctx context.Context, n *gorayv1.NodeInfo, inUse []*gorayv1.BundleRef, reason string) (*gorayv1.ReleaseUnusedBundlesReply, error) {
	if r.dead() {
		return nil, errGCSKilled
	}
	return r.RayletReserver.ReleaseUnused(ctx, n, inUse, reason)
}

// openReservingGCS opens a GCS on the bolt file at path that reserves
// placement groups with r; its nodes are declared dead only after 100
// missed heartbeat periods.
func openReservingGCS(t *testing.T, path string, r *cutReserver) *gcs.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	logs := &syncBuffer{}
	r.logs = logs
	t.Cleanup(func() { // a failure shows what this GCS did
		if t.Failed() {
			t.Logf("the logs of the GCS on %s:\n%s", path, logs)
		}
	})
	g, err := gcs.Open(ctx, gcs.Options{HeartbeatPeriod: testGCSPeriod, FailureThreshold: 100, Reserver: r,
		Storage: gcs.Storage{Backend: gcs.BackendBolt, Path: path},
		Logger:  hclog.New(&hclog.LoggerOptions{Name: "gcs", Level: hclog.Debug, Output: logs})})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// runGCS runs g (health checks, placement groups) until the returned stop
// or the test's end (before the GCS stops serving).
func runGCS(t *testing.T, g *gcs.Server) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// TestGCSRestartReleasesCutReservation: the GCS prepares a placement
// group's bundle on a real raylet (and, in "committed", the raylet commits
// it) and dies before the group is created; the GCS restarted on the same
// storage has the group PENDING and does not place it again. The raylet,
// which the restored GCS knows only from its storage, registers again
// (its heartbeats are refused until it does) and is swept: its available
// resources return to its totals, and the GCS accepts its heartbeats (a
// committed bundle's resources, unknown to the restored GCS, would make
// it refuse them).
func TestGCSRestartReleasesCutReservation(t *testing.T) {
	for _, committed := range []bool{false, true} {
		name := "prepared"
		if committed {
			name = "committed"
		}
		t.Run(name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "gcs.db")
			r1 := newCutReserver(t)
			r1.afterCommit = committed
			g1, addr := serveGCS(t, openReservingGCS(t, db, r1), "127.0.0.1:0")
			stopRun1 := runGCS(t, g1.g)
			h := newGCSHarness(t, addr, time.Minute)
			h.waitAlive(g1.g, time.Time{})
			totals := h.r.cfg.Resources.Clone()
			if got := h.stats().GetAvailable().GetAmounts(); !maps.Equal(got, map[string]int64(totals)) {
				t.Fatalf("available before the group = %v, want the totals %v", got, totals)
			}

			group := ids.New()
			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
			defer cancel()
			_, err := g1.g.CreatePlacementGroup(ctx, &gorayv1.CreatePlacementGroupRequest{Group: &gorayv1.PlacementGroupInfo{
				PlacementGroupId: group.Bytes(), Detached: true, Strategy: gorayv1.PlacementStrategy_PLACEMENT_STRATEGY_STRICT_PACK,
				Bundles: []*gorayv1.Bundle{{Index: 0, Resources: resourcesProto(cpus(1))}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the raylet to hold the bundle", func() bool {
				return maps.Equal(h.r.sched.heldBundles(group), map[int]bool{0: committed})
			})
			close(r1.killed) // the GCS dies: nothing it sends from now on arrives
			stopRun1()
			g1.stop()

			restart := time.Now()
			r2 := newCutReserver(t)
			r2.refusePrepares = true
			g2, _ := serveGCS(t, openReservingGCS(t, db, r2), addr)
			runGCS(t, g2.g)
			waitFor(t, "the raylet's available resources back to its totals", func() bool {
				got := h.stats().GetAvailable().GetAmounts()
				return maps.Equal(got, map[string]int64(totals)) && len(h.r.sched.heldBundles(group)) == 0
			})
			h.r.sched.mu.Lock()
			total := h.r.sched.total.Clone()
			h.r.sched.mu.Unlock()
			if !maps.Equal(total, totals) {
				t.Fatalf("the raylet's total is %v, want its own %v", total, totals)
			}
			r, err := g2.g.GetPlacementGroup(ctx, &gorayv1.GetPlacementGroupRequest{PlacementGroupId: group.Bytes()})
			if err != nil {
				t.Fatal(err)
			}
			if st := r.GetGroup().GetState(); st != gorayv1.PlacementGroupState_PLACEMENT_GROUP_STATE_PENDING {
				t.Fatalf("the restored group is %v, want PENDING", st)
			}
			h.waitAlive(g2.g, restart)
			if n := h.count("released placement group bundles the GCS does not use"); n != 1 {
				t.Errorf("the release was logged %d times, want once; logs:\n%s", n, h.logs)
			}
			// The restored GCS logs each registration: "node registered again
			// after the GCS restarted" as a rule, "node registered" when the
			// killed GCS's answer to the node's first registration never
			// reached it and the node comes as new.
			regs := func() int {
				l := r2.logs.String()
				return strings.Count(l, "gcs: node registered again after the GCS restarted") + strings.Count(l, "gcs: node registered:")
			}
			waitFor(t, "the registration to be logged", func() bool { return regs() >= 1 })
			if n := regs(); n != 1 {
				t.Errorf("the node registered %d times with the restored GCS, want once; logs:\n%s", n, r2.logs)
			}
			h.shutdown()
		})
	}
}

// TestGCSOutageJobReportsWait: while the GCS is down, a driver's
// registration waits for it (and is done once it is back), and a job that
// ends meanwhile is reported to the GCS once it is back: a restored GCS
// learns of it instead of keeping the job RUNNING forever.
func TestGCSOutageJobReportsWait(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gcs.db")
	g1, addr := serveGCS(t, openBoltGCS(t, db), "127.0.0.1:0")
	h := newGCSHarness(t, addr, time.Minute)
	h.waitAlive(g1.g, time.Time{})
	ended := h.driver()
	g1.stop()

	// The job ends during the outage.
	ended.cancel()
	waitFor(t, "the job's end to be retried in the background", func() bool {
		return strings.Contains(h.logs.String(), "marking job "+ended.job.Short()+" finished: the GCS cannot be reached")
	})
	// A driver registers during the outage: it waits.
	type reg struct {
		d   *testDriver
		err error
	}
	regd := make(chan reg, 1)
	go func() {
		d, err := h.tryDriver(testworkerBin)
		regd <- reg{d, err}
	}()
	select {
	case r := <-regd:
		t.Fatalf("a driver registered with the GCS down: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}

	g2, _ := serveGCS(t, openBoltGCS(t, db), addr)
	r := <-regd
	if r.err != nil {
		t.Fatalf("driver registration after the GCS came back: %v", r.err)
	}
	jobState := func(id ids.ID) string {
		for _, j := range g2.g.Jobs() {
			if string(j.GetJobId()) == string(id.Bytes()) {
				return j.GetState()
			}
		}
		return ""
	}
	waitFor(t, "the restored GCS to learn the job ended during the outage", func() bool {
		return jobState(ended.job) == gcs.StateFinished
	})
	if s := jobState(r.d.job); s != gcs.StateRunning {
		t.Errorf("the job registered during the outage is %q in the GCS, want RUNNING", s)
	}
	h.shutdown()
}
