package raylet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/waitfor"
)

// testworkerBin is the test worker binary built by TestMain.
var testworkerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "raylet-testworker")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testworkerBin = filepath.Join(dir, "testworker")
	out, err := exec.Command("go", "build", "-o", testworkerBin, "./internal/testworker").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the test worker: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ---------------------------------------------------------------- fakes

type storeFullError struct{ id ids.ObjectID }

func (e storeFullError) Error() string {
	return fmt.Sprintf("object store full: cannot create %s", e.id)
}
func (e storeFullError) StoreFull() bool { return true }

type fakeObject struct {
	entry  StoreEntry
	client ids.ID
}

// fakeStore is an in-memory ObjectStore that records what it was asked.
type fakeStore struct {
	mu        sync.Mutex
	objs      map[ids.ObjectID]*fakeObject
	next      int64
	createErr error
	released  []ids.ID // ReleaseClient calls
	aborted   []ids.ObjectID
	sealedBy  map[ids.ObjectID]ids.ID
	freed     []ids.ObjectID
	releases  map[ids.ID][]ids.ObjectID // Release calls by client
	getClient []ids.ID
	arena     []byte // object bytes, by offset
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		objs:     map[ids.ObjectID]*fakeObject{},
		sealedBy: map[ids.ObjectID]ids.ID{},
		releases: map[ids.ID][]ids.ObjectID{},
	}
}

func (s *fakeStore) Create(id ids.ObjectID, size int64, md []byte, client ids.ID) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.createErr != nil {
		return 0, s.createErr
	}
	if _, ok := s.objs[id]; ok {
		return 0, fmt.Errorf("object %s already exists", id)
	}
	off := s.next
	s.next += size
	s.arena = append(s.arena, make([]byte, size)...)
	s.objs[id] = &fakeObject{entry: StoreEntry{ID: id, Found: true, Offset: off, DataSize: size, Metadata: md, Pins: 1}, client: client}
	return off, nil
}

func (s *fakeStore) Seal(id ids.ObjectID, client ids.ID, release bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[id]
	if !ok {
		return fmt.Errorf("object %s not found", id)
	}
	o.entry.Sealed = true
	s.sealedBy[id] = client
	return nil
}

func (s *fakeStore) Abort(id ids.ObjectID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objs, id)
	s.aborted = append(s.aborted, id)
	return nil
}

func (s *fakeStore) GetEntries(objs []ids.ObjectID, client ids.ID) []StoreEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.getClient = append(s.getClient, client)
	out := make([]StoreEntry, 0, len(objs))
	for _, id := range objs {
		if o, ok := s.objs[id]; ok && o.entry.Sealed {
			o.entry.Pins++
			out = append(out, o.entry)
		} else {
			out = append(out, StoreEntry{ID: id})
		}
	}
	return out
}

func (s *fakeStore) Release(objs []ids.ObjectID, client ids.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases[client] = append(s.releases[client], objs...)
}

func (s *fakeStore) Free(objs []ids.ObjectID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range objs {
		delete(s.objs, id)
	}
	s.freed = append(s.freed, objs...)
}

func (s *fakeStore) ReleaseClient(client ids.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = append(s.released, client)
}

func (s *fakeStore) Usage() StoreUsage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var used int64
	for _, o := range s.objs {
		used += o.entry.DataSize
	}
	return StoreUsage{Used: used, Capacity: 1 << 20, Objects: len(s.objs)}
}

func (s *fakeStore) ListEntries() []StoreEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []StoreEntry
	for _, o := range s.objs {
		out = append(out, o.entry)
	}
	return out
}

func (s *fakeStore) SocketPath() string { return "/tmp/fake-store.sock" }
func (s *fakeStore) Capacity() int64    { return 1 << 20 }

func (s *fakeStore) Contains(id ids.ObjectID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.objs[id]
	return ok
}

func (s *fakeStore) Data(offset, size int64) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.arena[offset : offset+size : offset+size]
}

func (s *fakeStore) releasedClient(id ids.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.released {
		if c == id {
			return true
		}
	}
	return false
}

// fakeGCS records the GCS calls a raylet makes. Methods it does not
// override panic (nil embedded interface).
type fakeGCS struct {
	gorayv1.GcsClient

	mu           sync.Mutex
	nodes        []*gorayv1.NodeInfo
	unregistered [][]byte
	heartbeats   []*gorayv1.HeartbeatRequest
	jobs         []*gorayv1.JobInfo
	finished     [][]byte
	failures     []*gorayv1.ReportWorkerFailureRequest
	dead         bool // answer heartbeats with dead=true
}

