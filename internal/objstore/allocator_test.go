package objstore

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// checkAllocator verifies the allocator's internal invariants: free and used
// blocks tile [0, capacity) exactly, free blocks are fully coalesced, all
// three free-block indexes agree, and the treap is ordered and heap-shaped.
func checkAllocator(t testing.TB, a *allocator) {
	t.Helper()
	type blk struct {
		off, size int64
		free      bool
	}
	var blocks []blk
	var used int64
	for off, size := range a.inUse {
		blocks = append(blocks, blk{off, size, false})
		used += size
		if off%Alignment != 0 || size%Alignment != 0 || size <= 0 {
			t.Fatalf("used block [%d,+%d) not aligned", off, size)
		}
	}
	for off, size := range a.freeAt {
		blocks = append(blocks, blk{off, size, true})
		if start, ok := a.freeEnd[off+size]; !ok || start != off {
			t.Fatalf("free block [%d,+%d) missing from end index", off, size)
		}
		if off%Alignment != 0 || size%Alignment != 0 || size <= 0 {
			t.Fatalf("free block [%d,+%d) not aligned", off, size)
		}
	}
	if len(a.freeEnd) != len(a.freeAt) {
		t.Fatalf("end index has %d entries, start index %d", len(a.freeEnd), len(a.freeAt))
	}
	if used != a.used {
		t.Fatalf("used = %d, blocks sum to %d", a.used, used)
	}
	slices.SortFunc(blocks, func(x, y blk) int { return int(x.off - y.off) })
	var pos int64
	for i, b := range blocks {
		if b.off != pos {
			t.Fatalf("block %d starts at %d, want %d (gap or overlap)", i, b.off, pos)
		}
		if i > 0 && b.free && blocks[i-1].free {
			t.Fatalf("adjacent free blocks at %d and %d not coalesced", blocks[i-1].off, b.off)
		}
		pos += b.size
	}
	if pos != a.capacity {
		t.Fatalf("blocks end at %d, capacity %d", pos, a.capacity)
	}
	// Treap: in-order keys strictly increasing, heap on priority, same set.
	var n int
	var prevSize, prevOff int64 = -1, -1
	var walk func(nd *tnode, parentPrio uint64)
	walk = func(nd *tnode, parentPrio uint64) {
		if nd == nil {
			return
		}
		if nd.prio > parentPrio {
			t.Fatalf("treap heap order violated at (%d,%d)", nd.size, nd.off)
		}
		walk(nd.left, nd.prio)
		if !keyLess(prevSize, prevOff, nd.size, nd.off) {
			t.Fatalf("treap keys out of order: (%d,%d) after (%d,%d)", nd.size, nd.off, prevSize, prevOff)
		}
		prevSize, prevOff = nd.size, nd.off
		if a.freeAt[nd.off] != nd.size {
			t.Fatalf("treap node (%d,%d) is not a free block", nd.size, nd.off)
		}
		n++
		walk(nd.right, nd.prio)
	}
	walk(a.bySize.root, ^uint64(0))
	if n != len(a.freeAt) || n != a.bySize.n {
		t.Fatalf("treap has %d nodes (count %d), %d free blocks", n, a.bySize.n, len(a.freeAt))
	}
}

func mustAlloc(t *testing.T, a *allocator, n int64) int64 {
	t.Helper()
	off, ok := a.alloc(n)
	if !ok {
		t.Fatalf("alloc(%d) failed; used %d of %d, largest free %d", n, a.used, a.capacity, a.largestFree())
	}
	return off
}

func TestAllocatorAlignment(t *testing.T) {
	tests := []struct {
		size, want int64
	}{
		{1, 64}, {63, 64}, {64, 64}, {65, 128}, {1000, 1024}, {4096, 4096}, {4097, 4160},
	}
	a := newAllocator(1 << 20)
	for _, tt := range tests {
		off := mustAlloc(t, a, tt.size)
		if off%Alignment != 0 {
			t.Errorf("alloc(%d) offset %d not %d-aligned", tt.size, off, Alignment)
		}
		if got := a.sizeOf(off); got != tt.want {
			t.Errorf("alloc(%d) reserved %d bytes, want %d", tt.size, got, tt.want)
		}
	}
	checkAllocator(t, a)
}

func TestAllocatorEdgeCases(t *testing.T) {
	tests := []struct {
		name     string
		capacity int64
		size     int64
		ok       bool
	}{
		{"zero size", 1024, 0, false},
		{"negative size", 1024, -5, false},
		{"larger than capacity", 1024, 1025, false},
		{"exactly capacity", 1024, 1024, true},
		{"capacity rounded down", 1000, 961, false}, // usable 960
		{"capacity below alignment", 63, 1, false},
		{"huge size", 1024, 1<<63 - 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAllocator(tt.capacity)
			_, ok := a.alloc(tt.size)
			if ok != tt.ok {
				t.Fatalf("alloc(%d) in %d-byte arena ok=%t, want %t", tt.size, tt.capacity, ok, tt.ok)
			}
			checkAllocator(t, a)
		})
	}
	a := newAllocator(1024)
	if a.free(128) {
		t.Fatal("free of an unallocated offset succeeded")
	}
}

