package raylet

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/waitfor"
)

// putOwned creates and seals an object of size bytes on n, owned by owner,
// each byte from seed; it returns the object and its bytes.
func (n *testNode) putOwned(size int64, owner *gorayv1.Address, seed byte) (ids.ObjectID, []byte) {
	n.t.Helper()
	oid := ids.ObjectIDFor(ids.New(), 1)
	rep, err := n.cl.CreateObject(context.Background(), &gorayv1.CreateObjectRequest{ObjectId: oid[:], DataSize: size, Owner: owner})
	if err != nil {
		n.t.Fatalf("CreateObject: %v", err)
	}
	b := n.store.Data(rep.GetOffset(), size)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	want := bytes.Clone(b)
	n.sealObject(oid)
	return oid, want
}

// pullCode pulls oid from node into n and returns the gRPC status code.
func (n *testNode) pullCode(oid ids.ObjectID, node ids.ID, owner *gorayv1.Address) codes.Code {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	_, err := n.cl.PullObject(ctx, &gorayv1.PullObjectRequest{ObjectId: oid[:], NodeId: node.Bytes(), Owner: owner})
	return status.Code(err)
}

// TestRerunAdoptsPulledCopy: a task re-run to rebuild an object lost with
// its node lands on a node that holds a copy it pulled before (a
// secondary copy, evictable). The worker's create of the result finds it
// (AlreadyExists, as before) and the raylet makes that copy the object's
// primary copy, owned by the task's owner: no longer evicted to make
// room, its bytes intact. Before, the copy stayed secondary and the create
// simply failed (the owner recorded the object as lost for good).
func TestRerunAdoptsPulledCopy(t *testing.T) {
	g, addr, _ := drainGCS(t)
	src := newTestNode(t, addr, "127.0.0.2", cpus(1), nil)
	dst := newTestNode(t, addr, "127.0.0.3", cpus(1), nil)
	src.waitAlive(g, time.Time{})
	dst.waitAlive(g, time.Time{})
	owner := &gorayv1.Address{WorkerId: ids.New().Bytes(), NodeId: dst.id.Bytes()}
	const size = 1 << 20
	oid, want := src.putOwned(size, owner, 3)
	if code := dst.pullCode(oid, src.id, owner); code != codes.OK {
		t.Fatalf("pull: %v", code)
	}
	if p := dst.r.objects.primaries([]ids.ObjectID{oid}); p[0] {
		t.Fatal("a pulled copy is a primary copy before the re-run")
	}

	_, err := dst.cl.CreateObject(context.Background(), &gorayv1.CreateObjectRequest{ObjectId: oid[:], DataSize: size, Owner: owner, CreatorId: ids.New().Bytes()})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the re-run's create: %v, want AlreadyExists", err)
	}
	if p := dst.r.objects.primaries([]ids.ObjectID{oid}); !p[0] {
		t.Fatal("the copy the re-run found is not the object's primary copy")
	}
	if freed := dst.r.objects.evictSecondaries(1 << 30); freed != 0 || !dst.store.Contains(oid) {
		t.Fatalf("the adopted copy was evicted (%d bytes freed)", freed)
	}
	client := ids.New()
	got, err := dst.cl.GetObjects(context.Background(), &gorayv1.GetObjectsRequest{ObjectIds: [][]byte{oid[:]}, ClientId: client.Bytes()})
	if err != nil || !got.GetObjects()[0].GetFound() {
		t.Fatalf("the adopted copy is not readable: %v, %v", got, err)
	}
	o := got.GetObjects()[0]
	if !bytes.Equal(dst.store.Data(o.GetOffset(), o.GetDataSize()), want) {
		t.Fatal("the adopted copy reads other bytes")
	}
	dst.store.ReleaseClient(client)
}

