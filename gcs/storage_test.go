package gcs

import (
	"context"
	"errors"
	"fmt"
	"github.com/goray-dev/goray/internal/leaktest"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goray-dev/goray/gcs/internal/store"
	_ "github.com/goray-dev/goray/gcs/redisstore" // the Redis backend
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/testservers/redistest"
	"github.com/goray-dev/goray/internal/waitfor"
)

// serveOpened serves an opened server over real gRPC (and runs it) until
// the returned stop function or the test's end; stop closes its storage.
func serveOpened(t *testing.T, s *Server) (gorayv1.GcsClient, func()) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "gcs.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = g.Serve(lis) }()
	go func() { defer wg.Done(); s.Run(ctx) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			conn.Close()
			cancel()
			g.Stop()
			wg.Wait()
			cctx, ccancel := context.WithTimeout(context.Background(), waitfor.Generous)
			defer ccancel()
			if err := s.Close(cctx); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return gorayv1.NewGcsClient(conn), stop
}

// storages are the durable backends, each with a fresh place to keep data.
var storages = []struct {
	name string
	make func(t *testing.T) (Storage, *redistest.Server)
}{
	{"bolt", func(t *testing.T) (Storage, *redistest.Server) {
		return Storage{Backend: BackendBolt, Path: filepath.Join(t.TempDir(), "head", "gcs.db")}, nil
	}},
	{"redis", func(t *testing.T) (Storage, *redistest.Server) {
		srv := redistest.Start(t)
		return Storage{Backend: BackendRedis, RedisAddress: srv.Address, RedisPassword: srv.Password, RedisPrefix: "test"}, srv
	}},
}

// TestRestartRestoresEverything: a GCS stopped and opened again on the same
// storage has the cluster id, nodes, jobs, actors (names, state, restarts,
// owners), KV entries and placement groups of the first.
func TestRestartRestoresEverything(t *testing.T) {
	for _, sc := range storages {
		t.Run(sc.name, func(t *testing.T) {
			if sc.name == "bolt" {
				// (Redis runs a server whose process reaper outlives the
				// count; bolt shows the GCS itself leaks nothing.)
				leaktest.Goroutines(t)
			}
			st, _ := sc.make(t)
			f := newFakeRaylets()
			s1, err := Open(ctxT(t), Options{Storage: st, Reserver: f})
			mustOK(t, err)
			if s1.Restored() {
				t.Fatal("a fresh storage says it was restored")
			}
			c1, stop1 := serveOpened(t, s1)
			node := newID()
			f.addNode(node, 4)
			info := nodeInfo(node, "n0")
			_, err = c1.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: info})
			mustOK(t, err)
			job := newID()
			_, err = c1.AddJob(ctxT(t), &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: job.Bytes(), BinaryPath: "/bin/x", BinarySha256: fmt.Sprintf("%064x", 7)}})
			mustOK(t, err)
			actor := newID()
			a := actorOn(actor, job, node, newID(), "counter")
			a.MaxRestarts = 3
			a.Owner = &gorayv1.Address{NodeId: node.Bytes(), WorkerId: newID().Bytes()}
			registerActor(t, c1, a)
			setState(t, c1, actor, gorayv1.ActorState_ACTOR_STATE_ALIVE, "")
			_, err = c1.ReportWorkerFailure(ctxT(t), &gorayv1.ReportWorkerFailureRequest{WorkerId: a.GetAddress().GetWorkerId(), Reason: "crash"})
			mustOK(t, err)
			_, err = c1.KVPut(ctxT(t), &gorayv1.KVPutRequest{Ns: "collective", Key: "group/a", Value: []byte("ranks"), Overwrite: true})
			mustOK(t, err)
			_, err = c1.KVPut(ctxT(t), &gorayv1.KVPutRequest{Ns: "collective", Key: "gone", Value: []byte("x"), Overwrite: true})
			mustOK(t, err)
			_, err = c1.KVDel(ctxT(t), &gorayv1.KVDelRequest{Ns: "collective", Key: "gone"})
			mustOK(t, err)
			pg := newID()
			_, err = c1.CreatePlacementGroup(ctxT(t), &gorayv1.CreatePlacementGroupRequest{Group: &gorayv1.PlacementGroupInfo{
				PlacementGroupId: pg.Bytes(), Name: "gang", JobId: job.Bytes(), Detached: true, Bundles: bundlesOf(1)}})
			mustOK(t, err)
			_, err = c1.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{PlacementGroupId: pg.Bytes(), WaitReady: true})
			mustOK(t, err)
			cluster := s1.ClusterID()
			stop1()

			s2, err := Open(ctxT(t), Options{Storage: st, Reserver: f})
			mustOK(t, err)
			c2, _ := serveOpened(t, s2)
			if !s2.Restored() || s2.ClusterID() != cluster {
				t.Fatalf("restored=%v cluster %q, want true and %q", s2.Restored(), s2.ClusterID(), cluster)
			}
			// The node is shown once it registered again (restore.go).
			_, err = c2.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: info, ClusterId: cluster})
			mustOK(t, err)
			nv := nodeView(t, c2, node)
			if nv.GetInfo().GetState() != StateAlive || nv.GetInfo().GetNodeName() != "n0" {
				t.Fatalf("node after restart: %v", nv.GetInfo())
			}
			if got := nv.GetInfo().GetTotal().GetAmounts()[resources.GroupName("CPU", pg.String(), 0)]; got != resources.Unit {
				t.Errorf("the committed bundle is not in the node's total after restart: %v", nv.GetInfo().GetTotal())
			}
			jobs, err := c2.GetAllJobs(ctxT(t), &gorayv1.GetAllJobsRequest{})
			mustOK(t, err)
			if len(jobs.GetJobs()) != 1 || ids.MustFromBytes(jobs.GetJobs()[0].GetJobId()) != job {
				t.Fatalf("jobs after restart: %v", jobs.GetJobs())
			}
			r, err := c2.GetActor(ctxT(t), &gorayv1.GetActorRequest{Name: "counter"})
			mustOK(t, err)
			got := r.GetActor()
			if got.GetState() != gorayv1.ActorState_ACTOR_STATE_RESTARTING || got.GetNumRestarts() != 1 || got.GetMaxRestarts() != 3 ||
				ids.MustFromBytes(got.GetOwner().GetWorkerId()) != ids.MustFromBytes(a.GetOwner().GetWorkerId()) {
				t.Fatalf("actor after restart: %v", got)
			}
			kv, err := c2.KVGet(ctxT(t), &gorayv1.KVGetRequest{Ns: "collective", Key: "group/a"})
			mustOK(t, err)
			if !kv.GetFound() || string(kv.GetValue()) != "ranks" {
				t.Fatalf("kv after restart: %v", kv)
			}
			if gone, _ := c2.KVGet(ctxT(t), &gorayv1.KVGetRequest{Ns: "collective", Key: "gone"}); gone.GetFound() {
				t.Fatal("a deleted kv key came back after restart")
			}
			g, err := c2.GetPlacementGroup(ctxT(t), &gorayv1.GetPlacementGroupRequest{Name: "gang"})
			mustOK(t, err)
			if g.GetGroup().GetState() != stCreated || ids.MustFromBytes(g.GetGroup().GetBundles()[0].GetNodeId()) != node {
				t.Fatalf("placement group after restart: %v", g.GetGroup())
			}
			// The restarted GCS goes on: the actor comes back, a new one
			// can take a name.
			setState(t, c2, actor, gorayv1.ActorState_ACTOR_STATE_ALIVE, "")
			registerActor(t, c2, actorOn(newID(), job, node, newID(), "second"))
		})
	}
}

