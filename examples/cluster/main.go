// Command cluster runs a real workload across the nodes of a goray cluster
// and reports which node ran what:
//
//   - a Monte Carlo estimate of π with tasks spread over every node
//     (ray.Spread), checked against math.Pi;
//   - a 64 MiB array made by a task pinned to one node and summed by a task
//     pinned to another (ray.NodeAffinity), so the object travels between
//     the nodes' stores; the driver reads it too and checks every byte's sum.
//
// Start a cluster and run it against it, from the repository root:
//
//	goray start --head --port 6379
//	goray start --address 127.0.0.1:6379 --num-cpus 2
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/cluster --min-nodes 2
//	goray stop
//
// Without GORAY_ADDRESS it runs on an embedded single-node cluster. It exits
// non-zero when a result is wrong.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// Sample is one task's share of the Monte Carlo estimate.
type Sample struct {
	Node   string
	Inside int64
	Total  int64
}

// sample throws n darts at the unit square and counts those inside the
// quarter circle.
func sample(ctx context.Context, seed uint64, n int64) (Sample, error) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var in int64
	for i := int64(0); i < n; i++ {
		x, y := r.Float64(), r.Float64()
		if x*x+y*y <= 1 {
			in++
		}
	}
	return Sample{Node: ray.NodeID(), Inside: in, Total: n}, nil
}

// Block is a large array and the node that made it.
type Block struct {
	Node string
	Data []byte
}

// makeBlock fills size bytes with a pattern whose sum is known.
func makeBlock(ctx context.Context, size int) (Block, error) {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return Block{Node: ray.NodeID(), Data: b}, nil
}

// Summed is what sumBlock found and where it ran.
type Summed struct {
	Node, From string
	Sum        uint64
}

// sumBlock adds up a block's bytes. What it prints reaches the driver,
// prefixed with the task, its worker and node (docs/logs.md).
func sumBlock(ctx context.Context, b Block) (Summed, error) {
	fmt.Printf("summing %d MiB made on node %.8s\n", len(b.Data)>>20, b.Node)
	return Summed{Node: ray.NodeID(), From: b.Node, Sum: byteSum(b.Data)}, nil
}

func byteSum(b []byte) uint64 {
	var s uint64
	for _, x := range b {
		s += uint64(x)
	}
	return s
}

var (
	Sampler  = ray.Task2(sample)
	MakeBlk  = ray.Task1(makeBlock)
	SumBlk   = ray.Task1(sumBlock)
	minNodes = flag.Int("min-nodes", 1, "wait until the cluster has this many alive nodes")
	tasks    = flag.Int("tasks", 16, "Monte Carlo tasks")
	darts    = flag.Int64("darts", 1_000_000, "darts per task")
	blockMiB = flag.Int("block-mib", 64, "size of the array moved between nodes, in MiB")
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

func run(ctx context.Context) error {
	flag.Parse()
	nodes, err := waitNodes(ctx, *minNodes, time.Minute)
	if err != nil {
		return err
	}
	names := map[string]string{}
	var ids []string
	for _, n := range nodes {
		if n.Alive {
			names[n.ID] = n.Name + "/" + n.ID[:8]
			ids = append(ids, n.ID)
		}
	}
	fmt.Printf("cluster: %d alive nodes\n", len(ids))

	// 1. Monte Carlo π, spread over the nodes.
	refs := make([]ray.Ref[Sample], *tasks)
	for i := range refs {
		refs[i] = Sampler.Options(ray.Spread()).Remote(ctx, ray.V(uint64(i+1)), ray.V(*darts))
	}
	samples, err := ray.GetAll(ctx, refs)
	if err != nil {
		return fmt.Errorf("sampling: %w", err)
	}
	var in, total int64
	perNode := map[string]int{}
	for _, s := range samples {
		in += s.Inside
		total += s.Total
		perNode[s.Node]++
	}
	pi := 4 * float64(in) / float64(total)
	fmt.Printf("π ≈ %.5f from %d darts (error %.5f)\n", pi, total, math.Abs(pi-math.Pi))
	var lines []string
	for id, c := range perNode {
		lines = append(lines, fmt.Sprintf("  %s ran %d sampling tasks", names[id], c))
	}
	sort.Strings(lines)
	fmt.Println(strings.Join(lines, "\n"))
	if total != int64(*tasks)*(*darts) || math.Abs(pi-math.Pi) > 0.01 {
		return fmt.Errorf("estimate %.5f from %d darts is wrong", pi, total)
	}
	if want := min(len(ids), *tasks); len(perNode) < want {
		return fmt.Errorf("Spread used %d nodes, want %d", len(perNode), want)
	}

	// 2. A large object made on one node and read on another.
	src, dst := ids[len(ids)-1], ids[0]
	size := *blockMiB << 20
	blk := MakeBlk.Options(ray.NodeAffinity(src, false)).Remote(ctx, ray.V(size))
	res, err := SumBlk.Options(ray.NodeAffinity(dst, false)).Remote(ctx, blk).Get(ctx)
	if err != nil {
		return fmt.Errorf("moving a block: %w", err)
	}
	want := byteSum(mustBlock(size))
	fmt.Printf("%d MiB block made on %s, summed on %s: %d\n", *blockMiB, names[res.From], names[res.Node], res.Sum)
	if res.Sum != want || res.From != src || res.Node != dst {
		return fmt.Errorf("block: sum %d from %s on %s, want %d from %s on %s", res.Sum, res.From, res.Node, want, src, dst)
	}
	// 3. Locality: with the default strategy a task runs where its
	// argument's bytes are.
	loc, err := SumBlk.Remote(ctx, blk).Get(ctx)
	if err != nil {
		return fmt.Errorf("summing the block where it is: %w", err)
	}
	if loc.Node != src || loc.Sum != want {
		return fmt.Errorf("locality: the task ran on %s (sum %d), want the block's node %s", names[loc.Node], loc.Sum, names[src])
	}
	fmt.Printf("locality: ran on the block's node %s\n", names[loc.Node])
	got, err := blk.Get(ctx)
	if err != nil {
		return fmt.Errorf("reading the block in the driver: %w", err)
	}
	if byteSum(got.Data) != want {
		return errors.New("the driver read a corrupt block")
	}
	fmt.Printf("driver on %s read the block: sum ok\n", names[ray.NodeID()])
	return nil
}

func mustBlock(size int) []byte {
	b, _ := makeBlock(context.Background(), size)
	return b.Data
}

// waitNodes waits until at least n nodes are alive.
func waitNodes(ctx context.Context, n int, timeout time.Duration) ([]ray.Node, error) {
	deadline := time.Now().Add(timeout)
	for {
		nodes, err := ray.Nodes(ctx)
		if err != nil {
			return nil, err
		}
		alive := 0
		for _, nd := range nodes {
			if nd.Alive {
				alive++
			}
		}
		if alive >= n {
			return nodes, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the cluster has %d alive nodes after %s, want %d", alive, timeout, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
