package acceptance

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// rogueDataPlane is a listener that speaks the server side of the raw
// handshake without the cluster token (it cannot prove it holds it) and
// answers every object request with forged bytes, speaking the data
// plane's framing (raylet/internal/dataplane).
type rogueDataPlane struct {
	lis      net.Listener
	forged   []byte
	accepted atomic.Int64 // connections whose handshake the client completed
	dialled  atomic.Int64 // connections made to it

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startRogueDataPlane(t *testing.T, forged []byte) *rogueDataPlane {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &rogueDataPlane{lis: lis, forged: forged, conns: map[net.Conn]struct{}{}}
	noToken, err := auth.Disabled(nil)
	if err != nil {
		t.Fatal(err)
	}
	r.wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			r.dialled.Add(1)
			r.mu.Lock()
			r.conns[c] = struct{}{}
			r.mu.Unlock()
			r.wg.Go(func() {
				defer c.Close()
				ac, err := noToken.ServerConn(c)
				if err != nil {
					return
				}
				r.accepted.Add(1)
				r.serve(ac)
			})
		}
	})
	t.Cleanup(func() {
		lis.Close()
		r.mu.Lock()
		for c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

// serve answers requests (magic | object id | offset | length) with the
// forged bytes as the object's, until the client hangs up.
func (r *rogueDataPlane) serve(c net.Conn) {
	req := make([]byte, 4+ids.ObjectIDSize+16)
	for {
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		off := int64(binary.BigEndian.Uint64(req[4+ids.ObjectIDSize:]))
		n := int64(binary.BigEndian.Uint64(req[12+ids.ObjectIDSize:]))
		size := int64(len(r.forged))
		if off < 0 || off > size {
			return
		}
		if n < 0 || n > size-off {
			n = size - off
		}
		hdr := make([]byte, 13, 13+1)
		binary.BigEndian.PutUint64(hdr[1:], uint64(size))
		binary.BigEndian.PutUint32(hdr[9:], 1)
		hdr = append(hdr, 0) // metadata: one format byte
		if _, err := c.Write(append(hdr, r.forged[off:off+n]...)); err != nil {
			return
		}
	}
}

// TestRogueDataPlaneRefused points a real node's pull at a rogue data
// plane: a node registered (with the token, as a compromised or stale
// record could be) whose object_addr is a listener without the token that
// serves forged bytes. The node dials the rogue, refuses it at the
// handshake (it proves no token) and keeps no object. With the GRA1
// handshake, where only the client proved the token, the node took the
// forged bytes as the object and served them to the cluster.
func TestRogueDataPlaneRefused(t *testing.T) {
	ctx := testCtx(t)
	h := startClusterHead(t, ctx)
	tok, err := auth.ReadTokenFile(tokenPath)
	if err != nil {
		t.Fatal(err)
	}
	good, err := auth.New(tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	gcs := pb.NewGcsClient(dial(t, h.addr, good))
	nodes, err := gcs.GetAllNodes(ctx, &pb.GetAllNodesRequest{})
	if err != nil || len(nodes.GetNodes()) != 1 {
		t.Fatalf("nodes: %v, %v", nodes.GetNodes(), err)
	}
	headInfo := nodes.GetNodes()[0].GetInfo()

	forged := []byte("forged object bytes from a rogue data plane")
	rogue := startRogueDataPlane(t, forged)

	// The rogue's node record, kept alive by heartbeats until the test
	// ends (the GCS declares a silent node dead within seconds).
	fake := ids.New()
	if _, err := gcs.RegisterNode(ctx, &pb.RegisterNodeRequest{Node: &pb.NodeInfo{
		NodeId: fake.Bytes(), NodeName: "rogue", RayletTcp: "127.0.0.1:1", ObjectAddr: rogue.lis.Addr().String(),
	}}); err != nil {
		t.Fatalf("registering the rogue's node record: %v", err)
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	var hb sync.WaitGroup
	hb.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			_, _ = gcs.ReportHeartbeat(hbCtx, &pb.HeartbeatRequest{NodeId: fake.Bytes()})
			select {
			case <-hbCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	defer func() { stopHB(); hb.Wait() }()

	// The head's raylet pulls an object "from" the rogue.
	raylet := pb.NewRayletClient(dial(t, headInfo.GetRayletTcp(), good))
	oid := ids.ObjectIDFor(ids.New(), 1)
	_, err = raylet.PullObject(ctx, &pb.PullObjectRequest{ObjectId: oid.Bytes(), NodeId: fake.Bytes(), Owner: &pb.Address{}})
	if rogue.dialled.Load() == 0 {
		t.Fatalf("the node never dialled the rogue (pull: %v)", err)
	}
	got, readErr := readObjectRange(ctx, headInfo.GetObjectAddr(), good, oid)
	if err == nil || readErr == nil {
		t.Fatalf("the node accepted the rogue data plane: pull %v; the node now serves object %s as %q (%v)", err, oid, got, readErr)
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), auth.ErrServerNotAuthenticated.Error()) ||
		!strings.Contains(err.Error(), rogue.lis.Addr().String()) {
		t.Errorf("pull from the rogue: %v; want Unavailable saying the server (%s) did not prove the token", err, rogue.lis.Addr())
	}
	if n := rogue.accepted.Load(); n != 0 {
		t.Errorf("%d connections to the rogue completed the handshake", n)
	}
	t.Logf("the node refused the rogue: %v", err)
}
