package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// runJobExit prints a line and exits with status code (a job that fails:
// jobs_test.go).
func runJobExit(code string) error {
	n, err := strconv.Atoi(code)
	if err != nil {
		return fmt.Errorf("exit code %q: %w", code, err)
	}
	fmt.Println("job-exit: exiting with", n)
	os.Exit(n)
	return nil
}

// runJobHold starts an actor and a blocking task on node, prints their
// worker's pids and blocks until the job is stopped (jobs_test.go checks
// that the workers end with it).
func runJobHold(ctx context.Context, node string) error {
	actor := HolderActor.Options(ray.NodeAffinity(node, false)).Remote(ctx, ray.V("held by a job"))
	pid, err := HolderPid.On(actor).Remote(ctx).Get(ctx)
	if err != nil {
		return fmt.Errorf("actor on node %s: %w", node, err)
	}
	fmt.Println("job-hold: actor pid", pid)
	_ = WaitForFile.Options(ray.NodeAffinity(node, false)).Remote(ctx, ray.V(filepath.Join(os.TempDir(), "goray-never-"+strconv.Itoa(os.Getpid()))))
	fmt.Println("job-hold: ready")
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Hour):
		return nil
	}
}
