package ray

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"runtime"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/goray-dev/goray/sdk/ray/internal/core"
)

// Stream is the caller's side of a streaming generator call (Ray's
// ObjectRefGenerator): the references to the values the generator yields,
// in order, each its own object, available as soon as it is made. Take them
// with Next or range over All; a reference taken is the caller's like any
// other (pass it to tasks, Get it, Release it).
//
// The generator waits while the caller has the call's Backpressure bound
// of values it has not taken. An error the generator returns (or a panic,
// or its worker failing for good) comes after the values yielded before
// it. A generator whose worker dies is retried within MaxRetries: it runs
// again from the start, and the values the caller received already are
// not delivered twice. Close, or the end of the context given to Remote,
// stops a generator still running.
type Stream[T any] struct {
	s *core.Stream
}

func newStream[T any](s *core.Stream) *Stream[T] {
	st := &Stream[T]{s: s}
	// A stream dropped without Close stops its producer when collected.
	runtime.AddCleanup(st, func(s *core.Stream) { s.Close() }, s)
	return st
}

// readyChan makes a Stream a Waitable: ready once Next would not wait.
func (s *Stream[T]) readyChan(*core.CoreWorker, bool) (<-chan struct{}, string, error) {
	if s == nil || s.s == nil {
		return nil, "", errors.New("a nil Stream")
	}
	return s.s.Ready(), "stream " + s.ID(), nil
}

// ErrStreamNotPassable is the error of encoding a Stream: it belongs to
// the process that called Remote and cannot be passed to a task or actor,
// nor stored in an object. Pass the references of its items instead.
var ErrStreamNotPassable = errors.New("goray: a *ray.Stream cannot be passed to a task or actor or stored in an object; pass the refs of its items")

// EncodeMsgpack implements msgpack.CustomEncoder: it refuses, with
// ErrStreamNotPassable.
func (s *Stream[T]) EncodeMsgpack(enc *msgpack.Encoder) error { return ErrStreamNotPassable }

// DecodeMsgpack implements msgpack.CustomDecoder: it refuses, with
// ErrStreamNotPassable.
func (s *Stream[T]) DecodeMsgpack(dec *msgpack.Decoder) error { return ErrStreamNotPassable }

// ErrStreamClosed is returned by Next after Close.
var ErrStreamClosed = core.ErrStreamClosed

// ID returns the generator call's task id.
func (s *Stream[T]) ID() string { return s.s.ID().String() }

// Next returns a reference to the next value, waiting for it (bounded by
// ctx). After the last value it returns the error that ended the stream,
// if any (once: typed as Get's errors, for example a *TaskError), then
// io.EOF.
func (s *Stream[T]) Next(ctx context.Context) (Ref[T], error) {
	h, err := s.s.Next(ctx)
	if err != nil {
		return Ref[T]{}, err
	}
	return Ref[T]{h}, nil
}

// All ranges over the references to the stream's values in order. It ends
// after the last one, or with a non-nil error: the generator's (after the
// values made before it) or ctx's. Breaking out of the loop leaves the
// stream open; Close stops the generator.
func (s *Stream[T]) All(ctx context.Context) iter.Seq2[Ref[T], error] {
	return func(yield func(Ref[T], error) bool) {
		for {
			r, err := s.Next(ctx)
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(r, err) || err != nil {
				return
			}
		}
	}
}

// Values ranges over the stream's values, getting each (and releasing its
// reference) as it comes; it ends like All.
func (s *Stream[T]) Values(ctx context.Context) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for r, err := range s.All(ctx) {
			var v T
			if err == nil {
				v, err = r.Get(ctx)
				r.Release()
			}
			if !yield(v, err) || err != nil {
				return
			}
		}
	}
}

// Buffered reports how many values have reached this process that were
// not taken yet (at most the call's Backpressure bound).
func (s *Stream[T]) Buffered() int { return s.s.Buffered() }

// Close stops the generator if it is still running (as Cancel does), drops
// the values not taken yet and ends the stream. References taken stay
// valid. Close is safe to call more than once.
func (s *Stream[T]) Close() { s.s.Close() }