func (g *fakeGCS) RegisterNode(ctx context.Context, in *gorayv1.RegisterNodeRequest, _ ...grpc.CallOption) (*gorayv1.RegisterNodeReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nodes = append(g.nodes, in.GetNode())
	return &gorayv1.RegisterNodeReply{}, nil
}

func (g *fakeGCS) UnregisterNode(ctx context.Context, in *gorayv1.UnregisterNodeRequest, _ ...grpc.CallOption) (*gorayv1.UnregisterNodeReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unregistered = append(g.unregistered, in.GetNodeId())
	return &gorayv1.UnregisterNodeReply{}, nil
}

func (g *fakeGCS) ReportHeartbeat(ctx context.Context, in *gorayv1.HeartbeatRequest, _ ...grpc.CallOption) (*gorayv1.HeartbeatReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.heartbeats = append(g.heartbeats, in)
	return &gorayv1.HeartbeatReply{Dead: g.dead}, nil
}

func (g *fakeGCS) AddJob(ctx context.Context, in *gorayv1.AddJobRequest, _ ...grpc.CallOption) (*gorayv1.AddJobReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.jobs = append(g.jobs, in.GetJob())
	return &gorayv1.AddJobReply{}, nil
}

func (g *fakeGCS) MarkJobFinished(ctx context.Context, in *gorayv1.MarkJobFinishedRequest, _ ...grpc.CallOption) (*gorayv1.MarkJobFinishedReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.finished = append(g.finished, in.GetJobId())
	return &gorayv1.MarkJobFinishedReply{}, nil
}

func (g *fakeGCS) ReportWorkerFailure(ctx context.Context, in *gorayv1.ReportWorkerFailureRequest, _ ...grpc.CallOption) (*gorayv1.ReportWorkerFailureReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failures = append(g.failures, in)
	return &gorayv1.ReportWorkerFailureReply{}, nil
}

// locked runs f with g's lock held.
func (g *fakeGCS) GetAllNodes(ctx context.Context, in *gorayv1.GetAllNodesRequest, _ ...grpc.CallOption) (*gorayv1.GetAllNodesReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rep := &gorayv1.GetAllNodesReply{}
	for _, n := range g.nodes {
		rep.Nodes = append(rep.Nodes, &gorayv1.NodeView{Info: n})
	}
	return rep, nil
}

func (g *fakeGCS) GetAllJobs(ctx context.Context, in *gorayv1.GetAllJobsRequest, _ ...grpc.CallOption) (*gorayv1.GetAllJobsReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return &gorayv1.GetAllJobsReply{Jobs: g.jobs}, nil
}

func (g *fakeGCS) locked(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f()
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ---------------------------------------------------------------- harness

type harness struct {
	t     testing.TB
	r     *Raylet
	cl    gorayv1.RayletClient
	store *fakeStore
	gcs   *fakeGCS
	dir   string
}

func intp(n int) *int { return &n }

func cpus(n float64) resources.Set {
	v, _ := resources.FromFloat(resources.CPU, n)
	return resources.Set{resources.CPU: v}
}

// newHarness starts a raylet (2 CPUs, no prestart unless mod says
// otherwise) served over a real unix socket, with a fake store and GCS.
func newHarness(t testing.TB, mod func(*Config)) *harness {
	t.Helper()
	// Short paths: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "rl")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, store: newFakeStore(), gcs: &fakeGCS{}, dir: dir}
	logger := hclog.NewNullLogger()
	if os.Getenv("RAYLET_TEST_LOG") != "" {
		logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: os.Stderr})
	}
	cfg := Config{
		NodeName:   "test-node",
		SessionDir: dir,
		SocketPath: filepath.Join(dir, "raylet.sock"),
		Resources:  cpus(2),
		Labels:     map[string]string{"zone": "test"},
		Store:      h.store,
		GCS:        h.gcs,
		Pool:       config.WorkerPool{Prestart: intp(0)},
		Logger:     logger,
		LogLevel:   "debug",
		GCSAddress: "127.0.0.1:6379",
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("New: %v", err)
	}
	h.r = r
	lis, err := net.Listen("unix", cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	r.Register(srv)
	go srv.Serve(lis)
	conn, err := grpc.NewClient("unix://"+cfg.SocketPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	h.cl = gorayv1.NewRayletClient(conn)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		srv.Stop()
		conn.Close()
		os.RemoveAll(dir)
	})
	return h
}

