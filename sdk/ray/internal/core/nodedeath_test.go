package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/sdk/transport"
)

// leasingRaylet grants each lease request the next worker of its list
// (the last one once the list is used up).
type leasingRaylet struct {
	pb.UnimplementedRayletServer
	mu      sync.Mutex
	workers []*pb.Address
	granted int
}

func (r *leasingRaylet) RequestWorkerLease(context.Context, *pb.LeaseRequest) (*pb.LeaseReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[min(r.granted, len(r.workers)-1)]
	r.granted++
	return &pb.LeaseReply{LeaseId: ids.New().Bytes(), Worker: w}, nil
}

func (r *leasingRaylet) ReturnWorkerLease(context.Context, *pb.ReturnLeaseRequest) (*pb.ReturnLeaseReply, error) {
	return &pb.ReturnLeaseReply{}, nil
}

// startTCPFakeWorker serves a fakeActorWorker over TCP, as a worker of
// node is reached from another node.
func startTCPFakeWorker(t *testing.T, name string, node ids.ID) (*fakeActorWorker, *pb.Address) {
	t.Helper()
	w := &fakeActorWorker{name: name, id: ids.New(), cut: make(chan struct{})}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.srv = grpc.NewServer(rpc.ServerOptions(nil)...)
	pb.RegisterCoreWorkerServer(w.srv, w)
	go func() { _ = w.srv.Serve(lis) }()
	t.Cleanup(w.srv.Stop)
	return w, &pb.Address{WorkerId: w.id.Bytes(), NodeId: node.Bytes(), TcpAddr: lis.Addr().String()}
}

// TestNodeDeathEndsItsLeases: when a node holding a lease whose task runs
// is declared dead — the node answers nothing and closes nothing, like a
// frozen one — the task is retried on another node's worker at once (with
// retries left) or fails naming the node (without); the frozen worker's
// late reply is never taken as the result, and no new connection is made
// to a process of the dead node.
func TestNodeDeathEndsItsLeases(t *testing.T) {
	dir, err := os.MkdirTemp("", "gn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for i, tt := range []struct {
		name    string
		retries int
	}{{"retries left: retried elsewhere", 1}, {"no retry left: fails naming the node", 0}} {
		t.Run(tt.name, func(t *testing.T) {
			frozenNode, liveNode := ids.New(), ids.New()
			frozen, frozenAddr := startTCPFakeWorker(t, "frozen", frozenNode)
			_, liveAddr := startTCPFakeWorker(t, "live", liveNode)
			release := frozen.holdReplies() // its task runs until the node "comes back"
			r := &leasingRaylet{workers: []*pb.Address{frozenAddr, liveAddr}}
			rc, err := rpc.Dial(serveRaylet(t, filepath.Join(dir, fmt.Sprintf("raylet%d.sock", i)), r), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rc.Close() })

			cw := submitterTestWorker(t, pb.NewRayletClient(rc))

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			h := cw.SubmitTask(ctx, "f", nil, TaskOptions{MaxRetries: tt.retries})
			waitUntil(t, "the task to run on the frozen node", func() bool { return frozen.callCount() == 1 })

			cw.markNodeDead(frozenNode, "missed 5 health checks")
			cw.connsMu.Lock()
			_, open := cw.conns[frozenAddr.TcpAddr]
			cw.connsMu.Unlock()
			if open {
				t.Fatal("the connection to the dead node's worker is still open")
			}
			v, err := cw.Get(ctx, h)
			release() // the frozen node comes back and answers
			if tt.retries > 0 {
				if err != nil || string(v.Data) != "live" {
					t.Fatalf("got %v, %v; want the live node's answer", v, err)
				}
			} else {
				var wc *WorkerCrashedError
				if !errors.As(err, &wc) || !strings.Contains(wc.Reason, frozenNode.Short()) {
					t.Fatalf("got %v, %v; want a WorkerCrashedError naming node %s", v, err, frozenNode.Short())
				}
			}
			// The frozen worker's reply, sent now, changes nothing.
			v2, err2 := cw.Get(ctx, h)
			if (err2 == nil) != (err == nil) || (v2 != nil && string(v2.Data) != "live") {
				t.Fatalf("after the frozen node answered: %v, %v", v2, err2)
			}
			if _, err := cw.peer(frozenAddr); err == nil || !strings.Contains(err.Error(), "declared dead") {
				t.Fatalf("a connection to a process of the dead node: %v; want refused", err)
			}
		})
	}
}

// serveRaylet serves a raylet on unix socket path.
func serveRaylet(t *testing.T, path string, r pb.RayletServer) string {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(rpc.ServerOptions(nil)...)
	pb.RegisterRayletServer(s, r)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return path
}

// TestNodeDeathEndsTransportCalls: a call to another node's transport
// plugin (relayed by that node's raylet) that waits for an answer when the
// node is declared dead ends at once, saying so, instead of waiting for a
// node that may never answer.
func TestNodeDeathEndsTransportCalls(t *testing.T) {
	w := newRoutingWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		// "two0" waits for a Send that never comes: an answer that never comes.
		_, err := w.cw.transportOn("two0", w.remote).Receive(ctx, &transport.ReceiveRequest{ObjectID: "o"})
		done <- err
	}()
	waitUntil(t, "the call to reach the remote plugin", func() bool { return strings.Contains(w.log.String(), "remote:receive") })
	w.cw.markNodeDead(w.remote, "missed 5 health checks")
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "declared dead") {
			t.Fatalf("the call ended with %v; want Unavailable saying the node was declared dead", err)
		}
	case <-ctx.Done():
		t.Fatal("the call to the dead node's plugin never ended")
	}
}