// Backpressure bounds how many values a generator may have yielded that
// its caller has not taken (Ray's _generator_backpressure_num_objects):
// the generator's yield waits until the caller takes one. The default is
// core.DefaultBackpressure (64); -1 means without bound.
func Backpressure(n int) Option { return func(c *callOptions) { c.backpressure = n } }

// CallBackpressure is Backpressure for an actor generator method: given
// to GeneratorMethodN it applies to every call, given to Options to the
// calls made through the copy it returns.
func CallBackpressure(n int) MethodOption { return func(m *methodBase) { m.backpressure = n } }

// checkBackpressure checks a Backpressure bound.
func checkBackpressure(name string, n int) error {
	if n == 0 || n < -1 {
		return fmt.Errorf("goray: %s: Backpressure(%d): want a positive bound, or -1 for none", name, n)
	}
	return nil
}

// registerGenerator registers a generator task; registerGeneratorMethod a
// generator method.
func registerGenerator(fn any, n int, inv invoker) string {
	name := registerTask(fn, n, inv)
	core.Lookup(name).Streaming = true
	return name
}

func registerGeneratorMethod[T any](m any, n int, inv func(ctx context.Context, self *T, name string, args []core.ArgValue) (any, error)) string {
	name := registerMethod[T](m, n, inv)
	core.Lookup(name).Streaming = true
	return name
}

// yielder returns the yield function a generator running with ctx gets.
func yielder[R any](ctx context.Context) func(R) error {
	return func(v R) error { return core.Yield(ctx, v) }
}

// failedStream returns a stream that ends with err.
func failedStream[R any](cw *core.CoreWorker, err error) *Stream[R] {
	return newStream[R](cw.FailedStream(err))
}

func startStream[R any](ctx context.Context, b *taskBase, args ...core.ArgInput) *Stream[R] {
	cw, err := current()
	if err != nil {
		panic(err)
	}
	opts, err := b.taskOptions()
	if err == nil && b.opts.backpressure != 0 {
		err = checkBackpressure(b.name, b.opts.backpressure)
	}
	if err != nil {
		return failedStream[R](cw, err)
	}
	opts.Backpressure = b.opts.backpressure
	return newStream[R](cw.SubmitStream(ctx, b.name, args, opts))
}

func callStream[R any](ctx context.Context, actor core.ActorRef, m methodBase, args ...core.ArgInput) *Stream[R] {
	cw, err := current()
	if err != nil {
		panic(err)
	}
	if actor, err = m.withRetries(actor); err == nil && m.backpressure != 0 {
		err = checkBackpressure(m.name, m.backpressure)
	}
	if err != nil {
		return failedStream[R](cw, err)
	}
	return newStream[R](cw.SubmitActorStream(ctx, actor, m.name, args, core.TaskOptions{ConcurrencyGroup: m.group, Backpressure: m.backpressure}))
}

// submitTaskReturns submits a task returning n values; callMethodReturns
// calls a method returning n values. Each gives a handle per value.
func submitTaskReturns(ctx context.Context, b *taskBase, n int, args ...core.ArgInput) []*core.Handle {
	cw, err := current()
	if err != nil {
		panic(err)
	}
	opts, err := b.taskOptions()
	if err != nil {
		return failedHandles(cw, err, n)
	}
	opts.NumReturns = n
	return cw.SubmitTaskReturns(ctx, b.name, args, opts)
}

func callMethodReturns(ctx context.Context, actor core.ActorRef, m methodBase, n int, args ...core.ArgInput) []*core.Handle {
	cw, err := current()
	if err != nil {
		panic(err)
	}
	if actor, err = m.withRetries(actor); err != nil {
		return failedHandles(cw, err, n)
	}
	return cw.SubmitActorTaskReturns(ctx, actor, m.name, args, core.TaskOptions{ConcurrencyGroup: m.group, NumReturns: n, RetryErrors: m.retryErrors})
}

func failedHandles(cw *core.CoreWorker, err error, n int) []*core.Handle {
	hs := make([]*core.Handle, n)
	for i := range hs {
		hs[i] = cw.FailedHandle(err)
	}
	return hs
}
