package gcs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/codes"
)

const (
	pending = gorayv1.ActorState_ACTOR_STATE_PENDING
	alive   = gorayv1.ActorState_ACTOR_STATE_ALIVE
	dead    = gorayv1.ActorState_ACTOR_STATE_DEAD
)

func TestRegisterActor(t *testing.T) {
	clock := newFakeClock()
	_, c := startServer(t, Options{Now: clock.Now})
	ctx := ctxT(t)
	job := newID()
	id := newID()
	in := actorOn(id, job, newID(), newID(), "c1")
	in.State = alive // ignored: registration is always PENDING
	in.DeathReason = "bogus"
	in.MaxConcurrency = 4
	registerActor(t, c, in)

	got := getActor(t, c, id)
	if got.GetState() != pending || got.GetDeathReason() != "" || got.GetStartTimeMs() != clock.Now().UnixMilli() {
		t.Fatalf("registered actor = %v", got)
	}
	if got.GetClassName() != "Counter" || got.GetMaxConcurrency() != 4 || got.GetName() != "c1" {
		t.Fatalf("fields not stored: %v", got)
	}

	_, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: actorOn(id, job, ids.Nil, ids.Nil, "")})
	wantCode(t, err, codes.AlreadyExists, fmt.Sprintf("actor %s is already registered", id))

	list, err := c.ListActors(ctx, &gorayv1.ListActorsRequest{})
	mustOK(t, err)
	if len(list.GetActors()) != 1 {
		t.Fatalf("ListActors = %d actors, want 1", len(list.GetActors()))
	}
}

func TestActorNames(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)
	job := newID()
	first, second, third := newID(), newID(), newID()

	registerActor(t, c, actorOn(first, job, ids.Nil, ids.Nil, "c1"))
	_, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: actorOn(second, job, ids.Nil, ids.Nil, "c1")})
	wantCode(t, err, codes.AlreadyExists, fmt.Sprintf(`actor name "c1" is already taken by actor %s`, first))

	// Still taken while ALIVE.
	setState(t, c, first, alive, "")
	_, err = c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: actorOn(second, job, ids.Nil, ids.Nil, "c1")})
	wantCode(t, err, codes.AlreadyExists, "already taken")

	// Unnamed actors never conflict.
	registerActor(t, c, actorOn(newID(), job, ids.Nil, ids.Nil, ""))
	registerActor(t, c, actorOn(newID(), job, ids.Nil, ids.Nil, ""))

	byName := func(name string) (*gorayv1.ActorInfo, error) {
		r, err := c.GetActor(ctx, &gorayv1.GetActorRequest{Name: name})
		return r.GetActor(), err
	}
	if a, err := byName("c1"); err != nil || ids.MustFromBytes(a.GetActorId()) != first {
		t.Fatalf("GetActor(c1) = %v, %v; want first", a, err)
	}

	// Death frees the name; lookup then finds the dead one until reuse.
	setState(t, c, first, dead, "killed")
	if a, err := byName("c1"); err != nil || ids.MustFromBytes(a.GetActorId()) != first || a.GetState() != dead {
		t.Fatalf("GetActor(c1) after death = %v, %v; want first DEAD", a, err)
	}
	registerActor(t, c, actorOn(second, job, ids.Nil, ids.Nil, "c1"))
	if a, err := byName("c1"); err != nil || ids.MustFromBytes(a.GetActorId()) != second {
		t.Fatalf("GetActor(c1) after reuse = %v, %v; want second", a, err)
	}
	setState(t, c, second, dead, "")
	registerActor(t, c, actorOn(third, job, ids.Nil, ids.Nil, "c1"))
	setState(t, c, third, dead, "")
	if a, err := byName("c1"); err != nil || ids.MustFromBytes(a.GetActorId()) != third {
		t.Fatalf("GetActor(c1) with all dead = %v, %v; want most recent (third)", a, err)
	}

	_, err = byName("x")
	wantCode(t, err, codes.NotFound, `no actor named "x"`)
	_, err = c.GetActor(ctx, &gorayv1.GetActorRequest{ActorId: newID().Bytes()})
	wantCode(t, err, codes.NotFound, "no actor with id")
}