func TestAllocatorBestFit(t *testing.T) {
	const u = Alignment
	a := newAllocator(100 * u)
	// Layout in units: [1][5][1][3][1][8][1][3][1][tail]. Freeing the 5, 3, 8
	// and 3 blocks leaves holes 5u@1, 3u@7, 8u@11, 3u@20 and the tail 76u@24.
	sizes := []int64{1, 5, 1, 3, 1, 8, 1, 3, 1}
	offs := make([]int64, len(sizes))
	for i, s := range sizes {
		offs[i] = mustAlloc(t, a, s*u)
	}
	for _, i := range []int{1, 3, 5, 7} {
		a.free(offs[i])
	}
	checkAllocator(t, a)
	steps := []struct {
		size int64 // units
		want int64 // expected offset
	}{
		{3, offs[3]},       // exact fit; two 3u holes, lowest offset wins
		{3, offs[7]},       // the other 3u hole
		{2, offs[1]},       // best fit is the 5u hole, not 8u or the tail
		{3, offs[1] + 2*u}, // remainder of the 5u hole is 3u
		{6, offs[5]},       // 8u hole
		{2, offs[5] + 6*u}, // its 2u remainder
		{9, offs[8] + 1*u}, // only the tail fits
		{100, -1},          // never fits
		{sizes[0], offs[8] + 10*u},
	}
	for i, st := range steps {
		off, ok := a.alloc(st.size * u)
		if st.want < 0 {
			if ok {
				t.Fatalf("step %d: alloc(%du) succeeded at %d, want failure", i, st.size, off)
			}
			continue
		}
		if !ok || off != st.want {
			t.Fatalf("step %d: alloc(%du) = %d,%t; want %d", i, st.size, off, ok, st.want)
		}
		checkAllocator(t, a)
	}
}

func TestAllocatorCoalescing(t *testing.T) {
	const u = Alignment
	orders := [][]int{
		{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0},
	}
	for _, order := range orders {
		a := newAllocator(3 * u)
		offs := []int64{mustAlloc(t, a, u), mustAlloc(t, a, u), mustAlloc(t, a, u)}
		for _, i := range order {
			if !a.free(offs[i]) {
				t.Fatalf("order %v: free(%d) failed", order, offs[i])
			}
			checkAllocator(t, a)
		}
		if a.freeBlocks() != 1 || a.largestFree() != 3*u || a.used != 0 {
			t.Fatalf("order %v: %d free blocks, largest %d, used %d; want one %d-byte block",
				order, a.freeBlocks(), a.largestFree(), a.used, 3*u)
		}
		// The whole arena is allocatable again.
		if off := mustAlloc(t, a, 3*u); off != 0 {
			t.Fatalf("order %v: full-size alloc at %d", order, off)
		}
	}
}

func TestAllocatorFullAndFragmented(t *testing.T) {
	const u = Alignment
	a := newAllocator(10 * u)
	var offs []int64
	for range 10 {
		offs = append(offs, mustAlloc(t, a, u))
	}
	if _, ok := a.alloc(1); ok {
		t.Fatal("alloc succeeded in a full arena")
	}
	for i := 0; i < 10; i += 2 {
		a.free(offs[i])
	}
	checkAllocator(t, a)
	if free := a.capacity - a.used; free != 5*u {
		t.Fatalf("free bytes %d, want %d", free, 5*u)
	}
	if _, ok := a.alloc(2 * u); ok {
		t.Fatal("2-unit alloc succeeded although no two free units are adjacent")
	}
	if got := a.largestFree(); got != u {
		t.Fatalf("largest free %d, want %d", got, u)
	}
	if a.freeBlocks() != 5 {
		t.Fatalf("%d free blocks, want 5", a.freeBlocks())
	}
}

// TestAllocatorRandomModel runs a random alloc/free sequence and checks every
// result against a simple model that recomputes the free gaps from the set
// of allocations and predicts the exact best-fit offset.
func TestAllocatorRandomModel(t *testing.T) {
	const capacity = 256 << 10
	a := newAllocator(capacity)
	model := map[int64]int64{} // offset -> aligned size
	rng := rand.New(rand.NewPCG(1, 2))
	var live []int64

	predict := func(size int64) int64 {
		type gap struct{ off, size int64 }
		var gaps []gap
		offs := make([]int64, 0, len(model))
		for off := range model {
			offs = append(offs, off)
		}
		slices.Sort(offs)
		var pos int64
		for _, off := range offs {
			if off > pos {
				gaps = append(gaps, gap{pos, off - pos})
			}
			pos = off + model[off]
		}
		if pos < capacity {
			gaps = append(gaps, gap{pos, capacity - pos})
		}
		best := gap{-1, 1 << 62}
		for _, g := range gaps {
			if g.size >= size && (g.size < best.size || (g.size == best.size && g.off < best.off)) {
				best = g
			}
		}
		return best.off
	}

	for step := range 4000 {
		if len(live) > 0 && rng.IntN(100) < 45 {
			i := rng.IntN(len(live))
			off := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			if !a.free(off) {
				t.Fatalf("step %d: free(%d) failed", step, off)
			}
			delete(model, off)
		} else {
			var size int64
			switch rng.IntN(3) {
			case 0:
				size = 1 + rng.Int64N(128)
			case 1:
				size = 1 + rng.Int64N(4096)
			default:
				size = 1 + rng.Int64N(32<<10)
			}
			want := predict(alignUp(size))
			off, ok := a.alloc(size)
			if want < 0 {
				if ok {
					t.Fatalf("step %d: alloc(%d) = %d, model says no block fits", step, size, off)
				}
				continue
			}
			if !ok || off != want {
				t.Fatalf("step %d: alloc(%d) = %d,%t; model best fit %d", step, size, off, ok, want)
			}
			model[off] = alignUp(size)
			live = append(live, off)
		}
		if step%97 == 0 {
			checkAllocator(t, a)
		}
	}
	checkAllocator(t, a)
	for _, off := range live {
		a.free(off)
	}
	checkAllocator(t, a)
	if a.used != 0 || a.freeBlocks() != 1 {
		t.Fatalf("after freeing all: used %d, %d free blocks", a.used, a.freeBlocks())
	}
}
