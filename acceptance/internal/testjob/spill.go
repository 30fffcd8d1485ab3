package main

// testjob spill DIR N MIB: puts N objects of MIB MiB; after N/3 puts it
// writes DIR/third and waits for DIR/go (the test breaks the storage
// meanwhile), then puts the rest and checks every value.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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

// countAndSize parses a count of objects and their size in MiB.
func countAndSize(count, mib string) (n, size int, err error) {
	if n, err = strconv.Atoi(count); err != nil {
		return 0, 0, fmt.Errorf("count: %w", err)
	}
	m, err := strconv.Atoi(mib)
	if err != nil {
		return 0, 0, fmt.Errorf("size in MiB: %w", err)
	}
	return n, m << 20, nil
}

func runSpill(ctx context.Context, dir, count, mib string) error {
	n, size, err := countAndSize(count, mib)
	if err != nil {
		return err
	}
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

// makeSpillBlock returns spill block i of size bytes (made where it runs).
func makeSpillBlock(ctx context.Context, i, size int) ([]byte, error) {
	return spillBlock(i, size), nil
}

// makeSpillPair returns spill blocks i and i+1.
func makeSpillPair(ctx context.Context, i, size int) ([]byte, []byte, error) {
	return spillBlock(i, size), spillBlock(i+1, size), nil
}

// streamSpillBlocks yields n spill blocks from block i on.
func streamSpillBlocks(ctx context.Context, i, n, size int, yield func([]byte) error) error {
	for k := range n {
		if err := yield(spillBlock(i+k, size)); err != nil {
			return err
		}
	}
	return nil
}

// fnvOf returns the FNV-1a sum of its argument.
func fnvOf(ctx context.Context, b []byte) (uint64, error) { return fnvSum(b), nil }

var (
	// MakeSpillBlock makes a spill block.
	MakeSpillBlock = ray.Task2(makeSpillBlock)
	// MakeSpillPair makes spill blocks i and i+1, each its own object.
	MakeSpillPair = ray.Task2R2(makeSpillPair)
	// StreamSpillBlocks yields n spill blocks from block i on.
	StreamSpillBlocks = ray.Generator3(streamSpillBlocks)
	// FnvOf sums a byte slice.
	FnvOf = ray.Task1(fnvOf)
)

// testjob spill-nodekill DIR VICTIM OTHER N MIB: makes N objects of MIB MiB
// one after the other on node VICTIM (tasks pinned there return them; the
// driver owns them and never reads them yet), writes DIR/ready and waits
// for DIR/go: meanwhile the test kills VICTIM once it has spilled some of
// them to shared storage and waits until the cluster declares it dead.
// Then a task on node OTHER takes object 0 (the oldest, spilled first) as
// its argument, and the driver reads every object: each must be its exact
// value (restored from the dead node's spilled copy) or ErrObjectLost (it
// was only in the victim's memory). Prints "restored K lost L".
func runSpillNodeKill(ctx context.Context, dir, victim, other, count, mib string) error {
	n, size, err := countAndSize(count, mib)
	if err != nil {
		return err
	}
	refs := make([]ray.Ref[[]byte], n)
	for i := range refs {
		refs[i] = MakeSpillBlock.Options(ray.NodeAffinity(victim, false)).Remote(ctx, ray.V(i), ray.V(size))
		// Made on the victim, not copied here (FetchLocal(false)).
		if _, pending, err := ray.Wait(ctx, refs[i:i+1], 1, 30*time.Second, ray.FetchLocal(false)); err != nil || len(pending) > 0 {
			return fmt.Errorf("making object %d on the victim: %v (pending %d)", i, err, len(pending))
		}
	}
	if err := writeFile(filepath.Join(dir, "ready"), "1"); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return err
	}
	sum, err := FnvOf.Options(ray.NodeAffinity(other, false)).Remote(ctx, refs[0]).Get(ctx)
	if err != nil {
		return fmt.Errorf("task on %s reading object 0 of the dead node: %w", other, err)
	}
	if sum != fnvSum(spillBlock(0, size)) {
		return fmt.Errorf("task on %s read object 0 wrong", other)
	}
	fmt.Println("object 0 read by a task on another node")
	restored, lost := 0, 0
	for i, r := range refs {
		got, err := r.Get(ctx)
		switch {
		case errors.Is(err, ray.ErrObjectLost):
			lost++
			fmt.Printf("object %d lost: %v\n", i, err)
		case err != nil:
			return fmt.Errorf("get %d: %w", i, err)
		case fnvSum(got) != fnvSum(spillBlock(i, size)):
			return fmt.Errorf("object %d read back wrong", i)
		default:
			restored++
		}
	}
	fmt.Printf("restored %d lost %d\n", restored, lost)
	return nil
}