func TestUpdateActor(t *testing.T) {
	clock := newFakeClock()
	_, c := startServer(t, Options{Now: clock.Now})
	ctx := ctxT(t)
	job, node, worker := newID(), newID(), newID()
	registerNode(t, c, node, "n")

	update := func(a *gorayv1.ActorInfo) error {
		_, err := c.UpdateActor(ctx, &gorayv1.UpdateActorRequest{Actor: a})
		return err
	}
	tests := []struct {
		name string
		// steps are applied to a fresh PENDING actor with the given id.
		steps func(id ids.ID) []*gorayv1.ActorInfo
		check func(t *testing.T, a *gorayv1.ActorInfo)
	}{
		{
			name: "alive with address and pid",
			steps: func(id ids.ID) []*gorayv1.ActorInfo {
				return []*gorayv1.ActorInfo{{ActorId: id.Bytes(), State: alive, Pid: 77,
					Address: &gorayv1.Address{NodeId: node.Bytes(), WorkerId: worker.Bytes(), UnixPath: "/w"}}}
			},
			check: func(t *testing.T, a *gorayv1.ActorInfo) {
				if a.GetState() != alive || a.GetPid() != 77 || a.GetAddress().GetUnixPath() != "/w" || a.GetName() != "u" {
					t.Fatalf("got %v", a)
				}
			},
		},
		{
			name: "pending update changes only given fields",
			steps: func(id ids.ID) []*gorayv1.ActorInfo {
				return []*gorayv1.ActorInfo{
					{ActorId: id.Bytes(), State: alive},
					{ActorId: id.Bytes(), Pid: 9},
				}
			},
			check: func(t *testing.T, a *gorayv1.ActorInfo) {
				if a.GetState() != alive || a.GetPid() != 9 || a.GetClassName() != "Counter" {
					t.Fatalf("got %v", a)
				}
			},
		},
		{
			name: "dead with reason and end time",
			steps: func(id ids.ID) []*gorayv1.ActorInfo {
				return []*gorayv1.ActorInfo{{ActorId: id.Bytes(), State: dead, DeathReason: "panic: boom", EndTimeMs: 1234}}
			},
			check: func(t *testing.T, a *gorayv1.ActorInfo) {
				if a.GetState() != dead || a.GetDeathReason() != "panic: boom" || a.GetEndTimeMs() != 1234 {
					t.Fatalf("got %v", a)
				}
			},
		},
		{
			name: "dead defaults reason and end time",
			steps: func(id ids.ID) []*gorayv1.ActorInfo {
				return []*gorayv1.ActorInfo{{ActorId: id.Bytes(), State: dead}}
			},
			check: func(t *testing.T, a *gorayv1.ActorInfo) {
				if a.GetState() != dead || a.GetDeathReason() != "actor died" || a.GetEndTimeMs() != clock.Now().UnixMilli() {
					t.Fatalf("got %v", a)
				}
			},
		},
		{
			name: "dead never becomes alive again",
			steps: func(id ids.ID) []*gorayv1.ActorInfo {
				return []*gorayv1.ActorInfo{
					{ActorId: id.Bytes(), State: alive},
					{ActorId: id.Bytes(), State: dead, DeathReason: "first"},
					{ActorId: id.Bytes(), State: alive, Pid: 5},
					{ActorId: id.Bytes(), State: dead, DeathReason: "second"},
				}
			},
			check: func(t *testing.T, a *gorayv1.ActorInfo) {
				if a.GetState() != dead || a.GetDeathReason() != "first" || a.GetPid() == 5 {
					t.Fatalf("got %v", a)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := newID()
			registerActor(t, c, actorOn(id, job, ids.Nil, ids.Nil, "u"))
			for _, step := range tc.steps(id) {
				mustOK(t, update(step))
			}
			tc.check(t, getActor(t, c, id))
			setState(t, c, id, dead, "") // free the name for the next case
		})
	}

	t.Run("alive on a dead node dies", func(t *testing.T) {
		gone, id := newID(), newID()
		registerNode(t, c, gone, "gone")
		_, err := c.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: gone.Bytes(), Reason: "bye"})
		mustOK(t, err)
		registerActor(t, c, actorOn(id, job, ids.Nil, ids.Nil, ""))
		mustOK(t, update(&gorayv1.ActorInfo{ActorId: id.Bytes(), State: alive, Address: &gorayv1.Address{NodeId: gone.Bytes()}}))
		a := getActor(t, c, id)
		if want := fmt.Sprintf("node %s died: bye", gone.Short()); a.GetState() != dead || a.GetDeathReason() != want {
			t.Fatalf("got %v %q, want DEAD %q", a.GetState(), a.GetDeathReason(), want)
		}
	})
	t.Run("unknown actor", func(t *testing.T) {
		wantCode(t, update(&gorayv1.ActorInfo{ActorId: newID().Bytes(), State: alive}), codes.NotFound, "no actor with id")
	})
	t.Run("unknown state", func(t *testing.T) {
		wantCode(t, update(&gorayv1.ActorInfo{ActorId: newID().Bytes(), State: 9}), codes.InvalidArgument, "actor.state")
	})
}

