package core

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"google.golang.org/grpc"
)

// TestActorTaskRetries: calls under way when an actor's worker fails are
// retried on its next instance (MaxTaskRetries), keeping their task id,
// in the order they were sent and before calls made after them; a call
// out of retries fails with ActorUnavailableError saying how many attempts
// ran; a dead actor fails a requeued call at once. The GCS is real, the
// workers are fakes served over gRPC (fakeActorWorker), and this process
// is a caller that does not own the actor.
func TestActorTaskRetries(t *testing.T) {
	dir, gpath := serveTestGCS(t)
	cw := newActorTestWorker(t, gpath)
	gc := cw.gcs
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	newActor := func(t *testing.T, w *fakeActorWorker, retries int) ActorRef {
		t.Helper()
		ref := ActorRef{ID: ids.New(), Class: "Fake", MaxTaskRetries: retries}
		if _, err := gc.RegisterActor(ctx, &pb.RegisterActorRequest{Actor: &pb.ActorInfo{ActorId: ref.ID.Bytes(), JobId: cw.jobID.Bytes(), ClassName: "Fake", MaxRestarts: -1}}); err != nil {
			t.Fatal(err)
		}
		aliveOn(t, gc, ref, w)
		return ref
	}
	call := func(ref ActorRef) *Handle { return cw.SubmitActorTask(ctx, ref, "m", nil, TaskOptions{}) }
	answer := func(h *Handle) (string, error) {
		v, err := cw.Get(ctx, h)
		if err != nil {
			return "", err
		}
		return string(v.Data), nil
	}
	// kill stops w (its streams end) and has the GCS record its failure,
	// as a raylet does when a worker process dies.
	kill := func(t *testing.T, ref ActorRef, w *fakeActorWorker) {
		t.Helper()
		w.srv.Stop()
		waitUntil(t, "the client to see the stream end", func() bool { return suspended(cw, ref) })
		if _, err := gc.ReportWorkerFailure(ctx, &pb.ReportWorkerFailureRequest{WorkerId: w.id.Bytes(), Reason: "worker process exited: signal: killed"}); err != nil {
			t.Fatal(err)
		}
	}
	taskOf := func(h *Handle) ids.ID { return h.ID.TaskID() }

	t.Run("retried in order on the restarted instance", func(t *testing.T) {
		w1, w2 := startFakeActorWorker(t, dir, "w1a"), startFakeActorWorker(t, dir, "w2a")
		ref := newActor(t, w1, 2)
		w1.holdReplies()
		under := []*Handle{call(ref), call(ref), call(ref)}
		waitUntil(t, "the calls to be under way", func() bool { return underWay(cw, ref) == 3 && w1.callCount() == 1 })
		kill(t, ref, w1)
		queued := call(ref) // made while the actor restarts
		aliveOn(t, gc, ref, w2)
		later := call(ref)
		for i, h := range append(append(under, queued), later) {
			if got, err := answer(h); err != nil || got != "w2a" {
				t.Fatalf("call %d answered %q, %v; want the restarted instance's answer", i, got, err)
			}
		}
		w2.mu.Lock()
		specs := w2.specs
		w2.mu.Unlock()
		want := []struct {
			h       *Handle
			attempt int32
		}{{under[0], 1}, {under[1], 1}, {under[2], 1}, {queued, 0}, {later, 0}}
		if len(specs) != len(want) {
			t.Fatalf("the new instance got %d calls, want %d", len(specs), len(want))
		}
		var lastSeq uint64
		for i, w := range want {
			got := ids.MustFromBytes(specs[i].TaskId)
			if got != taskOf(w.h) || specs[i].Attempt != w.attempt {
				t.Errorf("call %d on the new instance is task %s attempt %d, want task %s attempt %d", i, got.Short(), specs[i].Attempt, taskOf(w.h).Short(), w.attempt)
			}
			if specs[i].Seq <= lastSeq {
				t.Errorf("call %d has seq %d after seq %d", i, specs[i].Seq, lastSeq)
			}
			lastSeq = specs[i].Seq
		}
		for _, ts := range cw.submitter.listTasks() {
			if id := ids.MustFromBytes(ts.TaskId); id == taskOf(under[0]) && (ts.Attempt != 1 || ts.State != stateFinished) {
				t.Errorf("task list shows the retried call at attempt %d, %s; want attempt 1, %s", ts.Attempt, ts.State, stateFinished)
			}
		}
	})

	t.Run("a handle found by name has the recorded budget", func(t *testing.T) {
		id := ids.New()
		if _, err := gc.RegisterActor(ctx, &pb.RegisterActorRequest{Actor: &pb.ActorInfo{ActorId: id.Bytes(), JobId: cw.jobID.Bytes(), ClassName: "Fake",
			Name: "budgeted", Namespace: "ns", MaxRestarts: -1, MaxTaskRetries: 3}}); err != nil {
			t.Fatal(err)
		}
		ref, err := cw.LookupActorIn(ctx, "ns", "budgeted")
		if err != nil || ref.ID != id || ref.MaxTaskRetries != 3 {
			t.Fatalf("LookupActorIn = %+v, %v; want actor %s with MaxTaskRetries 3", ref, err, id.Short())
		}
	})

	t.Run("out of retries: unavailable, saying how many attempts ran", func(t *testing.T) {
		w1, w2 := startFakeActorWorker(t, dir, "w1b"), startFakeActorWorker(t, dir, "w2b")
		ref := newActor(t, w1, 1)
		w1.holdReplies()
		w2.holdReplies()
		h := call(ref)
		waitUntil(t, "the call to reach the worker", func() bool { return w1.callCount() == 1 })
		kill(t, ref, w1)
		aliveOn(t, gc, ref, w2)
		waitUntil(t, "the retry to reach the new instance", func() bool { return w2.callCount() == 1 })
		kill(t, ref, w2)
		_, err := answer(h)
		var ue *ActorUnavailableError
		if !errors.Is(err, ErrActorUnavailable) || !errors.As(err, &ue) || ue.Attempts != 2 || !strings.Contains(err.Error(), "2 attempts ran") {
			t.Fatalf("call out of retries: %v; want an *ActorUnavailableError after 2 attempts", err)
		}
	})

	t.Run("dead while restarting: requeued calls fail at once", func(t *testing.T) {
		w1 := startFakeActorWorker(t, dir, "w1c")
		ref := newActor(t, w1, -1)
		w1.holdReplies()
		h := call(ref)
		waitUntil(t, "the call to reach the worker", func() bool { return w1.callCount() == 1 })
		kill(t, ref, w1)
		waitUntil(t, "the call to be requeued", func() bool { return requeued(cw, ref) == 1 })
		if _, err := gc.UpdateActor(ctx, &pb.UpdateActorRequest{Actor: &pb.ActorInfo{ActorId: ref.ID.Bytes(), State: pb.ActorState_ACTOR_STATE_DEAD, DeathReason: "killed by ray.Kill"}}); err != nil {
			t.Fatal(err)
		}
		_, err := answer(h)
		var de *ActorDiedError
		if !errors.Is(err, ErrActorDied) || !errors.As(err, &de) || de.Attempts != 1 || !strings.Contains(err.Error(), "after 1 attempt of the call") {
			t.Fatalf("requeued call of a killed actor: %v; want an *ActorDiedError after 1 attempt", err)
		}
	})

	t.Run("stream cut, worker lives: resent to it", func(t *testing.T) {
		w1 := startFakeActorWorker(t, dir, "w1d")
		ref := newActor(t, w1, 1)
		release := w1.holdReplies()
		h := call(ref)
		waitUntil(t, "the call to reach the worker", func() bool { return w1.callCount() == 1 })
		w1.cutStreams()
		release()
		if got, err := answer(h); err != nil || got != "w1d" {
			t.Fatalf("call resent after the stream broke answered %q, %v", got, err)
		}
		w1.mu.Lock()
		defer w1.mu.Unlock()
		if len(w1.specs) != 2 || w1.specs[0].Attempt != 0 || w1.specs[1].Attempt != 1 || string(w1.specs[1].TaskId) != string(w1.specs[0].TaskId) {
			t.Fatalf("the worker got %d calls, want the same task at attempts 0 and 1", len(w1.specs))
		}
	})
}

// serveTestGCS serves a real GCS on a unix socket in a temp dir until the
// test ends, and returns the dir and the socket's path.
func serveTestGCS(t *testing.T) (dir, path string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path = filepath.Join(dir, "gcs.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(rpc.ServerOptions(nil)...)
	gcs.New(gcs.Options{}).Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return dir, path
}

// clientOf returns cw's client of ref (nil: none yet).
func clientOf(cw *CoreWorker, ref ActorRef) *actorClient {
	cw.actors.mu.Lock()
	defer cw.actors.mu.Unlock()
	return cw.actors.clients[ref.ID]
}

// requeued counts the calls waiting in cw's client of ref that are retries.
func requeued(cw *CoreWorker, ref ActorRef) int {
	c := clientOf(cw, ref)
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, rec := range c.queue {
		if rec.spec.Attempt > 0 {
			n++
		}
	}
	return n
}

// underWay counts the calls cw's client of ref has sent and not had
// answered.
func underWay(cw *CoreWorker, ref ActorRef) int {
	c := clientOf(cw, ref)
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.inflight)
}