// TestPullStatusTellsSlowFromLost: PullObject's status says what its
// caller may do: a node that does not hold the object answers NotFound, a
// node that is unreachable but not reported dead is Unavailable (try
// again), a dead node is FailedPrecondition (the copy is gone). Before, a
// refusal was Unavailable too, so "not there" and "cannot reach it now"
// could not be told apart.
func TestPullStatusTellsSlowFromLost(t *testing.T) {
	g, addr, _ := drainGCS(t)
	reader := newTestNode(t, addr, "127.0.0.2", cpus(1), nil)
	holder := newTestNode(t, addr, "127.0.0.3", cpus(1), nil)
	cut := newTestNode(t, addr, "127.0.0.4", cpus(1), nil)
	for _, n := range []*testNode{reader, holder, cut} {
		n.waitAlive(g, time.Time{})
	}
	owner := &gorayv1.Address{WorkerId: ids.New().Bytes(), NodeId: reader.id.Bytes()}
	onCut, _ := cut.putOwned(1<<20, owner, 1)
	cut.stopServing() // still heartbeating: alive in the GCS, unreachable
	reader.seesPeer("the cut-off node alive in the reader's view", cut.id, func(p *peerView) bool { return p.alive })

	tests := []struct {
		name string
		oid  ids.ObjectID
		node ids.ID
		want codes.Code
	}{
		{"an object its live node does not hold", ids.ObjectIDFor(ids.New(), 1), holder.id, codes.NotFound},
		{"a node unreachable but alive", onCut, cut.id, codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reader.pullCode(tt.oid, tt.node, owner); got != tt.want {
				t.Fatalf("pull: %v, want %v", got, tt.want)
			}
		})
	}
	cut.shutdown() // unregisters: the GCS says it is dead
	reader.seesPeer("the cut-off node dead in the reader's view", cut.id, func(p *peerView) bool { return !p.alive })
	if got := reader.pullCode(onCut, cut.id, owner); got != codes.FailedPrecondition {
		t.Fatalf("pull from the dead node: %v, want FailedPrecondition", got)
	}
}

// frozenListener accepts connections on addr, completes the connection
// handshake and then never answers: a node frozen (SIGSTOPped) or cut off
// after a transfer began, which no handshake timeout ends.
func frozenListener(t *testing.T, addr string) {
	t.Helper()
	var lis net.Listener
	waitFor(t, "the data plane's address to be free", func() bool {
		var err error
		lis, err = net.Listen("tcp", addr)
		return err == nil
	})
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = (*auth.Credentials)(nil).ServerConn(c) }()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
}

// TestPullFromFrozenNodeEndsAtItsDeath: a pull from a node that stops
// answering once connected (frozen) waits, and ends with
// FailedPrecondition as soon as the node is reported dead: its readers
// (and the owner's recovery) go on. Before, it waited for the pull's
// 10-minute bound.
func TestPullFromFrozenNodeEndsAtItsDeath(t *testing.T) {
	g, addr, _ := drainGCS(t)
	reader := newTestNode(t, addr, "127.0.0.2", cpus(1), nil)
	frozen := newTestNode(t, addr, "127.0.0.3", cpus(1), nil)
	reader.waitAlive(g, time.Time{})
	frozen.waitAlive(g, time.Time{})
	owner := &gorayv1.Address{WorkerId: ids.New().Bytes(), NodeId: reader.id.Bytes()}
	oid, _ := frozen.putOwned(1<<20, owner, 2)
	dataAddr := frozen.data.Addr().String()
	frozen.data.Close()
	frozenListener(t, dataAddr)

	res := make(chan codes.Code, 1)
	go func() { res <- reader.pullCode(oid, frozen.id, owner) }()
	waitFor(t, "the pull to be in flight", func() bool {
		reader.r.objects.mu.Lock()
		defer reader.r.objects.mu.Unlock()
		return reader.r.objects.pulls[oid] != nil
	})
	select {
	case c := <-res:
		t.Fatalf("the pull from a frozen node ended (%v) before the node was reported dead", c)
	default:
	}
	frozen.shutdown() // the GCS says it is dead; its data plane stays frozen
	var got codes.Code
	waitFor(t, "the pull to end once the node is reported dead", func() bool {
		select {
		case got = <-res:
			return true
		default:
			return false
		}
	})
	if got != codes.FailedPrecondition {
		t.Fatalf("pull from the frozen node reported dead: %v, want FailedPrecondition", got)
	}
}
