package main

// The job of TestPlacementGroupRemovalFreesChildLeases:
//
//	testjob pg-children DIR HEAD N2   a group of one bundle on HEAD (the
//	                               only node with the custom resource
//	                               pghome); a parent task in it submits a
//	                               child out of the group to N2 (node
//	                               affinity). Both block. Once the child
//	                               runs (DIR/child: "pid node", the parent
//	                               wrote DIR/parent) the job waits for
//	                               DIR/remove, removes the group (which
//	                               kills the parent's worker), writes
//	                               DIR/removed, checks the parent failed
//	                               and waits for DIR/finish.
//	testjob holder-node DIR HEAD N2   a parent task on N2 submits a child
//	                               to HEAD (node affinity); both block.
//	                               The test kills N2; the job checks the
//	                               parent failed and waits for
//	                               DIR/finish.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goray-dev/goray/sdk/ray"
)

// pgChild writes "pid node" to dir/child and blocks until dir/finish
// appears or its worker is killed.
func pgChild(ctx context.Context, dir string) (int, error) {
	if err := writeFile(filepath.Join(dir, "child"), fmt.Sprintf("%d %s", os.Getpid(), ray.NodeID())); err != nil {
		return 0, err
	}
	if err := pollFile(ctx, filepath.Join(dir, "finish")); err != nil {
		return 0, err
	}
	return os.Getpid(), nil
}

// pgParent runs in the group: it writes "pid node" to dir/parent, submits
// the child outside the group on node n2 and blocks on its result.
func pgParent(ctx context.Context, dir, n2 string) (int, error) {
	if err := writeFile(filepath.Join(dir, "parent"), fmt.Sprintf("%d %s", os.Getpid(), ray.NodeID())); err != nil {
		return 0, err
	}
	child := PGChild.Options(ray.DefaultScheduling(), ray.NodeAffinity(n2, false)).Remote(ctx, ray.V(dir))
	return child.Get(ctx)
}

// holderParent writes "pid node" to dir/parent, submits the child to node
// head and blocks on its result.
func holderParent(ctx context.Context, dir, head string) (int, error) {
	if err := writeFile(filepath.Join(dir, "parent"), fmt.Sprintf("%d %s", os.Getpid(), ray.NodeID())); err != nil {
		return 0, err
	}
	return PGChild.Options(ray.NodeAffinity(head, false)).Remote(ctx, ray.V(dir)).Get(ctx)
}

var (
	// HolderParent is holder-node's parent task, on the node the test kills.
	HolderParent = ray.Task2(holderParent)
	// PGChild is the child task, run outside the group on the second node.
	PGChild = ray.Task1(pgChild)
	// PGParent is the task in the group.
	PGParent = ray.Task2(pgParent)
)

func runPGChildren(ctx context.Context, dir, head, n2 string) error {
	pg, err := ray.CreatePlacementGroup(ctx, []ray.Bundle{{"CPU": 1, "pghome": 1}}, ray.StrictPack, ray.GroupName("pg-children"))
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
	if len(info.BundleNodes) != 1 || info.BundleNodes[0] != head {
		return fmt.Errorf("the group's bundle is on %v, want the head %s", info.BundleNodes, head)
	}
	fmt.Println("group created on the head:", pg.ID())
	parent := PGParent.Options(ray.InPlacementGroup(pg, 0), ray.CPUs(1), ray.MaxRetries(0)).Remote(ctx, ray.V(dir), ray.V(n2))
	// The child runs; the test checks its lease holds a CPU of N2.
	if err := pollFile(ctx, filepath.Join(dir, "child")); err != nil {
		return err
	}
	fmt.Println("child running")
	if err := pollFile(ctx, filepath.Join(dir, "remove")); err != nil {
		return err
	}
	if err := ray.RemovePlacementGroup(ctx, pg); err != nil {
		return fmt.Errorf("removing the group: %w", err)
	}
	fmt.Println("group removed")
	if err := writeFile(filepath.Join(dir, "removed"), ""); err != nil {
		return err
	}
	_, err = parent.Get(ctx)
	fmt.Println("parent error:", err)
	if err == nil {
		return errors.New("the parent task returned although its group was removed")
	}
	return pollFile(ctx, filepath.Join(dir, "finish"))
}

// runHolderNode is the job of TestNodeDeathEndsItsHoldersLeases.
func runHolderNode(ctx context.Context, dir, head, n2 string) error {
	parent := HolderParent.Options(ray.NodeAffinity(n2, false), ray.CPUs(0), ray.MaxRetries(0)).Remote(ctx, ray.V(dir), ray.V(head))
	if err := pollFile(ctx, filepath.Join(dir, "child")); err != nil {
		return err
	}
	fmt.Println("child running")
	_, err := parent.Get(ctx)
	fmt.Println("parent error:", err)
	if err == nil {
		return errors.New("the parent task returned although its node was killed")
	}
	return pollFile(ctx, filepath.Join(dir, "finish"))
}
