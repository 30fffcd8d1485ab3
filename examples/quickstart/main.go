// Command quickstart shows goray's core API: tasks, references as
// arguments, Put/Get/Wait, a large []byte read in place, an actor with state, and an error surfaced from a
// remote panic. It runs on an embedded single-node cluster with
//
//	go run ./examples/quickstart
//
// or against a running cluster when GORAY_ADDRESS is set. It exits non-zero
// if any result is wrong.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// add is a plain Go function; Add makes it a remote task.
func add(ctx context.Context, a, b int) (int, error) { return a + b, nil }

// square is another task; its argument below is the result of add, passed
// by reference.
func square(ctx context.Context, x int) (int, error) { return x * x, nil }

// sumAll adds up a slice that was stored once with Put.
func sumAll(ctx context.Context, xs []int) (int, error) {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s, nil
}

// checksum reads a large []byte without copying it: a *ray.Buffer
// parameter points into the node's shared-memory object store for the
// call (do not modify it or keep it after returning).
func checksum(ctx context.Context, b *ray.Buffer) (uint64, error) {
	var s uint64
	for _, c := range b.Bytes() {
		s += uint64(c)
	}
	return s, nil
}

// divide panics on a zero divisor; the panic comes back as an error.
func divide(ctx context.Context, a, b int) (int, error) { return a / b, nil }

// Counter is an actor: a struct whose state lives in one worker process.
type Counter struct{ n int }

// NewCounter is the actor's constructor.
func NewCounter(ctx context.Context, start int) (*Counter, error) { return &Counter{n: start}, nil }

// Inc adds by and returns the new count.
func (c *Counter) Inc(ctx context.Context, by int) (int, error) { c.n += by; return c.n, nil }

// Value returns the count.
func (c *Counter) Value(ctx context.Context) (int, error) { return c.n, nil }

var (
	Add          = ray.Task2(add)
	Square       = ray.Task1(square)
	SumAll       = ray.Task1(sumAll)
	Checksum     = ray.Task1(checksum)
	Divide       = ray.Task2(divide)
	CounterActor = ray.Actor1(NewCounter)
	Inc          = ray.Method1((*Counter).Inc)
	Value        = ray.Method0((*Counter).Value)
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("all checks passed")
}

func check(what string, got, want any) error {
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("%s: got %v, want %v", what, got, want)
	}
	fmt.Printf("ok  %-40s = %v\n", what, got)
	return nil
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := ray.Init(ctx)
	if err != nil {
		return err
	}
	defer rt.Shutdown(context.Background())
	where := "an embedded node"
	if a := os.Getenv(ray.EnvAddress); a != "" {
		where = "the cluster at " + a
	}
	fmt.Printf("goray is running on %s (node %s)\n", where, rt.NodeID()[:8])

	// 1. A task: Remote returns a typed reference at once; Get waits.
	sum, err := Add.Remote(ctx, ray.V(1), ray.V(2)).Get(ctx)
	if err != nil {
		return err
	}
	if err := check("Add(1, 2)", sum, 3); err != nil {
		return err
	}

	// 2. References as arguments: square's input is add's future result.
	ref := Add.Remote(ctx, ray.V(3), ray.V(4))
	sq, err := Square.Remote(ctx, ref).Get(ctx)
	if err != nil {
		return err
	}
	if err := check("Square(Add(3, 4))", sq, 49); err != nil {
		return err
	}

	// 3. Put a value once and pass the reference to many tasks.
	xs := make([]int, 1000)
	for i := range xs {
		xs[i] = i
	}
	data, err := ray.Put(ctx, xs)
	if err != nil {
		return err
	}
	var parts []ray.Ref[int]
	for i := 0; i < 4; i++ {
		parts = append(parts, SumAll.Remote(ctx, data))
	}
	// 4. Wait for the first two, then get them all.
	ready, _, err := ray.Wait(ctx, parts, 2, 30*time.Second)
	if err != nil {
		return err
	}
	if err := check("Wait(4 refs, 2) ready", len(ready) >= 2, true); err != nil {
		return err
	}
	sums, err := ray.GetAll(ctx, parts)
	if err != nil {
		return err
	}
	if err := check("SumAll(Put(0..999)) x4", sums, []int{499500, 499500, 499500, 499500}); err != nil {
		return err
	}

	// A large []byte goes to the object store once; a *ray.Buffer
	// parameter reads it there in place (ray.BufferRef passes the ref).
	blob := make([]byte, 8<<20)
	var want uint64
	for i := range blob {
		blob[i] = byte(i)
		want += uint64(blob[i])
	}
	big, err := ray.Put(ctx, blob)
	if err != nil {
		return err
	}
	defer big.Release()
	cs, err := Checksum.Remote(ctx, ray.BufferRef(big)).Get(ctx)
	if err != nil {
		return err
	}
	if err := check("Checksum(BufferRef(Put(8 MiB)))", cs, want); err != nil {
		return err
	}

	// 5. An actor keeps state between calls; calls from one caller run in order.
	c := CounterActor.Remote(ctx, ray.V(10))
	var incs []ray.Ref[int]
	for i := 0; i < 5; i++ {
		incs = append(incs, Inc.On(c).Remote(ctx, ray.V(1)))
	}
	got, err := ray.GetAll(ctx, incs)
	if err != nil {
		return err
	}
	if err := check("Counter(10).Inc(1) x5", got, []int{11, 12, 13, 14, 15}); err != nil {
		return err
	}
	v, err := Value.On(c).Remote(ctx).Get(ctx)
	if err != nil {
		return err
	}
	if err := check("Counter.Value()", v, 15); err != nil {
		return err
	}

	// 6. A panic in a task comes back as a typed error with the remote stack.
	_, err = Divide.Remote(ctx, ray.V(1), ray.V(0)).Get(ctx)
	var te *ray.TaskError
	if !errors.As(err, &te) || !errors.Is(err, ray.ErrPanic) {
		return fmt.Errorf("Divide(1, 0): want a panic TaskError, got %v", err)
	}
	if err := check("Divide(1, 0) panic message", strings.Contains(te.Message, "divide by zero"), true); err != nil {
		return err
	}
	return nil
}
