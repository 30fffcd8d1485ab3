package gcs

import (
	"context"
	"errors"
	"fmt"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestInvalidArguments(t *testing.T) {
	_, c := startServer(t, Options{})
	short := []byte{1, 2, 3}
	good := newID().Bytes()
	tests := []struct {
		name  string
		call  func(ctx context.Context) error
		field string
	}{
		{"register node nil", func(ctx context.Context) error {
			_, err := c.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{})
			return err
		}, "node: required"},
		{"register node empty id", func(ctx context.Context) error {
			_, err := c.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: &gorayv1.NodeInfo{}})
			return err
		}, "node.node_id: required"},
		{"register node short id", func(ctx context.Context) error {
			_, err := c.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: &gorayv1.NodeInfo{NodeId: short}})
			return err
		}, "node.node_id: want 16 bytes, got 3"},
		{"unregister node", func(ctx context.Context) error {
			_, err := c.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: short})
			return err
		}, "node_id"},
		{"heartbeat", func(ctx context.Context) error {
			_, err := c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{})
			return err
		}, "node_id: required"},
		{"add job nil", func(ctx context.Context) error {
			_, err := c.AddJob(ctx, &gorayv1.AddJobRequest{})
			return err
		}, "job: required"},
		{"add job id", func(ctx context.Context) error {
			_, err := c.AddJob(ctx, &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: short}})
			return err
		}, "job.job_id"},
		{"add job driver node", func(ctx context.Context) error {
			_, err := c.AddJob(ctx, &gorayv1.AddJobRequest{Job: &gorayv1.JobInfo{JobId: good, DriverNodeId: short}})
			return err
		}, "job.driver_node_id"},
		{"mark job finished", func(ctx context.Context) error {
			_, err := c.MarkJobFinished(ctx, &gorayv1.MarkJobFinishedRequest{})
			return err
		}, "job_id: required"},
		{"register actor nil", func(ctx context.Context) error {
			_, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{})
			return err
		}, "actor: required"},
		{"register actor id", func(ctx context.Context) error {
			_, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: &gorayv1.ActorInfo{JobId: good}})
			return err
		}, "actor.actor_id: required"},
		{"register actor job", func(ctx context.Context) error {
			_, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: &gorayv1.ActorInfo{ActorId: good, JobId: short}})
			return err
		}, "actor.job_id"},
		{"register actor address", func(ctx context.Context) error {
			_, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: &gorayv1.ActorInfo{ActorId: good, JobId: good,
				Address: &gorayv1.Address{WorkerId: short}}})
			return err
		}, "actor.address.worker_id"},
		{"register actor owner", func(ctx context.Context) error {
			_, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: &gorayv1.ActorInfo{ActorId: good, JobId: good,
				Owner: &gorayv1.Address{NodeId: short}}})
			return err
		}, "actor.owner.node_id"},
		{"update actor", func(ctx context.Context) error {
			_, err := c.UpdateActor(ctx, &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: short}})
			return err
		}, "actor.actor_id"},
		{"update actor address", func(ctx context.Context) error {
			_, err := c.UpdateActor(ctx, &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: good, Address: &gorayv1.Address{NodeId: short}}})
			return err
		}, "actor.address.node_id"},
		{"get actor neither", func(ctx context.Context) error {
			_, err := c.GetActor(ctx, &gorayv1.GetActorRequest{})
			return err
		}, "actor_id or name is required"},
		{"get actor short id", func(ctx context.Context) error {
			_, err := c.GetActor(ctx, &gorayv1.GetActorRequest{ActorId: short, Name: "x"})
			return err
		}, "actor_id: want 16 bytes"},
		{"worker failure worker", func(ctx context.Context) error {
			_, err := c.ReportWorkerFailure(ctx, &gorayv1.ReportWorkerFailureRequest{WorkerId: short})
			return err
		}, "worker_id: want 16 bytes"},
		{"worker failure node", func(ctx context.Context) error {
			_, err := c.ReportWorkerFailure(ctx, &gorayv1.ReportWorkerFailureRequest{NodeId: short})
			return err
		}, "node_id: want 16 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.call(ctxT(t)), codes.InvalidArgument, tc.field)
		})
	}
}

