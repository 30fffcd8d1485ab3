package core

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	_ "github.com/goray-dev/goray/internal/proto/transportv1" // the Transport service's types
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// The tests below run a core worker against two fake raylets, each
// forwarding TransportInvoke to a recording transport "plugin" of its
// node, and check which node's plugin every duty of a cross-node transfer
// reaches.

// recorder is a fake transport that records the duties it runs.
type recorder struct {
	node string
	info transport.InfoResponse
	log  *callLog
	// allocate, when set, makes Receive allocate a segment for the caller.
	allocate bool
	// block, when set, makes Receive wait for its context (a two-sided
	// receive whose Send never comes).
	block bool
}

type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	l.calls = append(l.calls, s)
	l.mu.Unlock()
}

func (l *callLog) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.calls {
		if c == s {
			return true
		}
	}
	return false
}

func (l *callLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.calls, ", ")
}

func (r *recorder) Info(context.Context, *transport.InfoRequest) (*transport.InfoResponse, error) {
	info := r.info
	return &info, nil
}

func (r *recorder) ActorHasTransport(context.Context, *transport.ActorHasTransportRequest) (*transport.ActorHasTransportResponse, error) {
	return &transport.ActorHasTransportResponse{HasTransport: true}, nil
}

func (r *recorder) ExtractMetadata(context.Context, *transport.ExtractMetadataRequest) (*transport.ExtractMetadataResponse, error) {
	r.log.add(r.node + ":extract")
	return &transport.ExtractMetadataResponse{}, nil
}

func (r *recorder) CommunicatorMetadata(context.Context, *transport.CommunicatorMetadataRequest) (*transport.CommunicatorMetadataResponse, error) {
	r.log.add(r.node + ":communicator")
	return &transport.CommunicatorMetadataResponse{Data: []byte("token")}, nil
}

func (r *recorder) Send(_ context.Context, req *transport.SendRequest) (*transport.SendResponse, error) {
	r.log.add(r.node + ":send:" + string(req.CommunicatorData))
	return &transport.SendResponse{}, nil
}

func (r *recorder) Receive(ctx context.Context, req *transport.ReceiveRequest) (*transport.ReceiveResponse, error) {
	r.log.add(r.node + ":receive")
	if r.block {
		<-ctx.Done()
		return nil, transport.ContextError(ctx)
	}
	if !r.allocate {
		return &transport.ReceiveResponse{Tensors: []transport.Tensor{{DType: transport.Uint8, Shape: []int64{0}}}}, nil
	}
	t, err := transport.NewTensorIn(shmem.Prefix+"tt-core-", transport.Uint8, 8)
	if err != nil {
		return nil, err
	}
	return &transport.ReceiveResponse{Tensors: []transport.Tensor{t}, Allocated: []string{t.Buffer.Segment}}, nil
}

func (r *recorder) GarbageCollect(context.Context, *transport.GarbageCollectRequest) (*transport.GarbageCollectResponse, error) {
	r.log.add(r.node + ":gc")
	return &transport.GarbageCollectResponse{}, nil
}

func (r *recorder) Abort(context.Context, *transport.AbortRequest) (*transport.AbortResponse, error) {
	r.log.add(r.node + ":abort")
	return &transport.AbortResponse{}, nil
}

// fakeRaylet forwards TransportInvoke to its node's transports, like the
// real raylet, over an in-process gRPC connection.
type fakeRaylet struct {
	pb.UnimplementedRayletServer
	plugins map[string]*grpc.ClientConn
	// endpoint answers TransportEndpoint (nil: Unimplemented, as an
	// older raylet).
	endpoint func(name string) (*pb.TransportEndpointReply, error)
}

func (f *fakeRaylet) TransportEndpoint(_ context.Context, req *pb.TransportEndpointRequest) (*pb.TransportEndpointReply, error) {
	if f.endpoint == nil {
		return nil, status.Error(codes.Unimplemented, "no TransportEndpoint")
	}
	return f.endpoint(req.GetName())
}

