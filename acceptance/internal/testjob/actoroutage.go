package main

// The job of TestActorCreationDuringGCSOutage (acceptance/actoroutage_test.go):
//
//	testjob actor-outage DIR   DIR/ready once connected; waits for
//	                           DIR/frozen (the test has stopped the head's
//	                           GCS with SIGSTOP); creates an unnamed actor
//	                           and writes DIR/created as soon as Remote
//	                           returned; submits a task given the handle,
//	                           which calls the actor through it, and a call
//	                           on the handle itself, and writes
//	                           DIR/submitted once both returned; gets both
//	                           results (they come once the GCS runs again);
//	                           then checks that a named actor, registered
//	                           before Remote returns, works.

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/goray-dev/goray/sdk/ray"
)

// Adder is an actor that adds to the base it was created with.
type Adder struct{ base int }

// NewAdder is Adder's constructor.
func NewAdder(ctx context.Context, base int) (*Adder, error) { return &Adder{base: base}, nil }

// Add returns the base plus k.
func (a *Adder) Add(ctx context.Context, k int) (int, error) { return a.base + k, nil }

// addThrough calls Add(k) on the actor behind h, from the task's worker.
func addThrough(ctx context.Context, h ray.ActorHandle[Adder], k int) (int, error) {
	return AdderAdd.On(h).Remote(ctx, ray.V(k)).Get(ctx)
}

var (
	// AdderActor is the actor class.
	AdderActor = ray.Actor1(NewAdder)
	// AdderAdd adds to the actor's base.
	AdderAdd = ray.Method1((*Adder).Add)
	// AddThrough calls the actor whose handle it is given.
	AddThrough = ray.Task2(addThrough)
)

// Values of runActorOutage: the unnamed actor's base and the addends of
// its two calls, and the named actor's.
const (
	outageBase   = 100
	outageDirect = 1
	outageTask   = 20
	namedBase    = 7
	namedAdd     = 1
	outageName   = "actor-outage-named"
)

func runActorOutage(ctx context.Context, dir string) error {
	if err := writeFile(filepath.Join(dir, "ready"), ""); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "frozen")); err != nil {
		return err
	}

	// The GCS is stopped: Remote returns the handle at once.
	h := AdderActor.Remote(ctx, ray.V(outageBase))
	if err := writeFile(filepath.Join(dir, "created"), h.ID()); err != nil {
		return err
	}
	viaTask := AddThrough.Remote(ctx, ray.V(h), ray.V(outageTask))
	direct := AdderAdd.On(h).Remote(ctx, ray.V(outageDirect))
	if err := writeFile(filepath.Join(dir, "submitted"), ""); err != nil {
		return err
	}
	fmt.Println("created and submitted while the GCS was stopped; actor", h.ID())

	// The results come once the GCS runs again.
	d, err := direct.Get(ctx)
	if err != nil {
		return fmt.Errorf("direct call on the actor created during the outage: %w", err)
	}
	fmt.Println("direct call:", d)
	v, err := viaTask.Get(ctx)
	if err != nil {
		return fmt.Errorf("task calling the actor created during the outage through its handle: %w", err)
	}
	fmt.Println("task via handle:", v)
	if d != outageBase+outageDirect || v != outageBase+outageTask {
		return fmt.Errorf("direct call = %d, want %d; task via handle = %d, want %d", d, outageBase+outageDirect, v, outageBase+outageTask)
	}

	// A named actor registers before Remote returns; it is found by name.
	named := AdderActor.Options(ray.Name(outageName)).Remote(ctx, ray.V(namedBase))
	if err := named.Ready(ctx); err != nil {
		return fmt.Errorf("named actor %s: %w", outageName, err)
	}
	found, err := ray.GetActor[Adder](ctx, outageName)
	if err != nil {
		return fmt.Errorf("named actor %s by name: %w", outageName, err)
	}
	n, err := AdderAdd.On(found).Remote(ctx, ray.V(namedAdd)).Get(ctx)
	if err != nil {
		return fmt.Errorf("named actor %s: %w", outageName, err)
	}
	fmt.Println("named actor:", n)
	if n != namedBase+namedAdd || found.ID() != named.ID() {
		return fmt.Errorf("named actor %s (id %s, created as %s) = %d, want %d", outageName, found.ID(), named.ID(), n, namedBase+namedAdd)
	}
	return nil
}
