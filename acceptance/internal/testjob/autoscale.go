package main

// The jobs of the autoscaler's acceptance tests (acceptance/autoscale_test.go):
//
//	testjob as-burst N MS        N one-CPU tasks of MS milliseconds each;
//	                             prints "worker-nodes: K" (nodes other than
//	                             the driver's that ran some)
//	testjob as-actors N DIR      N actors of two CPUs each; writes
//	                             DIR/alive.<k> as each answers, and waits
//	                             for DIR/release
//	testjob as-request N         ray.RequestResources of N CPUs (0 clears)
//	testjob as-infeasible DIR    a task needing 64 CPUs; writes
//	                             DIR/submitted and waits for DIR/release
//	testjob as-pg N              a STRICT_SPREAD group of N {CPU: 2} bundles;
//	                             prints "pg-nodes: K" once it is placed
//	testjob as-object DIR        a 4 MiB object made by a two-CPU task (on a
//	                             worker node), which writes DIR/made (its
//	                             node's id); once DIR/read exists the job
//	                             reads the object back and checks it

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

func asWork(ctx context.Context, i int, ms int) (string, error) {
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(time.Duration(ms) * time.Millisecond):
	}
	return ray.NodeID(), nil
}

// AsWork is the burst's task.
var AsWork = ray.Task2(asWork, ray.CPUs(1))

func runASBurst(ctx context.Context, nArg, msArg string) error {
	n, err1 := strconv.Atoi(nArg)
	ms, err2 := strconv.Atoi(msArg)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	refs := make([]ray.Ref[string], n)
	for i := range refs {
		refs[i] = AsWork.Remote(ctx, ray.V(i), ray.V(ms))
	}
	nodes, err := ray.GetAll(ctx, refs)
	if err != nil {
		return err
	}
	others := map[string]bool{}
	for _, id := range nodes {
		if id != ray.NodeID() {
			others[id] = true
		}
	}
	fmt.Println("worker-nodes:", len(others))
	return nil
}

// AsActor is the actors' class: two CPUs each.
type AsActor struct{}

func newAsActor(ctx context.Context) (*AsActor, error) { return &AsActor{}, nil }
func (a *AsActor) Node(ctx context.Context) (string, error) {
	return ray.NodeID(), nil
}

var (
	AsActorClass = ray.Actor0(newAsActor, ray.CPUs(2))
	AsActorNode  = ray.Method0((*AsActor).Node)
)

func runASActors(ctx context.Context, nArg, dir string) error {
	n, err := strconv.Atoi(nArg)
	if err != nil {
		return err
	}
	var refs []ray.Ref[string]
	for range n {
		h := AsActorClass.Remote(ctx)
		refs = append(refs, AsActorNode.On(h).Remote(ctx))
	}
	answered := 0
	go func() {
		for answered < n {
			ready, _, err := ray.Wait(ctx, refs, answered+1, time.Second)
			if err != nil {
				return
			}
			for answered < len(ready) {
				answered++
				_ = writeFile(filepath.Join(dir, fmt.Sprintf("alive.%d", answered)), "")
			}
		}
	}()
	return pollFile(ctx, filepath.Join(dir, "release"))
}

func runASRequest(ctx context.Context, nArg string) error {
	n, err := strconv.ParseFloat(nArg, 64)
	if err != nil {
		return err
	}
	if n == 0 {
		return ray.RequestResources(ctx)
	}
	return ray.RequestResources(ctx, ray.WithCPUs(n))
}

func runASInfeasible(ctx context.Context, dir string) error {
	ref := AsWork.Options(ray.CPUs(64)).Remote(ctx, ray.V(0), ray.V(0))
	if err := writeFile(filepath.Join(dir, "submitted"), ""); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "release")); err != nil {
		return err
	}
	return ray.Cancel(ctx, ref)
}

func asMake(ctx context.Context, dir string, size int) ([]byte, error) {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i % 253)
	}
	return b, writeFile(filepath.Join(dir, "made"), ray.NodeID())
}

// AsMake makes the object; it needs two CPUs, more than the head has, so
// it runs on a worker node the autoscaler launches for it. No retries: a
// lost object cannot be rebuilt by running it again (lineage), so reading
// it proves the copy survived.
var AsMake = ray.Task2(asMake, ray.CPUs(2), ray.MaxRetries(0))

func runASObject(ctx context.Context, dir string) error {
	const size = 4 << 20
	ref := AsMake.Remote(ctx, ray.V(dir), ray.V(size))
	// Made on the worker node, not copied here (FetchLocal(false)).
	if _, _, err := ray.Wait(ctx, []ray.Ref[[]byte]{ref}, 1, time.Minute, ray.FetchLocal(false)); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "read")); err != nil {
		return err
	}
	b, err := ray.Get(ctx, ref)
	if err != nil {
		return fmt.Errorf("reading the object: %w", err)
	}
	if len(b) != size {
		return fmt.Errorf("object of %d bytes, want %d", len(b), size)
	}
	for i := range b {
		if b[i] != byte(i%253) {
			return fmt.Errorf("object byte %d is %d, want %d", i, b[i], i%253)
		}
	}
	fmt.Println("object: read back intact")
	return nil
}

// runASPG creates a STRICT_SPREAD group of n {CPU: 2} bundles, waits until
// it is placed, prints on how many distinct nodes, and removes it.
func runASPG(ctx context.Context, nArg string) error {
	n, err := strconv.Atoi(nArg)
	if err != nil {
		return err
	}
	bundles := make([]ray.Bundle, n)
	for i := range bundles {
		bundles[i] = ray.Bundle{"CPU": 2}
	}
	pg, err := ray.CreatePlacementGroup(ctx, bundles, ray.StrictSpread)
	if err != nil {
		return err
	}
	if err := pg.Wait(ctx); err != nil {
		return fmt.Errorf("waiting for the group: %w", err)
	}
	info, err := pg.Info(ctx)
	if err != nil {
		return err
	}
	nodes := map[string]bool{}
	for _, id := range info.BundleNodes {
		nodes[id] = true
	}
	fmt.Println("pg-nodes:", len(nodes))
	return ray.RemovePlacementGroup(ctx, pg)
}
