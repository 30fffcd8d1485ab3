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

// runMetrics is the known workload of the metrics test: n tasks pinned to
// this node and n to node other, all finished, then a put of size bytes
// (in this node's store) held until DIR/release exists. It writes
// DIR/ready once the tasks are done and the object is put.
func runMetrics(ctx context.Context, other, dir, nArg, sizeArg string) error {
	n, err := strconv.Atoi(nArg)
	if err != nil {
		return fmt.Errorf("task count %q: %w", nArg, err)
	}
	size, err := strconv.Atoi(sizeArg)
	if err != nil {
		return fmt.Errorf("object size %q: %w", sizeArg, err)
	}
	var refs []ray.Ref[Where]
	for _, node := range []string{ray.NodeID(), other} {
		for range n {
			refs = append(refs, WhereAmI.Options(ray.NodeAffinity(node, false)).Remote(ctx, ray.V(time.Duration(0))))
		}
	}
	ws, err := ray.GetAll(ctx, refs)
	if err != nil {
		return fmt.Errorf("tasks: %w", err)
	}
	per := map[string]int{}
	for _, w := range ws {
		per[w.Node]++
	}
	fmt.Println("tasks per node:", per)
	held, err := ray.Put(ctx, make([]byte, size))
	if err != nil {
		return fmt.Errorf("put: %w", err)
	}
	defer held.Release()
	if err := writeFile(filepath.Join(dir, "ready"), "1"); err != nil {
		return err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "release")); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond): // polling interval
		}
	}
}