func TestGetActorWaitAlive(t *testing.T) {
	s, c := startServer(t, Options{})
	job := newID()

	type result struct {
		a   *gorayv1.ActorInfo
		err error
	}
	// wait starts a blocking GetActor and returns once it is parked.
	wait := func(t *testing.T, ctx context.Context, req *gorayv1.GetActorRequest) <-chan result {
		t.Helper()
		before := s.waiters.Load()
		ch := make(chan result, 1)
		go func() {
			r, err := c.GetActor(ctx, req)
			ch <- result{r.GetActor(), err}
		}()
		waitFor(t, "GetActor to block", func() bool { return s.waiters.Load() > before })
		return ch
	}
	recv := func(t *testing.T, ch <-chan result) result {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(5 * time.Second):
			t.Fatal("GetActor did not return")
			return result{}
		}
	}

	t.Run("wakes on alive", func(t *testing.T) {
		id := newID()
		registerActor(t, c, actorOn(id, job, ids.Nil, ids.Nil, ""))
		ch := wait(t, ctxT(t), &gorayv1.GetActorRequest{ActorId: id.Bytes(), WaitAlive: true})
		ch2 := wait(t, ctxT(t), &gorayv1.GetActorRequest{ActorId: id.Bytes(), WaitAlive: true})
		setState(t, c, id, alive, "")
		for _, ch := range []<-chan result{ch, ch2} {
			if r := recv(t, ch); r.err != nil || r.a.GetState() != alive {
				t.Fatalf("got %v, %v; want ALIVE", r.a, r.err)
			}
		}
	})
	t.Run("wakes on dead by name", func(t *testing.T) {
		id := newID()
		registerActor(t, c, actorOn(id, job, ids.Nil, ids.Nil, "w"))
		ch := wait(t, ctxT(t), &gorayv1.GetActorRequest{Name: "w", WaitAlive: true})
		setState(t, c, id, dead, "creation failed")
		if r := recv(t, ch); r.err != nil || r.a.GetState() != dead || r.a.GetDeathReason() != "creation failed" {
			t.Fatalf("got %v, %v; want DEAD", r.a, r.err)
		}
	})
	t.Run("ignores unrelated updates", func(t *testing.T) {
		id := newID()
		registerActor(t, c, actorOn(id, job, ids.Nil, ids.Nil, ""))
		ch := wait(t, ctxT(t), &gorayv1.GetActorRequest{ActorId: id.Bytes(), WaitAlive: true})
		_, err := c.UpdateActor(ctxT(t), &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: id.Bytes(), Pid: 3}})
		mustOK(t, err)
		select {
		case r := <-ch:
			t.Fatalf("returned on a pid update: %v, %v", r.a, r.err)
		default:
		}
		setState(t, c, id, alive, "")
		if r := recv(t, ch); r.err != nil || r.a.GetPid() != 3 || r.a.GetState() != alive {
			t.Fatalf("got %v, %v", r.a, r.err)
		}
	})
	t.Run("returns at once when already alive or without wait", func(t *testing.T) {
		id := newID()
		registerActor(t, c, actorOn(id, job, ids.Nil, ids.Nil, ""))
		r, err := c.GetActor(ctxT(t), &gorayv1.GetActorRequest{ActorId: id.Bytes()})
		if err != nil || r.GetActor().GetState() != pending {
			t.Fatalf("got %v, %v; want PENDING", r, err)
		}
		setState(t, c, id, alive, "")
		r, err = c.GetActor(ctxT(t), &gorayv1.GetActorRequest{ActorId: id.Bytes(), WaitAlive: true})
		if err != nil || r.GetActor().GetState() != alive {
			t.Fatalf("got %v, %v; want ALIVE", r, err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		id := newID()
		registerActor(t, c, actorOn(id, job, ids.Nil, ids.Nil, ""))
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := c.GetActor(ctx, &gorayv1.GetActorRequest{ActorId: id.Bytes(), WaitAlive: true})
		wantCode(t, err, codes.DeadlineExceeded, "")
		waitFor(t, "waiter released", func() bool { return s.waiters.Load() == 0 })
	})
	t.Run("cancel", func(t *testing.T) {
		id := newID()
		registerActor(t, c, actorOn(id, job, ids.Nil, ids.Nil, ""))
		ctx, cancel := context.WithCancel(t.Context())
		ch := wait(t, ctx, &gorayv1.GetActorRequest{ActorId: id.Bytes(), WaitAlive: true})
		cancel()
		r := recv(t, ch)
		wantCode(t, r.err, codes.Canceled, "")
		waitFor(t, "waiter released", func() bool { return s.waiters.Load() == 0 })
	})
	t.Run("in-process deadline unwraps", func(t *testing.T) {
		id := newID()
		registerActor(t, c, actorOn(id, job, ids.Nil, ids.Nil, ""))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		_, err := s.GetActor(ctx, &gorayv1.GetActorRequest{ActorId: id.Bytes(), WaitAlive: true})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want context.DeadlineExceeded", err)
		}
	})
}

