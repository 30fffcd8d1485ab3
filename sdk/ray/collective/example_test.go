package collective_test

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/ray/collective"
	"github.com/goray-dev/goray/sdk/transport"
)

// Trainer is a data-parallel rank.
type Trainer struct{}

// NewTrainer is Trainer's constructor.
func NewTrainer(ctx context.Context) (*Trainer, error) { return &Trainer{}, nil }

// Step computes a gradient and averages it over the group's members.
func (t *Trainer) Step(ctx context.Context, n int) (float32, error) {
	grad, err := transport.NewTensor(transport.Float32, int64(n)) // shared memory
	if err != nil {
		return 0, err
	}
	defer grad.Free()
	// ... compute the local gradient into grad.Bytes(ctx) ...
	if err := collective.AllReduce(ctx, "grads", grad, collective.Sum); err != nil {
		return 0, err // errors.Is(err, collective.ErrRankFailed) when another rank failed
	}
	world, err := collective.WorldSize(ctx, "grads")
	if err != nil {
		return 0, err
	}
	// ... divide by world and apply ...
	return float32(world), nil
}

var (
	TrainerActor = ray.Actor0(NewTrainer)
	TrainerStep  = ray.Method1((*Trainer).Step)
)

// Four actors all-reduce their gradients through the "collective"
// transport plugin, which every node of the cluster runs.
func Example() {
	ctx := context.Background()
	trainers := make([]ray.ActorHandle[Trainer], 4)
	for i := range trainers {
		trainers[i] = TrainerActor.Options(ray.Transports("collective"), ray.Spread()).Remote(ctx)
	}
	if _, err := collective.CreateGroup(ctx, "grads", "collective", collective.Members(trainers...)); err != nil {
		fmt.Println(err)
		return
	}
	defer collective.DestroyGroup(ctx, "grads")
	// Every member must make the call: collectives need all ranks.
	refs := make([]ray.Ref[float32], len(trainers))
	for i, t := range trainers {
		refs[i] = TrainerStep.On(t).Remote(ctx, ray.V(1<<20))
	}
	if _, err := ray.GetAll(ctx, refs); err != nil {
		fmt.Println(err)
	}
}