func (f *fakeRaylet) TransportInvoke(ctx context.Context, req *pb.TransportInvokeRequest) (*pb.TransportInvokeReply, error) {
	conn := f.plugins[req.GetName()]
	if conn == nil {
		return nil, status.Errorf(codes.Unavailable, "no transport %q", req.GetName())
	}
	svc, name, _ := strings.Cut(strings.TrimPrefix(req.GetMethod(), "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, err
	}
	m := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name))
	in, _ := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
	out, _ := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName())
	inM, outM := in.New().Interface(), out.New().Interface()
	if err := proto.Unmarshal(req.GetPayload(), inM); err != nil {
		return nil, err
	}
	if err := conn.Invoke(ctx, req.GetMethod(), inM, outM); err != nil {
		return nil, err
	}
	b, err := proto.Marshal(outM)
	return &pb.TransportInvokeReply{Payload: b}, err
}

// serve runs srv's services on a loopback TCP port until the test ends.
func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// fakeNode starts a raylet whose transports are impls.
func fakeNode(t *testing.T, impls map[string]transport.Transport) string {
	t.Helper()
	r := &fakeRaylet{plugins: map[string]*grpc.ClientConn{}}
	for name, impl := range impls {
		addr := serve(t, func(s *grpc.Server) { transport.Register(s, impl) })
		cc, err := rpc.Dial(addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		r.plugins[name] = cc
	}
	return serve(t, func(s *grpc.Server) { pb.RegisterRayletServer(s, r) })
}

// routingWorker is a core worker on node "local" that knows node "remote".
type routingWorker struct {
	cw            *CoreWorker
	local, remote ids.ID
	log           *callLog
}

func newRoutingWorker(t *testing.T) *routingWorker {
	t.Helper()
	log := &callLog{}
	two := transport.InfoResponse{Name: "two", CanAbort: true}
	same := transport.InfoResponse{Name: "same", OneSided: true, SameNode: true}
	one := transport.InfoResponse{Name: "one", OneSided: true, CanAbort: true}
	mk := func(node string) map[string]transport.Transport {
		return map[string]transport.Transport{
			"two":  &recorder{node: node, info: two, log: log, allocate: true},
			"two0": &recorder{node: node, info: two, log: log, block: true}, // waits for a Send
			"same": &recorder{node: node, info: same, log: log},
			"one":  &recorder{node: node, info: one, log: log},
		}
	}
	localAddr := fakeNode(t, mk("local"))
	remotes := mk("remote")
	remotes["remote-same"] = &recorder{node: "remote", info: same, log: log}
	remoteAddr := fakeNode(t, remotes)
	w := &routingWorker{local: ids.New(), remote: ids.New(), log: log}
	cc, err := rpc.Dial(localAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.cw = &CoreWorker{ctx: t.Context(), log: hclog.NewNullLogger(), id: ids.New(), nodeID: w.local, raylet: pb.NewRayletClient(cc),
		conns: map[string]*grpc.ClientConn{}, connOf: map[string]string{}}
	w.cw.cfg.TransferTimeout = 5 * time.Second
	w.cw.nodeDir.nodes = map[ids.ID]*pb.NodeInfo{w.remote: {NodeId: w.remote.Bytes(), State: "ALIVE", RayletTcp: remoteAddr}}
	w.cw.nodeDir.fetched = time.Now()
	t.Cleanup(func() {
		w.cw.closeDirectTransports()
		w.cw.wg.Wait() // endpoint requests (this fake raylet answers none)
		cc.Close()
		for _, c := range w.cw.conns {
			c.Close()
		}
	})
	return w
}

func envelope(t *testing.T, name string, node ids.ID) []byte {
	t.Helper()
	b, err := msgpack.Marshal(&tensorEnvelope{Transport: name, ObjectID: ids.ObjectIDFor(ids.New(), 1).String(), Source: ids.New().String(), Node: node.Bytes()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTwoSidedAcrossNodesSendsOnTheSourceNode(t *testing.T) {
	w := newRoutingWorker(t)
	ctx := context.Background()
	ts, err := w.cw.receiveTensors(ctx, envelope(t, "two", w.remote))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"local:communicator", "remote:send:token", "local:receive"} {
		if !w.log.has(want) {
			t.Errorf("no %s in %s", want, w.log)
		}
	}
	if w.log.has("local:send:token") || w.log.has("remote:receive") {
		t.Errorf("a duty ran on the wrong node: %s", w.log)
	}
	// The segment the receive allocated belongs to this process:
	// ReleaseTensors frees it, and leaves segments it did not receive.
	seg := ts[0].Buffer.Segment
	mine, err := transport.NewTensorIn(shmem.Prefix+"tt-core-", transport.Uint8, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Free()
	if err := w.cw.ReleaseTensors(append(ts, mine)); err != nil {
		t.Fatal(err)
	}
	if shmem.Exists(seg) {
		t.Fatalf("allocated segment %s survived ReleaseTensors", seg)
	}
	if !shmem.Exists(mine.Buffer.Segment) {
		t.Fatal("ReleaseTensors unlinked a segment the process did not receive")
	}
	if err := w.cw.ReleaseTensors(ts); err != nil {
		t.Fatalf("releasing twice: %v", err)
	}

	// On one node, everything runs in the local plugin.
	w.log.calls = nil
	if _, err := w.cw.receiveTensors(ctx, envelope(t, "one", w.local)); err != nil {
		t.Fatal(err)
	}
	if got := w.log.String(); got != "local:receive" {
		t.Fatalf("one-sided local receive ran %s", got)
	}
	w.log.calls = nil
	ts, err = w.cw.receiveTensors(ctx, envelope(t, "one", w.remote))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.log.String(); got != "local:receive" {
		t.Fatalf("one-sided cross-node receive ran %s (the reader reads alone, on its node)", got)
	}
}

func TestSameNodeTransportAcrossNodesFailsClearly(t *testing.T) {
	w := newRoutingWorker(t)
	_, err := w.cw.receiveTensors(context.Background(), envelope(t, "same", w.remote))
	var te *TransferError
	if !errors.As(err, &te) || !errors.Is(err, ErrTransferFailed) || !strings.Contains(err.Error(), "only moves tensors within a node") {
		t.Fatalf("error %v", err)
	}
	if w.log.has("local:receive") {
		t.Fatalf("the receive ran: %s", w.log)
	}
	// Also when this node does not run the transport at all (the source's
	// node says it is same-node only).
	_, err = w.cw.receiveTensors(context.Background(), envelope(t, "remote-same", w.remote))
	if !errors.Is(err, ErrTransferFailed) || !strings.Contains(err.Error(), "only moves tensors within a node") {
		t.Fatalf("error without the transport here: %v", err)
	}
}

func TestGarbageCollectionGoesToTheSourceNode(t *testing.T) {
	w := newRoutingWorker(t)
	ctx := context.Background()
	if retry := w.cw.collectTensors(ctx, envelope(t, "one", w.remote)); retry {
		t.Fatal("retry after a successful collection")
	}
	if got := w.log.String(); got != "remote:gc" {
		t.Fatalf("collection ran %s, want remote:gc", got)
	}
	w.log.calls = nil
	if retry := w.cw.collectTensors(ctx, envelope(t, "two", w.local)); retry || w.log.String() != "local:gc" {
		t.Fatalf("local collection: retry %v, ran %s", retry, w.log)
	}
	// A dead source node has nothing to collect: no call, no retry.
	w.log.calls = nil
	w.cw.markNodeDead(w.remote, "test")
	if retry := w.cw.collectTensors(ctx, envelope(t, "one", w.remote)); retry || len(w.log.calls) != 0 {
		t.Fatalf("collection on a dead node: retry %v, ran %s", retry, w.log)
	}
	// So does a receive's send: it fails typed, at once.
	_, err := w.cw.receiveTensors(ctx, envelope(t, "two0", w.remote))
	if !errors.Is(err, ErrTransferFailed) || status.Code(errors.Unwrap(err)) != codes.Unavailable && !strings.Contains(err.Error(), "dead") {
		t.Fatalf("receive from a dead node: %v", err)
	}
}
