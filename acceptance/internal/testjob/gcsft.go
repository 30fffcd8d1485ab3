package main

// The job of the GCS fault tolerance acceptance tests:
//
//	testjob gcs-ft DIR   phase 1 (tasks on every node, a stateful named
//	                     actor, store objects); DIR/phase1; waits for DIR/go
//	                     (the test has frozen the GCS); tasks, actor calls
//	                     and object reads during the outage while a new
//	                     actor is being created; DIR/outage (says whether
//	                     the new actor answered: it must not have); waits
//	                     for DIR/back (the GCS was killed and restarted);
//	                     checks every result, the actor's state and pid, and
//	                     the new actor.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// Counter is a stateful actor: its sum lives only in its process.
type Counter struct{ sum int }

// NewCounter starts a counter at zero.
func NewCounter(ctx context.Context) (*Counter, error) { return &Counter{}, nil }

// Add adds k and returns the sum.
func (c *Counter) Add(ctx context.Context, k int) (int, error) { c.sum += k; return c.sum, nil }

// Pid says which process holds the state.
func (c *Counter) Pid(ctx context.Context) (int, error) { return os.Getpid(), nil }

// checksum sums a blob's bytes, on whichever node the task runs.
func checksum(ctx context.Context, b []byte) (int, error) {
	s := 0
	for _, x := range b {
		s += int(x)
	}
	return s, nil
}

var (
	// CounterActor is the stateful actor class (restartable, so a failure
	// would show as a new pid and a lost sum).
	CounterActor = ray.Actor0(NewCounter)
	// CounterAdd adds to a counter.
	CounterAdd = ray.Method1((*Counter).Add)
	// CounterPid returns the counter's pid.
	CounterPid = ray.Method0((*Counter).Pid)
	// Checksum sums a blob.
	Checksum = ray.Task1(checksum)
)

// ftBlobSize is above the inline limit: the blobs live in the store.
const ftBlobSize = 2 << 20

// ftRound runs one checksum task per blob on every node and checks each.
func ftRound(ctx context.Context, nodes []ray.Node, blobs []ray.Ref[[]byte], want []int) error {
	var refs []ray.Ref[int]
	var exp []int
	for _, n := range nodes {
		for i, b := range blobs {
			refs = append(refs, Checksum.Options(ray.NodeAffinity(n.ID, false)).Remote(ctx, b))
			exp = append(exp, want[i])
		}
	}
	got, err := ray.GetAll(ctx, refs)
	if err != nil {
		return err
	}
	for i := range got {
		if got[i] != exp[i] {
			return fmt.Errorf("checksum %d = %d, want %d", i, got[i], exp[i])
		}
	}
	return nil
}

// ftAdd adds from..to to the counter and checks the running sum.
func ftAdd(ctx context.Context, c ray.ActorHandle[Counter], from, to int, sum *int) error {
	for k := from; k <= to; k++ {
		*sum += k
		got, err := CounterAdd.On(c).Remote(ctx, ray.V(k)).Get(ctx)
		if err != nil {
			return fmt.Errorf("counter add %d: %w", k, err)
		}
		if got != *sum {
			return fmt.Errorf("counter add %d = %d, want %d (state lost)", k, got, *sum)
		}
	}
	return nil
}

func runGCSFT(ctx context.Context, dir string) error {
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return err
	}
	var alive []ray.Node
	for _, n := range nodes {
		if n.Alive {
			alive = append(alive, n)
		}
	}
	if len(alive) < 3 {
		return fmt.Errorf("%d alive nodes, want 3", len(alive))
	}
	// The counter runs on another node than the driver's.
	var other string
	for _, n := range alive {
		if n.ID != ray.NodeID() {
			other = n.ID
			break
		}
	}
	counter := CounterActor.Options(ray.Name("ft-counter"), ray.MaxRestarts(3), ray.NodeAffinity(other, false)).Remote(ctx)
	pid, err := CounterPid.On(counter).Remote(ctx).Get(ctx)
	if err != nil {
		return fmt.Errorf("counter: %w", err)
	}
	var blobs []ray.Ref[[]byte]
	var want []int
	for i := range 4 {
		b := make([]byte, ftBlobSize)
		for j := range b {
			b[j] = byte(i*7 + j%13)
		}
		s, _ := checksum(ctx, b)
		r, err := ray.Put(ctx, b)
		if err != nil {
			return err
		}
		blobs, want = append(blobs, r), append(want, s)
	}
	sum := 0
	if err := ftAdd(ctx, counter, 1, 10, &sum); err != nil {
		return err
	}
	if err := ftRound(ctx, alive, blobs, want); err != nil {
		return fmt.Errorf("before the outage: %w", err)
	}
	fmt.Println("phase 1 done: counter", sum, "pid", pid)
	if err := writeFile(filepath.Join(dir, "phase1"), ""); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return err
	}

	// The GCS is down: an actor created now comes up once it is back.
	type lateResult struct {
		sum int
		err error
	}
	late := make(chan lateResult, 1)
	go func() {
		h := CounterActor.Remote(ctx)
		v, err := CounterAdd.On(h).Remote(ctx, ray.V(5)).Get(ctx)
		late <- lateResult{v, err}
	}()
	start := time.Now()
	if err := ftAdd(ctx, counter, 11, 20, &sum); err != nil {
		return fmt.Errorf("during the outage: %w", err)
	}
	if err := ftRound(ctx, alive, blobs, want); err != nil {
		return fmt.Errorf("during the outage: %w", err)
	}
	for i, b := range blobs {
		v, err := ray.Get(ctx, b)
		if err != nil || len(v) != ftBlobSize {
			return fmt.Errorf("during the outage: reading blob %d: %d bytes, %v", i, len(v), err)
		}
	}
	lateState := "pending"
	var early *lateResult
	select {
	case r := <-late:
		early = &r
		lateState = fmt.Sprintf("answered %d, %v", r.sum, r.err)
	default:
	}
	fmt.Printf("outage work done in %s; late actor %s\n", time.Since(start).Round(time.Millisecond), lateState)
	if err := writeFile(filepath.Join(dir, "outage"), lateState); err != nil {
		return err
	}
	if err := pollFile(ctx, filepath.Join(dir, "back")); err != nil {
		return err
	}

	// The GCS is back, restored from its storage.
	var r lateResult
	if early != nil {
		r = *early
	} else {
		select {
		case r = <-late:
		case <-ctx.Done():
			return errors.New("the actor created during the outage never came up")
		}
	}
	if r.err != nil || r.sum != 5 {
		return fmt.Errorf("actor created during the outage: %d, %v", r.sum, r.err)
	}
	if err := ftAdd(ctx, counter, 21, 30, &sum); err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	if p, err := CounterPid.On(counter).Remote(ctx).Get(ctx); err != nil || p != pid {
		return fmt.Errorf("counter pid %d (%v), want %d: the actor was restarted", p, err, pid)
	}
	named, err := ray.GetActor[Counter](ctx, "ft-counter")
	if err != nil {
		return fmt.Errorf("named actor after the restart: %w", err)
	}
	if v, err := CounterAdd.On(named).Remote(ctx, ray.V(0)).Get(ctx); err != nil || v != sum {
		return fmt.Errorf("named actor's sum %d (%v), want %d", v, err, sum)
	}
	if err := ftRound(ctx, alive, blobs, want); err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	fmt.Println("counter", sum, "pid", pid, "late actor 5")
	return nil
}
