package objstore

import (
	"math/rand/v2"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
)

// BenchmarkCreateSealFree measures the lifecycle of a small (1 KiB) object.
func BenchmarkCreateSealFree(b *testing.B) {
	s := newTestStore(b, 64<<20)
	c := client(1)
	task := ids.ID{9}
	objs := make([]ids.ObjectID, 1)
	b.ReportAllocs()
	var i uint32
	for b.Loop() {
		id := ids.ObjectIDFor(task, i)
		i++
		if _, err := s.Create(id, 1024, nil, c); err != nil {
			b.Fatal(err)
		}
		if err := s.Seal(id, c, true); err != nil {
			b.Fatal(err)
		}
		objs[0] = id
		s.Free(objs)
	}
	if u := s.Usage(); u.Objects != 0 {
		b.Fatalf("%d objects left", u.Objects)
	}
}

// BenchmarkAllocator measures one free plus one alloc of random size in a
// 1 GiB arena holding about 8192 live blocks.
func BenchmarkAllocator(b *testing.B) {
	a := newAllocator(1 << 30)
	rng := rand.New(rand.NewPCG(3, 4))
	size := func() int64 { return 1 + rng.Int64N(64<<10) }
	live := make([]int64, 0, 8192)
	for range 8192 {
		off, ok := a.alloc(size())
		if !ok {
			b.Fatal("prefill failed")
		}
		live = append(live, off)
	}
	b.ReportAllocs()
	for b.Loop() {
		i := rng.IntN(len(live))
		a.free(live[i])
		off, ok := a.alloc(size())
		if !ok {
			b.Fatal("alloc failed")
		}
		live[i] = off
	}
	b.ReportMetric(float64(a.freeBlocks()), "freeblocks")
}

// BenchmarkWrite256MiB measures copying 256 MiB into an object through a
// client Mapping.
func BenchmarkWrite256MiB(b *testing.B) {
	const size = 256 << 20
	s := newTestStore(b, size+(1<<20))
	m, err := Map(b.Context(), s.SocketPath())
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	off := mustCreate(b, s, oid(1), size, client(1))
	dst, err := m.Slice(off, size)
	if err != nil {
		b.Fatal(err)
	}
	src := make([]byte, size)
	fillPattern(src, 1)
	b.SetBytes(size)
	for b.Loop() {
		copy(dst, src)
	}
	b.StopTimer()
	if i := checkPattern(s.Data(off, size), 1); i >= 0 {
		b.Fatalf("store sees different data at byte %d", i)
	}
}
