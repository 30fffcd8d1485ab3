package gcs

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// fakeClock is an injectable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// startServer serves a new GCS on a unix socket and returns it with a client
// connected over real gRPC. Everything is stopped at cleanup.
func startServer(t *testing.T, opts Options) (*Server, gorayv1.GcsClient) {
	t.Helper()
	leaktest.Goroutines(t)
	s := New(opts)
	sock := filepath.Join(t.TempDir(), "gcs.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(lis)
	}()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			g.Stop() // waits for running handlers
			<-served
		}()
		select {
		case <-stopped:
		case <-time.After(waitfor.Generous):
			t.Error("gRPC server did not stop: a handler is stuck")
		}
	})
	return s, gorayv1.NewGcsClient(conn)
}

// ctxT returns a context bounded by a generous test deadline.
func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, for at most waitfor.Generous.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitfor.Cond(t, waitfor.Generous, what, cond)
}

// wantCode checks err's gRPC code and that its message contains want.
func wantCode(t *testing.T, err error, code codes.Code, want string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error = %v, want code %v", err, code)
	}
	if !strings.Contains(st.Message(), want) {
		t.Fatalf("error message %q does not contain %q", st.Message(), want)
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newID() ids.ID { return ids.New() }

func nodeInfo(id ids.ID, name string) *gorayv1.NodeInfo {
	return &gorayv1.NodeInfo{
		NodeId:     id.Bytes(),
		NodeName:   name,
		RayletUnix: "/tmp/" + name + ".sock",
		Total:      &gorayv1.Resources{Amounts: map[string]int64{"CPU": 40000}},
		Labels:     map[string]string{"zone": "a"},
		Pid:        42,
	}
}

func registerNode(t *testing.T, c gorayv1.GcsClient, id ids.ID, name string) {
	t.Helper()
	_, err := c.RegisterNode(ctxT(t), &gorayv1.RegisterNodeRequest{Node: nodeInfo(id, name)})
	mustOK(t, err)
}

// actorOn returns an actor of job hosted by worker on node (either may be Nil
// for no address).
func actorOn(id, job, node, worker ids.ID, name string) *gorayv1.ActorInfo {
	a := &gorayv1.ActorInfo{ActorId: id.Bytes(), JobId: job.Bytes(), Name: name, ClassName: "Counter"}
	if !node.IsNil() || !worker.IsNil() {
		a.Address = &gorayv1.Address{UnixPath: "/tmp/w.sock"}
		if !node.IsNil() {
			a.Address.NodeId = node.Bytes()
		}
		if !worker.IsNil() {
			a.Address.WorkerId = worker.Bytes()
		}
	}
	return a
}

func registerActor(t *testing.T, c gorayv1.GcsClient, a *gorayv1.ActorInfo) {
	t.Helper()
	_, err := c.RegisterActor(ctxT(t), &gorayv1.RegisterActorRequest{Actor: a})
	mustOK(t, err)
}

func setState(t *testing.T, c gorayv1.GcsClient, id ids.ID, st gorayv1.ActorState, reason string) {
	t.Helper()
	_, err := c.UpdateActor(ctxT(t), &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{
		ActorId: id.Bytes(), State: st, DeathReason: reason,
	}})
	mustOK(t, err)
}

func getActor(t *testing.T, c gorayv1.GcsClient, id ids.ID) *gorayv1.ActorInfo {
	t.Helper()
	r, err := c.GetActor(ctxT(t), &gorayv1.GetActorRequest{ActorId: id.Bytes()})
	mustOK(t, err)
	return r.GetActor()
}

func nodeView(t *testing.T, c gorayv1.GcsClient, id ids.ID) *gorayv1.NodeView {
	t.Helper()
	r, err := c.GetAllNodes(ctxT(t), &gorayv1.GetAllNodesRequest{})
	mustOK(t, err)
	for _, n := range r.GetNodes() {
		if ids.MustFromBytes(n.GetInfo().GetNodeId()) == id {
			return n
		}
	}
	t.Fatalf("node %s not in GetAllNodes", id.Short())
	return nil
}
