package core

import (
	"context"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Background registration of unnamed actors (Ray's AsyncRegisterActor).
//
// CreateActor of an unnamed actor returns its handle at once and registers
// the actor with the GCS from a goroutine of its own, then creates it; a
// GCS that is down delays the creation, not the caller. Until the GCS has
// the actor, another process given the handle could not find it there, so
// every way a handle leaves this process waits for the registration: a
// task or actor call whose arguments hold it (resolveArgs, like an
// argument not ready yet), a Put of a value that holds it, and a task's
// return value. Calls through the handle in this process queue as they do
// until the actor is alive; Kill waits for the registration first. A
// failed registration kills the actor with its reason, as before.

// registerThenCreate registers c's actor with the GCS, bounded by the
// creation's context, then creates it. Only once it is registered does
// the client hold the constructor's arguments for restarts (createRec,
// holdsArgs), as CreateActor does for a named actor: a failed registration
// releases them here, once.
func (c *actorClient) registerThenCreate(rec *taskRecord) {
	cw := c.m.cw
	c.mu.Lock()
	cancel := c.createCancel
	done := c.registered
	c.mu.Unlock()
	_, err := cw.gcs.RegisterActor(rec.ctx, &pb.RegisterActorRequest{Actor: c.info(rec)})
	if err != nil {
		cw.objects.removeSubmitted(rec.deps)
		if cancel != nil {
			cancel()
		}
		if rec.ctx.Err() != nil {
			err = cancelledError(rec.spec.Function, context.Cause(rec.ctx))
		}
		c.setDead(registerError(c.ref, err))
		close(done)
		return
	}
	c.mu.Lock()
	c.createRec = rec
	c.holdsArgs = c.maxRestarts != 0 // released at its death
	c.mu.Unlock()
	close(done)
	c.create(rec)
}

// ownsLive reports whether this process created an actor, not detached,
// that is not dead (objectTable.ownsAny).
func (m *actorManager) ownsLive() bool {
	m.mu.Lock()
	cs := make([]*actorClient, 0, len(m.clients))
	for _, c := range m.clients {
		cs = append(cs, c)
	}
	m.mu.Unlock()
	for _, c := range cs {
		c.mu.Lock()
		live := c.owner && !c.detached && c.dead == nil
		c.mu.Unlock()
		if live {
			return true
		}
	}
	return false
}

// pendingRegistration returns what closes once this process's
// registration of actor id is done, or nil when none is under way.
func (m *actorManager) pendingRegistration(id ids.ID) <-chan struct{} {
	m.mu.Lock()
	c := m.clients[id]
	m.mu.Unlock()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	done := c.registered
	c.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
		return done
	}
}

// awaitRegistered waits until this process's registration of actor id, if
// one is under way, is done (or failed: the actor is then dead, which its
// handle says), ctx ends or the core worker stops.
func (m *actorManager) awaitRegistered(ctx context.Context, id ids.ID) error {
	done := m.pendingRegistration(id)
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-m.cw.closed:
		return ErrShutdown
	}
}

// awaitAll is awaitRegistered of every actor in actors.
func (m *actorManager) awaitAll(ctx context.Context, actors []ids.ID) error {
	for _, id := range actors {
		if err := m.awaitRegistered(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// registering returns those of actors whose registration by this process
// is under way.
func (m *actorManager) registering(actors []ids.ID) []ids.ID {
	var out []ids.ID
	for _, id := range actors {
		if m.pendingRegistration(id) != nil {
			out = append(out, id)
		}
	}
	return out
}
