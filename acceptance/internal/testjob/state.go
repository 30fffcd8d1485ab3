package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// failOnPurpose returns an error (the state test looks for the task).
func failOnPurpose(ctx context.Context, msg string) (int, error) { return 0, errors.New(msg) }

// FailOnPurpose is the task `goray list tasks --filter state=FAILED` finds.
var FailOnPurpose = ray.Task1(failOnPurpose)

// runState runs tasks on the head and on another node, one of them
// failing on the head, makes an object in each node's store, writes
// dir/ready and holds the objects until dir/go exists.
func runState(ctx context.Context, dir string) error {
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return err
	}
	var head, other string
	for _, n := range nodes {
		switch {
		case !n.Alive:
		case n.Head:
			head = n.ID
		default:
			other = n.ID
		}
	}
	if head == "" || other == "" {
		return fmt.Errorf("want a head and another alive node, have %v", nodes)
	}
	for _, node := range []string{head, other} {
		for range 2 {
			w, err := WhereAmI.Options(ray.NodeAffinity(node, false)).Remote(ctx, ray.V(time.Duration(0))).Get(ctx)
			if err != nil {
				return err
			}
			if w.Node != node {
				return fmt.Errorf("ran on %s, want %s", w.Node, node)
			}
		}
	}
	if _, err := FailOnPurpose.Options(ray.NodeAffinity(head, false)).Remote(ctx, ray.V("failed on purpose")).Get(ctx); err == nil {
		return errors.New("the failing task succeeded")
	}
	blobs := []ray.Ref[[]byte]{
		MakeBlob.Options(ray.NodeAffinity(head, false)).Remote(ctx, ray.V(1<<20)),
		MakeBlob.Options(ray.NodeAffinity(other, false)).Remote(ctx, ray.V(1<<20)),
	}
	// Made where they are pinned, not copied here (FetchLocal(false)).
	if _, _, err := ray.Wait(ctx, blobs, len(blobs), ray.NoTimeout, ray.FetchLocal(false)); err != nil {
		return err
	}
	fmt.Println("state: head", head, "other", other)
	if err := writeFile(filepath.Join(dir, "ready"), head+" "+other); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return err
	}
	runtime.KeepAlive(blobs)
	return nil
}
