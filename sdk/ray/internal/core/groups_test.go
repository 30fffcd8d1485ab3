package core

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
)

// gate counts the calls of a test that are running, the most that ever
// ran at once, and holds them until released.
type gate struct {
	running, most atomic.Int64
	release       chan struct{}
}

func newGate() *gate { return &gate{release: make(chan struct{})} }

// call returns a groupCall that blocks in the gate; done is counted in wg.
func (g *gate) call(ctx context.Context, wg *sync.WaitGroup) groupCall {
	wg.Add(1)
	return groupCall{ctx: ctx, done: wg.Done, run: func() {
		n := g.running.Add(1)
		for {
			m := g.most.Load()
			if n <= m || g.most.CompareAndSwap(m, n) {
				break
			}
		}
		<-g.release
		g.running.Add(-1)
	}}
}

func mustEnqueue(t *testing.T, gs *callGroups, group string, c groupCall) {
	t.Helper()
	g, err := gs.group("m", group)
	if err != nil {
		t.Fatal(err)
	}
	if err := gs.enqueue(context.Background(), g, c); err != nil {
		t.Fatal(err)
	}
}

// TestSaturatedGroupDoesNotBlockOthers: with "compute" full (its calls
// held, more queued behind them), calls of "health" and of the default
// group run and finish.
func TestSaturatedGroupDoesNotBlockOthers(t *testing.T) {
	leaktest.Goroutines(t)
	ctx := context.Background()
	gs := newCallGroups(ids.New(), "Service", 1, map[string]int32{"compute": 2, "health": 1})
	defer gs.close()
	compute := newGate()
	var wg sync.WaitGroup
	for range 5 {
		mustEnqueue(t, gs, "compute", compute.call(ctx, &wg))
	}
	waitUntil(t, "2 compute calls running", func() bool { return compute.running.Load() == 2 })

	for _, group := range []string{"health", ""} {
		answered := make(chan struct{})
		wg.Add(1)
		mustEnqueue(t, gs, group, groupCall{ctx: ctx, done: wg.Done, run: func() { close(answered) }})
		select {
		case <-answered:
		case <-time.After(waitfor.Generous):
			t.Fatalf("a call in group %q did not run while compute was saturated", group)
		}
	}
	close(compute.release)
	wg.Wait()
	if m := compute.most.Load(); m != 2 {
		t.Errorf("compute ran %d calls at once, want its limit 2", m)
	}
}

// TestGroupLimits: each group runs at most its limit of calls at once,
// and reaches it.
func TestGroupLimits(t *testing.T) {
	for _, tc := range []struct {
		name        string
		defLimit    int
		group       string
		groupLimits map[string]int32
		want        int64
	}{
		{"default group of an actor without MaxConcurrency", 0, "", nil, 1},
		{"default group with MaxConcurrency 3", 3, "", map[string]int32{"io": 1}, 3},
		{"named group of limit 1", 4, "io", map[string]int32{"io": 1}, 1},
		{"named group of limit 4", 1, "io", map[string]int32{"io": 4, "cpu": 2}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaktest.Goroutines(t)
			gs := newCallGroups(ids.New(), "Service", tc.defLimit, tc.groupLimits)
			defer gs.close()
			g := newGate()
			var wg sync.WaitGroup
			const calls = 12
			for range calls {
				mustEnqueue(t, gs, tc.group, g.call(context.Background(), &wg))
			}
			// Release one call at a time once the group is full: a group
			// starting more than its limit shows in most.
			for left := calls; left > 0; left-- {
				waitUntil(t, "the group full", func() bool { return g.running.Load() == min(tc.want, int64(left)) })
				g.release <- struct{}{}
			}
			wg.Wait()
			if m := g.most.Load(); m != tc.want {
				t.Errorf("at most %d calls ran at once, want %d", m, tc.want)
			}
		})
	}
}

// TestDefaultGroupKeepsOrder: the default group of limit 1 runs its calls
// one at a time in the order they arrived, as do named groups of limit 1.
func TestDefaultGroupKeepsOrder(t *testing.T) {
	leaktest.Goroutines(t)
	gs := newCallGroups(ids.New(), "Service", 1, map[string]int32{"io": 1})
	defer gs.close()
	var mu sync.Mutex
	got := map[string][]int{}
	var wg sync.WaitGroup
	const calls = 200
	for i := range calls {
		for _, group := range []string{"", "io"} {
			wg.Add(1)
			mustEnqueue(t, gs, group, groupCall{ctx: context.Background(), done: wg.Done, run: func() {
				mu.Lock()
				got[group] = append(got[group], i)
				mu.Unlock()
			}})
		}
	}
	wg.Wait()
	for _, group := range []string{"", "io"} {
		if len(got[group]) != calls {
			t.Fatalf("group %q ran %d calls, want %d", group, len(got[group]), calls)
		}
		for i, v := range got[group] {
			if v != i {
				t.Fatalf("group %q ran call %d in position %d: %v", group, v, i, got[group])
			}
		}
	}
}

