// Command placement-group gang-schedules work with placement groups and
// checks that every bundle landed where its strategy promises:
//
//   - a STRICT_SPREAD group of --gang bundles of {CPU: 1}, one per node,
//     holds a gang of actors (one per bundle) that exchange data: each
//     makes a vector in its node's object store and reads every other
//     member's (so the data crosses nodes), and all must agree on the sum;
//   - a PACK group of two {CPU: 0.5} bundles, which fit on one node, so
//     PACK puts them together; a task runs in each bundle.
//
// It prints where each bundle landed, removes both groups and waits until
// the cluster's resources are free again. It exits non-zero when a
// placement or a result is wrong.
//
// Start a cluster of three nodes on one machine (each on its own loopback
// address) and run it, from the repository root:
//
//	goray start --head --port 6379 --num-cpus 2
//	goray start --address 127.0.0.1:6379 --node-ip 127.0.0.2 --num-cpus 2
//	goray start --address 127.0.0.1:6379 --node-ip 127.0.0.3 --num-cpus 2
//	GORAY_ADDRESS=127.0.0.1:6379 go run ./examples/placement-group --gang 3
//	goray list placement-groups
//	goray stop
//
// Without GORAY_ADDRESS it runs on an embedded single-node cluster (a
// gang of one).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// Member is one actor of the gang.
type Member struct {
	rank int
}

// NewMember creates the gang's member rank.
func NewMember(ctx context.Context, rank int) (*Member, error) { return &Member{rank: rank}, nil }

// Node returns the node the member runs on.
func (m *Member) Node(ctx context.Context) (string, error) { return ray.NodeID(), nil }

// Shard is a member's data: n values of rank+1.
func (m *Member) Shard(ctx context.Context, n int) ([]int64, error) {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(m.rank + 1)
	}
	return out, nil
}

// SumAll reads every member's shard (from their nodes) and sums them.
func (m *Member) SumAll(ctx context.Context, shards []ray.Ref[[]int64]) (int64, error) {
	var sum int64
	for _, r := range shards {
		vs, err := r.Get(ctx)
		if err != nil {
			return 0, err
		}
		for _, v := range vs {
			sum += v
		}
	}
	return sum, nil
}

// where reports the node a task runs on.
func where(ctx context.Context, _ int) (string, error) { return ray.NodeID(), nil }

var (
	MemberA = ray.Actor1(NewMember)
	NodeOf  = ray.Method0((*Member).Node)
	Shard   = ray.Method1((*Member).Shard)
	SumAll  = ray.Method1((*Member).SumAll)
	Where   = ray.Task1(where)
)

func main() {
	gang := flag.Int("gang", 0, "actors in the STRICT_SPREAD gang, one per node (default: the number of alive nodes)")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rt, err := ray.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	err = run(ctx, *gang)
	_ = rt.Shutdown(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("OK")
}

func run(ctx context.Context, gang int) error {
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return err
	}
	alive := 0
	for _, n := range nodes {
		if n.Alive {
			alive++
		}
	}
	if gang <= 0 {
		gang = alive
	}
	fmt.Printf("cluster: %d alive nodes; gang of %d\n", alive, gang)
	if err := spreadGang(ctx, gang); err != nil {
		return err
	}
	if err := packed(ctx); err != nil {
		return err
	}
	return resourcesFree(ctx)
}

