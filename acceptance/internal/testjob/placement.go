package main

// Jobs of the placement group acceptance tests (nodes of 2 CPUs):
//
//	testjob pg-strategies          each strategy lands where it promises
//	                               on 3 nodes; removal ends the group's
//	                               actor and frees every resource
//	testjob pg-wait DIR            a STRICT_SPREAD group of 4 on 3 nodes:
//	                               DIR/pending once it waits, then waits
//	                               until a node joins
//	testjob pg-hold DIR STRATEGY N CPU   a group of N {CPU} bundles; DIR/made
//	                               once created (not waited), removed when
//	                               DIR/go appears
//	testjob pg-race                two groups racing for the node's CPUs
//	testjob pg-nodekill DIR VICTIM a SPREAD group with a restartable actor in
//	                               VICTIM's bundle; the test kills VICTIM
//	                               after DIR/ready
//	testjob pg-detached NAME       a detached named group, left behind
//	testjob pg-elsewhere NAME      from another namespace: the name is not
//	                               found, and names a group of its own
//	testjob pg-lookup NAME         finds it from a new job of its namespace
//	                               and removes it

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// PGMember is an actor placed in a group.
type PGMember struct{}

// NewPGMember creates a member.
func NewPGMember(ctx context.Context, _ int) (*PGMember, error) { return &PGMember{}, nil }

// Node returns where the member runs.
func (m *PGMember) Node(ctx context.Context) (string, error) { return ray.NodeID(), nil }

var (
	// PGMemberA is the member class.
	PGMemberA = ray.Actor1(NewPGMember)
	// PGMemberNode reports a member's node.
	PGMemberNode = ray.Method0((*PGMember).Node)
)

func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func bundlesOf(n int, cpu float64) []ray.Bundle {
	out := make([]ray.Bundle, n)
	for i := range out {
		out[i] = ray.Bundle{"CPU": cpu}
	}
	return out
}

// resourcesFree waits until available resources equal the totals.
func resourcesFree(ctx context.Context) error {
	return poll(ctx, "resources free", func() (bool, error) {
		t, err1 := ray.ClusterResources(ctx)
		a, err2 := ray.AvailableResources(ctx)
		return err1 == nil && err2 == nil && maps.Equal(t, a), errors.Join(err1, err2)
	})
}

func distinct(nodes []string) int {
	m := map[string]bool{}
	for _, n := range nodes {
		m[n] = true
	}
	return len(m)
}

func runPGStrategies(ctx context.Context) error {
	for _, c := range []struct {
		s     ray.PlacementStrategy
		n     int
		cpu   float64
		nodes int
	}{
		{ray.StrictSpread, 3, 1, 3},
		{ray.SpreadBundles, 3, 0.5, 3},
		{ray.StrictPack, 3, 0.5, 1},
		{ray.Pack, 2, 0.5, 1},
	} {
		pg, err := ray.CreatePlacementGroup(ctx, bundlesOf(c.n, c.cpu), c.s)
		if err != nil {
			return err
		}
		if err := pg.Wait(ctx); err != nil {
			return fmt.Errorf("%s: %w", c.s, err)
		}
		info, err := pg.Info(ctx)
		if err != nil {
			return err
		}
		if d := distinct(info.BundleNodes); d != c.nodes {
			return fmt.Errorf("%s: %d bundles on %d nodes %v, want %d", c.s, c.n, d, info.BundleNodes, c.nodes)
		}
		// An actor in the last bundle runs on its node; removal ends it.
		h := PGMemberA.Options(ray.InPlacementGroup(pg, c.n-1), ray.CPUs(c.cpu)).Remote(ctx, ray.V(0))
		node, err := PGMemberNode.On(h).Remote(ctx).Get(ctx)
		if err != nil || node != info.BundleNodes[c.n-1] {
			return fmt.Errorf("%s: actor in bundle %d on %s (%v), want %s", c.s, c.n-1, node, err, info.BundleNodes[c.n-1])
		}
		fmt.Printf("%s: %d bundles on %d nodes\n", c.s, c.n, c.nodes)
		if err := ray.RemovePlacementGroup(ctx, pg); err != nil {
			return err
		}
		if err := poll(ctx, "the actor to end with its group", func() (bool, error) {
			_, err := PGMemberNode.On(h).Remote(ctx).Get(ctx)
			return errors.Is(err, ray.ErrActorDied), nil
		}); err != nil {
			return err
		}
		if err := resourcesFree(ctx); err != nil {
			return fmt.Errorf("%s: after removal: %w", c.s, err)
		}
	}
	fmt.Println("removal ended the actors and freed every resource")
	return nil
}

