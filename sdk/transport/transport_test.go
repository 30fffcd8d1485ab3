package transport_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/goray-dev/goray/sdk/transport/transporttest"
)

func TestElementSize(t *testing.T) {
	want := map[transport.DType]int{
		transport.Float16: 2, transport.BFloat16: 2, transport.Float32: 4, transport.Float64: 8,
		transport.Int8: 1, transport.Int16: 2, transport.Int32: 4, transport.Int64: 8,
		transport.Uint8: 1, transport.Bool: 1, "complex64": 0, "": 0,
	}
	for dt, n := range want {
		if got := dt.ElementSize(); got != n {
			t.Errorf("%q.ElementSize() = %d, want %d", dt, got, n)
		}
		if dt.Valid() != (n != 0) {
			t.Errorf("%q.Valid() = %v", dt, dt.Valid())
		}
	}
	if len(transport.DTypes) != 10 {
		t.Errorf("DTypes has %d entries, want 10", len(transport.DTypes))
	}
}

func TestTensorMeta(t *testing.T) {
	tests := []struct {
		name  string
		meta  transport.TensorMeta
		size  int64
		valid bool
	}{
		{"scalar", transport.TensorMeta{DType: transport.Float32}, 4, true},
		{"matrix", transport.TensorMeta{DType: transport.Int64, Shape: []int64{3, 5}}, 120, true},
		{"empty", transport.TensorMeta{DType: transport.Bool, Shape: []int64{4, 0, 2}}, 0, true},
		{"negative", transport.TensorMeta{DType: transport.Int8, Shape: []int64{-1}}, -1, false},
		{"overflow", transport.TensorMeta{DType: transport.Float64, Shape: []int64{math.MaxInt64 / 2, 4}}, -1, false},
		{"overflow by element size", transport.TensorMeta{DType: transport.Float64, Shape: []int64{math.MaxInt64 / 4}}, -1, false},
		{"unknown dtype", transport.TensorMeta{DType: "q4", Shape: []int64{2}}, -1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.meta.ByteSize(); got != tc.size {
				t.Errorf("ByteSize = %d, want %d", got, tc.size)
			}
			err := tc.meta.Validate()
			if tc.valid && err != nil {
				t.Errorf("Validate: %v", err)
			}
			if !tc.valid && !errors.Is(err, transport.ErrBadMetadata) {
				t.Errorf("Validate: %v, want ErrBadMetadata", err)
			}
		})
	}
	a := transport.TensorMeta{DType: transport.Float32, Shape: []int64{2}}
	b := transport.TensorMeta{DType: transport.Float32, Shape: []int64{2}, Device: "cpu"}
	if !a.Equal(b) {
		t.Error("an empty device does not equal cpu")
	}
	if a.Equal(transport.TensorMeta{DType: transport.Float32, Shape: []int64{2}, Device: "cuda:0"}) {
		t.Error("cpu equals cuda:0")
	}
	if got := b.String(); got != "float32[2]@cpu" {
		t.Errorf("String = %q", got)
	}
}

func TestTensorValidate(t *testing.T) {
	ok := transport.Tensor{DType: transport.Int16, Shape: []int64{4}, Buffer: transport.Buffer{Segment: "goray-t-x", Length: 8}}
	tests := []struct {
		name string
		mod  func(*transport.Tensor)
		ok   bool
	}{
		{"good", func(*transport.Tensor) {}, true},
		{"zero length without segment", func(t *transport.Tensor) { t.Shape = []int64{0}; t.Buffer = transport.Buffer{} }, true},
		{"length mismatch", func(t *transport.Tensor) { t.Buffer.Length = 7 }, false},
		{"negative offset", func(t *transport.Tensor) { t.Buffer.Offset = -8 }, false},
		{"no segment", func(t *transport.Tensor) { t.Buffer.Segment = "" }, false},
		{"segment path", func(t *transport.Tensor) { t.Buffer.Segment = "../x" }, false},
		{"bad dtype", func(t *transport.Tensor) { t.DType = "x" }, false},
	}
	for _, tc := range tests {
		tn := ok
		tn.Shape = append([]int64(nil), ok.Shape...)
		tc.mod(&tn)
		err := tn.Validate()
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, transport.ErrBadMetadata)) {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
	}
}

