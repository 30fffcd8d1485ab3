// Command generators shows multiple returns (Ray's num_returns) and
// streaming generators (Ray's ObjectRefGenerator and
// _generator_backpressure_num_objects).
//
// A task returns two values, each its own object: the first is released
// and the second alone is another task's argument. A generator streams 20
// chunks, which the driver ranges over as they come; with Backpressure(4)
// the generator waits once 4 chunks are not taken. A generator that fails
// at its fourth line delivers the three values before the error, then the
// error, then io.EOF. An endless generator stops when the driver closes
// its stream. It runs on an embedded single-node cluster with
//
//	go run ./examples/generators
//
// or against a running cluster when GORAY_ADDRESS is set. It exits non-zero
// if any result is wrong.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// partition splits xs into its even and its odd numbers: two results.
func partition(ctx context.Context, xs []int) ([]int, []int, error) {
	var evens, odds []int
	for _, x := range xs {
		if x%2 == 0 {
			evens = append(evens, x)
		} else {
			odds = append(odds, x)
		}
	}
	return evens, odds, nil
}

// sum adds xs up.
func sum(ctx context.Context, xs []int) (int, error) {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t, nil
}

// chunks yields n chunks of size bytes, chunk i filled with byte i. yield
// waits while the caller has its Backpressure bound of chunks not taken,
// and fails once the caller stopped: the generator then returns its error.
func chunks(ctx context.Context, n, size int, yield func([]byte) error) error {
	for i := range n {
		if err := yield(bytes.Repeat([]byte{byte(i)}, size)); err != nil {
			return err
		}
	}
	return nil
}

// parse yields the number on each line; a line that is not one ends the
// stream with an error, which the caller gets after the numbers before it.
func parse(ctx context.Context, lines []string, yield func(int) error) error {
	for i, l := range lines {
		n, err := strconv.Atoi(l)
		if err != nil {
			return fmt.Errorf("line %d: %q is not a number", i+1, l)
		}
		if err := yield(n); err != nil {
			return err
		}
	}
	return nil
}

// Report is what the endless generator tells its Monitor when it stops.
type Report struct {
	Made int
	Why  string
}

// Monitor holds the report of a generator that stopped.
type Monitor struct{ report *Report }

// NewMonitor starts a monitor with no report.
func NewMonitor(ctx context.Context) (*Monitor, error) { return &Monitor{}, nil }

// Stopped records r.
func (m *Monitor) Stopped(ctx context.Context, r Report) (bool, error) {
	m.report = &r
	return true, nil
}

// Last returns the report, if any.
func (m *Monitor) Last(ctx context.Context) (Report, bool, error) {
	if m.report == nil {
		return Report{}, false, nil
	}
	return *m.report, true, nil
}

// ticks yields 0, 1, 2, ... until its caller stops it, then tells m how
// many it made and what yield returned.
func ticks(ctx context.Context, m ray.ActorHandle[Monitor], yield func(int) error) error {
	for i := 0; ; i++ {
		if err := yield(i); err != nil {
			// ctx is cancelled: the report goes with a context of its own.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_, _ = Stopped.On(m).Remote(rctx, ray.V(Report{Made: i, Why: err.Error()})).Get(rctx)
			cancel()
			return err
		}
	}
}

var (
	// Partition returns two values, each its own object (Ray's
	// num_returns=2).
	Partition = ray.Task1R2(partition)
	Sum       = ray.Task1(sum)
	// Chunks, Parse and Ticks are streaming generators.
	Chunks    = ray.Generator2(chunks)
	Parse     = ray.Generator1(parse)
	Ticks     = ray.Generator1(ticks)
	MonitorA  = ray.Actor0(NewMonitor)
	Stopped   = ray.Method1((*Monitor).Stopped)
	LastState = ray.Method0R2((*Monitor).Last)
)

// bound is the chunk stream's Backpressure.
const bound = 4

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := ray.MustInit(ctx) // in a worker process this serves calls and never returns
	err := run(ctx)
	_ = rt.Shutdown(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "generators:", err)
		os.Exit(1)
	}
	fmt.Println("OK")
}