// testjob secondaries N2 COUNT MIB: the driver puts COUNT objects of MIB
// MiB (more than N2's store holds) and keeps them all; a task pinned to N2
// reads each in turn (N2 pulls a copy of each), then reads object 0 again.
// N2 must evict older copies to make room: every read is exact.
func runSecondaries(ctx context.Context, n2, count, mib string) error {
	n, size, err := countAndSize(count, mib)
	if err != nil {
		return err
	}
	refs := make([]ray.Ref[[]byte], n)
	for i := range refs {
		if refs[i], err = ray.Put(ctx, spillBlock(i, size)); err != nil {
			return fmt.Errorf("put %d: %w", i, err)
		}
	}
	read := func(i int) error {
		sum, err := FnvOf.Options(ray.NodeAffinity(n2, false)).Remote(ctx, refs[i]).Get(ctx)
		if err != nil {
			return fmt.Errorf("task on N2 reading object %d: %w", i, err)
		}
		if sum != fnvSum(spillBlock(i, size)) {
			return fmt.Errorf("task on N2 read object %d wrong", i)
		}
		return nil
	}
	for i := range refs {
		if err := read(i); err != nil {
			return err
		}
	}
	if err := read(0); err != nil {
		return fmt.Errorf("again: %w", err)
	}
	fmt.Printf("%d objects of %d MiB read on N2: ok\n", n, size>>20)
	return nil
}

// testjob lineage DIR VICTIM: two 8 MiB objects are made by tasks that
// prefer node VICTIM (soft affinity) and the driver only waits for them;
// it writes DIR/ready and waits for DIR/go while the test kills VICTIM.
// Then the driver reads the first (Get) and passes the second to a task:
// both copies died with the node, and the driver, their owner, rebuilds
// them by re-running their tasks elsewhere.
func runLineage(ctx context.Context, dir, victim string) error {
	const size = 8 << 20
	refs := []ray.Ref[[]byte]{
		MakeSpillBlock.Options(ray.NodeAffinity(victim, true)).Remote(ctx, ray.V(1), ray.V(size)),
		MakeSpillBlock.Options(ray.NodeAffinity(victim, true)).Remote(ctx, ray.V(2), ray.V(size)),
	}
	// Two results of one call, and the items of a generator, each its own
	// object: the first result is freed before the node dies, the second
	// is rebuilt alone; a generator item is rebuilt by running the
	// generator again.
	first, second := MakeSpillPair.Options(ray.NodeAffinity(victim, true)).Remote(ctx, ray.V(3), ray.V(size))
	refs = append(refs, first, second)
	stream := StreamSpillBlocks.Options(ray.NodeAffinity(victim, true)).Remote(ctx, ray.V(10), ray.V(3), ray.V(size))
	defer stream.Close()
	for r, err := range stream.All(ctx) {
		if err != nil {
			return fmt.Errorf("generator: %w", err)
		}
		refs = append(refs, r)
	}
	// Made on the victim, not copied here (FetchLocal(false)): they are lost with it.
	if _, pending, err := ray.Wait(ctx, refs, len(refs), 30*time.Second, ray.FetchLocal(false)); err != nil || len(pending) > 0 {
		return fmt.Errorf("making the objects: %v (pending %d)", err, len(pending))
	}
	first.Release()
	if err := writeFile(filepath.Join(dir, "ready"), "1"); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return err
	}
	got, err := refs[0].Get(ctx)
	if err != nil {
		return fmt.Errorf("get of an object lost with its node: %w", err)
	}
	if fnvSum(got) != fnvSum(spillBlock(1, size)) {
		return fmt.Errorf("the rebuilt object reads wrong")
	}
	sum, err := FnvOf.Remote(ctx, refs[1]).Get(ctx)
	if err != nil {
		return fmt.Errorf("task taking an object lost with its node: %w", err)
	}
	if sum != fnvSum(spillBlock(2, size)) {
		return fmt.Errorf("the task read the rebuilt argument wrong")
	}
	fmt.Println("lineage: both lost objects rebuilt")
	got, err = second.Get(ctx)
	if err != nil {
		return fmt.Errorf("get of a second result lost with its node: %w", err)
	}
	if fnvSum(got) != fnvSum(spillBlock(4, size)) {
		return fmt.Errorf("the rebuilt second result reads wrong")
	}
	got, err = refs[len(refs)-2].Get(ctx) // item 1 of the generator
	if err != nil {
		return fmt.Errorf("get of a generator item lost with its node: %w", err)
	}
	if fnvSum(got) != fnvSum(spillBlock(11, size)) {
		return fmt.Errorf("the rebuilt generator item reads wrong")
	}
	fmt.Println("lineage: a second result and a generator item rebuilt")
	return nil
}

// testjob copies DIR N2: four 8 MiB objects put by the driver (on its
// node) are read by tasks on node N2, which pulls a copy of each; the
// driver then releases them and writes their ids to DIR/ids, and waits for
// DIR/go (the test checks that no store still holds them: the owner's free
// reached N2, although it was sent only to the nodes holding a copy).
func runCopiesFreed(ctx context.Context, dir, n2 string) error {
	const size = 8 << 20
	var idList []string
	for i := range 4 {
		ref, err := ray.Put(ctx, spillBlock(i, size))
		if err != nil {
			return fmt.Errorf("put %d: %w", i, err)
		}
		sum, err := FnvOf.Options(ray.NodeAffinity(n2, false)).Remote(ctx, ref).Get(ctx)
		if err != nil {
			return fmt.Errorf("task on N2 reading object %d: %w", i, err)
		}
		if sum != fnvSum(spillBlock(i, size)) {
			return fmt.Errorf("task on N2 read object %d wrong", i)
		}
		idList = append(idList, ref.ID())
		ref.Release()
	}
	if err := writeFile(filepath.Join(dir, "ids"), strings.Join(idList, "\n")); err != nil {
		return err
	}
	fmt.Println("copies: 4 objects read on N2 and released")
	return pollFile(ctx, filepath.Join(dir, "go"))
}
