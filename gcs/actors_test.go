package gcs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/waitfor"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	// The holder travels as a detail, for clients to name it.
	if d := status.Convert(err).Details(); len(d) != 1 {
		t.Fatalf("name taken: details %v, want the holder", d)
	} else if h, ok := d[0].(*gorayv1.ActorInfo); !ok || ids.MustFromBytes(h.GetActorId()) != first || h.GetName() != "c1" || h.GetClassName() != "Counter" {
		t.Fatalf("name taken: detail %v, want the holder %s", d[0], first)
	}

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

	// Death frees the name at once: a lookup says not found (as Ray's
	// get_actor raises), and the name can be taken again.
	setState(t, c, first, dead, "killed")
	_, err = byName("c1")
	wantCode(t, err, codes.NotFound, `no actor named "c1"`)
	if a := getActor(t, c, first); a.GetState() != dead || a.GetName() != "c1" {
		t.Fatalf("the dead actor by id = %v, want DEAD and still named c1", a)
	}
	registerActor(t, c, actorOn(second, job, ids.Nil, ids.Nil, "c1"))
	if a, err := byName("c1"); err != nil || ids.MustFromBytes(a.GetActorId()) != second {
		t.Fatalf("GetActor(c1) after reuse = %v, %v; want second", a, err)
	}
	// The first actor's late updates (already dead) do not touch the name.
	setState(t, c, first, dead, "again")
	if a, err := byName("c1"); err != nil || ids.MustFromBytes(a.GetActorId()) != second {
		t.Fatalf("GetActor(c1) after the old holder's update = %v, %v; want second", a, err)
	}
	// However the holder dies (here its worker fails with no restarts
	// left), the name is free; a restarting holder keeps it.
	setState(t, c, second, dead, "")
	w := newID()
	info := actorOn(third, job, newID(), w, "c1")
	info.MaxRestarts = 1
	registerActor(t, c, info)
	setState(t, c, third, alive, "")
	for i, want := range []gorayv1.ActorState{gorayv1.ActorState_ACTOR_STATE_RESTARTING, dead} {
		_, err = c.ReportWorkerFailure(ctx, &gorayv1.ReportWorkerFailureRequest{WorkerId: w.Bytes()})
		mustOK(t, err)
		if a := getActor(t, c, third); a.GetState() != want {
			t.Fatalf("failure %d: %v, want %v", i+1, a.GetState(), want)
		}
		if want == dead {
			break
		}
		if a, err := byName("c1"); err != nil || ids.MustFromBytes(a.GetActorId()) != third {
			t.Fatalf("GetActor(c1) while restarting = %v, %v; want third", a, err)
		}
		_, err = c.UpdateActor(ctx, &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: third.Bytes(), State: alive,
			Address: &gorayv1.Address{UnixPath: "/tmp/w2.sock", WorkerId: w.Bytes()}}})
		mustOK(t, err)
	}
	_, err = byName("c1")
	wantCode(t, err, codes.NotFound, `no actor named "c1"`)
	registerActor(t, c, actorOn(newID(), job, ids.Nil, ids.Nil, "c1"))

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
		case <-time.After(waitfor.Generous):
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

	// wait_not_alive_on: a caller that saw the actor ALIVE on worker w1
	// follows its fate from there however long that takes; with wait_alive
	// too (an actor's own worker fencing itself), it waits through
	// PENDING and RESTARTING and ends once the actor is not on w1.
	t.Run("not alive on", func(t *testing.T) {
		const restarting = gorayv1.ActorState_ACTOR_STATE_RESTARTING
		node := newID()
		type step func(t *testing.T, id, w1 ids.ID)
		aliveOn := func(on func(w1 ids.ID) ids.ID) step {
			return func(t *testing.T, id, w1 ids.ID) {
				t.Helper()
				_, err := c.UpdateActor(ctxT(t), &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: id.Bytes(), State: alive,
					Address: &gorayv1.Address{UnixPath: "/tmp/w.sock", NodeId: node.Bytes(), WorkerId: on(w1).Bytes()}}})
				mustOK(t, err)
			}
		}
		onW1 := aliveOn(func(w1 ids.ID) ids.ID { return w1 })
		onW2 := aliveOn(func(ids.ID) ids.ID { return newID() })
		fail := func(t *testing.T, _, w1 ids.ID) {
			_, err := c.ReportWorkerFailure(ctxT(t), &gorayv1.ReportWorkerFailureRequest{WorkerId: w1.Bytes(), Reason: "worker crashed"})
			mustOK(t, err)
		}
		kill := func(t *testing.T, id, _ ids.ID) { setState(t, c, id, dead, "killed") }
		pid := func(t *testing.T, id, _ ids.ID) {
			_, err := c.UpdateActor(ctxT(t), &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: id.Bytes(), Pid: 9}})
			mustOK(t, err)
		}
		for _, tc := range []struct {
			name      string
			waitAlive bool
			before    []step // applied to a PENDING actor before the wait
			still     []step // applied during the wait, which must go on
			last      step   // ends the wait
			want      gorayv1.ActorState
			elsewhere bool // want it ALIVE on a worker other than w1
		}{
			{name: "its worker fails: restarting", before: []step{onW1}, still: []step{pid}, last: fail, want: restarting},
			{name: "killed", before: []step{onW1}, last: kill, want: dead},
			{name: "fencing: through restarting to a new worker", waitAlive: true, before: []step{onW1}, still: []step{fail}, last: onW2, want: alive, elsewhere: true},
			{name: "fencing: from pending, alive on w1, then killed", waitAlive: true, still: []step{onW1, pid}, last: kill, want: dead},
			{name: "already alive elsewhere", before: []step{onW2}, want: alive, elsewhere: true},
			{name: "already restarting", before: []step{onW1, fail}, want: restarting},
			{name: "already dead", before: []step{kill}, want: dead},
		} {
			t.Run(tc.name, func(t *testing.T) {
				id, w1 := newID(), newID()
				info := actorOn(id, job, node, ids.Nil, "")
				info.MaxRestarts = -1
				registerActor(t, c, info)
				for _, f := range tc.before {
					f(t, id, w1)
				}
				req := &gorayv1.GetActorRequest{ActorId: id.Bytes(), WaitAlive: tc.waitAlive, WaitNotAliveOn: w1.Bytes()}
				var r result
				if tc.last == nil {
					got, err := c.GetActor(ctxT(t), req)
					r = result{got.GetActor(), err}
				} else {
					ch := wait(t, ctxT(t), req)
					for _, f := range tc.still {
						f(t, id, w1)
						select {
						case r := <-ch:
							t.Fatalf("the wait ended early: %v, %v", r.a, r.err)
						case <-time.After(20 * time.Millisecond):
						}
					}
					tc.last(t, id, w1)
					r = recv(t, ch)
				}
				mustOK(t, r.err)
				stillOnW1 := ids.MustFromBytes(r.a.GetAddress().GetWorkerId()) == w1
				if r.a.GetState() != tc.want || (tc.elsewhere && stillOnW1) {
					t.Fatalf("got %v on worker %x, want %v (elsewhere: %v)", r.a.GetState(), r.a.GetAddress().GetWorkerId(), tc.want, tc.elsewhere)
				}
			})
		}
		_, err := c.GetActor(ctxT(t), &gorayv1.GetActorRequest{ActorId: newID().Bytes(), WaitNotAliveOn: []byte{1}})
		wantCode(t, err, codes.InvalidArgument, "wait_not_alive_on")
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