func TestValidObjectID(t *testing.T) {
	for id, ok := range map[string]bool{
		"00ff":                  true,
		strings.Repeat("a", 40): true,
		"":                      false,
		"abc":                   false,
		"00FF":                  false,
		"zz":                    false,
		"../..":                 false,
		strings.Repeat("a", transport.MaxObjectIDLen+2): false,
	} {
		err := transport.ValidObjectID(id)
		if ok != (err == nil) || (err != nil && !errors.Is(err, transport.ErrBadMetadata)) {
			t.Errorf("ValidObjectID(%.20q) = %v", id, err)
		}
	}
}

func TestNewTensorBytesFree(t *testing.T) {
	ctx := context.Background()
	tn, err := transport.NewTensor(transport.Float64, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if tn.Buffer.Length != 48 || !strings.HasPrefix(tn.Buffer.Segment, shmem.Prefix) || tn.Device != transport.CPU {
		t.Fatalf("NewTensor = %+v", tn)
	}
	b, err := tn.Bytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b[47] = 9
	seg, err := shmem.Open(tn.Buffer.Segment)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Bytes()[47] != 9 {
		t.Error("Bytes is not the segment's memory")
	}
	_ = seg.Close()
	tn.Release()
	if err := tn.Free(); err != nil {
		t.Fatal(err)
	}
	if shmem.Exists(tn.Buffer.Segment) {
		t.Fatal("segment exists after Free")
	}
	if _, err := tn.Bytes(ctx); !errors.Is(err, shmem.ErrNotFound) {
		t.Fatalf("Bytes of a freed tensor: %v, want shmem.ErrNotFound", err)
	}
	if _, err := transport.NewTensor(transport.Float32, -1); !errors.Is(err, transport.ErrBadMetadata) {
		t.Fatalf("NewTensor with a negative dimension: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := (transport.Tensor{}).Bytes(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Bytes with a cancelled context: %v", err)
	}
	empty := transport.Tensor{DType: transport.Int8, Shape: []int64{0}}
	if b, err := empty.Bytes(ctx); err != nil || len(b) != 0 {
		t.Fatalf("Bytes of an empty tensor = %v, %v", b, err)
	}
	empty.Release()
}

func TestTransferError(t *testing.T) {
	err := transport.Errorf("ab12", transport.OpReceive, "%w: segment gone", transport.ErrBadMetadata)
	if !errors.Is(err, transport.ErrBadMetadata) {
		t.Fatal("TransferError does not unwrap to its cause")
	}
	if got, want := err.Error(), "transport receive of object ab12: bad transport metadata: segment gone"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestContextError(t *testing.T) {
	if transport.ContextError(context.Background()) != nil {
		t.Fatal("ContextError of a live context is not nil")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := transport.ContextError(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	err := transport.ContextError(ctx)
	if !errors.Is(err, transport.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v, want ErrTimeout and DeadlineExceeded", err)
	}
}

func TestAborts(t *testing.T) {
	var a transport.Aborts
	ctx, done, err := a.Begin(context.Background(), "aa")
	if err != nil {
		t.Fatal(err)
	}
	if a.Pending("aa") != 1 {
		t.Fatalf("Pending = %d", a.Pending("aa"))
	}
	other, otherDone, err := a.Begin(context.Background(), "bb")
	if err != nil {
		t.Fatal(err)
	}
	defer otherDone()
	a.Abort("aa", "peer died")
	<-ctx.Done()
	err = transport.ContextError(ctx)
	if !errors.Is(err, transport.ErrAborted) || !strings.Contains(err.Error(), "peer died") {
		t.Fatalf("aborted call sees %v", err)
	}
	if other.Err() != nil {
		t.Fatal("abort of one object cancelled another")
	}
	done()
	if a.Pending("aa") != 0 {
		t.Fatal("done did not unregister")
	}
	if _, _, err := a.Begin(context.Background(), "aa"); !errors.Is(err, transport.ErrAborted) {
		t.Fatalf("Begin after Abort: %v", err)
	}
	a.Forget("aa")
	if _, d, err := a.Begin(context.Background(), "aa"); err != nil {
		t.Fatalf("Begin after Forget: %v", err)
	} else {
		d()
	}
	// The memory of aborted objects is bounded.
	for i := range transport.MaxAbortedRemembered + 10 {
		a.Abort(fmt.Sprintf("%04x", i), "")
	}
	if a.Aborted("0000") != nil {
		t.Fatal("the oldest aborted object is still remembered past the bound")
	}
	if a.Aborted(fmt.Sprintf("%04x", transport.MaxAbortedRemembered+9)) == nil {
		t.Fatal("the newest aborted object is forgotten")
	}
}

// fake is a Transport whose methods return what the test sets and record
// the requests they get.
type fake struct {
	mu      sync.Mutex
	err     error
	panicky bool
	got     []any
	entered chan struct{} // Receive signals it is blocking
	exited  chan error    // Receive reports its context's error
	recv    *transport.ReceiveResponse
}

func (f *fake) record(req any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, req)
	if f.panicky {
		panic("boom")
	}
	return f.err
}

func (f *fake) Info(_ context.Context, r *transport.InfoRequest) (*transport.InfoResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return &transport.InfoResponse{Name: "fake", OneSided: true, CanAbort: true, SameNode: true}, nil
}
func (f *fake) ActorHasTransport(_ context.Context, r *transport.ActorHasTransportRequest) (*transport.ActorHasTransportResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return &transport.ActorHasTransportResponse{HasTransport: true}, nil
}
func (f *fake) ExtractMetadata(_ context.Context, r *transport.ExtractMetadataRequest) (*transport.ExtractMetadataResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return &transport.ExtractMetadataResponse{
		Tensors:       []transport.TensorMeta{{DType: transport.Int8, Shape: []int64{1, 2}, Device: "cpu"}},
		TransportData: []byte{1, 2, 3},
	}, nil
}
func (f *fake) CommunicatorMetadata(_ context.Context, r *transport.CommunicatorMetadataRequest) (*transport.CommunicatorMetadataResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return &transport.CommunicatorMetadataResponse{Data: []byte("group=g rank=1")}, nil
}
func (f *fake) Send(_ context.Context, r *transport.SendRequest) (*transport.SendResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return &transport.SendResponse{}, nil
}
func (f *fake) Receive(ctx context.Context, r *transport.ReceiveRequest) (*transport.ReceiveResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	if f.entered != nil {
		close(f.entered)
		<-ctx.Done()
		err := transport.ContextError(ctx)
		f.exited <- err
		return nil, err
	}
	return f.recv, nil
}
func (f *fake) GarbageCollect(_ context.Context, r *transport.GarbageCollectRequest) (*transport.GarbageCollectResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return &transport.GarbageCollectResponse{}, nil
}
func (f *fake) Abort(_ context.Context, r *transport.AbortRequest) (*transport.AbortResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return &transport.AbortResponse{}, nil
}

// TestBridgeCarriesEveryField sends every request field through gRPC and
// checks the implementation sees it, and that responses come back whole.
func TestBridgeCarriesEveryField(t *testing.T) {
	ctx := context.Background()
	tn := transport.Tensor{DType: transport.BFloat16, Shape: []int64{2, 3}, Device: "cpu", Buffer: transport.Buffer{Segment: "goray-t-a", Offset: 64, Length: 12}}
	f := &fake{recv: &transport.ReceiveResponse{Tensors: []transport.Tensor{tn}, Allocated: []string{"goray-t-a"}}}
	c := transporttest.OverGRPC(t, f)

	reqs := []any{
		&transport.ActorHasTransportRequest{ActorID: "actor1", NodeID: "node1"},
		&transport.ExtractMetadataRequest{ObjectID: "0a", Source: "s", Tensors: []transport.Tensor{tn}, TransferOwnership: true},
		&transport.CommunicatorMetadataRequest{ObjectID: "0a", Source: "s", Destination: "d"},
		&transport.SendRequest{ObjectID: "0a", Source: "s", Destination: "d", Tensors: []transport.TensorMeta{tn.Meta()}, TransportData: []byte{9}, CommunicatorData: []byte{8}},
		&transport.ReceiveRequest{ObjectID: "0a", Source: "s", Destination: "d", Tensors: []transport.TensorMeta{tn.Meta()}, TransportData: []byte{9}, CommunicatorData: []byte{8}, Targets: []transport.Tensor{tn}},
		&transport.GarbageCollectRequest{ObjectID: "0a", TransportData: []byte{7}},
		&transport.AbortRequest{ObjectID: "0a", Reason: "why"},
	}
	info, err := c.Info(ctx, nil)
	if err != nil || *info != (transport.InfoResponse{Name: "fake", OneSided: true, CanAbort: true, SameNode: true}) {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	has, err := c.ActorHasTransport(ctx, reqs[0].(*transport.ActorHasTransportRequest))
	if err != nil || !has.HasTransport {
		t.Fatalf("ActorHasTransport = %+v, %v", has, err)
	}
	em, err := c.ExtractMetadata(ctx, reqs[1].(*transport.ExtractMetadataRequest))
	if err != nil || !reflect.DeepEqual(em, &transport.ExtractMetadataResponse{
		Tensors: []transport.TensorMeta{{DType: transport.Int8, Shape: []int64{1, 2}, Device: "cpu"}}, TransportData: []byte{1, 2, 3}}) {
		t.Fatalf("ExtractMetadata = %+v, %v", em, err)
	}
	cm, err := c.CommunicatorMetadata(ctx, reqs[2].(*transport.CommunicatorMetadataRequest))
	if err != nil || string(cm.Data) != "group=g rank=1" {
		t.Fatalf("CommunicatorMetadata = %+v, %v", cm, err)
	}
	if _, err := c.Send(ctx, reqs[3].(*transport.SendRequest)); err != nil {
		t.Fatal(err)
	}
	rr, err := c.Receive(ctx, reqs[4].(*transport.ReceiveRequest))
	if err != nil || !reflect.DeepEqual(rr, f.recv) {
		t.Fatalf("Receive = %+v, %v; want %+v", rr, err, f.recv)
	}
	if _, err := c.GarbageCollect(ctx, reqs[5].(*transport.GarbageCollectRequest)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Abort(ctx, reqs[6].(*transport.AbortRequest)); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	got := f.got[1:] // after Info
	f.mu.Unlock()
	if !reflect.DeepEqual(got, reqs) {
		for i := range reqs {
			if i < len(got) && !reflect.DeepEqual(got[i], reqs[i]) {
				t.Errorf("request %d: implementation got %+v, client sent %+v", i, got[i], reqs[i])
			}
		}
		t.Fatalf("implementation got %d requests, want %d", len(got), len(reqs))
	}
}

// TestBridgeErrors checks that errors keep their identity, object and
// operation across gRPC.
func TestBridgeErrors(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		match   []error
		message string
	}{
		{"aborted", fmt.Errorf("%w: peer died", transport.ErrAborted), []error{transport.ErrAborted}, "transfer aborted: peer died"},
		{"bad metadata", transport.Errorf("0a", transport.OpReceive, "%w: garbage", transport.ErrBadMetadata), []error{transport.ErrBadMetadata}, "bad transport metadata: garbage"},
		{"not supported", transport.ErrNotSupported, []error{transport.ErrNotSupported}, "not supported by this transport"},
		{"timeout", fmt.Errorf("waited: %w", transport.ErrTimeout), []error{transport.ErrTimeout, context.DeadlineExceeded}, "waited: transfer timed out"},
		{"context deadline", context.DeadlineExceeded, []error{transport.ErrTimeout, context.DeadlineExceeded}, "context deadline exceeded"},
		{"other", errors.New("disk on fire"), nil, "disk on fire"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := transporttest.OverGRPC(t, &fake{err: tc.err})
			_, err := c.Receive(context.Background(), &transport.ReceiveRequest{ObjectID: "0a"})
			if err == nil {
				t.Fatal("no error")
			}
			for _, m := range tc.match {
				if !errors.Is(err, m) {
					t.Errorf("error %v does not match %v", err, m)
				}
			}
			for _, s := range []error{transport.ErrAborted, transport.ErrBadMetadata, transport.ErrNotSupported, transport.ErrTimeout} {
				if errors.Is(err, s) && !slicesContains(tc.match, s) {
					t.Errorf("error %v wrongly matches %v", err, s)
				}
			}
			var te *transport.TransferError
			if !errors.As(err, &te) || te.ObjectID != "0a" || te.Op != transport.OpReceive {
				t.Fatalf("error %v is not a TransferError for object 0a, op receive", err)
			}
			if want := "transport receive of object 0a: " + tc.message; err.Error() != want {
				t.Errorf("message %q, want %q", err.Error(), want)
			}
		})
	}
}

func slicesContains(es []error, e error) bool {
	for _, x := range es {
		if x == e {
			return true
		}
	}
	return false
}

func TestBridgeRecoversPanics(t *testing.T) {
	f := &fake{panicky: true}
	c := transporttest.OverGRPC(t, f)
	_, err := c.ExtractMetadata(context.Background(), &transport.ExtractMetadataRequest{ObjectID: "0a"})
	if err == nil || !strings.Contains(err.Error(), "panicked: boom") {
		t.Fatalf("panicking implementation gave %v", err)
	}
	f.mu.Lock()
	f.panicky = false
	f.mu.Unlock()
	if _, err := c.Info(context.Background(), nil); err != nil {
		t.Fatalf("server unusable after a panic: %v", err)
	}
}

// TestBridgeCancellation checks that cancelling or timing out a call on the
// client reaches the implementation and returns promptly.
func TestBridgeCancellation(t *testing.T) {
	for _, deadline := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadline=%v", deadline), func(t *testing.T) {
			f := &fake{entered: make(chan struct{}), exited: make(chan error, 1)}
			c := transporttest.OverGRPC(t, f)
			ctx, cancel := context.WithCancel(context.Background())
			if deadline {
				ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
			}
			defer cancel()
			res := make(chan error, 1)
			go func() {
				_, err := c.Receive(ctx, &transport.ReceiveRequest{ObjectID: "0a"})
				res <- err
			}()
			<-f.entered
			if !deadline {
				cancel()
			}
			var err error
			select {
			case err = <-res:
			case <-time.After(waitfor.Generous):
				t.Fatal("Receive did not return after its context ended")
			}
			var implErr error
			select {
			case implErr = <-f.exited:
			case <-time.After(waitfor.Generous):
				t.Fatal("the implementation's context was not cancelled")
			}
			if deadline {
				if !errors.Is(err, transport.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("client error %v, want ErrTimeout", err)
				}
				if !errors.Is(implErr, context.DeadlineExceeded) && !errors.Is(implErr, context.Canceled) {
					t.Errorf("implementation saw %v", implErr)
				}
			} else {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("client error %v, want context.Canceled", err)
				}
				if !errors.Is(implErr, context.Canceled) {
					t.Errorf("implementation saw %v, want context.Canceled", implErr)
				}
			}
		})
	}
}
