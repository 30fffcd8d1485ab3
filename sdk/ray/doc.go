// Package ray is goray's application API: remote tasks, actors and objects
// for Go, in the model of Ray.
//
// Register functions as tasks and structs as actors at package level, call
// Init in main, and call them remotely:
//
//	func add(ctx context.Context, a, b int) (int, error) { return a + b, nil }
//
//	type Counter struct{ n int }
//
//	func NewCounter(ctx context.Context, start int) (*Counter, error) { return &Counter{n: start}, nil }
//	func (c *Counter) Inc(ctx context.Context, by int) (int, error)    { c.n += by; return c.n, nil }
//
//	var (
//		Add        = ray.Task2(add)
//		NewCounterActor = ray.Actor1(NewCounter)
//		Inc        = ray.Method1((*Counter).Inc)
//	)
//
//	func main() {
//		ctx := context.Background()
//		rt := ray.MustInit(ctx) // in a worker process this serves calls and never returns
//		defer rt.Shutdown(ctx)
//
//		sum, err := Add.Remote(ctx, ray.V(1), ray.V(2)).Get(ctx) // sum is an int
//		c := NewCounterActor.Options(ray.Name("c1")).Remote(ctx, ray.V(10))
//		v, err := Inc.On(c).Remote(ctx, ray.V(5)).Get(ctx)
//	}
//
// Arguments are typed: ray.V(x) passes a value, and a Ref[T] passes the
// result of another call without waiting for it (it is resolved before the
// call runs). Values travel as MessagePack; []byte values are stored raw and
// can be read without a copy with GetBuffer.
//
// The driver and its workers are the same binary: a raylet re-executes the
// driver's executable in worker mode, where Init serves calls instead of
// returning. Code before Init therefore also runs in workers (see
// IsWorker).
package ray

//go:generate go run ./internal/gen
