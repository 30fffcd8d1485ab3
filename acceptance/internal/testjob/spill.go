package main

// testjob spill DIR N MIB: puts N objects of MIB MiB; after N/3 puts it
// writes DIR/third and waits for DIR/go (the test breaks the storage
// meanwhile), then puts the rest and checks every value.

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strconv"

	"github.com/goray-dev/goray/sdk/ray"
)

func spillBlock(i, size int) []byte {
	b := make([]byte, size)
	for off := 0; off+8 <= size; off += 8 {
		binary.LittleEndian.PutUint64(b[off:], uint64(i)<<40|uint64(off))
	}
	return b
}

func fnvSum(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

func runSpill(ctx context.Context, dir, count, mib string) error {
	n, err := strconv.Atoi(count)
	if err != nil {
		return err
	}
	m, err := strconv.Atoi(mib)
	if err != nil {
		return err
	}
	size := m << 20
	refs := make([]ray.Ref[[]byte], n)
	want := make([]uint64, n)
	for i := range refs {
		if i == n/3 {
			if err := writeFile(filepath.Join(dir, "third"), "1"); err != nil {
				return err
			}
			if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
				return err
			}
		}
		b := spillBlock(i, size)
		want[i] = fnvSum(b)
		if refs[i], err = ray.Put(ctx, b); err != nil {
			return fmt.Errorf("put %d: %w", i, err)
		}
	}
	fmt.Println("all puts done")
	for i, r := range refs {
		got, err := r.Get(ctx)
		if err != nil {
			return fmt.Errorf("get %d: %w", i, err)
		}
		if fnvSum(got) != want[i] {
			return fmt.Errorf("object %d read back wrong", i)
		}
	}
	fmt.Println("every value read back correctly")
	return nil
}