func TestReportWorkerFailure(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)
	job, nodeA, nodeB, w1, w2 := newID(), newID(), newID(), newID(), newID()
	a1, a2, b1 := newID(), newID(), newID()
	registerActor(t, c, actorOn(a1, job, nodeA, w1, ""))
	registerActor(t, c, actorOn(a2, job, nodeA, w2, ""))
	registerActor(t, c, actorOn(b1, job, nodeB, newID(), ""))
	unplaced := newID()
	registerActor(t, c, actorOn(unplaced, job, ids.Nil, ids.Nil, ""))
	for _, id := range []ids.ID{a1, a2, b1} {
		setState(t, c, id, alive, "")
	}

	_, err := c.ReportWorkerFailure(ctx, &gorayv1.ReportWorkerFailureRequest{WorkerId: w1.Bytes(), NodeId: nodeA.Bytes(), Reason: "worker exited with code 2"})
	mustOK(t, err)
	if a := getActor(t, c, a1); a.GetState() != dead || a.GetDeathReason() != "worker exited with code 2" {
		t.Fatalf("a1 = %v", a)
	}
	if a := getActor(t, c, a2); a.GetState() != alive {
		t.Fatalf("a2 on another worker = %v, want ALIVE", a.GetState())
	}

	_, err = c.ReportWorkerFailure(ctx, &gorayv1.ReportWorkerFailureRequest{NodeId: nodeA.Bytes()})
	mustOK(t, err)
	if a := getActor(t, c, a2); a.GetState() != dead || a.GetDeathReason() != fmt.Sprintf("node %s failed", nodeA.Short()) {
		t.Fatalf("a2 = %v", a)
	}
	if a := getActor(t, c, a1); a.GetDeathReason() != "worker exited with code 2" {
		t.Fatalf("a1 reason overwritten: %q", a.GetDeathReason())
	}
	for _, id := range []ids.ID{b1, unplaced} {
		if a := getActor(t, c, id); a.GetState() == dead {
			t.Fatalf("actor %s on other node died", id.Short())
		}
	}
	_, err = c.ReportWorkerFailure(ctx, &gorayv1.ReportWorkerFailureRequest{})
	wantCode(t, err, codes.InvalidArgument, "worker_id or node_id is required")
}

