package ray_test

import (
	"context"
	"log"

	"github.com/goray-dev/goray/sdk/ray"
)

// Scale up ahead of a burst of work, and let the cluster scale down after.
func ExampleRequestResources() {
	ctx := context.Background()
	// Room for 16 one-CPU tasks and two {CPU: 8, GPU: 4} workers at once.
	if err := ray.RequestResources(ctx, ray.WithCPUs(16),
		ray.WithBundles(ray.Bundle{"CPU": 8, "GPU": 4}, ray.Bundle{"CPU": 8, "GPU": 4})); err != nil {
		log.Fatal(err)
	}
	// ... submit the work ...
	if err := ray.RequestResources(ctx); err != nil { // clear the request
		log.Fatal(err)
	}
}
