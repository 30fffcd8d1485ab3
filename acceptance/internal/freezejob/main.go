// Command freezejob is the driver of acceptance/freeze_test.go: tasks
// whose first attempts run on a node the test then freezes or cuts off.
//
//	freezejob DIR NODE N
//
// It submits N tasks with resource "slot" and a soft affinity to node
// NODE, each with 2 retries. A first attempt writes DIR/started-<i> (its
// node id and pid) and waits until DIR/resumed exists, then writes
// DIR/late-<i> and answers; a later attempt answers at once. An answer names the node and attempt
// that made it. The driver prints "result <i>: <answer>" for each task
// (each Get bounded by $FREEZEJOB_TIMEOUT, default 5m), then "RESULTS",
// waits for DIR/recheck, reads every result again and prints "again <i>:
// <answer>", and ends with "PASS freeze" (exit 0) or "FAIL ..." lines
// (exit 1).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// hold is the task: the first attempt waits for dir/resumed.
func hold(ctx context.Context, dir string, i int) (string, error) {
	attempt := 0
	if tc, ok := ray.CurrentTask(ctx); ok {
		attempt = tc.Attempt
	}
	if attempt == 0 {
		if err := writeFile(filepath.Join(dir, fmt.Sprintf("started-%d", i)), fmt.Sprintf("%s %d", ray.NodeID(), os.Getpid())); err != nil {
			return "", err
		}
		if err := pollFile(ctx, filepath.Join(dir, "resumed")); err != nil {
			return "", err
		}
		// The test waits for this before it has the results read again:
		// the late answer is sent right after.
		if err := writeFile(filepath.Join(dir, fmt.Sprintf("late-%d", i)), ray.NodeID()); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("node=%s attempt=%d", ray.NodeID(), attempt), nil
}

// Hold is the task the test freezes.
var Hold = ray.Task2(hold)

func main() {
	// In a worker this serves tasks and never returns.
	timeout := 5 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("FREEZEJOB_TIMEOUT")); err == nil {
		timeout = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
	defer cancel()
	rt, err := ray.Init(ctx, ray.WorkerOutput(os.Stderr))
	if err != nil {
		fmt.Println("FAIL: init:", err)
		os.Exit(1)
	}
	code := 0
	if err := run(ctx, timeout); err != nil {
		fmt.Println("FAIL freeze:", err)
		code = 1
	}
	if err := rt.Shutdown(context.Background()); err != nil {
		fmt.Println("FAIL: shutdown:", err)
		code = 1
	}
	if code == 0 {
		fmt.Println("PASS freeze")
	}
	os.Exit(code)
}

func run(ctx context.Context, timeout time.Duration) error {
	if len(os.Args) != 4 {
		return errors.New("usage: freezejob DIR NODE N")
	}
	dir, node := os.Args[1], os.Args[2]
	n, err := strconv.Atoi(os.Args[3])
	if err != nil {
		return fmt.Errorf("N: %w", err)
	}
	refs := make([]ray.Ref[string], n)
	for i := range refs {
		refs[i] = Hold.Options(ray.Resource("slot", 1), ray.NodeAffinity(node, true), ray.MaxRetries(2)).Remote(ctx, ray.V(dir), ray.V(i))
	}
	first := make([]string, n)
	for i, r := range refs {
		gctx, cancel := context.WithTimeout(ctx, timeout)
		v, err := r.Get(gctx)
		cancel()
		if err != nil {
			return fmt.Errorf("task %d: %w", i, err)
		}
		first[i] = v
		fmt.Printf("result %d: %s\n", i, v)
	}
	fmt.Println("RESULTS")
	if err := pollFile(ctx, filepath.Join(dir, "recheck")); err != nil {
		return err
	}
	for i, r := range refs {
		v, err := r.Get(ctx)
		if err != nil {
			return fmt.Errorf("task %d read again: %w", i, err)
		}
		fmt.Printf("again %d: %s\n", i, v)
		if v != first[i] {
			return fmt.Errorf("task %d's result changed from %q to %q", i, first[i], v)
		}
	}
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
