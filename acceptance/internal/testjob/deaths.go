package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/goray-dev/goray/sdk/ray"
)

// Owner is an actor that puts objects, so it owns them.
type Owner struct{}

var (
	OwnerActor = ray.Actor0(newOwner)
	OwnerPut   = ray.Method1((*Owner).Put)
)

func newOwner(ctx context.Context) (*Owner, error) { return &Owner{}, nil }

// Put puts block i (1 MiB, a store object) and returns its ref.
func (o *Owner) Put(ctx context.Context, i int) (ray.Ref[[]byte], error) {
	return ray.Put(ctx, spillBlock(i, 1<<20))
}

// runDeaths: k actors on node head each put an object that a task on
// node n2 reads (n2 pulls a copy); the job writes the objects' ids to
// DIR/ids, waits for DIR/kill, kills every actor at once, writes
// DIR/killed and waits for DIR/go. Only the owners' deaths, told to n2
// (WorkersDied), free n2's copies: the driver still holds its refs.
func runDeaths(ctx context.Context, dir, head, n2, kArg string) error {
	var k int
	if _, err := fmt.Sscan(kArg, &k); err != nil || k < 1 {
		return fmt.Errorf("deaths: actor count %q: want a positive number", kArg)
	}
	hs := make([]ray.ActorHandle[Owner], k)
	var refs []ray.Ref[[]byte]
	var idList []string
	for i := range hs {
		hs[i] = OwnerActor.Options(ray.NodeAffinity(head, false)).Remote(ctx)
		ref, err := OwnerPut.On(hs[i]).Remote(ctx, ray.V(i)).Get(ctx)
		if err != nil {
			return fmt.Errorf("actor %d put: %w", i, err)
		}
		sum, err := FnvOf.Options(ray.NodeAffinity(n2, false)).Remote(ctx, ref).Get(ctx)
		if err != nil {
			return fmt.Errorf("task on N2 reading object %d: %w", i, err)
		}
		if sum != fnvSum(spillBlock(i, 1<<20)) {
			return fmt.Errorf("task on N2 read object %d wrong", i)
		}
		refs = append(refs, ref)
		idList = append(idList, ref.ID())
	}
	if err := writeFile(filepath.Join(dir, "ids"), strings.Join(idList, "\n")); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "kill")); err != nil {
		return err
	}
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.Kill(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("killing the actors: %w", err)
	}
	if err := writeFile(filepath.Join(dir, "killed"), ""); err != nil {
		return err
	}
	fmt.Printf("deaths: %d owners killed at once\n", k)
	err := pollFile(ctx, filepath.Join(dir, "go"))
	for _, r := range refs {
		r.Release()
	}
	return err
}
