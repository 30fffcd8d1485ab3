package main

// Jobs of the memory monitor's acceptance test (acceptance/memory_test.go):
//
//	testjob oom DIR CAP_MIB     a task (MaxRetries(1), MaxOOMRetries(2)) that
//	                            allocates until its worker is killed (giving
//	                            up at CAP_MIB) fails, after three kills, with
//	                            *ray.OutOfMemoryError naming this node
//	testjob oom-neighbour DIR   tasks and an actor on the same node, with a
//	                            task running from DIR/neighbour.running until
//	                            DIR/release: all of it must survive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// hogChunk is what memoryHog allocates at a time.
const hogChunk = 32 << 20

// memoryHog allocates memory without bound, touching every page, until
// its worker is killed; it gives up (an error) after capMiB MiB. Each
// attempt writes its pid to dir/hog.<attempt>.pid first.
func memoryHog(ctx context.Context, dir string, capMiB int) (int, error) {
	tc, ok := ray.CurrentTask(ctx)
	if !ok {
		return -1, errors.New("no task context")
	}
	if err := writeFile(filepath.Join(dir, fmt.Sprintf("hog.%d.pid", tc.Attempt)), strconv.Itoa(os.Getpid())); err != nil {
		return -1, err
	}
	var hold [][]byte
	for total := 0; total < capMiB<<20; total += hogChunk {
		b := make([]byte, hogChunk)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		hold = append(hold, b)
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	runtime.KeepAlive(hold)
	return -1, fmt.Errorf("attempt %d (pid %d) allocated %d MiB and was not killed by the memory monitor", tc.Attempt, os.Getpid(), capMiB)
}

// holdUntilReleased writes dir/neighbour.running and returns once
// dir/release exists.
func holdUntilReleased(ctx context.Context, dir string) (int, error) {
	if err := writeFile(filepath.Join(dir, "neighbour.running"), strconv.Itoa(os.Getpid())); err != nil {
		return 0, err
	}
	if err := pollFile(ctx, filepath.Join(dir, "release")); err != nil {
		return 0, err
	}
	return 1, nil
}

var (
	// MemoryHog allocates until it is killed.
	MemoryHog = ray.Task2(memoryHog)
	// HoldUntilReleased runs until the test releases it.
	HoldUntilReleased = ray.Task1(holdUntilReleased)
)

// runOOM runs MemoryHog with two retries after kills (and one after other
// failures: the kills must not draw on it) and checks the typed error.
func runOOM(ctx context.Context, dir, capArg string) error {
	capMiB, err := strconv.Atoi(capArg)
	if err != nil {
		return fmt.Errorf("cap: %w", err)
	}
	_, err = MemoryHog.Options(ray.MaxRetries(1), ray.MaxOOMRetries(2)).Remote(ctx, ray.V(dir), ray.V(capMiB)).Get(ctx)
	fmt.Println("oom error:", err)
	var oom *ray.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, ray.ErrOutOfMemory) {
		return fmt.Errorf("want a *ray.OutOfMemoryError matching ray.ErrOutOfMemory, got %T: %v", err, err)
	}
	node := ray.NodeID()
	fmt.Println("oom attempts:", oom.Attempts)
	fmt.Println("oom names the node:", oom.Node == node && strings.Contains(err.Error(), node[:8]))
	fmt.Println("oom names the task:", strings.Contains(err.Error(), "memoryHog"))
	fmt.Println("oom says the usage:", oom.UsedBytes > 0 && oom.TotalBytes >= oom.UsedBytes && float64(oom.UsedBytes)/float64(oom.TotalBytes) > oom.Threshold &&
		strings.Contains(err.Error(), fmt.Sprintf("threshold %.3f", oom.Threshold)))
	fmt.Println("oom is not a crash:", !errors.Is(err, ray.ErrWorkerCrashed))
	// The node still runs tasks.
	if got, err := SleepTask.Remote(ctx, ray.V(time.Millisecond)).Get(ctx); err != nil || got != 1 {
		return fmt.Errorf("a task after the kills: %d, %v", got, err)
	}
	fmt.Println("task after the kills: ok")
	return nil
}

// runOOMNeighbour is the job that must survive next to the hog.
func runOOMNeighbour(ctx context.Context, dir string) error {
	quick := func(when string) error {
		for i := range 5 {
			if _, err := SleepTask.Remote(ctx, ray.V(5*time.Millisecond)).Get(ctx); err != nil {
				return fmt.Errorf("quick task %d %s: %w", i, when, err)
			}
		}
		return nil
	}
	if err := quick("before"); err != nil {
		return err
	}
	a := HolderActor.Remote(ctx, ray.V("neighbour"))
	if _, err := HolderGet.On(a).Remote(ctx).Get(ctx); err != nil {
		return fmt.Errorf("actor: %w", err)
	}
	// Retried if the machine's other work makes the monitor kill it too.
	if _, err := HoldUntilReleased.Options(ray.MaxRetries(10)).Remote(ctx, ray.V(dir)).Get(ctx); err != nil {
		return fmt.Errorf("the long task: %w", err)
	}
	if err := quick("after"); err != nil {
		return err
	}
	v, err := HolderGet.On(a).Remote(ctx).Get(ctx)
	if err != nil || v != "neighbour" {
		return fmt.Errorf("actor after the kills: %q, %w", v, err)
	}
	fmt.Println("neighbour survived: ok")
	return nil
}
