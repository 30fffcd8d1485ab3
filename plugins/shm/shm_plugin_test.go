package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/goray-dev/goray/host"
	shm "github.com/goray-dev/goray/plugins/shm/shmtransport"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/goray-dev/goray/sdk/transport/transporttest"
)

// pluginBin is the plugin binary, built once by TestMain.
var pluginBin string

func TestMain(m *testing.M) { os.Exit(host.RunWithPlugin(m, "goray-transport-shm", &pluginBin)) }

// launch starts the plugin binary through a real host and returns a
// transport client of it.
func launch(t *testing.T, cfg string) transport.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, v := host.Launch(ctx, t, pluginBin, "transport", "shm", cfg)
	if v != transport.APIVersion {
		t.Fatalf("negotiated API version %d, want %d", v, transport.APIVersion)
	}
	return transport.NewClient(conn, v)
}

func manifestGone(_ context.Context, objectID string) error {
	if shmem.Exists(shm.ManifestName(objectID)) {
		return fmt.Errorf("manifest %s still exists", shm.ManifestName(objectID))
	}
	return nil
}

// TestConformancePlugin runs the conformance suite through two real plugin
// processes: the source and the destination are different processes, as
// the actors of a node would use them.
func TestConformancePlugin(t *testing.T) {
	src := launch(t, `max_poll = "5ms"`)
	dst := launch(t, ``)
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		return src, dst
	}, transporttest.Options{Inspector: manifestGone})
}

// TestZeroCopyAcrossProcesses checks that a received tensor is the source's
// memory: the destination plugin process hands back the source's segment,
// and a write through one mapping is read through the other.
func TestZeroCopyAcrossProcesses(t *testing.T) {
	src := launch(t, ``)
	dst := launch(t, ``)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	in, err := transport.NewTensor(transport.Float32, 4, 256)
	if err != nil {
		t.Fatal(err)
	}
	id := "0123456789abcdef0123456789abcdef01234567"
	meta, err := src.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Tensors: []transport.Tensor{in}, TransferOwnership: true})
	if err != nil {
		_ = in.Free()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := src.GarbageCollect(context.Background(), &transport.GarbageCollectRequest{ObjectID: id}); err != nil {
			t.Errorf("GarbageCollect: %v", err)
		}
		if shmem.Exists(in.Buffer.Segment) {
			t.Errorf("segment %s left after GarbageCollect", in.Buffer.Segment)
		}
	})
	r, err := dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, Tensors: meta.Tensors, TransportData: meta.TransportData})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tensors) != 1 || r.Tensors[0].Buffer != in.Buffer || len(r.Allocated) != 0 {
		t.Fatalf("received %+v (allocated %v), want the source's own buffer %+v", r.Tensors, r.Allocated, in.Buffer)
	}
	checkShared(t, ctx, in, r.Tensors[0])
}

// checkShared writes through an independent mapping of the source and reads
// through the received tensor's mapping, and the other way round.
func checkShared(t *testing.T, ctx context.Context, src, got transport.Tensor) {
	t.Helper()
	seg, err := shmem.Open(src.Buffer.Segment)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	srcBytes := seg.Bytes()[src.Buffer.Offset : src.Buffer.Offset+src.Buffer.Length]
	gotBytes, err := got.Bytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if &srcBytes[0] == &gotBytes[0] {
		t.Fatal("test bug: both views are the same mapping")
	}
	for i := range srcBytes {
		srcBytes[i] = byte(i * 7)
	}
	if !slices.Equal(gotBytes, srcBytes) {
		t.Fatal("a write to the source is not visible through the received tensor")
	}
	gotBytes[3] = 0xAB
	if srcBytes[3] != 0xAB {
		t.Fatal("a write to the received tensor is not visible in the source")
	}
}

