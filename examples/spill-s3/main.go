// Command spill-s3 puts more data than the object store holds and reads
// every value back: the node spills objects to S3 (or any storage the HCL
// file names) while the job runs and restores them on Get.
//
// From the repository root, with the plugin binaries built and an S3
// endpoint named the AWS SDKs' way; for a local MinIO (README.md's
// Configuration section shows how to start the pinned one):
//
//	make plugins
//	export AWS_ENDPOINT_URL=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=goray AWS_SECRET_ACCESS_KEY=goray-secret
//	go run ./examples/spill-s3 --config examples/spill-s3/spill-s3.hcl
//
// The config (spill-s3.hcl) sets a 256 MiB object store and spills to the
// bucket goray-spill, which it creates; the job puts 3× that by default.
// Without --config the embedded node spills to local disk. It exits
// non-zero when a value does not read back.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

var (
	configPath = flag.String("config", "", "node config (HCL) of the embedded node; empty: defaults with a 256 MiB store spilling to local disk")
	objects    = flag.Int("objects", 24, "objects to put")
	sizeMiB    = flag.Int("size-mib", 32, "size of each object in MiB")
)

// block returns object i's bytes: a pattern derived from i.
func block(i, size int) []byte {
	b := make([]byte, size)
	for off := 0; off+8 <= size; off += 8 {
		binary.LittleEndian.PutUint64(b[off:], uint64(i)<<40|uint64(off))
	}
	return b
}

func sum(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// checksum reads an object in a task (on whatever node holds it), so
// restores happen in workers too.
func checksum(ctx context.Context, b []byte) (uint64, error) { return sum(b), nil }

var Checksum = ray.Task1(checksum)

func main() {
	flag.Parse()
	ctx := context.Background()
	opts := []ray.InitOption{}
	switch {
	case os.Getenv(ray.EnvAddress) != "":
		// Attach to a running cluster: its nodes' configs apply.
	case *configPath != "":
		opts = append(opts, ray.ConfigFile(*configPath))
	default:
		opts = append(opts, ray.ObjectStoreMemory(256<<20))
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
	size := *sizeMiB << 20
	usage, err := ray.ObjectStoreUsage(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("object store: %d MiB; putting %d objects of %d MiB (%d MiB)\n", usage.Capacity>>20, *objects, *sizeMiB, *objects*(*sizeMiB))
	start := time.Now()
	refs := make([]ray.Ref[[]byte], *objects)
	want := make([]uint64, *objects)
	for i := range refs {
		b := block(i, size)
		want[i] = sum(b)
		if refs[i], err = ray.Put(ctx, b); err != nil {
			return fmt.Errorf("put %d: %w", i, err)
		}
	}
	fmt.Printf("put %d objects in %s\n", *objects, time.Since(start).Round(time.Millisecond))
	// Read every value back, in the driver and in tasks.
	for i, r := range refs {
		got, err := r.Get(ctx)
		if err != nil {
			return fmt.Errorf("get %d: %w", i, err)
		}
		if s := sum(got); s != want[i] || len(got) != size {
			return fmt.Errorf("object %d read back wrong (%d bytes)", i, len(got))
		}
	}
	sums := make([]ray.Ref[uint64], len(refs))
	for i, r := range refs {
		sums[i] = Checksum.Remote(ctx, r)
	}
	got, err := ray.GetAll(ctx, sums)
	if err != nil {
		return fmt.Errorf("checksums in tasks: %w", err)
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("task read object %d wrong", i)
		}
	}
	fmt.Printf("every value read back correctly (driver and tasks) in %s\n", time.Since(start).Round(time.Millisecond))
	return nil
}
