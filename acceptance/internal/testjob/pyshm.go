package main

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/sdk/ray"
)

// Jobs of TestPythonTransportMovesTensors: tensors travel between actors
// through "pyshm", the shared-memory transport written in Python with the
// Python plugin SDK (sdk/python).

// pyMake is Make with its result travelling by pyshm; the producer and
// consumer actors are those of the shm jobs (tensors.go), declared with
// the pyshm transport.
var pyMake = Make.TensorTransport("pyshm")

// runTensorsPyshm moves a tensor from one actor to another through the
// Python transport and checks its bytes, that it was not copied (the
// consumer reads the producer's segment) and that the driver reads it too.
func runTensorsPyshm(ctx context.Context) error {
	const n = 1 << 16
	p := ProducerActor.Options(ray.Transports("pyshm")).Remote(ctx)
	c := ConsumerActor.Options(ray.Transports("pyshm")).Remote(ctx)
	for round := 1; round <= 3; round++ {
		ref, _, err := actorToActor(ctx, pyMake, p, c, n)
		ref.Release()
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
	}
	fmt.Println("pyshm actor-to-actor: ok, zero copy, 3 rounds")
	return nil
}