type testDriver struct {
	id     ids.ID
	job    ids.ID
	addr   *gorayv1.Address
	reg    *gorayv1.RayletCommand
	stream gorayv1.Raylet_DriverSessionClient
	cancel context.CancelFunc
}

// driver registers a fake driver whose workers run the test worker with
// the extra environment variables env.
func (h *harness) driver(env ...string) *testDriver {
	h.t.Helper()
	d, err := h.tryDriver(testworkerBin, env...)
	if err != nil {
		h.t.Fatalf("driver registration: %v", err)
	}
	return d
}

func (h *harness) tryDriver(bin string, env ...string) (*testDriver, error) {
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	stream, err := h.cl.DriverSession(ctx)
	if err != nil {
		return nil, err
	}
	d := &testDriver{id: ids.New(), stream: stream, cancel: cancel}
	d.addr = &gorayv1.Address{UnixPath: filepath.Join(h.dir, "driver.sock"), WorkerId: d.id.Bytes()}
	sum, err := digest.FileSHA256(bin)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&gorayv1.DriverMessage{
		Job:     &gorayv1.JobInfo{BinaryPath: bin, BinarySha256: sum, Env: env},
		Address: d.addr,
		Pid:     int32(os.Getpid()),
	}); err != nil {
		return nil, err
	}
	reg, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	d.reg = reg
	d.job = ids.MustFromBytes(reg.GetJobId())
	return d, nil
}

func (h *harness) lease(ctx context.Context, job ids.ID, res resources.Set, actor ids.ID) (*gorayv1.LeaseReply, error) {
	req := &gorayv1.LeaseRequest{JobId: job.Bytes(), Resources: resourcesProto(res)}
	if !actor.IsNil() {
		req.ActorId = actor.Bytes()
	}
	return h.cl.RequestWorkerLease(ctx, req)
}

func (h *harness) mustLease(job ids.ID, res resources.Set) *gorayv1.LeaseReply {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	l, err := h.lease(ctx, job, res, ids.Nil)
	if err != nil {
		h.t.Fatalf("lease %v: %v", res, err)
	}
	return l
}

func (h *harness) returnLease(l *gorayv1.LeaseReply, disconnect bool) {
	h.t.Helper()
	if _, err := h.cl.ReturnWorkerLease(context.Background(), &gorayv1.ReturnLeaseRequest{LeaseId: l.GetLeaseId(), DisconnectWorker: disconnect}); err != nil {
		h.t.Fatalf("return lease: %v", err)
	}
}

func (h *harness) stats() *gorayv1.GetNodeStatsReply {
	h.t.Helper()
	s, err := h.cl.GetNodeStats(context.Background(), &gorayv1.GetNodeStatsRequest{})
	if err != nil {
		h.t.Fatalf("GetNodeStats: %v", err)
	}
	return s
}

// workers returns the node's workers by state.
func (h *harness) workers(state string) []*gorayv1.WorkerStats {
	var out []*gorayv1.WorkerStats
	for _, w := range h.stats().GetWorkers() {
		if state == "" || w.GetState() == state {
			out = append(out, w)
		}
	}
	return out
}

func (h *harness) availableCPU() int64 {
	return h.stats().GetAvailable().GetAmounts()[resources.CPU]
}

func (h *harness) pendingCount() int32 {
	var n int32
	for _, p := range h.stats().GetPending() {
		n += p.GetCount()
	}
	return n
}

// waitFor polls cond until it holds, for at most waitfor.Generous.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitfor.Cond(t, waitfor.Generous, what, cond)
}

// processGone reports whether pid no longer exists (it was reaped).
func processGone(pid int32) bool {
	if pid <= 0 {
		panic(fmt.Sprintf("processGone(%d): not a process id", pid))
	}
	return errors.Is(syscall.Kill(int(pid), 0), syscall.ESRCH)
}

func workerPIDs(ws []*gorayv1.WorkerStats) []int32 {
	var out []int32
	for _, w := range ws {
		out = append(out, w.GetPid())
	}
	return out
}