func runPGWait(ctx context.Context, dir string) error {
	pg, err := ray.CreatePlacementGroup(ctx, bundlesOf(4, 1), ray.StrictSpread)
	if err != nil {
		return err
	}
	if err := poll(ctx, "the group pending", func() (bool, error) {
		info, err := pg.Info(ctx)
		return err == nil && info.State == "PENDING" && info.PendingReason != "", err
	}); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "pending"), nil, 0o644); err != nil {
		return err
	}
	if err := pg.Wait(ctx); err != nil {
		return err
	}
	info, err := pg.Info(ctx)
	if err != nil {
		return err
	}
	if d := distinct(info.BundleNodes); d != 4 {
		return fmt.Errorf("4 STRICT_SPREAD bundles on %d nodes", d)
	}
	fmt.Println("created once the 4th node joined")
	return ray.RemovePlacementGroup(ctx, pg)
}

func runPGHold(ctx context.Context, dir, strategy, n, cpu string) error {
	count, err1 := strconv.Atoi(n)
	amount, err2 := strconv.ParseFloat(cpu, 64)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	pg, err := ray.CreatePlacementGroup(ctx, bundlesOf(count, amount), ray.PlacementStrategy(strategy), ray.GroupName("held"))
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "made"), pg.ID()); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return err
	}
	return ray.RemovePlacementGroup(ctx, pg)
}