// TestUnknownGroup: a group the actor does not declare is a typed error
// naming the method, the group and the declared groups.
func TestUnknownGroup(t *testing.T) {
	leaktest.Goroutines(t)
	actor := ids.New()
	for _, tc := range []struct {
		name     string
		declared map[string]int32
		want     []string
	}{
		{"groups declared", map[string]int32{"io": 2, "compute": 4}, []string{`"compute" (limit 4), "io" (limit 2) and the default group`}},
		{"no group declared", nil, []string{"declares no concurrency group, only the default group"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := newCallGroups(actor, "main.Service", 1, tc.declared)
			defer gs.close()
			_, err := gs.group("main.(*Service).Fetch", "network")
			var ue *UnknownConcurrencyGroupError
			if !errors.Is(err, ErrUnknownConcurrencyGroup) || !errors.As(err, &ue) || ue.Group != "network" {
				t.Fatalf("got %v, want an *UnknownConcurrencyGroupError for group network", err)
			}
			for _, w := range append(tc.want, `main.(*Service).Fetch names concurrency group "network"`, "main.Service ("+actor.Short()+")", `ray.ConcurrencyGroup("network", limit)`) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestUnknownGroupCrossesProcesses: found by the actor's worker, the error
// reaches the caller as a RemoteError that still matches
// ErrUnknownConcurrencyGroup and converts to the typed error.
func TestUnknownGroupCrossesProcesses(t *testing.T) {
	local := &UnknownConcurrencyGroupError{Method: "M", Group: "g", Class: "C", ActorID: ids.New()}
	re := &RemoteError{Function: "M", Kind: kindOf(local), Message: local.Error()}
	var ue *UnknownConcurrencyGroupError
	if !errors.Is(re, ErrUnknownConcurrencyGroup) || !errors.As(re, &ue) || ue.Method != "M" || ue.Error() != local.Error() {
		t.Fatalf("remote error %v (kind %q) does not convert back to %v", re, re.Kind, local)
	}
}

// TestEndedStreamsCallsDropped: a call whose stream ended before its turn
// does not run, and its stream learns it is over.
func TestEndedStreamsCallsDropped(t *testing.T) {
	leaktest.Goroutines(t)
	gs := newCallGroups(ids.New(), "Service", 1, nil)
	defer gs.close()
	hold := newGate()
	var wg sync.WaitGroup
	mustEnqueue(t, gs, "", hold.call(context.Background(), &wg))
	waitUntil(t, "the first call running", func() bool { return hold.running.Load() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Bool
	wg.Add(1)
	mustEnqueue(t, gs, "", groupCall{ctx: ctx, done: wg.Done, run: func() { ran.Store(true) }})
	cancel()
	close(hold.release)
	wg.Wait()
	if ran.Load() {
		t.Error("a call whose stream had ended ran")
	}
}

// TestFullGroupBackPressure: a group's queue holds maxQueuedCalls; one
// more waits for room, honouring its context, and closing the groups ends
// the wait and answers every queued call as over.
func TestFullGroupBackPressure(t *testing.T) {
	leaktest.Goroutines(t)
	gs := newCallGroups(ids.New(), "Service", 1, nil)
	hold := newGate()
	var wg sync.WaitGroup
	mustEnqueue(t, gs, "", hold.call(context.Background(), &wg))
	waitUntil(t, "the first call running", func() bool { return hold.running.Load() == 1 })
	// With an ended context, enqueue still queues while there is room,
	// then gives up instead of waiting.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	queued := 0
	for {
		err := gs.enqueue(ctx, gs.def, hold.call(ctx, &wg))
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("enqueue in a full group with an ended context: %v, want context.Canceled", err)
			}
			wg.Done() // that call was not queued
			break
		}
		if queued++; queued > maxQueuedCalls {
			t.Fatalf("a group of limit 1 with a call running queued %d calls, more than %d", queued, maxQueuedCalls)
		}
	}
	if queued != maxQueuedCalls {
		t.Fatalf("the group queued %d calls, want %d", queued, maxQueuedCalls)
	}
	waiting := make(chan error)
	go func() { waiting <- gs.enqueue(context.Background(), gs.def, groupCall{}) }()
	closed := make(chan struct{})
	go func() { gs.close(); close(closed) }()
	if err := <-waiting; !errors.Is(err, errGroupsClosed) {
		t.Fatalf("enqueue waiting for room when the groups close: %v", err)
	}
	close(hold.release) // the running call returns; close drops the queued ones
	<-closed
	wg.Wait()
	if n := hold.most.Load(); n != 1 {
		t.Errorf("%d calls ran at once in a group of limit 1", n)
	}
}
