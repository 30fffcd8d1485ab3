package shmtransport_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	shm "github.com/goray-dev/goray/plugins/shm/shmtransport"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/goray-dev/goray/sdk/transport/transporttest"
)

// manifestGone is the inspector: after collection no manifest is left.
func manifestGone(_ context.Context, objectID string) error {
	if shmem.Exists(shm.ManifestName(objectID)) {
		return fmt.Errorf("manifest %s still exists", shm.ManifestName(objectID))
	}
	return nil
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) (src, dst transport.Transport) {
		src, dst = shm.New(), shm.New()
		t.Cleanup(func() {
			if n, s := src.(*shm.Transport).Objects(); n != 0 || s != 0 {
				t.Errorf("source still holds %d objects and %d segments after the suite collected everything", n, s)
			}
		})
		return src, dst
	}, transporttest.Options{Inspector: manifestGone})
}

// The same suite through the gRPC bridge the plugin binary uses.
func TestConformanceOverGRPC(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) (src, dst transport.Transport) {
		return transporttest.OverGRPC(t, shm.New()), transporttest.OverGRPC(t, shm.New())
	}, transporttest.Options{Inspector: manifestGone})
}

func newObject(t *testing.T, dt transport.DType, shape ...int64) transport.Tensor {
	t.Helper()
	tn, err := transport.NewTensor(dt, shape...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tn.Free() })
	return tn
}

func extract(t *testing.T, tr transport.Transport, id string, own bool, ts ...transport.Tensor) *transport.ExtractMetadataResponse {
	t.Helper()
	m, err := tr.ExtractMetadata(context.Background(), &transport.ExtractMetadataRequest{ObjectID: id, Tensors: ts, TransferOwnership: own})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = tr.GarbageCollect(context.Background(), &transport.GarbageCollectRequest{ObjectID: id})
	})
	return m
}

// TestZeroCopy: the destination gets the source's buffer, and a write
// through one mapping is read through the other.
func TestZeroCopy(t *testing.T) {
	ctx := context.Background()
	src, dst := shm.New(), shm.New()
	in := newObject(t, transport.Int32, 1024)
	m := extract(t, src, "aa01", false, in)
	r, err := dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: "aa01", Tensors: m.Tensors, TransportData: m.TransportData})
	if err != nil {
		t.Fatal(err)
	}
	if r.Tensors[0].Buffer != in.Buffer || len(r.Allocated) != 0 {
		t.Fatalf("received %+v, want the source's buffer %+v and no allocation", r.Tensors[0].Buffer, in.Buffer)
	}
	seg, err := shmem.Open(in.Buffer.Segment)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	got, err := r.Tensors[0].Bytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Tensors[0].Release()
	if &got[0] == &seg.Bytes()[0] {
		t.Fatal("test bug: same mapping")
	}
	seg.Bytes()[4095] = 0x5A
	if got[4095] != 0x5A {
		t.Fatal("write through the source's mapping not seen by the receiver")
	}
}

func TestExtractErrors(t *testing.T) {
	ctx := context.Background()
	a, b := shm.New(), shm.New()
	in := newObject(t, transport.Float32, 4)
	extract(t, a, "bb02", false, in)
	// Another source publishing the same object id is refused.
	_, err := b.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: "bb02", Tensors: []transport.Tensor{in}})
	if !errors.Is(err, transport.ErrBadMetadata) || !strings.Contains(err.Error(), "another source") {
		t.Fatalf("second source: %v", err)
	}
	gpu := in
	gpu.Device = "cuda:0"
	_, err = a.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: "bb03", Tensors: []transport.Tensor{gpu}})
	if !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("gpu tensor: %v, want ErrNotSupported", err)
	}
	var te *transport.TransferError
	if !errors.As(err, &te) || te.ObjectID != "bb03" || te.Op != transport.OpExtractMetadata {
		t.Fatalf("error %v does not name the object and op", err)
	}
}

func TestReceiveChecksSegmentsAndStaleness(t *testing.T) {
	ctx := context.Background()
	src, dst := shm.New(), shm.New()
	in := newObject(t, transport.Uint8, 10)
	m := extract(t, src, "cc04", false, in)
	// Collect and extract again: the old transport data is stale.
	if _, err := src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: "cc04"}); err != nil {
		t.Fatal(err)
	}
	m2 := extract(t, src, "cc04", false, in)
	_, err := dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: "cc04", TransportData: m.TransportData})
	if !errors.Is(err, transport.ErrBadMetadata) || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("stale transport data: %v", err)
	}
	// A segment unlinked behind the transport's back.
	if err := in.Free(); err != nil {
		t.Fatal(err)
	}
	_, err = dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: "cc04", TransportData: m2.TransportData})
	if !errors.Is(err, transport.ErrBadMetadata) || !strings.Contains(err.Error(), in.Buffer.Segment) {
		t.Fatalf("missing segment: %v (want ErrBadMetadata naming %s)", err, in.Buffer.Segment)
	}
}

