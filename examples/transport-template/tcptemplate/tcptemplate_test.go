package tcptemplate_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goray-dev/goray/examples/transport-template/tcptemplate"
	"github.com/goray-dev/goray/internal/auth/authtest"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/goray-dev/goray/sdk/transport/transporttest"
)

// testPrefix names every segment these tests create or make the transport
// allocate ("goray-t-tt-" is ignored by other packages' leak checks; the
// plugin test in the parent directory, which may run at the same time, uses
// another prefix so neither cleans up the other's segments).
const testPrefix = shmem.Prefix + "tt-tcp-unit-"

// testToken is the cluster token of every test here (sdk/plugin reads it
// once, so TestMain sets it before any test runs).
const testToken = "template-test-cluster-token"

func TestMain(m *testing.M) {
	// Data connections authenticate with the cluster token the node gives
	// the plugin (sdk/plugin.AuthenticateServer/Client); run with one.
	os.Setenv("GORAY_AUTH_TOKEN", testToken)
	code := m.Run()
	if left, err := shmem.List(testPrefix); err == nil && len(left) > 0 {
		fmt.Fprintf(os.Stderr, "shared-memory segments left behind: %v\n", left)
		_, _ = shmem.CleanupPrefix(testPrefix)
		code = 1
	}
	os.Exit(code)
}

func testConfig() tcptemplate.Config {
	c := tcptemplate.DefaultConfig()
	c.SegmentPrefix = testPrefix
	return c
}

// newTransport returns an instance closed when the test ends.
func newTransport(t *testing.T) *tcptemplate.Transport {
	t.Helper()
	tr := tcptemplate.New(tcptemplate.WithConfig(testConfig()))
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// pair returns a source and a destination instance. When the test ends
// (after the conformance suite's own cleanup has collected its objects) it
// checks that both let go of everything: objects, pins, waiting
// destinations and connections.
func pair(t *testing.T) (src, dst *tcptemplate.Transport) {
	t.Helper()
	src = tcptemplate.New(tcptemplate.WithConfig(testConfig()))
	dst = tcptemplate.New(tcptemplate.WithConfig(testConfig()))
	t.Cleanup(func() {
		for name, tr := range map[string]*tcptemplate.Transport{"source": src, "destination": dst} {
			if s, ok := waitStats(tr, tcptemplate.Stats{}); !ok {
				t.Errorf("%s still holds %+v after every object was collected", name, s)
			}
			_ = tr.Close()
		}
	})
	return src, dst
}

// single returns one instance that is both source and destination, as
// on a node, where one plugin process serves every actor, and checks at the
// end that it let go of everything.
func single(t *testing.T) *tcptemplate.Transport {
	t.Helper()
	tr := tcptemplate.New(tcptemplate.WithConfig(testConfig()))
	t.Cleanup(func() {
		if s, ok := waitStats(tr, tcptemplate.Stats{}); !ok {
			t.Errorf("instance still holds %+v after every object was collected", s)
		}
		_ = tr.Close()
	})
	return tr
}

// waitStats polls until tr's stats equal want or 5 s pass.
func waitStats(tr *tcptemplate.Transport, want tcptemplate.Stats) (tcptemplate.Stats, bool) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := tr.Stats()
		if s == want {
			return s, true
		}
		if time.Now().After(deadline) {
			return s, false
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronisation
	}
}

// gcInspector checks that a collected object left nothing pinned: the
// source forgot it, and no mapping in this process is still referenced
// (the suite's GarbageCollect test collects the only live object).
func gcInspector(src **tcptemplate.Transport) transporttest.Inspector {
	return func(_ context.Context, id string) error {
		if s := (*src).Stats(); s.Objects != 0 || s.PinnedBuffers != 0 {
			return fmt.Errorf("source still holds %+v after collecting %s", s, id)
		}
		if _, referenced := shmem.Default.Stats(); referenced != 0 {
			return fmt.Errorf("%d shared-memory mappings still referenced after collecting %s", referenced, id)
		}
		return nil
	}
}

func TestConformance(t *testing.T) {
	var src *tcptemplate.Transport
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		s, d := pair(t)
		src = s
		return s, d
	}, transporttest.Options{Inspector: gcInspector(&src)})
}

func TestConformanceOverGRPC(t *testing.T) {
	var src *tcptemplate.Transport
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		s, d := pair(t)
		src = s
		return transporttest.OverGRPC(t, s), transporttest.OverGRPC(t, d)
	}, transporttest.Options{Inspector: gcInspector(&src), LargeSize: 16 << 20})
}

