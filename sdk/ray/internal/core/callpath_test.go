package core

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc"
)

// Tests of the synchronous call path's shortcuts (callpath.go): each must
// leave behaviour as it was.

// TestFlushLoopWokenOnlyForWork: completing and releasing objects wakes
// the flush loop only when that queued something for it.
func TestFlushLoopWokenOnlyForWork(t *testing.T) {
	inline := func(id ids.ObjectID) *pb.ReturnObject {
		return &pb.ReturnObject{ObjectId: id.Bytes(), Metadata: codec.FormatRaw.Meta(), Data: []byte("ok")}
	}
	tests := []struct {
		name string
		// make creates the object (with one handle) and returns its id.
		make func(tb *objectTable) ids.ObjectID
		want bool
	}{
		{"owned, inline value", func(tb *objectTable) ids.ObjectID {
			id := ids.ObjectIDFor(tb.cw.idgen.Next(), 1)
			tb.newOwned(id, nil, 1)
			tb.complete(id, inline(id), nil, false)
			return id
		}, false},
		{"owned, in the store: a free", func(tb *objectTable) ids.ObjectID {
			id := ids.ObjectIDFor(tb.cw.idgen.Next(), 1)
			tb.newOwned(id, nil, 1)
			tb.complete(id, storeRet(id), nil, false)
			return id
		}, true},
		{"borrowed, registered with its owner: a removal", func(tb *objectTable) ids.ObjectID {
			id := ids.ObjectIDFor(ids.New(), 1)
			tb.addLocal(id, otherOwner())
			tb.mu.Lock()
			o := tb.objs[id]
			o.pendingAdd, o.registered = false, true
			tb.adds = map[ownerKey]*borrowBatch{}
			tb.mu.Unlock()
			return id
		}, true},
		{"borrowed, not registered yet", func(tb *objectTable) ids.ObjectID {
			id := ids.ObjectIDFor(ids.New(), 1)
			tb.addLocal(id, otherOwner())
			return id
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTestWorker(t).objects
			id := tt.make(tb)
			if len(tb.kick) != 0 {
				t.Fatal("flush loop woken before anything was released")
			}
			tb.removeLocal(id)
			if got := len(tb.kick) == 1; got != tt.want {
				t.Fatalf("flush loop woken = %v, want %v (frees %d, removes %d)", got, tt.want, len(tb.frees), len(tb.removes))
			}
		})
	}
}

// leaseFakes are the raylet and stream of a lease under test: the raylet
// records returned leases.
type leaseFakes struct {
	pb.RayletClient
	pb.CoreWorker_PushTasksClient
	mu       sync.Mutex
	returned int
}

func (f *leaseFakes) ReturnWorkerLease(context.Context, *pb.ReturnLeaseRequest, ...grpc.CallOption) (*pb.ReturnLeaseReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.returned++
	return &pb.ReturnLeaseReply{}, nil
}

func (f *leaseFakes) CloseSend() error { return nil }

func (f *leaseFakes) returns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.returned
}

// TestLeaseLinger: an idle lease is returned once it has had nothing to
// do for its whole linger, never while it is busy or used again, and one
// timer serves all its idle spells.
func TestLeaseLinger(t *testing.T) {
	newLease := func(t *testing.T, linger time.Duration) (*submitter, *lease, *leaseFakes) {
		t.Helper()
		cw := newTestWorker(t)
		s := newSubmitter(cw)
		s.linger = linger
		f := &leaseFakes{}
		k := &schedKey{leases: map[*lease]struct{}{}}
		l := &lease{raylet: f, stream: f, worker: &pb.Address{}, inflight: map[ids.ID]*taskRecord{}, key: k, cancel: func() {}}
		k.leases[l] = struct{}{}
		return s, l, f
	}
	// use dispatches a task to l and returns it: l idles again at the
	// generation returned.
	use := func(s *submitter, l *lease) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		l.idleGen++
		return l.idleGen
	}
	state := func(s *submitter, l *lease) (dead, lingering bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return l.dead, l.lingering
	}
	tests := []struct {
		name string
		run  func(t *testing.T, s *submitter, l *lease, f *leaseFakes)
	}{
		{"idle for its whole linger: returned", func(t *testing.T, s *submitter, l *lease, f *leaseFakes) {
			s.lingerThenReturn(l, 0)
			s.mu.Lock()
			l.idleSince = time.Now().Add(-2 * s.linger)
			s.mu.Unlock()
			s.lingerExpired(l)
			if dead, _ := state(s, l); !dead || f.returns() != 1 {
				t.Fatalf("dead %v, returned %d times; want returned once", dead, f.returns())
			}
		}},
		{"idle since less than its linger: waits out the rest", func(t *testing.T, s *submitter, l *lease, f *leaseFakes) {
			s.lingerThenReturn(l, 0)
			s.lingerExpired(l)
			if dead, lingering := state(s, l); dead || !lingering || f.returns() != 0 {
				t.Fatalf("dead %v, lingering %v, returned %d; want kept and still lingering", dead, lingering, f.returns())
			}
		}},
		{"busy when the timer fires: left to its next idle spell", func(t *testing.T, s *submitter, l *lease, f *leaseFakes) {
			s.lingerThenReturn(l, 0)
			gen := use(s, l)
			s.mu.Lock()
			l.inflight[ids.New()] = &taskRecord{}
			s.mu.Unlock()
			s.lingerExpired(l)
			if dead, lingering := state(s, l); dead || lingering || f.returns() != 0 {
				t.Fatalf("dead %v, lingering %v, returned %d; want kept, timer disarmed", dead, lingering, f.returns())
			}
			s.mu.Lock()
			clear(l.inflight)
			s.mu.Unlock()
			s.lingerThenReturn(l, gen)
			if _, lingering := state(s, l); !lingering {
				t.Fatal("timer not armed again when the lease became idle")
			}
		}},
		{"used again after its idle spell was noted late: not returned", func(t *testing.T, s *submitter, l *lease, f *leaseFakes) {
			s.lingerThenReturn(l, 0)
			use(s, l) // dispatched and answered; its idle spell not noted yet
			s.mu.Lock()
			l.idleSince = time.Now().Add(-2 * s.linger)
			s.mu.Unlock()
			s.lingerExpired(l)
			if dead, _ := state(s, l); dead || f.returns() != 0 {
				t.Fatalf("dead %v, returned %d; want kept", dead, f.returns())
			}
		}},
		{"a stale idle spell does not arm the timer", func(t *testing.T, s *submitter, l *lease, f *leaseFakes) {
			use(s, l)
			s.lingerThenReturn(l, 0)
			if _, lingering := state(s, l); lingering {
				t.Fatal("timer armed for a lease used since")
			}
		}},
		{"one timer for many idle spells", func(t *testing.T, s *submitter, l *lease, f *leaseFakes) {
			s.lingerThenReturn(l, 0)
			first := l.lingerTimer
			for range 100 {
				s.lingerThenReturn(l, use(s, l))
			}
			if l.lingerTimer != first {
				t.Fatal("a new timer for an idle spell")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A linger no test waits out: the timer never fires by itself.
			s, l, f := newLease(t, time.Hour)
			tt.run(t, s, l, f)
		})
	}
	t.Run("the timer returns an idle lease", func(t *testing.T) {
		s, l, f := newLease(t, time.Millisecond)
		s.lingerThenReturn(l, 0)
		waitUntil(t, "the idle lease to be returned", func() bool { return f.returns() == 1 })
		if dead, _ := state(s, l); !dead {
			t.Fatal("returned lease not marked dead")
		}
	})
}