// TestActorRestarts: a worker failure makes an actor with restarts left
// RESTARTING (counting the restart) until its owner reports it ALIVE again;
// waiters wait through it; an exhausted, killed-on-purpose or not yet
// alive actor dies; -1 never runs out.
func TestActorRestarts(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)
	const restarting = gorayv1.ActorState_ACTOR_STATE_RESTARTING
	job, node := newID(), newID()
	type actor struct{ id, worker ids.ID }
	newActor := func(max int32, state gorayv1.ActorState) actor {
		a := actor{newID(), newID()}
		info := actorOn(a.id, job, node, a.worker, "")
		info.MaxRestarts = max
		registerActor(t, c, info)
		if state == alive {
			setState(t, c, a.id, alive, "")
		}
		return a
	}
	fail := func(a actor, permanent bool) *gorayv1.ActorInfo {
		t.Helper()
		_, err := c.ReportWorkerFailure(ctx, &gorayv1.ReportWorkerFailureRequest{WorkerId: a.worker.Bytes(), Reason: "worker crashed", Permanent: permanent})
		mustOK(t, err)
		return getActor(t, c, a.id)
	}
	// Back alive on a new worker (what the owner does).
	revive := func(a *actor) {
		t.Helper()
		a.worker = newID()
		_, err := c.UpdateActor(ctx, &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: a.id.Bytes(), State: alive,
			Address: &gorayv1.Address{UnixPath: "/tmp/w2.sock", NodeId: node.Bytes(), WorkerId: a.worker.Bytes()}}})
		mustOK(t, err)
	}

	once := newActor(1, alive)
	waited := make(chan *gorayv1.ActorInfo, 1)
	if got := fail(once, false); got.GetState() != restarting || got.GetNumRestarts() != 1 || got.GetDeathReason() != "worker crashed" {
		t.Fatalf("first failure with max_restarts 1: %v, want RESTARTING, 1 restart", got)
	}
	go func() {
		r, err := c.GetActor(ctx, &gorayv1.GetActorRequest{ActorId: once.id.Bytes(), WaitAlive: true})
		if err != nil {
			t.Error(err)
		}
		waited <- r.GetActor()
	}()
	revive(&once)
	if got := <-waited; got.GetState() != alive || ids.MustFromBytes(got.GetAddress().GetWorkerId()) != once.worker {
		t.Fatalf("a waiter through RESTARTING got %v, want ALIVE on the new worker", got)
	}
	if got := fail(once, false); got.GetState() != dead || got.GetDeathReason() != "worker crashed (restarted 1 times, max_restarts 1)" {
		t.Fatalf("second failure with max_restarts 1: %v, want DEAD saying the restarts ran out", got)
	}

	forever := newActor(-1, alive)
	for i := 1; i <= 3; i++ {
		if got := fail(forever, false); got.GetState() != restarting || got.GetNumRestarts() != int32(i) {
			t.Fatalf("failure %d with max_restarts -1: %v", i, got)
		}
		revive(&forever)
	}
	if got := fail(forever, true); got.GetState() != dead {
		t.Fatalf("a worker stopped on purpose: %v, want DEAD", got)
	}
	if got := fail(newActor(0, alive), false); got.GetState() != dead {
		t.Fatalf("max_restarts 0: %v, want DEAD", got)
	}
	if got := fail(newActor(3, pending), false); got.GetState() != dead {
		t.Fatalf("a pending actor's worker failed: %v, want DEAD (its owner's creation fails)", got)
	}
}
