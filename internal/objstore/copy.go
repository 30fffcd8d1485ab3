package objstore

import (
	"runtime"
	"sync"
)

// Copy copies src into dst (as the built-in copy does: min(len(dst),
// len(src)) bytes) and returns the count. A large copy is split among up
// to CopyWorkers goroutines: one core copying from memory to memory is
// bound by its own memory bandwidth, not the machine's, so a put of a
// large object into the store takes less time with every core that helps
// (Ray's put copies with several threads for the same reason). A copy under
// two ParallelCopyChunk is made by the caller's goroutine alone.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	workers := min(runtime.GOMAXPROCS(0), CopyWorkers, n/ParallelCopyChunk)
	if workers < 2 {
		return copy(dst, src)
	}
	// Parts are whole multiples of 4 KiB, so that no two goroutines write
	// to one page; the last part takes the rest.
	part := (n / workers) &^ (4<<10 - 1)
	var wg sync.WaitGroup
	for i := 1; i < workers; i++ {
		lo, hi := i*part, (i+1)*part
		if i == workers-1 {
			hi = n
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[lo:hi], src[lo:hi])
		}()
	}
	copy(dst[:part], src[:part])
	wg.Wait()
	return n
}

const (
	// CopyWorkers bounds the goroutines of one Copy.
	CopyWorkers = 4
	// ParallelCopyChunk is the least each goroutine of a Copy copies
	// (below it, starting a goroutine costs more than it saves).
	ParallelCopyChunk = 4 << 20
)
