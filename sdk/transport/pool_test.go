package transport_test

import (
	"context"
	"testing"

	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// TestTensorsFromPool: with a pool, Free returns a tensor's segment to it
// and the next tensor of the size class reuses it (zero-filled again by
// NewTensor, as written by NewUninitializedTensor); tensors below
// MinPooled and tensors of other classes get fresh segments.
func TestTensorsFromPool(t *testing.T) {
	ctx := context.Background()
	p, err := shmem.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	old := shmem.SetDefaultPool(p)
	t.Cleanup(func() {
		shmem.SetDefaultPool(old)
		if err := p.Remove(); err != nil {
			t.Error(err)
		}
	})
	ino := func(tn transport.Tensor) uint64 {
		t.Helper()
		seg, err := shmem.Open(tn.Buffer.Segment)
		if err != nil {
			t.Fatal(err)
		}
		defer seg.Close()
		return seg.Inode()
	}
	fill := func(tn transport.Tensor) {
		t.Helper()
		b, err := tn.Bytes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b {
			b[i] = 0xAB
		}
		tn.Release()
	}

	const n = 300_000 // float32: 1.2 MB, class 1.25 MiB
	first, err := transport.NewTensor(transport.Float32, n)
	if err != nil {
		t.Fatal(err)
	}
	if size, _ := shmem.Stat(first.Buffer.Segment); size != shmem.ClassSize(4*n) || first.Buffer.Length != 4*n {
		t.Fatalf("segment of %d bytes for a %d-byte tensor, want the class size %d", size, first.Buffer.Length, shmem.ClassSize(4*n))
	}
	fill(first)
	file := ino(first)
	if err := first.Free(); err != nil {
		t.Fatal(err)
	}
	if shmem.Exists(first.Buffer.Segment) {
		t.Fatal("a freed tensor's segment keeps its name")
	}

	// The same class (a little smaller), zero-filled.
	second, err := transport.NewTensor(transport.Float32, n-1000)
	if err != nil {
		t.Fatal(err)
	}
	if ino(second) != file {
		t.Fatal("NewTensor did not reuse the freed segment")
	}
	b, err := second.Bytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range b {
		if v != 0 {
			t.Fatalf("byte %d of a reused tensor is %#x, want 0", i, v)
		}
	}
	second.Release()
	fill(second)
	if err := second.Free(); err != nil {
		t.Fatal(err)
	}
	// Uninitialized: the same file, the old bytes.
	third, err := transport.NewUninitializedTensor(transport.Uint8, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	if ino(third) != file {
		t.Fatal("NewUninitializedTensor did not reuse the freed segment")
	}
	if b, err := third.Bytes(ctx); err != nil || b[0] != 0xAB {
		t.Fatalf("uninitialized tensor: %v (first byte %#x): want the old bytes", err, b[0])
	}
	third.Release()
	// While third is held, another tensor of the class is a fresh segment.
	fourth, err := transport.NewTensor(transport.Uint8, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	if ino(fourth) == file {
		t.Fatal("a segment still owned was handed out again")
	}
	small, err := transport.NewTensor(transport.Uint8, 100)
	if err != nil {
		t.Fatal(err)
	}
	if size, _ := shmem.Stat(small.Buffer.Segment); size != 100 {
		t.Fatalf("a 100-byte tensor has a %d-byte segment, want 100 (not pooled)", size)
	}
	for _, tn := range []transport.Tensor{third, fourth, small} {
		if err := tn.Free(); err != nil {
			t.Fatal(err)
		}
	}
	if segs, bytes, err := p.Usage(); err != nil || segs != 2 || bytes != 2*shmem.ClassSize(4*n) {
		t.Fatalf("pool holds %d segments (%d bytes), %v; want the two pooled ones", segs, bytes, err)
	}
}
