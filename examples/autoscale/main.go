// Command autoscale sends a burst of tasks that needs more CPUs than the
// cluster's head has, and watches the autoscaler grow the cluster for it
// and shrink it again:
//
//   - it submits --tasks tasks of one CPU each, each running for
//     --task-time, while the head has one CPU;
//   - the autoscaler sees the queued demand and launches worker nodes
//     (node type "cpu" of cluster.hcl, two CPUs each, at most three);
//   - every task's result is checked, and the nodes that ran them are
//     counted;
//   - once the burst is over the workers sit idle, and after idle_timeout
//     the autoscaler terminates them; the program waits until only the
//     head is left.
//
// Start the cluster from the repository root, run it against it, and tear
// the cluster down:
//
//	make plugins
//	goray up --port 6379 examples/autoscale/cluster.hcl
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/autoscale
//	goray status --address 127.0.0.1:6379
//	goray down examples/autoscale/cluster.hcl
//
// It prints what happened and exits non-zero when a result is wrong, no
// worker node came, or the workers did not go within --scale-down-timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// Result is what one task did and where.
type Result struct {
	Node  string
	Input int
	Sum   int
}

// work adds up 1..n slowly: a stand-in for a task that keeps a CPU busy.
func work(ctx context.Context, n int, d time.Duration) (Result, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-t.C:
	}
	s := 0
	for i := 1; i <= n; i++ {
		s += i
	}
	return Result{Node: ray.NodeID(), Input: n, Sum: s}, nil
}

var (
	Work             = ray.Task2(work, ray.CPUs(1))
	tasks            = flag.Int("tasks", 12, "tasks in the burst (one CPU each)")
	taskTime         = flag.Duration("task-time", 3*time.Second, "how long each task runs")
	scaleDownTimeout = flag.Duration("scale-down-timeout", 3*time.Minute, "how long to wait for the idle workers to be terminated (0: do not wait)")
)

func main() {
	ctx := context.Background()
	rt, err := ray.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	err = run(ctx)
	rt.Shutdown(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("OK")
}

// workers returns the alive worker nodes (not the head).
func workers(ctx context.Context) ([]ray.Node, error) {
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []ray.Node
	for _, n := range nodes {
		if n.Alive && !n.Head {
			out = append(out, n)
		}
	}
	return out, nil
}

func run(ctx context.Context) error {
	flag.Parse()
	start := time.Now()
	since := func() string { return time.Since(start).Round(100 * time.Millisecond).String() }
	cpus, err := ray.ClusterResources(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("[%s] cluster has %g CPUs; submitting %d tasks of 1 CPU, %s each\n", since(), cpus["CPU"], *tasks, *taskTime)

	refs := make([]ray.Ref[Result], *tasks)
	for i := range refs {
		refs[i] = Work.Remote(ctx, ray.V(i+1), ray.V(*taskTime))
	}
	// Report the workers joining while the burst runs.
	done := make(chan struct{})
	go func() {
		seen := map[string]bool{}
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			ws, _ := workers(ctx)
			for _, w := range ws {
				if !seen[w.ID] {
					seen[w.ID] = true
					fmt.Printf("[%s] worker node %s joined (%s, %g CPUs)\n", since(), w.ID[:8], w.Address, w.Resources["CPU"])
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	results, err := ray.GetAll(ctx, refs)
	close(done)
	if err != nil {
		return fmt.Errorf("the burst: %w", err)
	}
	perNode := map[string]int{}
	for i, r := range results {
		if r.Input != i+1 || r.Sum != (i+1)*(i+2)/2 {
			return fmt.Errorf("task %d returned %+v, want the sum of 1..%d = %d", i, r, i+1, (i+1)*(i+2)/2)
		}
		perNode[r.Node]++
	}
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return err
	}
	head := ""
	for _, n := range nodes {
		if n.Head {
			head = n.ID
		}
	}
	var lines []string
	ranOnWorkers := 0
	for id, c := range perNode {
		what := "worker"
		if id == head {
			what = "head"
		} else {
			ranOnWorkers++
		}
		lines = append(lines, fmt.Sprintf("  %s %s ran %d tasks", what, id[:8], c))
	}
	sort.Strings(lines)
	fmt.Printf("[%s] all %d results are right; %d nodes ran them:\n%s\n", since(), len(results), len(perNode), strings.Join(lines, "\n"))
	if ranOnWorkers == 0 {
		return fmt.Errorf("every task ran on the head: the autoscaler launched no worker node that took work")
	}
	if *scaleDownTimeout <= 0 {
		return nil
	}
	fmt.Printf("[%s] waiting for the idle workers to be terminated\n", since())
	deadline := time.Now().Add(*scaleDownTimeout)
	for {
		ws, err := workers(ctx)
		if err == nil && len(ws) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d worker nodes still alive after %s (last error: %v)", len(ws), *scaleDownTimeout, err)
		}
		time.Sleep(time.Second)
	}
	fmt.Printf("[%s] the workers are gone: the cluster is back to its head\n", since())
	return nil
}