// TestConformanceOneInstance runs the suite with the source and the
// destination on one instance: a node runs one plugin process for all its
// actors, so a transfer between two actors of a node goes through one
// instance, which dials its own listener.
func TestConformanceOneInstance(t *testing.T) {
	var tr *tcptemplate.Transport
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		tr = single(t)
		return tr, tr
	}, transporttest.Options{Inspector: gcInspector(&tr), LargeSize: 16 << 20})
}

// overSmallGRPC serves impl over gRPC with a 64 KiB message limit on both
// sides: any call carrying tensor bytes would fail.
func overSmallGRPC(t *testing.T, impl transport.Transport) transport.Transport {
	t.Helper()
	dir, err := os.MkdirTemp("", "gx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	const limit = 64 << 10
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(limit), grpc.MaxSendMsgSize(limit))
	transport.Register(srv, impl)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit), grpc.MaxCallSendMsgSize(limit)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-served
	})
	return transport.NewClient(conn, transport.APIVersion)
}

// tensor makes a test tensor filled with a pattern; it is freed at the end.
func tensor(t *testing.T, seed byte, shape ...int64) transport.Tensor {
	t.Helper()
	tn, err := transport.NewTensorIn(testPrefix, transport.Float32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tn.Free() })
	b, err := tn.Bytes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	tn.Release()
	return tn
}

func contents(t *testing.T, tn transport.Tensor) []byte {
	t.Helper()
	b, err := tn.Bytes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Release()
	return slices.Clone(b)
}

// freeAllocated unlinks what a receive allocated for the test.
func freeAllocated(t *testing.T, r *transport.ReceiveResponse) {
	t.Helper()
	if r == nil {
		return
	}
	for _, s := range r.Allocated {
		shmem.Default.Forget(s)
		if err := shmem.Unlink(s); err != nil {
			t.Errorf("unlink received segment: %v", err)
		}
	}
}

func oid(n byte) string { return strings.Repeat(fmt.Sprintf("%02x", n), 20) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	t.Cleanup(cancel)
	return ctx
}

// extract runs ExtractMetadata and collects the object at the end.
func extract(t *testing.T, src transport.Transport, id string, tensors ...transport.Tensor) *transport.ExtractMetadataResponse {
	t.Helper()
	ctx := ctxT(t)
	m, err := src.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Tensors: tensors})
	if err != nil {
		t.Fatalf("ExtractMetadata: %v", err)
	}
	t.Cleanup(func() {
		_, _ = src.GarbageCollect(context.Background(), &transport.GarbageCollectRequest{ObjectID: id})
	})
	return m
}

// TestBytesNeverCrossGRPC moves a 4 MiB tensor between two instances whose
// gRPC links refuse messages over 64 KiB: the bytes must take the
// transport's own connection.
func TestBytesNeverCrossGRPC(t *testing.T) {
	s, d := pair(t)
	src, dst := overSmallGRPC(t, s), overSmallGRPC(t, d)
	ctx := ctxT(t)
	in := tensor(t, 7, 1<<20)
	id := oid(1)
	meta := extract(t, src, id, in)
	cm, err := src.CommunicatorMetadata(ctx, &transport.CommunicatorMetadataRequest{ObjectID: id, Source: "a", Destination: "b"})
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		_, err := src.Send(ctx, &transport.SendRequest{ObjectID: id, Tensors: meta.Tensors, TransportData: meta.TransportData, CommunicatorData: cm.Data})
		sent <- err
	}()
	r, err := dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, Tensors: meta.Tensors, TransportData: meta.TransportData, CommunicatorData: cm.Data})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	defer freeAllocated(t, r)
	if err := <-sent; err != nil {
		t.Fatalf("Send: %v", err)
	}
	if len(r.Tensors) != 1 || len(r.Allocated) != 1 || !strings.HasPrefix(r.Allocated[0], testPrefix) {
		t.Fatalf("received %+v, allocated %v; want one tensor in a %s segment", r.Tensors, r.Allocated, testPrefix)
	}
	if !slices.Equal(contents(t, r.Tensors[0]), contents(t, in)) {
		t.Fatal("received bytes differ")
	}
	if len(meta.TransportData) > 4096 {
		t.Errorf("transport data is %d bytes; it should be a handle, not data", len(meta.TransportData))
	}
}

