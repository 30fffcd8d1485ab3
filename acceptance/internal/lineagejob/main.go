// Command lineagejob is the driver of acceptance/lineage_copies_test.go:
// objects made by tasks on a node B that dies, freezes or is cut off,
// while copies of them may live on a node C.
//
//	lineagejob MODE DIR B C
//
// Every mode makes its objects, writes DIR/ready, waits for DIR/go (the
// test kills or freezes B meanwhile) and then checks every value by
// checksum, ending with "PASS MODE" or "FAIL MODE: why".
//
//	livecopy  an 8 MiB object made on B by a task that may not be re-run
//	          (MaxRetries 0), read by a task on C (C pulls a copy): after
//	          B's death a Get and a task taking it read it from C's copy.
//	oncopy    the same made by a task that may be re-run (soft affinity to
//	          B, resource "xy" that only B and C have, so that a re-run
//	          lands on C, which holds the copy).
//	argdies   a task on C taking B's object as an argument and a gate
//	          argument (a task that waits for DIR/go): the argument is
//	          resolved while B lives and read after B died, so the task's
//	          owner must rebuild it and send the task again.
//	slowpull  an 8 MiB object made on B (MaxRetries 0) read after DIR/go
//	          while B is frozen (the test resumes it once the driver said
//	          it retries the pull): the Get waits and reads it.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

const size = 8 << 20

// block returns size bytes made from seed.
func block(seed, n int) []byte {
	b := make([]byte, n)
	for off := 0; off+8 <= n; off += 8 {
		binary.LittleEndian.PutUint64(b[off:], uint64(seed)<<40|uint64(off))
	}
	return b
}

func sum(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

func makeBlock(ctx context.Context, seed, n int) ([]byte, error) { return block(seed, n), nil }

func sumOf(ctx context.Context, b []byte) (uint64, error) { return sum(b), nil }

func sumGated(ctx context.Context, b []byte, gate int) (uint64, error) {
	return sum(b) + uint64(gate), nil
}

// waitFor returns 0 once path exists.
func waitFor(ctx context.Context, path string) (int, error) { return 0, pollFile(ctx, path) }

var (
	// MakeBlock makes block seed of n bytes.
	MakeBlock = ray.Task2(makeBlock)
	// SumOf checksums its argument.
	SumOf = ray.Task1(sumOf)
	// SumGated checksums its first argument once the second is ready.
	SumGated = ray.Task2(sumGated)
	// WaitFor returns once a file exists.
	WaitFor = ray.Task1(waitFor)
)

func main() {
	// In a worker this serves tasks and never returns.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rt, err := ray.Init(ctx, ray.WorkerOutput(os.Stderr))
	if err != nil {
		fmt.Println("FAIL: init:", err)
		os.Exit(1)
	}
	code := 0
	if len(os.Args) != 5 {
		fmt.Println("FAIL: usage: lineagejob MODE DIR B C")
		code = 2
	} else if err := run(ctx, os.Args[1], os.Args[2], os.Args[3], os.Args[4]); err != nil {
		fmt.Printf("FAIL %s: %v\n", os.Args[1], err)
		code = 1
	}
	if err := rt.Shutdown(context.Background()); err != nil {
		fmt.Println("FAIL: shutdown:", err)
		code = 1
	}
	if code == 0 {
		fmt.Println("PASS", os.Args[1])
	}
	os.Exit(code)
}

func run(ctx context.Context, mode, dir, b, c string) error {
	softB := ray.NodeAffinity(b, true) // a re-run goes elsewhere
	onC := ray.NodeAffinity(c, false)
	var x ray.Ref[[]byte]
	switch mode {
	case "livecopy", "slowpull":
		x = MakeBlock.Options(ray.NodeAffinity(b, false), ray.MaxRetries(0)).Remote(ctx, ray.V(1), ray.V(size)) // never re-run
	case "oncopy":
		x = MakeBlock.Options(softB, ray.Resource("xy", 1)).Remote(ctx, ray.V(2), ray.V(size))
	case "argdies":
		x = MakeBlock.Options(softB).Remote(ctx, ray.V(3), ray.V(size))
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	want := sum(block(map[string]int{"livecopy": 1, "slowpull": 1, "oncopy": 2, "argdies": 3}[mode], size))
	// Made on B, not copied here (FetchLocal(false)).
	if _, pending, err := ray.Wait(ctx, []ray.Ref[[]byte]{x}, 1, time.Minute, ray.FetchLocal(false)); err != nil || len(pending) > 0 {
		return fmt.Errorf("making the object on B: %v (pending %d)", err, len(pending))
	}
	var gated ray.Ref[uint64]
	switch mode {
	case "livecopy", "oncopy":
		// A task on C reads it: C pulls a copy, and its owner records C.
		got, err := SumOf.Options(onC).Remote(ctx, x).Get(ctx)
		if err != nil {
			return fmt.Errorf("task on C reading the object: %w", err)
		}
		if got != want {
			return errors.New("the task on C read the object wrong")
		}
	case "argdies":
		gate := WaitFor.Options(onC).Remote(ctx, ray.V(filepath.Join(dir, "go")))
		gated = SumGated.Options(onC).Remote(ctx, x, gate)
	}
	if err := writeFile(filepath.Join(dir, "ready"), "1"); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return err
	}
	switch mode {
	case "argdies":
		got, err := gated.Get(ctx)
		if err != nil {
			return fmt.Errorf("task whose argument's node died: %w", err)
		}
		if got != want {
			return errors.New("the task read its rebuilt argument wrong")
		}
		fmt.Println("argdies: the task read its argument, rebuilt after its node died")
		return nil
	}
	got, err := x.Get(ctx)
	if err != nil {
		return fmt.Errorf("get of the object after its node died: %w", err)
	}
	if sum(got) != want {
		return errors.New("the object reads wrong")
	}
	if mode == "slowpull" {
		fmt.Println("slowpull: the object was read once its node answered again")
		return nil
	}
	// A task taking it reads it too, wherever it runs.
	s, err := SumOf.Remote(ctx, x).Get(ctx)
	if err != nil {
		return fmt.Errorf("task taking the object after its node died: %w", err)
	}
	if s != want {
		return errors.New("the task read the object wrong")
	}
	fmt.Printf("%s: the object survived its node's death\n", mode)
	return nil
}

// writeFile writes path atomically.
func writeFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// pollFile returns once path exists or ctx ends.
func pollFile(ctx context.Context, path string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}
