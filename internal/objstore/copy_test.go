package objstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ dst, src int }{
		{0, 0}, {1, 1}, {100, 100},
		{ParallelCopyChunk*2 - 1, ParallelCopyChunk*2 - 1}, // one goroutine
		{ParallelCopyChunk * 2, ParallelCopyChunk * 2},     // two
		{ParallelCopyChunk*4 + 12345, ParallelCopyChunk*4 + 12345},
		{ParallelCopyChunk*9 + 7, ParallelCopyChunk*9 + 7}, // more parts than workers
		{ParallelCopyChunk * 3, ParallelCopyChunk * 5},     // a shorter dst
		{ParallelCopyChunk * 5, ParallelCopyChunk*3 + 1},   // a shorter src
	} {
		t.Run(fmt.Sprintf("dst=%d/src=%d", tc.dst, tc.src), func(t *testing.T) {
			src := make([]byte, tc.src)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			dst := make([]byte, tc.dst+64)
			for i := range dst {
				dst[i] = 0xa5
			}
			n := Copy(dst[:tc.dst], src)
			want := min(tc.dst, tc.src)
			if n != want {
				t.Fatalf("Copy = %d, want %d", n, want)
			}
			if !bytes.Equal(dst[:want], src[:want]) {
				t.Fatal("the copy differs from the source")
			}
			for i := want; i < len(dst); i++ {
				if dst[i] != 0xa5 {
					t.Fatalf("byte %d past the copy was written", i)
				}
			}
		})
	}
}

// BenchmarkCopy compares Copy with the built-in copy on a 256 MiB object
// (go test -bench Copy ./internal/objstore).
func BenchmarkCopy(b *testing.B) {
	const size = 256 << 20
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	for _, bc := range []struct {
		name string
		f    func(dst, src []byte) int
	}{{"builtin", func(d, s []byte) int { return copy(d, s) }}, {"Copy", Copy}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				bc.f(dst, src)
			}
		})
	}
}