// TestPairingTokens sends one object to two destinations at once; each
// Send serves only the destination with its communicator data, and a Send
// whose destination never comes does not steal another's.
func TestPairingTokens(t *testing.T) {
	src, d1 := pair(t)
	_, d2 := pair(t)
	ctx := ctxT(t)
	in := tensor(t, 3, 4096)
	want := contents(t, in)
	id := oid(2)
	meta := extract(t, src, id, in)
	link := func(dest string) []byte {
		cm, err := src.CommunicatorMetadata(ctx, &transport.CommunicatorMetadataRequest{ObjectID: id, Source: "src", Destination: dest})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data
	}
	l1, l2, lost := link("d1"), link("d2"), link("nobody")
	if string(l1) == string(l2) {
		t.Fatal("two transfers got the same communicator data")
	}

	type result struct {
		r   *transport.ReceiveResponse
		err error
	}
	recv := func(tr transport.Transport, l []byte) <-chan result {
		ch := make(chan result, 1)
		go func() {
			r, err := tr.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, TransportData: meta.TransportData, CommunicatorData: l})
			ch <- result{r, err}
		}()
		return ch
	}
	r1, r2 := recv(d1, l1), recv(d2, l2)
	if s, ok := waitStats(src, tcptemplate.Stats{Objects: 1, PinnedBuffers: 1, WaitingDestinations: 2, OpenConns: 2}); !ok {
		t.Fatalf("source stats %+v: want both destinations waiting", s)
	}

	// A Send for a destination that is not there times out and leaves the
	// waiting ones alone.
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := src.Send(sctx, &transport.SendRequest{ObjectID: id, TransportData: meta.TransportData, CommunicatorData: lost})
	cancel()
	if !errors.Is(err, transport.ErrTimeout) {
		t.Fatalf("Send to a destination that never connects: %v, want ErrTimeout", err)
	}

	var wg sync.WaitGroup
	for _, l := range [][]byte{l2, l1} {
		wg.Go(func() {
			if _, err := src.Send(ctx, &transport.SendRequest{ObjectID: id, TransportData: meta.TransportData, CommunicatorData: l}); err != nil {
				t.Errorf("Send: %v", err)
			}
		})
	}
	for i, ch := range []<-chan result{r1, r2} {
		res := <-ch
		if res.err != nil {
			t.Fatalf("destination %d: %v", i+1, res.err)
		}
		if !slices.Equal(contents(t, res.r.Tensors[0]), want) {
			t.Errorf("destination %d received different bytes", i+1)
		}
		freeAllocated(t, res.r)
	}
	wg.Wait()
}

// TestSourceTellsWaitingDestination checks that what happens to an object
// at the source reaches a destination waiting for it at once, through the
// data connection.
func TestSourceTellsWaitingDestination(t *testing.T) {
	tests := []struct {
		name    string
		act     func(ctx context.Context, src transport.Transport, id string) error
		want    error
		message string
	}{
		{"abort", func(ctx context.Context, src transport.Transport, id string) error {
			_, err := src.Abort(ctx, &transport.AbortRequest{ObjectID: id, Reason: "producer failed"})
			return err
		}, transport.ErrAborted, "producer failed"},
		{"garbage-collect", func(ctx context.Context, src transport.Transport, id string) error {
			_, err := src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id})
			return err
		}, transport.ErrBadMetadata, "garbage-collected at the source"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := pair(t)
			ctx := ctxT(t)
			id := oid(byte(0x10 + i))
			meta := extract(t, src, id, tensor(t, 1, 16))
			done := make(chan error, 1)
			go func() {
				r, err := dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, TransportData: meta.TransportData})
				freeAllocated(t, r)
				done <- err
			}()
			if s, ok := waitStats(src, tcptemplate.Stats{Objects: 1, PinnedBuffers: 1, WaitingDestinations: 1, OpenConns: 1}); !ok {
				t.Fatalf("source stats %+v: want one waiting destination", s)
			}
			if err := tc.act(ctx, src, id); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.message) {
					t.Fatalf("Receive: %v, want an error matching %v that says %q", err, tc.want, tc.message)
				}
			case <-time.After(waitfor.Generous):
				t.Fatal("the waiting Receive did not return")
			}
		})
	}
}

func TestReceiveOfCollectedObject(t *testing.T) {
	src, dst := pair(t)
	ctx := ctxT(t)
	id := oid(0x20)
	meta := extract(t, src, id, tensor(t, 1, 8))
	if _, err := src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id}); err != nil {
		t.Fatal(err)
	}
	_, err := dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, TransportData: meta.TransportData})
	if !errors.Is(err, transport.ErrBadMetadata) {
		t.Fatalf("Receive of a collected object: %v, want ErrBadMetadata", err)
	}
}