// spreadGang places the gang STRICT_SPREAD and has its members exchange
// their shards.
func spreadGang(ctx context.Context, gang int) error {
	bundles := make([]ray.Bundle, gang)
	for i := range bundles {
		bundles[i] = ray.Bundle{"CPU": 1}
	}
	pg, err := ray.CreatePlacementGroup(ctx, bundles, ray.StrictSpread)
	if err != nil {
		return err
	}
	defer ray.RemovePlacementGroup(context.WithoutCancel(ctx), pg)
	if err := pg.Wait(ctx); err != nil {
		info, _ := pg.Info(context.WithoutCancel(ctx))
		return fmt.Errorf("STRICT_SPREAD group of %d bundles not ready (%s): %w", gang, info.PendingReason, err)
	}
	info, err := pg.Info(ctx)
	if err != nil {
		return err
	}
	seen := map[string]int{}
	for i, node := range info.BundleNodes {
		fmt.Printf("STRICT_SPREAD bundle %d %s on node %s\n", i, info.Bundles[i], short(node))
		if j, ok := seen[node]; ok || node == "" {
			return fmt.Errorf("STRICT_SPREAD bundles %d and %d share node %q", j, i, node)
		}
		seen[node] = i
	}

	members := make([]ray.ActorHandle[Member], gang)
	for i := range members {
		members[i] = MemberA.Options(ray.InPlacementGroup(pg, i), ray.CPUs(1)).Remote(ctx, ray.V(i))
	}
	for i, m := range members {
		node, err := NodeOf.On(m).Remote(ctx).Get(ctx)
		if err != nil {
			return fmt.Errorf("member %d: %w", i, err)
		}
		fmt.Printf("member %d runs on node %s\n", i, short(node))
		if node != info.BundleNodes[i] {
			return fmt.Errorf("member %d runs on node %s, not on its bundle's node %s", i, short(node), short(info.BundleNodes[i]))
		}
	}
	const n = 1 << 20 // 8 MiB per shard: kept in each member's node's store
	shards := make([]ray.Ref[[]int64], gang)
	for i, m := range members {
		shards[i] = Shard.On(m).Remote(ctx, ray.V(n))
	}
	want := int64(n) * int64(gang*(gang+1)/2)
	for i, m := range members {
		got, err := SumAll.On(m).Remote(ctx, ray.V(shards)).Get(ctx)
		if err != nil {
			return fmt.Errorf("member %d summing the shards: %w", i, err)
		}
		if got != want {
			return fmt.Errorf("member %d sums %d, want %d", i, got, want)
		}
	}
	fmt.Printf("gang exchange: %d members each read %d shards of 8 MiB, sum %d: ok\n", gang, gang, want)
	if err := ray.RemovePlacementGroup(ctx, pg); err != nil {
		return err
	}
	// The gang ends with its group: calls fail with ErrActorDied once the
	// caller hears of it.
	for {
		_, err := NodeOf.On(members[0]).Remote(ctx).Get(ctx)
		if errors.Is(err, ray.ErrActorDied) {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("member 0 after the group was removed: %v, want ErrActorDied", err)
		}
		time.Sleep(50 * time.Millisecond) // poll; ctx bounds it
	}
	fmt.Println("removed the STRICT_SPREAD group: its actors ended")
	return nil
}

// packed places two small bundles PACK: they fit on one node, so they
// share it.
func packed(ctx context.Context) error {
	pg, err := ray.CreatePlacementGroup(ctx, []ray.Bundle{{"CPU": 0.5}, {"CPU": 0.5}}, ray.Pack)
	if err != nil {
		return err
	}
	defer ray.RemovePlacementGroup(context.WithoutCancel(ctx), pg)
	if err := pg.Wait(ctx); err != nil {
		return fmt.Errorf("PACK group not ready: %w", err)
	}
	info, err := pg.Info(ctx)
	if err != nil {
		return err
	}
	for i, node := range info.BundleNodes {
		fmt.Printf("PACK bundle %d %s on node %s\n", i, info.Bundles[i], short(node))
		ran, err := Where.Options(ray.InPlacementGroup(pg, i), ray.CPUs(0.5)).Remote(ctx, ray.V(i)).Get(ctx)
		if err != nil {
			return fmt.Errorf("task in PACK bundle %d: %w", i, err)
		}
		if ran != node {
			return fmt.Errorf("task in PACK bundle %d ran on %s, not on the bundle's node %s", i, short(ran), short(node))
		}
	}
	if info.BundleNodes[0] != info.BundleNodes[1] {
		return fmt.Errorf("PACK put two {CPU: 0.5} bundles on nodes %s and %s although one node holds both", short(info.BundleNodes[0]), short(info.BundleNodes[1]))
	}
	fmt.Println("PACK bundles share a node: ok")
	return ray.RemovePlacementGroup(ctx, pg)
}

// resourcesFree waits until the cluster's available resources equal its
// totals again: the groups gave everything back.
func resourcesFree(ctx context.Context) error {
	for {
		total, err1 := ray.ClusterResources(ctx)
		avail, err2 := ray.AvailableResources(ctx)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if maps.Equal(total, avail) {
			fmt.Println("resources free again after removal: ok")
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("available %v, total %v: %w", avail, total, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return strings.Repeat("-", max(1, len(id)))
}