// TestAcknowledgedMeansStored: when a handler answers, the change is in
// the storage (read here through a second client of the same Redis).
func TestAcknowledgedMeansStored(t *testing.T) {
	srv := redistest.Start(t)
	st := Storage{Backend: BackendRedis, RedisAddress: srv.Address, RedisPassword: srv.Password, RedisPrefix: "ack"}
	s, err := Open(ctxT(t), Options{Storage: st})
	mustOK(t, err)
	c, _ := serveOpened(t, s)
	reader, err := store.OpenRedis(ctxT(t), store.RedisOptions{Address: srv.Address, Password: srv.Password, Prefix: "ack"})
	mustOK(t, err)
	defer reader.Close()
	for i := range 20 {
		key := fmt.Sprint("k", i)
		_, err := c.KVPut(ctxT(t), &gorayv1.KVPutRequest{Ns: "ns", Key: key, Value: []byte("v"), Overwrite: true})
		mustOK(t, err)
		if v, err := reader.Get(ctxT(t), tableKV, kvRecordKey("ns", key)); err != nil || string(v) != "v" {
			t.Fatalf("KVPut %s acknowledged but the storage has %q, %v", key, v, err)
		}
	}
}

// failingStore fails every write while fail is set.
type failingStore struct {
	store.Store
	mu   sync.Mutex
	fail bool
}

func (f *failingStore) Apply(ctx context.Context, batch []store.Write) error {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return errors.New("disk on fire")
	}
	return f.Store.Apply(ctx, batch)
}

// TestStorageOutage: while the storage fails, a change is not acknowledged
// (Unavailable when the caller's deadline passes, naming the cause); once
// it works again the queued change is written, in order.
func TestStorageOutage(t *testing.T) {
	fs := &failingStore{Store: store.NewMemory(), fail: true}
	s := New(Options{})
	s.storage = fs
	s.journal = newJournal(fs, s.log)
	c, _ := serveOpened(t, s)
	// In process, so that the handler's own Unavailable is seen (over gRPC
	// the caller's deadline answers first).
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	_, err := s.KVPut(ctx, &gorayv1.KVPutRequest{Ns: "ns", Key: "k", Value: []byte("1"), Overwrite: true})
	wantCode(t, err, codes.Unavailable, "disk on fire")
	fs.mu.Lock()
	fs.fail = false
	fs.mu.Unlock()
	_, err = c.KVPut(ctxT(t), &gorayv1.KVPutRequest{Ns: "ns", Key: "k", Value: []byte("2"), Overwrite: true})
	mustOK(t, err)
	if v, err := fs.Get(ctxT(t), tableKV, kvRecordKey("ns", "k")); err != nil || string(v) != "2" {
		t.Fatalf("after the outage the storage has %q, %v; want the last value", v, err)
	}
}

// TestOpenErrorsNameTheStorage: storage that cannot be opened or reached
// fails Open with an error naming the path or address.
func TestOpenErrorsNameTheStorage(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	mustOK(t, writeTestFile(file))
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	mustOK(t, err)
	closed := l.Addr().String() // a port that was just free
	l.Close()
	for _, tc := range []struct {
		name string
		st   Storage
		want string
	}{
		{"bolt under a file", Storage{Backend: BackendBolt, Path: filepath.Join(file, "gcs.db")}, file},
		{"redis not listening", Storage{Backend: BackendRedis, RedisAddress: closed}, closed},
		{"unknown backend", Storage{Backend: "etcd"}, `unknown backend "etcd"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(ctx, Options{Storage: tc.st})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v; want an error naming %s", err, tc.want)
			}
		})
	}
}

func writeTestFile(path string) error { return os.WriteFile(path, []byte("x"), 0o600) }