func run(ctx context.Context) error {
	for _, step := range []func(context.Context) error{multipleReturns, streaming, errorMidStream, closeEarly} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// multipleReturns: each result is its own object; the second goes on
// alone, after the first was released.
func multipleReturns(ctx context.Context) error {
	evens, odds := Partition.Remote(ctx, ray.V([]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}))
	ev, err := evens.Get(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("partition: evens %v; the results are 2 objects: %v\n", ev, evens.ID() != odds.ID())
	evens.Release()
	total, err := Sum.Remote(ctx, odds).Get(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("sum of the odds (the second result alone as an argument): %d\n", total)
	if total != 25 {
		return fmt.Errorf("sum of the odds = %d, want 25", total)
	}
	return nil
}

// waitBuffered waits until s holds n values not taken.
func waitBuffered[T any](ctx context.Context, s *ray.Stream[T], n int) error {
	for s.Buffered() < n {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for %d buffered values (have %d): %w", n, s.Buffered(), err)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// streaming: 20 chunks as they come; the generator never gets more than
// bound chunks ahead.
func streaming(ctx context.Context) error {
	const n, size = 20, 1024
	s := Chunks.Options(ray.Backpressure(bound)).Remote(ctx, ray.V(n), ray.V(size))
	defer s.Close()
	// Nothing taken yet: the generator made bound chunks and waits.
	if err := waitBuffered(ctx, s, bound); err != nil {
		return err
	}
	fmt.Printf("before the first was taken: %d chunks buffered, the generator waits (Backpressure(%d))\n", s.Buffered(), bound)
	got, total, most := 0, 0, s.Buffered()
	for chunk, err := range s.Values(ctx) {
		if err != nil {
			return err
		}
		most = max(most, s.Buffered())
		if len(chunk) != size || chunk[0] != byte(got) || chunk[size-1] != byte(got) {
			return fmt.Errorf("chunk %d: %d bytes of %d", got, len(chunk), chunk[0])
		}
		got++
		total += len(chunk)
		if got%5 == 0 {
			fmt.Printf("received %d/%d chunks, %d bytes\n", got, n, total)
		}
	}
	fmt.Printf("most chunks buffered at once: %d (never above the bound)\n", most)
	if got != n || most > bound {
		return fmt.Errorf("%d chunks received, at most %d buffered; want %d, at most %d", got, most, n, bound)
	}
	return nil
}

// errorMidStream: the numbers before the bad line, then its error, then
// io.EOF.
func errorMidStream(ctx context.Context) error {
	s := Parse.Remote(ctx, ray.V([]string{"10", "20", "30", "x", "50"}))
	defer s.Close()
	var got []int
	var streamErr error
	for v, err := range s.Values(ctx) {
		if err != nil {
			streamErr = err
			break
		}
		got = append(got, v)
	}
	var te *ray.TaskError
	if !errors.As(streamErr, &te) {
		return fmt.Errorf("after %v: %v, want a *ray.TaskError", got, streamErr)
	}
	fmt.Printf("parse: %v, then the error: %s\n", got, te.Message)
	_, err := s.Next(ctx)
	fmt.Printf("after the error: %v\n", err)
	if !slices.Equal(got, []int{10, 20, 30}) || !errors.Is(err, io.EOF) {
		return fmt.Errorf("parse gave %v then %v, want [10 20 30] then EOF", got, err)
	}
	return nil
}

// closeEarly: Close stops an endless generator.
func closeEarly(ctx context.Context) error {
	m, err := MonitorA.New(ctx)
	if err != nil {
		return err
	}
	defer m.Kill(ctx)
	s := Ticks.Options(ray.Backpressure(bound)).Remote(ctx, ray.V(m))
	for i := range 3 {
		r, err := s.Next(ctx)
		if err != nil {
			return err
		}
		if v, err := r.Get(ctx); err != nil || v != i {
			return fmt.Errorf("tick %d = %d, %v", i, v, err)
		}
		r.Release()
	}
	// 3 taken and bound more made: the generator waits in yield.
	if err := waitBuffered(ctx, s, bound); err != nil {
		return err
	}
	s.Close()
	var rep Report
	for ok := false; !ok; {
		if rep, ok, err = lastReport(ctx, m); err != nil {
			return err
		}
		if !ok {
			time.Sleep(time.Millisecond)
		}
	}
	fmt.Printf("ticks: took 3 with %d more waiting, then Close: the generator stopped after %d ticks, its yield returned %q\n", bound, rep.Made, rep.Why)
	if rep.Made != 3+bound {
		return fmt.Errorf("the generator made %d ticks, want %d", rep.Made, 3+bound)
	}
	return nil
}

// lastReport asks m for its report.
func lastReport(ctx context.Context, m ray.ActorHandle[Monitor]) (Report, bool, error) {
	r, ok := LastState.On(m).Remote(ctx)
	rep, err1 := r.Get(ctx)
	got, err2 := ok.Get(ctx)
	return rep, got, errors.Join(err1, err2)
}