func runPGRace(ctx context.Context) error {
	total, err := ray.ClusterResources(ctx)
	if err != nil {
		return err
	}
	cpus := total["CPU"]
	var pgs [2]*ray.PlacementGroup
	errs := make(chan error, 2)
	for i := range pgs {
		go func() {
			var err error
			pgs[i], err = ray.CreatePlacementGroup(ctx, bundlesOf(2, cpus/2), ray.StrictPack)
			errs <- err
		}()
	}
	if err := errors.Join(<-errs, <-errs); err != nil {
		return err
	}
	// One is created, the other waits; the resources never show a partial
	// hold: the node's CPUs are all free or all one group's.
	var first, second *ray.PlacementGroup
	if err := poll(ctx, "one group created", func() (bool, error) {
		a, err := ray.AvailableResources(ctx)
		if err != nil {
			return false, err
		}
		held := 0.0
		for _, pg := range pgs {
			held += a["CPU_group_"+pg.ID()]
		}
		if c := a["CPU"]; c != 0 && c != cpus {
			return false, fmt.Errorf("partial hold: %v of %v CPUs available", c, cpus)
		}
		for i, pg := range pgs {
			info, err := pg.Info(ctx)
			if err != nil {
				return false, err
			}
			if info.State == "CREATED" {
				first, second = pg, pgs[1-i]
			}
		}
		return first != nil, nil
	}); err != nil {
		return err
	}
	if ok, err := second.WaitTimeout(ctx, 0); ok || err != nil {
		return fmt.Errorf("both groups created on %v CPUs (%v)", cpus, err)
	}
	info, err := second.Info(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("one created, the other %s: %s\n", info.State, info.PendingReason)
	if err := ray.RemovePlacementGroup(ctx, first); err != nil {
		return err
	}
	if err := second.Wait(ctx); err != nil {
		return err
	}
	fmt.Println("the waiting group was created once the first was removed")
	if err := ray.RemovePlacementGroup(ctx, second); err != nil {
		return err
	}
	return resourcesFree(ctx)
}

func runPGNodeKill(ctx context.Context, dir, victim string) error {
	pg, err := ray.CreatePlacementGroup(ctx, bundlesOf(3, 1), ray.SpreadBundles)
	if err != nil {
		return err
	}
	if err := pg.Wait(ctx); err != nil {
		return err
	}
	info, err := pg.Info(ctx)
	if err != nil {
		return err
	}
	idx := -1
	for i, n := range info.BundleNodes {
		if n == victim {
			idx = i
		}
	}
	if idx < 0 {
		return fmt.Errorf("no bundle on the victim %s: %v", victim, info.BundleNodes)
	}
	h := PGMemberA.Options(ray.InPlacementGroup(pg, idx), ray.CPUs(1), ray.MaxRestarts(1)).Remote(ctx, ray.V(0))
	if node, err := PGMemberNode.On(h).Remote(ctx).Get(ctx); err != nil || node != victim {
		return fmt.Errorf("actor in bundle %d on %s (%v), want the victim", idx, node, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		return err
	}
	var now ray.PlacementGroupInfo
	if err := poll(ctx, "the bundle rescheduled", func() (bool, error) {
		now, err = pg.Info(ctx)
		return err == nil && now.State == "CREATED" && now.Reschedules > 0, err
	}); err != nil {
		return err
	}
	if now.BundleNodes[idx] == victim || now.BundleNodes[idx] == "" {
		return fmt.Errorf("bundle %d still on %q", idx, now.BundleNodes[idx])
	}
	fmt.Printf("bundle %d rescheduled on %s\n", idx, now.BundleNodes[idx])
	node, err := PGMemberNode.On(h).Remote(ctx).Get(ctx)
	if err != nil || node != now.BundleNodes[idx] {
		return fmt.Errorf("restarted actor on %s (%v), want the bundle's new node %s", node, err, now.BundleNodes[idx])
	}
	fmt.Println("actor restarted in its bundle: ok")
	return ray.RemovePlacementGroup(ctx, pg)
}

func runPGDetached(ctx context.Context, name string) error {
	pg, err := ray.CreatePlacementGroup(ctx, bundlesOf(1, 1), ray.Pack, ray.GroupName(name), ray.Detached())
	if err != nil {
		return err
	}
	if err := pg.Wait(ctx); err != nil {
		return err
	}
	// A job-scoped group, removed when this job ends.
	if _, err := ray.CreatePlacementGroup(ctx, bundlesOf(1, 0.5), ray.Pack, ray.GroupName(name+"-scoped")); err != nil {
		return err
	}
	fmt.Println("detached group:", pg.ID())
	return nil
}

// runPGElsewhere runs in a namespace other than runPGDetached's: it must
// not find the group name, and names a (detached) group of its own so.
func runPGElsewhere(ctx context.Context, name string) error {
	_, err := ray.GetPlacementGroup(ctx, name)
	if !errors.Is(err, ray.ErrPlacementGroupNotFound) {
		return fmt.Errorf("another namespace's group %q: %v, want ErrPlacementGroupNotFound", name, err)
	}
	fmt.Println(err)
	pg, err := ray.CreatePlacementGroup(ctx, bundlesOf(1, 0.5), ray.Pack, ray.GroupName(name), ray.Detached())
	if err != nil {
		return fmt.Errorf("a group of this namespace named %q: %w", name, err)
	}
	if got, err := ray.GetPlacementGroup(ctx, name); err != nil || got.ID() != pg.ID() {
		return fmt.Errorf("GetPlacementGroup(%q) in this namespace: %v, %v; want %s", name, got, err, pg.ID())
	}
	fmt.Println("own group:", pg.ID())
	return ray.RemovePlacementGroup(ctx, pg)
}

func runPGLookup(ctx context.Context, name string) error {
	pg, err := ray.GetPlacementGroup(ctx, name)
	if err != nil {
		return err
	}
	info, err := pg.Info(ctx)
	if err != nil {
		return err
	}
	fmt.Println("found detached group:", pg.ID(), info.State)
	if _, err := ray.GetPlacementGroup(ctx, name+"-scoped"); !errors.Is(err, ray.ErrPlacementGroupNotFound) {
		return fmt.Errorf("the first job's scoped group: %v, want it removed with its job", err)
	}
	if err := ray.RemovePlacementGroup(ctx, pg); err != nil {
		return err
	}
	return resourcesFree(ctx)
}
