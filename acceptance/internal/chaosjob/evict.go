package main

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"

	"github.com/goray-dev/goray/sdk/ray"
)

// runEvict: a producer's 16 MiB result, made on the "kill" node, is read
// on the head (a copy in the head's store); the test kills the node
// (DIR/ready, then DIR/go once the GCS declared it dead); the driver reads
// the result again (the copy on the head is now the only one), fills the
// head's store with Put objects, releases them, and reads the result a
// third time.
//
// The Put objects (128 MiB through a 64 MiB store) are held until all are
// made: some creates cannot fit at once, which evicts the head's pulled
// copies first. The copy must have become a primary copy (spilled under the
// pressure, never evicted), or be rebuilt from lineage: it must not read
// as freed while referenced.
func runEvict(ctx context.Context, dir string) error {
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return err
	}
	victim := ""
	for _, n := range nodes {
		if n.Alive && n.Resources["kill"] > 0 {
			victim = n.ID
		}
	}
	if victim == "" {
		return fmt.Errorf("no live node with resource kill")
	}
	// A soft affinity: a re-run (lineage) may land on the head.
	want := blob(7, 16*mib)
	ref := Produce.Options(ray.NodeAffinity(victim, true), ray.MaxRetries(5)).Remote(ctx, ray.V(uint64(7)), ray.V(16*mib))
	x := object{name: "the kill node's result", ref: ref, want: want}
	if err := checkSumOn(ctx, x, "h"); err != nil {
		return fmt.Errorf("reading %s on the head: %w", x.name, err)
	}
	if err := writeFile(filepath.Join(dir, "ready"), ""); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return err
	}
	if err := x.check(ctx); err != nil {
		return fmt.Errorf("reading %s once its node died: %w", x.name, err)
	}
	fmt.Println("read once its node died: ok")
	var puts []ray.Ref[[]byte]
	for i := range 8 {
		p, err := ray.Put(ctx, blob(uint64(200+i), 16*mib))
		if err != nil {
			return fmt.Errorf("put %d: %w", i, err)
		}
		puts = append(puts, p)
	}
	for _, p := range puts {
		p.Release()
	}
	if err := x.check(ctx); err != nil {
		return fmt.Errorf("reading %s after the head's store filled up: %w", x.name, err)
	}
	fmt.Println("read after the store filled up: ok")
	runtime.KeepAlive(x)
	return nil
}
