package core

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNotCancellable matches a ray.Cancel that cannot apply to its object:
// it is not the result of a task or actor call (a Put), or Force was asked
// for an actor call.
var ErrNotCancellable = errors.New("not cancellable")

// notCancellableError is a ray.Cancel that cannot apply to its object; it
// matches ErrNotCancellable.
type notCancellableError struct {
	id     ids.ObjectID
	reason string
}

func (e *notCancellableError) Error() string {
	return fmt.Sprintf("goray: cancel %s: %v: %s", e.id, ErrNotCancellable, e.reason)
}

func (e *notCancellableError) Is(target error) bool { return target == ErrNotCancellable }

// CancelTask asks the task (or actor method call) producing object id to
// stop (ray.Cancel). A task not sent to a worker yet fails at once with a
// TaskCancelledError; a running one has its context cancelled, and when it
// gives up (returns an error) its result is a TaskCancelledError (a task
// that finishes anyway keeps its value); with force, a running normal task's
// worker process is stopped instead. A cancelled task is not retried. A
// finished task is left as it is.
func (cw *CoreWorker) CancelTask(ctx context.Context, id ids.ObjectID, force bool) error {
	rec := cw.objects.taskOf(id)
	if rec == nil {
		return &notCancellableError{id: id, reason: "it is not the result of a task or actor call this process submitted"}
	}
	if rec.spec.Kind == pb.TaskKind_TASK_KIND_ACTOR_METHOD {
		if force {
			return &notCancellableError{id: id, reason: "Force applies to tasks, not actor calls (kill the actor instead)"}
		}
		return cw.cancelActorCall(ctx, rec)
	}
	return cw.submitter.cancel(ctx, rec, force)
}

// CancelRef is ray.Cancel of the object h refers to: CancelTask when this
// process owns it; otherwise (a borrowed ref, for example one a task
// returned) the owner is asked to cancel the task or actor call producing
// it, as Ray's ray.cancel does for a ref the caller does not own.
func (cw *CoreWorker) CancelRef(ctx context.Context, h *Handle, force bool) error {
	if h.Owner == nil || cw.isSelf(h.Owner) {
		return cw.CancelTask(ctx, h.ID, force)
	}
	w, _ := ids.FromBytes(h.Owner.WorkerId)
	owner := w.Short()
	cli, err := cw.peer(h.Owner)
	if err == nil {
		_, err = cli.CancelObject(ctx, &pb.CancelObjectRequest{ObjectId: h.ID.Bytes(), Force: force})
	}
	if err != nil {
		if st := status.Convert(err); st.Code() == codes.FailedPrecondition {
			return &notCancellableError{id: h.ID, reason: st.Message() + " (says its owner, worker " + owner + ")"}
		}
		return fmt.Errorf("goray: cancel %s through its owner (worker %s): %w", h.ID, owner, err)
	}
	return nil
}

// cancel cancels a normal task (see CancelTask).
func (s *submitter) cancel(ctx context.Context, rec *taskRecord, force bool) error {
	tid := ids.MustFromBytes(rec.spec.TaskId)
	s.mu.Lock()
	if rec.state == stateFinished || rec.state == stateFailed {
		s.mu.Unlock()
		return nil
	}
	rec.cancelled = true
	var worker *pb.Address
	queued := false
	for _, k := range s.keys {
		if i := slices.Index(k.queue, rec); i >= 0 {
			k.queue = slices.Delete(k.queue, i, i+1)
			queued = true
			break
		}
		for l := range k.leases {
			if l.inflight[tid] == rec {
				worker = l.worker
			}
		}
	}
	s.mu.Unlock()
	switch {
	case queued:
		s.fail(rec, cancelledError(rec.spec.Function, errors.New("ray.Cancel")))
		return nil
	case worker == nil:
		// Resolving its arguments (or between a worker's death and its
		// retry): ending its context fails it before it is sent.
		rec.cancel()
		return nil
	}
	cli, err := s.cw.peer(worker)
	if err != nil {
		return fmt.Errorf("goray: cancel task %s: %w", tid.Short(), err)
	}
	if force {
		// The worker exits at once; the broken stream fails the task as
		// cancelled (never retried).
		_, _ = cli.Exit(ctx, &pb.ExitRequest{Reason: "ray.Cancel(Force) of task " + tid.String(), Force: true})
		return nil
	}
	if _, err := cli.CancelTask(ctx, &pb.CancelTaskRequest{TaskId: tid.Bytes()}); err != nil {
		return fmt.Errorf("goray: cancel task %s on its worker: %w", tid.Short(), err)
	}
	return nil
}

// cancelActorCall cancels an actor method call: its actor's worker cancels
// it when it runs, or answers it as cancelled when its turn comes.
func (cw *CoreWorker) cancelActorCall(ctx context.Context, rec *taskRecord) error {
	cw.submitter.mu.Lock()
	finished := rec.state == stateFinished || rec.state == stateFailed
	rec.cancelled = !finished // not retried (taskretry.go)
	cw.submitter.mu.Unlock()
	if finished {
		return nil
	}
	actorID := ids.MustFromBytes(rec.spec.ActorId)
	c := cw.actors.client(ActorRef{ID: actorID})
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	addr, dead := c.addr, c.dead
	c.mu.Unlock()
	if dead != nil || addr == nil {
		return nil // its calls fail with the actor's death
	}
	cli, err := cw.peer(addr)
	if err != nil {
		return fmt.Errorf("goray: cancel call of actor %s: %w", actorID.Short(), err)
	}
	if _, err := cli.CancelTask(ctx, &pb.CancelTaskRequest{TaskId: rec.spec.TaskId}); err != nil {
		return fmt.Errorf("goray: cancel call of actor %s: %w", actorID.Short(), err)
	}
	return nil
}