// TestSendNotSupportedAcrossPlugin checks the error identity survives the
// process boundary.
func TestSendNotSupportedAcrossPlugin(t *testing.T) {
	tr := launch(t, ``)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := tr.Send(ctx, &transport.SendRequest{ObjectID: "ab"})
	if !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("Send: %v, want ErrNotSupported", err)
	}
	var te *transport.TransferError
	if !errors.As(err, &te) || te.ObjectID != "ab" || te.Op != transport.OpSend {
		t.Fatalf("Send error %v is not a TransferError naming object ab and op send", err)
	}
	info, err := tr.Info(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := transport.InfoResponse{Name: "shm", OneSided: true, CanAbort: true, SameNode: true}
	if *info != want {
		t.Fatalf("Info = %+v, want %+v", *info, want)
	}
}

// withPool gives this test process and the plugins it launches a fresh
// segment pool, as a node does, and removes it at the end.
func withPool(t *testing.T) *shmem.Pool {
	t.Helper()
	p, err := shmem.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(shmem.EnvPool, p.Dir())
	old := shmem.SetDefaultPool(p)
	t.Cleanup(func() {
		shmem.SetDefaultPool(old)
		if err := p.Remove(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// TestConformancePluginWithPool runs the conformance suite with a node's
// segment pool: collected segments go back to the pool and new tensors
// come from it.
func TestConformancePluginWithPool(t *testing.T) {
	p := withPool(t)
	src := launch(t, `max_poll = "5ms"`)
	dst := launch(t, ``)
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		return src, dst
	}, transporttest.Options{Inspector: manifestGone})
	if n, _, err := p.Usage(); err != nil || n == 0 {
		t.Fatalf("the pool holds %d segments (%v): the plugin did not return collected segments to it", n, err)
	}
}

// TestPooledSegmentOutlivesObject: a reader still mapping a received tensor
// after its object is collected keeps reading that tensor's bytes; the
// segment goes to the pool but is handed to a new tensor only once the
// reader lets go.
func TestPooledSegmentOutlivesObject(t *testing.T) {
	withPool(t)
	src := launch(t, ``)
	dst := launch(t, ``)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 1 << 18 // 1 MiB of float32
	in, err := transport.NewTensor(transport.Float32, n)
	if err != nil {
		t.Fatal(err)
	}
	b, err := in.Bytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, "first tensor")
	in.Release()
	id := "1123456789abcdef0123456789abcdef01234567"
	meta, err := src.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Tensors: []transport.Tensor{in}, TransferOwnership: true})
	if err != nil {
		_ = in.Free()
		t.Fatal(err)
	}
	r, err := dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, Tensors: meta.Tensors, TransportData: meta.TransportData})
	if err != nil {
		t.Fatal(err)
	}
	// Map it through a cache of its own, as another process would.
	reader := shmem.NewCache(4)
	defer reader.Purge()
	got, err := reader.Acquire(r.Tensors[0].Buffer.Segment, 0, r.Tensors[0].Buffer.Length)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id}); err != nil {
		t.Fatal(err)
	}
	if shmem.Exists(in.Buffer.Segment) {
		t.Fatal("the collected tensor's segment keeps its name")
	}
	other, err := transport.NewTensor(transport.Float32, n)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := other.Bytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	copy(ob, "second tensor")
	other.Release()
	if string(got[:12]) != "first tensor" {
		t.Fatalf("the reader of the collected tensor reads %q", got[:12])
	}
	reader.Release(r.Tensors[0].Buffer.Segment)
	if err := other.Free(); err != nil {
		t.Fatal(err)
	}
	// Both are free now: the next two tensors of the class reuse them.
	for i := 0; i < 2; i++ {
		again, err := transport.NewTensor(transport.Float32, n)
		if err != nil {
			t.Fatal(err)
		}
		if size, _ := shmem.Stat(again.Buffer.Segment); size != shmem.ClassSize(4*n) {
			t.Fatalf("size %d", size)
		}
		defer again.Free()
	}
	if segs, _, _ := shmem.DefaultPool().Usage(); segs != 0 {
		t.Fatalf("%d segments left in the pool after two tensors took both", segs)
	}
}
