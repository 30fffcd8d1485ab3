// Command spillracejob is the driver of acceptance.TestSpillRacesReaders:
// spillracejob N MIB READERS puts N objects of MIB MiB each (far more than
// the node's store holds) while READERS goroutines read the objects put so
// far, oldest most often (the ones spilled first), checking every value.
// It prints "PASS spillrace <reads> reads" or "FAIL: <first failure>".
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// block is object i's value: every 8 bytes say i and their offset.
func block(i, size int) []byte {
	b := make([]byte, size)
	for off := 0; off+8 <= size; off += 8 {
		binary.LittleEndian.PutUint64(b[off:], uint64(i)<<40|uint64(off))
	}
	return b
}

// check reports how value differs from object i's.
func check(i int, v []byte, size int) error {
	if len(v) != size {
		return fmt.Errorf("object %d: %d bytes, want %d", i, len(v), size)
	}
	for off := 0; off+8 <= size; off += 8 {
		if got := binary.LittleEndian.Uint64(v[off:]); got != uint64(i)<<40|uint64(off) {
			return fmt.Errorf("object %d: wrong bytes at offset %d", i, off)
		}
	}
	return nil
}

func run(ctx context.Context, n, size, readers int) (int64, error) {
	refs := make([]ray.Ref[[]byte], n)
	var published atomic.Int64
	var reads atomic.Int64
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	done := make(chan struct{})
	var mu sync.Mutex // guards refs[i] until published says it is set
	first, err := ray.Put(ctx, block(0, size))
	if err != nil {
		return 0, fmt.Errorf("put 0: %w", err)
	}
	refs[0] = first
	published.Store(1)
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(r), 37))
			for {
				select {
				case <-done:
					return
				case <-ctx.Done():
					return
				default:
				}
				p := int(published.Load())
				i := rnd.IntN(p)
				if rnd.IntN(2) == 0 {
					i /= 4
				}
				mu.Lock()
				ref := refs[i]
				mu.Unlock()
				v, err := ref.Get(ctx)
				if err != nil {
					cancel(fmt.Errorf("reading live object %d while %d of %d were put: %w", i, p, n, err))
					return
				}
				if err := check(i, v, size); err != nil {
					cancel(err)
					return
				}
				reads.Add(1)
			}
		}()
	}
	for i := 1; i < n; i++ {
		ref, err := ray.Put(ctx, block(i, size))
		if err != nil {
			cancel(fmt.Errorf("put %d: %w", i, err))
			break
		}
		mu.Lock()
		refs[i] = ref
		mu.Unlock()
		published.Store(int64(i + 1))
	}
	close(done)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return reads.Load(), err
	}
	return reads.Load(), nil
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// First: in a worker process (the same binary) Init serves tasks.
	rt, err := ray.Init(ctx)
	if err != nil {
		fmt.Println("FAIL: init:", err)
		os.Exit(1)
	}
	var args [3]int
	if len(os.Args) != 4 {
		fail(rt, "usage: spillracejob N MIB READERS")
	}
	for i, a := range os.Args[1:] {
		v, err := strconv.Atoi(a)
		if err != nil || v <= 0 {
			fail(rt, fmt.Sprintf("argument %d (%q) is not a positive number", i+1, a))
		}
		args[i] = v
	}
	reads, err := run(ctx, args[0], args[1]<<20, args[2])
	if err != nil {
		fail(rt, err.Error())
	}
	if err := rt.Shutdown(context.Background()); err != nil {
		fmt.Println("FAIL: shutdown:", err)
		os.Exit(1)
	}
	fmt.Printf("PASS spillrace %d reads\n", reads)
}

// fail prints why and exits 1, after shutting the driver down.
func fail(rt *ray.Runtime, why string) {
	fmt.Println("FAIL:", why)
	_ = rt.Shutdown(context.Background())
	os.Exit(1)
}