func TestTypedErrors(t *testing.T) {
	s := New(Options{})
	ctx := t.Context()
	job, first := newID(), newID()
	_, err := s.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: actorOn(first, job, ids.Nil, ids.Nil, "c1")})
	mustOK(t, err)

	_, err = s.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: actorOn(newID(), job, ids.Nil, ids.Nil, "c1")})
	var taken *NameTakenError
	if !errors.As(err, &taken) || taken.Name != "c1" || taken.Holder != first {
		t.Fatalf("err = %v, want NameTakenError{c1, first}", err)
	}
	_, err = s.GetActor(ctx, &gorayv1.GetActorRequest{Name: "x"})
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.Kind != "actor" || nf.Name != "x" || err.Error() != `no actor named "x"` {
		t.Fatalf("err = %v, want NotFoundError for x", err)
	}
	_, err = s.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: []byte{1}})
	var bad *InvalidArgumentError
	if !errors.As(err, &bad) || bad.Field != "node_id" {
		t.Fatalf("err = %v, want InvalidArgumentError for node_id", err)
	}
	_, err = s.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: actorOn(first, job, ids.Nil, ids.Nil, "")})
	var dup *AlreadyExistsError
	if !errors.As(err, &dup) || dup.ID != first {
		t.Fatalf("err = %v, want AlreadyExistsError", err)
	}
}

func TestSubscribe(t *testing.T) {
	leaktest.Goroutines(t)
	clock := newFakeClock()
	s := New(Options{Now: clock.Now})
	ctx := t.Context()
	events, unsubscribe := s.Subscribe()
	events2, unsubscribe2 := s.Subscribe()
	defer unsubscribe2()

	node, job, actor := newID(), newID(), newID()
	_, err := s.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: nodeInfo(node, "n")})
	mustOK(t, err)
	_, err = s.AddJob(ctx, &gorayv1.AddJobRequest{Job: jobOf(job)})
	mustOK(t, err)
	_, err = s.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: actorOn(actor, job, node, newID(), "")})
	mustOK(t, err)
	_, err = s.UpdateActor(ctx, &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: actor.Bytes(), State: alive}})
	mustOK(t, err)
	_, err = s.UpdateActor(ctx, &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: actor.Bytes(), Pid: 4}}) // no event
	mustOK(t, err)
	clock.Advance(11 * time.Second) // its only node: declared dead after 2 × 5 periods (health.go)
	s.checkHealth()
	_, err = s.MarkJobFinished(ctx, &gorayv1.MarkJobFinishedRequest{JobId: job.Bytes()})
	mustOK(t, err)

	type want struct {
		kind   EventKind
		detail string
	}
	describe := func(ev Event) want {
		switch {
		case ev.Node != nil:
			return want{ev.Kind, ev.Node.GetState()}
		case ev.Job != nil:
			return want{ev.Kind, ev.Job.GetState()}
		case ev.Actor != nil:
			return want{ev.Kind, ev.Actor.GetState().String() + " " + ev.Actor.GetDeathReason()}
		}
		return want{ev.Kind, "empty"}
	}
	wants := []want{
		{EventNodeAdded, StateAlive},
		{EventJobAdded, StateRunning},
		{EventActorRegistered, "ACTOR_STATE_PENDING "},
		{EventActorStateChanged, "ACTOR_STATE_ALIVE "},
		{EventNodeDead, StateDead},
		{EventActorStateChanged, fmt.Sprintf("ACTOR_STATE_DEAD node %s died: missed 5 health checks (last seen 11.0s ago)", node.Short())},
		{EventJobFinished, StateFinished},
	}
	next := func(ch <-chan Event) Event {
		t.Helper()
		select {
		case ev := <-ch:
			return ev
		case <-time.After(waitfor.Generous):
			t.Fatal("no event")
			return Event{}
		}
	}
	var got1 []Event
	for i, w := range wants {
		ev := next(events)
		if d := describe(ev); d != w {
			t.Fatalf("event %d = %v %q, want %v %q", i, d.kind, d.detail, w.kind, w.detail)
		}
		got1 = append(got1, ev)
	}
	// The second subscriber gets the same sequence in its own copies.
	for i, w := range wants {
		ev := next(events2)
		if d := describe(ev); d != w {
			t.Fatalf("subscriber 2 event %d = %v, want %v", i, d, w)
		}
		if (ev.Node != nil && ev.Node == got1[i].Node) || (ev.Actor != nil && ev.Actor == got1[i].Actor) || (ev.Job != nil && ev.Job == got1[i].Job) {
			t.Fatalf("event %d shares a message between subscribers", i)
		}
	}
	// Snapshots are not aliased to the tables.
	got1[0].Node.NodeName = "mutated"
	if s.Nodes()[0].GetInfo().GetNodeName() != "n" {
		t.Fatal("event message aliases the node table")
	}

	unsubscribe()
	unsubscribe() // idempotent
	select {
	case _, ok := <-events:
		if ok {
			t.Fatal("event received after unsubscribe")
		}
	case <-time.After(waitfor.Generous):
		t.Fatal("channel not closed by unsubscribe")
	}
	// Later changes still reach the remaining subscriber.
	_, err = s.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: nodeInfo(newID(), "m")})
	mustOK(t, err)
	if ev := next(events2); ev.Kind != EventNodeAdded || ev.Node.GetNodeName() != "m" {
		t.Fatalf("after unsubscribe of other: %v", ev)
	}
}