func TestSourceGone(t *testing.T) {
	_, dst := pair(t)
	src := newTransport(t)
	ctx := ctxT(t)
	id := oid(0x21)
	in := tensor(t, 1, 8)
	meta, err := src.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Tensors: []transport.Tensor{in}})
	if err != nil {
		t.Fatal(err)
	}
	_ = src.Close()
	_, err = dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, TransportData: meta.TransportData})
	var te *transport.TransferError
	if err == nil || !errors.As(err, &te) || te.Op != transport.OpReceive || !strings.Contains(err.Error(), "connecting to the source") {
		t.Fatalf("Receive from a closed source: %v, want a receive error about connecting to the source", err)
	}
	if _, err := src.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: oid(0x22)}); !errors.Is(err, tcptemplate.ErrClosed) {
		t.Errorf("ExtractMetadata after Close: %v, want ErrClosed", err)
	}
}

func TestNonCPUTensorNotSupported(t *testing.T) {
	src := newTransport(t)
	in := tensor(t, 1, 4)
	in.Device = "cuda:0"
	_, err := src.ExtractMetadata(ctxT(t), &transport.ExtractMetadataRequest{ObjectID: oid(0x30), Tensors: []transport.Tensor{in}})
	if !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("ExtractMetadata of a cuda tensor: %v, want ErrNotSupported", err)
	}
}

func TestConfigure(t *testing.T) {
	defaults, err := plugin.NormalizeConfig(tcptemplate.New().ConfigSpec().Schema(), map[string]any{})
	if err != nil {
		t.Fatalf("the schema's defaults do not normalize: %v", err)
	}
	if typed, err := plugin.DecodeConfig[tcptemplate.Config](nil); err != nil || typed != tcptemplate.DefaultConfig() {
		t.Fatalf("the config block's defaults %+v (%v), want DefaultConfig() %+v", typed, err, tcptemplate.DefaultConfig())
	}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for dk, dv := range defaults {
			m[dk] = dv
		}
		m[k] = v
		return m
	}
	tests := []struct {
		name    string
		cfg     map[string]any
		wantErr string // "" for success
	}{
		{"defaults", defaults, ""},
		{"test prefix", with("segment_prefix", testPrefix), ""},
		{"fixed loopback port 0", with("listen_address", "127.0.0.1:0"), ""},
		{"listen address without port", with("listen_address", "127.0.0.1"), "listen_address"},
		{"unbindable address", with("listen_address", "192.0.2.1:0"), "listen_address"},
		{"prefix outside goray-t-", with("segment_prefix", "mine-"), `must start with "goray-t-"`},
		{"prefix with a slash", with("segment_prefix", "goray-t-a/b"), "segment_prefix"},
		{"zero dial timeout", with("dial_timeout", "0s"), "dial_timeout"},
		{"unparsable dial timeout", with("dial_timeout", "soon"), "dial_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTransport(t)
			err := tr.ConfigSpec().Configure(context.Background(), tc.cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Configure: %v", err)
				}
				if tr.Addr() == "" {
					t.Error("Configure did not start the data listener")
				}
				if err := tr.Health(context.Background()); err != nil {
					t.Errorf("Health: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Configure: %v, want an error mentioning %q", err, tc.wantErr)
			}
		})
	}

	t.Run("listen address cannot change while serving", func(t *testing.T) {
		tr := newTransport(t)
		if err := tr.ConfigSpec().Configure(context.Background(), defaults); err != nil {
			t.Fatal(err)
		}
		err := tr.ConfigSpec().Configure(context.Background(), with("listen_address", "127.0.0.1:1"))
		if err == nil || !strings.Contains(err.Error(), "cannot change") {
			t.Fatalf("Configure with a new address: %v, want an error", err)
		}
		if err := tr.ConfigSpec().Configure(context.Background(), with("dial_timeout", "1s")); err != nil {
			t.Fatalf("Configure with the same address: %v", err)
		}
	})
}

func TestInfoIsConstant(t *testing.T) {
	tr := newTransport(t)
	want := transport.InfoResponse{Name: "tcp-template", OneSided: false, CanAbort: true, SameNode: true}
	for range 2 {
		info, err := tr.Info(context.Background(), nil)
		if err != nil || *info != want {
			t.Fatalf("Info = %+v, %v; want %+v", info, err, want)
		}
	}
	if tr.Version() != tcptemplate.Version {
		t.Errorf("Version = %q", tr.Version())
	}
}

// TestDataListenerRefusesStrangers: the data listener serves only peers
// that prove they hold the cluster token.
func TestDataListenerRefusesStrangers(t *testing.T) {
	defaults, err := plugin.NormalizeConfig(tcptemplate.New().ConfigSpec().Schema(), map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	defaults["listen_address"] = "127.0.0.1:0"
	defaults["segment_prefix"] = testPrefix
	tr := newTransport(t)
	if err := tr.ConfigSpec().Configure(context.Background(), defaults); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	authtest.RefusesStrangers(t, tr.Addr(), testToken)
}