func TestGarbageCollectClearsAbort(t *testing.T) {
	ctx := context.Background()
	src, dst := shm.New(), shm.New()
	in := newObject(t, transport.Int8, 3)
	if _, err := dst.Abort(ctx, &transport.AbortRequest{ObjectID: "dd05", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	m := extract(t, src, "dd05", false, in)
	req := &transport.ReceiveRequest{ObjectID: "dd05", TransportData: m.TransportData}
	if _, err := dst.Receive(ctx, req); !errors.Is(err, transport.ErrAborted) || !strings.Contains(err.Error(), "test") {
		t.Fatalf("Receive of an aborted object: %v", err)
	}
	if _, err := dst.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: "dd05"}); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Receive(ctx, req); err != nil {
		t.Fatalf("Receive after the abort was collected: %v", err)
	}
}

func TestConfigure(t *testing.T) {
	tr := shm.New().(*shm.Transport)
	if err := tr.ConfigSpec().Err(); err != nil {
		t.Fatal(err)
	}
	if got := tr.ConfigSpec().Schema().Attributes["max_poll"].Default; got != shm.DefaultMaxPoll.String() {
		t.Fatalf("max_poll default %v, want %v", got, shm.DefaultMaxPoll)
	}
	if tr.MaxPoll() != shm.DefaultMaxPoll {
		t.Fatalf("default max_poll %v", tr.MaxPoll())
	}
	tests := []struct {
		cfg  map[string]any
		want time.Duration
		ok   bool
	}{
		{map[string]any{}, shm.DefaultMaxPoll, true},
		{map[string]any{"max_poll": "5ms"}, 5 * time.Millisecond, true},
		{map[string]any{"max_poll": "-1s"}, 5 * time.Millisecond, false},
		{map[string]any{"max_poll": 3.0}, 5 * time.Millisecond, false},
	}
	for _, tc := range tests {
		err := tr.ConfigSpec().Configure(context.Background(), tc.cfg)
		if tc.ok != (err == nil) {
			t.Errorf("Configure(%v) = %v", tc.cfg, err)
		}
		if tr.MaxPoll() != tc.want {
			t.Errorf("after Configure(%v): max_poll %v, want %v", tc.cfg, tr.MaxPoll(), tc.want)
		}
	}
}

// TestCollectAfterRestart: a new instance (the plugin restarted) collects
// objects an earlier one extracted, given their transport data.
func TestCollectAfterRestart(t *testing.T) {
	ctx := context.Background()
	old := shm.New()
	seg := newObject(t, transport.Float32, 16) // 64 bytes
	a := seg
	a.Shape, a.Buffer.Length = []int64{8}, 32
	b := a
	b.Buffer.Offset = 32
	solo := newObject(t, transport.Int8, 5)
	ma, err := old.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: "ee01", Tensors: []transport.Tensor{a}, TransferOwnership: true})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := old.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: "ee02", Tensors: []transport.Tensor{b}, TransferOwnership: true})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := old.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: "ee03", Tensors: []transport.Tensor{solo}, TransferOwnership: true})
	if err != nil {
		t.Fatal(err)
	}

	restarted := shm.New()
	gc := func(id string, td []byte) {
		t.Helper()
		if _, err := restarted.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id, TransportData: td}); err != nil {
			t.Fatal(err)
		}
	}
	gc("ee03", []byte(`{"v":1,"object":"ee03","nonce":"forged","tensors":[]}`))
	if !shmem.Exists(shm.ManifestName("ee03")) || !shmem.Exists(solo.Buffer.Segment) {
		t.Fatal("GarbageCollect with transport data that does not match the manifest removed something")
	}
	gc("ee03", ms.TransportData)
	if shmem.Exists(shm.ManifestName("ee03")) || shmem.Exists(solo.Buffer.Segment) {
		t.Fatal("orphan object ee03 not collected")
	}
	gc("ee01", ma.TransportData)
	if shmem.Exists(shm.ManifestName("ee01")) {
		t.Fatal("manifest of ee01 left")
	}
	if !shmem.Exists(seg.Buffer.Segment) {
		t.Fatal("segment unlinked while object ee02 still references it")
	}
	gc("ee02", mb.TransportData)
	if shmem.Exists(seg.Buffer.Segment) || shmem.Exists(shm.ManifestName("ee02")) {
		t.Fatal("last object of the segment collected, segment or manifest left")
	}
}
