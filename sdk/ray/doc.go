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
// Every call takes a context. A call whose context is cancelled before the
// call is sent to a worker never runs (its result matches
// ErrTaskCancelled); once sent, only Cancel stops it. A task's own context
// ends when the task returns, which is no cancellation: what the task
// submitted goes on, so a task may return the refs of calls it submitted
// (return F.Remote(ctx, ...)) or keep them in its result or in a Put
// object, and the caller reads them after the task has returned. A context
// the task's code cancels itself (defer cancel()) does cancel the calls it
// has not sent, as does a Cancel of the task.
//
// A task that submits itself cannot be initialised from its function
// (var Fib = ray.Task1(fib), with fib calling Fib, is an initialization
// cycle); declare it and register it in init, which runs in the driver and
// in every worker:
//
//	var Fib *ray.TaskFunc1[int, int]
//
//	func init() { Fib = ray.Task1(fib) }
//
//	func fib(ctx context.Context, n int) (int, error) {
//		if n < 2 {
//			return n, nil
//		}
//		a, b := Fib.Remote(ctx, ray.V(n-1)), Fib.Remote(ctx, ray.V(n-2))
//		x, err := a.Get(ctx)
//		if err != nil {
//			return 0, err
//		}
//		y, err := b.Get(ctx)
//		return x + y, err
//	}
//
// The driver and its workers are the same binary: a raylet re-executes the
// driver's executable in worker mode, where Init serves calls instead of
// returning. Code before Init therefore also runs in workers (see
// IsWorker).
package ray

//go:generate go run ./internal/gen