func TestSubscribeUnsubscribeWithUnreadEvents(t *testing.T) {
	leaktest.Goroutines(t)
	s := New(Options{})
	_, unsubscribe := s.Subscribe()
	for range 100 {
		_, err := s.RegisterNode(t.Context(), &gorayv1.RegisterNodeRequest{Node: nodeInfo(newID(), "n")})
		mustOK(t, err) // never blocks on the unread subscriber
	}
	unsubscribe()
}

func TestAccessorsReturnCopies(t *testing.T) {
	s := New(Options{})
	ctx := t.Context()
	node, job, actor := newID(), newID(), newID()
	_, err := s.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: nodeInfo(node, "n")})
	mustOK(t, err)
	_, err = s.AddJob(ctx, &gorayv1.AddJobRequest{Job: jobOf(job)})
	mustOK(t, err)
	_, err = s.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: actorOn(actor, job, node, ids.Nil, "")})
	mustOK(t, err)

	s.Nodes()[0].Info.State = "BROKEN"
	s.Jobs()[0].State = "BROKEN"
	s.Actors()[0].State = dead
	if s.Nodes()[0].GetInfo().GetState() != StateAlive || s.Jobs()[0].GetState() != StateRunning || s.Actors()[0].GetState() != pending {
		t.Fatal("accessor results alias the tables")
	}
}

// TestConcurrentUse hammers the server from many goroutines; run with -race.
func TestConcurrentUse(t *testing.T) {
	s, c := startServer(t, Options{HeartbeatPeriod: 5 * time.Millisecond, FailureThreshold: 1000})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var runWG sync.WaitGroup
	runWG.Go(func() { s.Run(ctx) })
	events, unsubscribe := s.Subscribe()
	defer unsubscribe()
	var drain sync.WaitGroup
	drain.Go(func() {
		for range events {
		}
	})

	job := newID()
	_, err := c.AddJob(ctx, &gorayv1.AddJobRequest{Job: jobOf(job)})
	mustOK(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			node := newID()
			if _, err := c.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: nodeInfo(node, fmt.Sprint(g))}); err != nil {
				errs <- err
				return
			}
			for i := range 20 {
				id := newID()
				name := fmt.Sprintf("a%d", i%3) // contended names
				_, err := c.RegisterActor(ctx, &gorayv1.RegisterActorRequest{Actor: actorOn(id, job, node, newID(), name)})
				if err != nil {
					if status.Code(err) != codes.AlreadyExists {
						errs <- err
						return
					}
					continue
				}
				getDone := make(chan error, 1)
				go func() {
					_, err := c.GetActor(ctx, &gorayv1.GetActorRequest{ActorId: id.Bytes(), WaitAlive: true})
					getDone <- err
				}()
				if _, err := c.UpdateActor(ctx, &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: id.Bytes(), State: alive}}); err != nil {
					errs <- err
					return
				}
				if err := <-getDone; err != nil {
					errs <- err
					return
				}
				_, _ = c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: node.Bytes()})
				_, _ = c.KVPut(ctx, &gorayv1.KVPutRequest{Ns: "ns", Key: name, Value: []byte{byte(i)}, Overwrite: true})
				_, _ = c.GetAllNodes(ctx, &gorayv1.GetAllNodesRequest{})
				_, _ = c.ListActors(ctx, &gorayv1.ListActorsRequest{})
				if _, err := c.UpdateActor(ctx, &gorayv1.UpdateActorRequest{Actor: &gorayv1.ActorInfo{ActorId: id.Bytes(), State: dead}}); err != nil {
					errs <- err
					return
				}
			}
			_, _ = c.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: node.Bytes()})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, a := range s.Actors() {
		if a.GetState() != dead {
			t.Fatalf("actor %x left %v", a.GetActorId(), a.GetState())
		}
	}
	cancel()
	runWG.Wait()
	unsubscribe()
	drain.Wait()
}