// TestActorCallsKeepOrder: calls sent from the submitting goroutine (an
// idle client) and by the client's sender keep their order: a call waiting
// for its argument is not overtaken, and concurrent callers' calls reach
// the actor in the order each made them, numbered in sent order.
func TestActorCallsKeepOrder(t *testing.T) {
	dir, gpath := serveTestGCS(t)
	cw := newActorTestWorker(t, gpath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := startFakeActorWorker(t, dir, "w")
	ref := ActorRef{ID: ids.New(), Class: "Fake"}
	if _, err := cw.gcs.RegisterActor(ctx, &pb.RegisterActorRequest{Actor: &pb.ActorInfo{ActorId: ref.ID.Bytes(), JobId: cw.jobID.Bytes(), ClassName: "Fake"}}); err != nil {
		t.Fatal(err)
	}
	aliveOn(t, cw.gcs, ref, w)
	call := func(method string, args ...ArgInput) *Handle {
		return cw.SubmitActorTask(ctx, ref, method, args, TaskOptions{})
	}
	get := func(t *testing.T, h *Handle) {
		t.Helper()
		if _, err := cw.Get(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	// arrived returns the methods of the calls the actor got from i on,
	// checking that they are numbered in arrival order.
	arrived := func(t *testing.T, from int) []string {
		t.Helper()
		w.mu.Lock()
		defer w.mu.Unlock()
		var out []string
		for i, s := range w.specs[from:] {
			if i > 0 && s.Seq <= w.specs[from+i-1].Seq {
				t.Fatalf("call %q arrived with seq %d after seq %d", s.Function, s.Seq, w.specs[from+i-1].Seq)
			}
			out = append(out, s.Function)
		}
		return out
	}
	get(t, call("open")) // the stream is open from here on

	t.Run("a call waiting for its argument is not overtaken", func(t *testing.T) {
		from := w.callCount()
		release := w.holdReplies()
		a := call("a")
		waitUntil(t, "the first call to reach the actor", func() bool { return w.callCount() == from+1 })
		b := call("b", ArgInput{Handle: a}) // waits for a's value
		c := call("c")
		release()
		get(t, b)
		get(t, c)
		if got := fmt.Sprint(arrived(t, from)); got != "[a b c]" {
			t.Fatalf("calls arrived as %s, want [a b c]", got)
		}
		w.mu.Lock()
		arg := w.specs[from+1].Args[0]
		w.mu.Unlock()
		if arg.ByRef || string(arg.Data) != "w" {
			t.Fatalf("b was sent with its argument unresolved: %v", arg)
		}
	})
	t.Run("concurrent callers", func(t *testing.T) {
		from := w.callCount()
		const callers, calls = 4, 30
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				var burst []*Handle
				for i := range calls {
					h := call(fmt.Sprintf("%d/%d", g, i))
					if i%4 == 0 {
						get(t, h) // synchronous
						continue
					}
					burst = append(burst, h)
				}
				for _, h := range burst {
					get(t, h)
				}
			})
		}
		wg.Wait()
		next := make([]int, callers)
		got := arrived(t, from)
		for _, m := range got {
			var g, i int
			if _, err := fmt.Sscanf(m, "%d/%d", &g, &i); err != nil {
				t.Fatalf("call %q: %v", m, err)
			}
			if i != next[g] {
				t.Fatalf("caller %d's call %d arrived when %d was due", g, i, next[g])
			}
			next[g]++
		}
		if len(got) != callers*calls {
			t.Fatalf("%d calls arrived, want %d", len(got), callers*calls)
		}
	})
}