// TestNodeLeavingIsANodeFailure: however a node leaves the cluster — it
// stops reporting, it is unregistered by `goray stop`, or its raylet
// reports its actors failed as it shuts down and then unregisters — an
// actor on it with restarts left restarts (its owner lives elsewhere),
// while one owned from that node, one without restarts left and one never
// alive die; only a kill (or the owner's death) ends a restartable actor.
func TestNodeLeavingIsANodeFailure(t *testing.T) {
	const restarting = gorayv1.ActorState_ACTOR_STATE_RESTARTING
	for _, leave := range []struct {
		name string
		do   func(t *testing.T, s *Server, c gorayv1.GcsClient, clock *fakeClock, node ids.ID)
	}{
		{"missed health checks", func(t *testing.T, s *Server, c gorayv1.GcsClient, clock *fakeClock, node ids.ID) {
			clock.Advance(3 * time.Second) // 6s since the victim's last report
			// The others report on time (health.go).
			for _, v := range s.Nodes() {
				if id := ids.MustFromBytes(v.GetInfo().GetNodeId()); id != node {
					_, err := c.ReportHeartbeat(ctxT(t), &gorayv1.HeartbeatRequest{NodeId: id.Bytes()})
					mustOK(t, err)
				}
			}
			s.checkHealth()
		}},
		{"unregistered", func(t *testing.T, s *Server, c gorayv1.GcsClient, clock *fakeClock, node ids.ID) {
			_, err := c.UnregisterNode(ctxT(t), &gorayv1.UnregisterNodeRequest{NodeId: node.Bytes(), Reason: "node shut down"})
			mustOK(t, err)
		}},
		{"raylet shutdown: node-wide report, then unregistered", func(t *testing.T, s *Server, c gorayv1.GcsClient, clock *fakeClock, node ids.ID) {
			_, err := c.ReportWorkerFailure(ctxT(t), &gorayv1.ReportWorkerFailureRequest{NodeId: node.Bytes(), Reason: "node shutting down"})
			mustOK(t, err)
			_, err = c.UnregisterNode(ctxT(t), &gorayv1.UnregisterNodeRequest{NodeId: node.Bytes(), Reason: "node shut down"})
			mustOK(t, err)
		}},
	} {
		t.Run(leave.name, func(t *testing.T) {
			clock := newFakeClock()
			s, c := startServer(t, Options{Now: clock.Now})
			job, victim, other := newID(), newID(), newID()
			registerNode(t, c, victim, "victim")
			registerNode(t, c, other, "other")
			type actor struct {
				name      string
				owner     ids.ID // node of the owner
				max       int32
				restarted int32 // restarts used up before the node leaves
				alive     bool
				killed    bool
				want      gorayv1.ActorState
			}
			actors := []actor{
				{name: "restartable", owner: other, max: 1, alive: true, want: restarting},
				{name: "unlimited", owner: other, max: -1, restarted: 5, alive: true, want: restarting},
				{name: "owned from the leaving node", owner: victim, max: -1, alive: true, want: dead},
				{name: "no restarts", owner: other, max: 0, alive: true, want: dead},
				{name: "restarts used up", owner: other, max: 1, restarted: 1, alive: true, want: dead},
				{name: "never alive", owner: other, max: 1, want: dead},
				{name: "killed", owner: other, max: -1, alive: true, killed: true, want: dead},
			}
			id := map[string]ids.ID{}
			for _, a := range actors {
				id[a.name] = newID()
				info := actorOn(id[a.name], job, victim, newID(), a.name)
				info.MaxRestarts = a.max
				info.Owner = &gorayv1.Address{NodeId: a.owner.Bytes(), WorkerId: newID().Bytes()}
				registerActor(t, c, info)
				s.mu.Lock()
				s.actors[id[a.name]].info.NumRestarts = a.restarted
				s.mu.Unlock()
				if a.alive {
					setState(t, c, id[a.name], alive, "")
				}
				if a.killed {
					setState(t, c, id[a.name], dead, "killed by ray.Kill")
				}
			}
			clock.Advance(3 * time.Second)
			_, err := c.ReportHeartbeat(ctxT(t), &gorayv1.HeartbeatRequest{NodeId: other.Bytes()})
			mustOK(t, err)
			leave.do(t, s, c, clock, victim)
			if st := nodeView(t, c, other).GetInfo().GetState(); st != StateAlive {
				t.Fatalf("the other node is %s", st)
			}
			for _, a := range actors {
				got := getActor(t, c, id[a.name])
				if got.GetState() != a.want {
					t.Errorf("%s: %v (%q), want %v", a.name, got.GetState(), got.GetDeathReason(), a.want)
				}
				if a.want == restarting && got.GetNumRestarts() != a.restarted+1 {
					t.Errorf("%s: %d restarts, want %d", a.name, got.GetNumRestarts(), a.restarted+1)
				}
			}
		})
	}
}

