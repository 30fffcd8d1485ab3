// Command actor-retries shows actor task retries (Ray's max_task_retries):
// a restartable actor whose worker process dies under its calls runs them
// again on its restarted instance, in the order they were made, instead
// of failing them with ErrActorUnavailable.
//
// Two ledgers record the steps they are given; step 3's first attempt
// kills its own worker process with SIGKILL (as an out-of-memory kill or
// a crash would). Both restart (MaxRestarts(1)) with fresh state. The
// ledger with MaxTaskRetries(3) runs step 3 again, as attempt 1, and the
// steps sent after it, in order; the one without task retries fails step
// 3 with ErrActorUnavailable and serves later calls on its new worker. It
// runs on an embedded single-node cluster with
//
//	go run ./examples/actor-retries
//
// or against a running cluster when GORAY_ADDRESS is set. It exits non-zero
// if any result is wrong.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// crashStep is the step whose first attempt kills the worker.
const crashStep = 3

// Ledger records steps in the order it runs them.
type Ledger struct{ steps []int }

// Entry is what Record returns: the ledger after the step, the attempt
// that ran it and the worker's pid.
type Entry struct {
	Steps   []int
	Attempt int
	Pid     int
}

// NewLedger starts an empty ledger.
func NewLedger(ctx context.Context) (*Ledger, error) { return &Ledger{}, nil }

// Record appends step. The first attempt of crashStep kills the worker.
func (l *Ledger) Record(ctx context.Context, step int) (Entry, error) {
	attempt := 0
	if tc, ok := ray.CurrentTask(ctx); ok {
		attempt = tc.Attempt
	}
	if step == crashStep && attempt == 0 {
		// Not an error the method returns (those are never retried): the
		// process dies under the call.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // killed meanwhile
	}
	l.steps = append(l.steps, step)
	return Entry{Steps: slices.Clone(l.steps), Attempt: attempt, Pid: os.Getpid()}, nil
}

var (
	// LedgerActor is the ledger actor class.
	LedgerActor = ray.Actor0(NewLedger)
	// Record records a step.
	Record = ray.Method1((*Ledger).Record)
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := ray.MustInit(ctx) // in a worker process this serves calls and never returns
	err := run(ctx)
	_ = rt.Shutdown(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "actor-retries:", err)
		os.Exit(1)
	}
	fmt.Println("OK")
}

func run(ctx context.Context) error {
	if err := retried(ctx); err != nil {
		return err
	}
	return notRetried(ctx)
}

// steps records steps 1 and 2, then sends steps 3 to 6 at once; step 3
// kills the worker under them.
func steps(ctx context.Context, h ray.ActorHandle[Ledger]) (first int, refs []ray.Ref[Entry], err error) {
	for step := 1; step < crashStep; step++ {
		e, err := Record.On(h).Remote(ctx, ray.V(step)).Get(ctx)
		if err != nil {
			return 0, nil, fmt.Errorf("step %d: %w", step, err)
		}
		fmt.Printf("step %d -> %v\n", step, e.Steps)
		first = e.Pid
	}
	for step := crashStep; step <= 6; step++ {
		refs = append(refs, Record.On(h).Remote(ctx, ray.V(step)))
	}
	return first, refs, nil
}

// retried: with MaxTaskRetries, steps 3 to 6 all run on the restarted
// ledger, in order, step 3 as its attempt 1.
func retried(ctx context.Context) error {
	fmt.Println("ledger with MaxRestarts(1), MaxTaskRetries(3):")
	h, err := LedgerActor.Options(ray.MaxRestarts(1), ray.MaxTaskRetries(3)).New(ctx)
	if err != nil {
		return err
	}
	defer h.Kill(ctx)
	first, refs, err := steps(ctx, h)
	if err != nil {
		return err
	}
	for i, ref := range refs {
		step := crashStep + i
		e, err := ref.Get(ctx)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if e.Pid == first {
			return fmt.Errorf("step %d ran on the killed worker %d", step, first)
		}
		if want := stepsFrom(crashStep, step); !slices.Equal(e.Steps, want) {
			return fmt.Errorf("step %d: the ledger holds %v, want %v", step, e.Steps, want)
		}
		note := ""
		if step == crashStep {
			note = fmt.Sprintf(" (attempt %d, on a new worker: attempt 0 killed the old one)", e.Attempt)
		}
		fmt.Printf("step %d -> %v%s\n", step, e.Steps, note)
	}
	return nil
}

// notRetried: without task retries, step 3 fails with ErrActorUnavailable;
// later calls reach the restarted ledger.
func notRetried(ctx context.Context) error {
	fmt.Println("ledger with MaxRestarts(1) only:")
	h, err := LedgerActor.Options(ray.MaxRestarts(1)).New(ctx)
	if err != nil {
		return err
	}
	defer h.Kill(ctx)
	first, refs, err := steps(ctx, h)
	if err != nil {
		return err
	}
	_, err = refs[0].Get(ctx)
	if !errors.Is(err, ray.ErrActorUnavailable) {
		return fmt.Errorf("step %d: %v; want ErrActorUnavailable", crashStep, err)
	}
	fmt.Printf("step %d failed with ErrActorUnavailable\n", crashStep)
	// Steps 4 to 6 were under way too (they fail) or still queued (they
	// run on the new worker): either way they end.
	for _, ref := range refs[1:] {
		_, _ = ref.Get(ctx)
	}
	e, err := Record.On(h).Remote(ctx, ray.V(7)).Get(ctx)
	if err != nil {
		return fmt.Errorf("step 7: %w", err)
	}
	fmt.Printf("step 7 ran on a new worker: %v\n", e.Pid != first)
	return nil
}

// stepsFrom returns from..to.
func stepsFrom(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}
