package core

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Namespaces and detached actors (Ray's namespace and lifetime="detached").
//
// Named actors live in a namespace: a job's actors in the job's
// (Config.Namespace; a driver's workers get it in EnvNamespace), and a
// name is unique per namespace in the GCS. A detached actor is registered
// without an owner (the GCS owns it) and leased without a holder, so
// neither this process's death nor its job's end ends it; this process
// still runs its creation (and its restarts while it runs).

// EnvNamespace names the variable that carries a job's namespace to its
// workers (the driver forwards it with the job).
const EnvNamespace = "GORAY_NAMESPACE"

// Namespace returns the namespace of this process's job.
func (cw *CoreWorker) Namespace() string { return cw.cfg.Namespace }

// LookupActorIn finds the live actor with the given name in namespace: a
// dead actor's name is free, and looking it up fails with
// ErrActorNotFound.
func (cw *CoreWorker) LookupActorIn(ctx context.Context, namespace, name string) (ActorRef, error) {
	if cw.gcs == nil {
		return ActorRef{}, ErrNotInitialized
	}
	rep, err := cw.gcs.GetActor(ctx, &pb.GetActorRequest{Name: name, Namespace: namespace})
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return ActorRef{}, fmt.Errorf("%w: no actor named %q in namespace %q", ErrActorNotFound, name, namespace)
		}
		return ActorRef{}, fmt.Errorf("goray: looking up actor %q in namespace %q: %w", name, namespace, err)
	}
	if rep.Actor.State == pb.ActorState_ACTOR_STATE_DEAD {
		return ActorRef{}, fmt.Errorf("%w: no live actor named %q in namespace %q (the last one died: %s)", ErrActorNotFound, name, namespace, rep.Actor.DeathReason)
	}
	id, err := ids.FromBytes(rep.Actor.ActorId)
	if err != nil {
		return ActorRef{}, err
	}
	return ActorRef{ID: id, Name: rep.Actor.Name, Class: rep.Actor.ClassName, MaxTaskRetries: int(rep.Actor.GetMaxTaskRetries())}, nil
}

// adopt replaces c, a creation the GCS did not register because a live
// actor of its class holds its name (get-if-exists), by that actor: c is
// forgotten, and the existing actor is followed like any found by name.
func (m *actorManager) adopt(c *actorClient, existing *pb.ActorInfo) (ActorRef, error) {
	m.mu.Lock()
	if m.clients[c.ref.ID] == c {
		delete(m.clients, c.ref.ID)
	}
	m.mu.Unlock()
	id, err := ids.FromBytes(existing.GetActorId())
	if err != nil {
		return c.ref, fmt.Errorf("goray: the GCS returned the existing actor %q with a bad id: %w", existing.GetName(), err)
	}
	m.cw.log.Debug("actor name held: using the existing actor", "name", existing.GetName(), "namespace", existing.GetNamespace(), "actor", id.Short())
	return ActorRef{ID: id, Name: existing.GetName(), Class: existing.GetClassName(), MaxTaskRetries: int(existing.GetMaxTaskRetries())}, nil
}
