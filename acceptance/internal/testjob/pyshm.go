package main

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/transport"
)

// Jobs of TestPythonTransportMovesTensors: tensors travel between actors
// through "pyshm", the shared-memory transport written in Python with the
// Python plugin SDK (sdk/python).

// PyProducer makes tensors whose results travel by the pyshm transport.
type PyProducer struct{ last string }

// NewPyProducer is the PyProducer constructor.
func NewPyProducer(ctx context.Context) (*PyProducer, error) { return &PyProducer{}, nil }

// Make returns a float32 tensor [0, 1, ..., n-1] in shared memory.
func (p *PyProducer) Make(ctx context.Context, n int) ([]transport.Tensor, error) {
	t, err := filledTensor(ctx, n)
	if err != nil {
		return nil, err
	}
	p.last = t.Buffer.Segment
	return []transport.Tensor{t}, nil
}

// Last returns the segment of the last tensor made.
func (p *PyProducer) Last(ctx context.Context) (string, error) { return p.last, nil }

// PyConsumer receives tensors as arguments.
type PyConsumer struct{}

// NewPyConsumer is the PyConsumer constructor.
func NewPyConsumer(ctx context.Context) (*PyConsumer, error) { return &PyConsumer{}, nil }

// Sum adds up float32 tensors and says which segment the first came in.
func (c *PyConsumer) Sum(ctx context.Context, ts []transport.Tensor) (SumResult, error) {
	s, err := sumTensors(ctx, ts)
	if err != nil {
		return SumResult{}, err
	}
	return SumResult{Sum: s, Segment: ts[0].Buffer.Segment}, nil
}

var (
	PyProducerActor = ray.Actor0(NewPyProducer)
	PyConsumerActor = ray.Actor0(NewPyConsumer)
	PyMake          = ray.Method1((*PyProducer).Make).TensorTransport("pyshm")
	PyLastSegment   = ray.Method0((*PyProducer).Last)
	PySum           = ray.Method1((*PyConsumer).Sum)
)

// runTensorsPyshm moves a tensor from one actor to another through the
// Python transport and checks its bytes, that it was not copied (the
// consumer reads the producer's segment) and that the driver reads it too.
func runTensorsPyshm(ctx context.Context) error {
	const n = 1 << 16
	want := float64(n) * float64(n-1) / 2
	p := PyProducerActor.Options(ray.Transports("pyshm")).Remote(ctx)
	c := PyConsumerActor.Options(ray.Transports("pyshm")).Remote(ctx)
	for round := 1; round <= 3; round++ {
		ref := PyMake.On(p).Remote(ctx, ray.V(n))
		got, err := PySum.On(c).Remote(ctx, ref).Get(ctx)
		if err != nil {
			return fmt.Errorf("actor-to-actor transfer %d: %w", round, err)
		}
		src, err := PyLastSegment.On(p).Remote(ctx).Get(ctx)
		if err != nil {
			return err
		}
		if got.Sum != want {
			return fmt.Errorf("consumer summed %v, want %v", got.Sum, want)
		}
		if got.Segment != src {
			return fmt.Errorf("the consumer's tensor is in segment %q, the producer's in %q: it was copied", got.Segment, src)
		}
		ts, err := ref.Get(ctx)
		if err != nil {
			return fmt.Errorf("driver get: %w", err)
		}
		if s, err := sumTensors(ctx, ts); err != nil || s != want {
			return fmt.Errorf("driver sum %v, %v; want %v", s, err, want)
		}
	}
	fmt.Println("pyshm actor-to-actor: ok, zero copy, 3 rounds")
	return nil
}