// TestReportWorkerFailureOutOfMemory: a worker the node's memory monitor
// killed (out_of_memory) gives its actor the death_cause out_of_memory,
// whether it dies of it or restarts from it; the cause goes once the actor
// is alive again, and a kill or another failure does not keep it.
func TestReportWorkerFailureOutOfMemory(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)
	job, node := newID(), newID()
	const oom = DeathCauseOutOfMemory
	restarting := gorayv1.ActorState_ACTOR_STATE_RESTARTING
	type actor struct{ id, w ids.ID }
	start := func(maxRestarts int32) actor {
		a := actor{newID(), newID()}
		info := actorOn(a.id, job, node, a.w, "")
		info.MaxRestarts = maxRestarts
		registerActor(t, c, info)
		setState(t, c, a.id, alive, "")
		return a
	}
	fail := func(a actor, outOfMemory bool) {
		t.Helper()
		_, err := c.ReportWorkerFailure(ctx, &gorayv1.ReportWorkerFailureRequest{WorkerId: a.w.Bytes(), NodeId: node.Bytes(),
			Reason: "killed by the memory monitor", OutOfMemory: outOfMemory})
		mustOK(t, err)
	}
	check := func(a actor, st gorayv1.ActorState, cause string) {
		t.Helper()
		if got := getActor(t, c, a.id); got.GetState() != st || got.GetDeathCause() != cause {
			t.Fatalf("actor %s: %v, cause %q; want %v, cause %q", a.id.Short(), got.GetState(), got.GetDeathCause(), st, cause)
		}
	}
	realive := func(a *actor) {
		t.Helper()
		a.w = newID()
		_, err := c.UpdateActor(ctx, &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: a.id.Bytes(), State: alive,
			Address: &gorayv1.Address{UnixPath: "/tmp/w.sock", NodeId: node.Bytes(), WorkerId: a.w.Bytes()}}})
		mustOK(t, err)
	}

	dies := start(0)
	fail(dies, true)
	check(dies, dead, oom)

	r := start(-1)
	fail(r, true)
	check(r, restarting, oom)
	realive(&r)
	check(r, alive, "")
	fail(r, false)
	check(r, restarting, "")

	k := start(-1)
	fail(k, true)
	check(k, restarting, oom)
	setState(t, c, k.id, dead, "killed")
	check(k, dead, "")
}
