package main

// Jobs of the actor restart acceptance tests:
//
//	testjob restart DIR VICTIM         a restartable actor on VICTIM; the test
//	                                   makes VICTIM fail after DIR/ready (its
//	                                   pid); the actor must come back elsewhere
//	testjob restart-frozen DIR VICTIM  the same, then DIR/restarted; after
//	                                   DIR/continued (the test let VICTIM run
//	                                   again) every call reaches the new
//	                                   instance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// Instance says which process answered a call.
type Instance struct {
	Node string
	Pid  int
}

// Phoenix is an actor that says where it runs.
type Phoenix struct{}

// NewPhoenix is Phoenix's constructor.
func NewPhoenix(ctx context.Context) (*Phoenix, error) { return &Phoenix{}, nil }

// Where reports the node and process of the instance.
func (p *Phoenix) Where(ctx context.Context) (Instance, error) {
	return Instance{Node: ray.NodeID(), Pid: os.Getpid()}, nil
}

var (
	// PhoenixActor is the restartable actor class.
	PhoenixActor = ray.Actor0(NewPhoenix)
	// PhoenixWhere asks an instance where it runs.
	PhoenixWhere = ray.Method0((*Phoenix).Where)
)

// runRestart puts a restartable actor on victim and calls it until an
// instance on another node answers. Calls under way when the node failed
// may fail with ErrActorUnavailable; any other error fails the job. With
// frozen, it then waits for the test to let the victim run again and checks
// that every call reaches the new instance.
func runRestart(ctx context.Context, dir, victim string, frozen bool) error {
	a := PhoenixActor.Options(ray.NodeAffinity(victim, true), ray.MaxRestarts(1)).Remote(ctx)
	first, err := PhoenixWhere.On(a).Remote(ctx).Get(ctx)
	if err != nil {
		return fmt.Errorf("actor on the victim: %w", err)
	}
	fmt.Printf("first instance: pid %d on %s\n", first.Pid, first.Node)
	if first.Node != victim {
		return fmt.Errorf("the actor started on %s, want the victim %s", first.Node, victim)
	}
	if err := writeFile(filepath.Join(dir, "ready"), fmt.Sprint(first.Pid)); err != nil {
		return err
	}
	start := time.Now()
	var now Instance
	for {
		w, err := PhoenixWhere.On(a).Remote(ctx).Get(ctx)
		if errors.Is(err, ray.ErrActorUnavailable) {
			fmt.Println("a call under way when the instance failed:", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("call %s after ready: %w", time.Since(start).Round(time.Millisecond), err)
		}
		if w.Node != victim {
			now = w
			break
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("the actor never left the victim: %w", ctx.Err())
		}
	}
	fmt.Printf("new instance: pid %d on %s, %s after ready\n", now.Pid, now.Node, time.Since(start).Round(time.Millisecond))
	fmt.Println("restartable actor restarted on another node: ok")
	if !frozen {
		return nil
	}
	if err := writeFile(filepath.Join(dir, "restarted"), fmt.Sprint(now.Pid)); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "continued")); err != nil {
		return err
	}
	for i := range 20 {
		w, err := PhoenixWhere.On(a).Remote(ctx).Get(ctx)
		if err != nil {
			return fmt.Errorf("call %d after the old node came back: %w", i, err)
		}
		if w != now {
			return fmt.Errorf("call %d after the old node came back answered by pid %d on %s, not the new instance (pid %d on %s)", i, w.Pid, w.Node, now.Pid, now.Node)
		}
	}
	fmt.Println("calls after the old node came back reach the new instance only: ok")
	return nil
}
