// Command allreduce is data-parallel training's communication step on
// goray: N worker actors, spread over the cluster's nodes, each hold a
// gradient-sized float32 tensor and all-reduce it (sum) with goray's
// collective library (sdk/ray/collective) through the "collective"
// transport plugin; every worker checks every element of the sum, and the
// driver reports the all-reduce's bus bandwidth.
//
// Run it from the repository root on a cluster whose nodes load the plugin
// (node.hcl here; make plugins builds the plugin into ./bin/plugins):
//
//	make plugins
//	goray start --head --port 6379 --config examples/allreduce/node.hcl
//	goray start --address 127.0.0.1:6379 --node-ip 127.0.0.2 --config examples/allreduce/node.hcl
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/allreduce -actors 4 -mib 64
//	goray stop
//
// Without GORAY_ADDRESS it starts an embedded single-node cluster that
// loads the plugin from -plugin-dir (default ./bin/plugins). It exits
// non-zero when a sum is wrong.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"time"
	"unsafe"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/ray/collective"
	"github.com/goray-dev/goray/sdk/transport"
)

// backend is the transport plugin running the collectives.
const backend = "collective"

// Worker is one data-parallel rank.
type Worker struct{}

// NewWorker is Worker's constructor.
func NewWorker(ctx context.Context) (*Worker, error) { return &Worker{}, nil }

// StepArgs says what one step all-reduces.
type StepArgs struct {
	Group    string
	Elements int
}

// StepResult is what a worker saw in one step.
type StepResult struct {
	Rank    int
	Node    string
	Seconds float64 // the all-reduce alone
}

// Step fills a gradient (element i of rank r is (r+1)·(i mod 1000 + 1)),
// all-reduces it and checks that every element is the sum over the ranks.
func (w *Worker) Step(ctx context.Context, a StepArgs) (StepResult, error) {
	rank, err := collective.Rank(ctx, a.Group)
	if err != nil {
		return StepResult{}, err
	}
	world, err := collective.WorldSize(ctx, a.Group)
	if err != nil {
		return StepResult{}, err
	}
	grad, err := transport.NewTensor(transport.Float32, int64(a.Elements))
	if err != nil {
		return StepResult{}, err
	}
	defer grad.Free()
	b, err := grad.Bytes(ctx)
	if err != nil {
		return StepResult{}, err
	}
	defer grad.Release()
	g := float32Slice(b)
	for i := range g {
		g[i] = float32((rank + 1) * (i%1000 + 1))
	}
	start := time.Now()
	if err := collective.AllReduce(ctx, a.Group, grad, collective.Sum); err != nil {
		return StepResult{}, fmt.Errorf("rank %d: all-reduce: %w", rank, err)
	}
	secs := time.Since(start).Seconds()
	ranks := float32(world * (world + 1) / 2)
	for i, v := range g {
		if want := ranks * float32(i%1000+1); v != want {
			return StepResult{}, fmt.Errorf("rank %d: element %d is %v, want %v", rank, i, v, want)
		}
	}
	return StepResult{Rank: rank, Node: ray.NodeID(), Seconds: secs}, nil
}

// float32Slice views the tensor's bytes as float32s, in place (goray runs
// on little-endian machines; segments are page aligned).
func float32Slice(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

var (
	WorkerActor = ray.Actor0(NewWorker)
	Step        = ray.Method1((*Worker).Step)

	actors    = flag.Int("actors", 4, "number of worker actors (ranks)")
	mib       = flag.Int("mib", 64, "gradient size in MiB (float32)")
	rounds    = flag.Int("rounds", 3, "all-reduce rounds")
	pluginDir = flag.String("plugin-dir", "bin/plugins", "where an embedded node finds goray-transport-collective (ignored with GORAY_ADDRESS)")
)

func main() {
	flag.Parse() // workers start without arguments: flags keep their defaults there
	ctx := context.Background()
	var opts []ray.InitOption
	if os.Getenv(ray.EnvAddress) == "" && !ray.IsWorker() {
		cfg := config.Default()
		cfg.PluginDir = *pluginDir
		cfg.Plugins = []config.Plugin{{Kind: "transport", Name: backend}}
		opts = append(opts, ray.WithConfig(cfg))
	}
	rt, err := ray.Init(ctx, opts...)
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

func run(ctx context.Context) error {
	if *actors < 1 || *mib < 1 || *rounds < 1 {
		return errors.New("-actors, -mib and -rounds must be positive")
	}
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return err
	}
	var alive []string
	for _, n := range nodes {
		if n.Alive {
			alive = append(alive, n.ID)
		}
	}
	// One worker per node in turn (soft affinity: elsewhere if a node
	// cannot take it).
	workers := make([]ray.ActorHandle[Worker], *actors)
	for i := range workers {
		workers[i] = WorkerActor.Options(ray.Transports(backend), ray.NodeAffinity(alive[i%len(alive)], true)).Remote(ctx)
	}
	defer func() {
		for _, w := range workers {
			_ = w.Kill(context.Background())
		}
	}()
	for _, w := range workers {
		if err := w.Ready(ctx); err != nil {
			return fmt.Errorf("worker actor: %w (does every node load the %q transport plugin?)", err, backend)
		}
	}
	const group = "gradients"
	if _, err := collective.CreateGroup(ctx, group, backend, collective.Members(workers...)); err != nil {
		return err
	}
	defer collective.DestroyGroup(context.Background(), group)

	elements := *mib << 20 / 4
	bytes := float64(elements * 4)
	var used []string
	for round := 1; round <= *rounds; round++ {
		refs := make([]ray.Ref[StepResult], len(workers))
		for i, w := range workers {
			refs[i] = Step.On(w).Remote(ctx, ray.V(StepArgs{Group: group, Elements: elements}))
		}
		res, err := ray.GetAll(ctx, refs)
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		slowest := 0.0
		for i, r := range res {
			if r.Rank != i {
				return fmt.Errorf("worker %d reports rank %d", i, r.Rank)
			}
			slowest = math.Max(slowest, r.Seconds)
			if !slices.Contains(used, r.Node) {
				used = append(used, r.Node)
			}
		}
		n := float64(len(workers))
		algbw := bytes / slowest / 1e9
		fmt.Printf("round %d: %d MiB all-reduced in %.1f ms: algbw %.2f GB/s, busbw %.2f GB/s; every element checked\n",
			round, *mib, slowest*1e3, algbw, algbw*2*(n-1)/math.Max(n, 1))
	}
	fmt.Printf("allreduce: %d actors on %d nodes, sum of %d float32 elements correct on every rank\n", len(workers), len(used), elements)
	return nil
}
