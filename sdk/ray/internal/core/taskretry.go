package core

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/goray-dev/goray/internal/ids"
)

// Actor task retries (Ray's max_task_retries).
//
// An actor call carries its retry budget in spec.MaxRetries (from the
// ActorRef it was made through, whose MaxTaskRetries is the handle's or
// the method's; -1: no limit) and its attempt number in spec.Attempt. When an attempt was under way (sent, not answered) as
// the actor's worker failed and the actor restarts — or as the connection
// to its live worker broke — the client requeues the call, if it has
// retries left, at the head of its queue: the calls requeued together in
// the order they were sent, before every call not sent yet, so each
// caller's calls still reach the actor in submission order. The call keeps
// its task id and return object; its attempt number goes up (the failed
// attempt is recorded FAILED in the task events, the next one queued).
// Retrying is at-least-once: the failed attempt may have run in part or in
// full. A call with no retry left fails with ActorUnavailableError saying
// how many attempts ran; a dead actor (killed, or out of restarts) fails
// every pending call at once (setDead), retried or not.
//
// Lock order: actorClient.mu, then submitter.mu.

// retriesLeft reports whether actor call rec, whose attempt failed with
// its actor's worker or connection, may run again: its budget allows,
// ray.Cancel did not ask to stop it and its caller still waits.
func retriesLeft(rec *taskRecord) bool {
	n := rec.spec.MaxRetries
	return !rec.cancelled && rec.ctx.Err() == nil && (n < 0 || rec.spec.Attempt-rec.oomKills < n)
}

// requeueInflightLocked takes the calls under way off c: those with
// retries left go back to the head of the queue (in the order they were
// sent, before the calls not sent yet) as their next attempt, the others
// are returned to be failed (attempts ran: spec.Attempt+1). It reports
// whether the queue's sender must be started. reason is why the attempts
// failed (task events). c.mu must be held.
func (c *actorClient) requeueInflightLocked(reason string) (fails []*taskRecord, start bool) {
	if len(c.inflight) == 0 {
		return nil, false
	}
	under := make([]*taskRecord, 0, len(c.inflight))
	for _, rec := range c.inflight {
		under = append(under, rec)
	}
	c.inflight = map[ids.ID]*taskRecord{}
	// Seq numbers the sends of this client: sent order.
	slices.SortFunc(under, func(a, b *taskRecord) int { return cmp.Compare(a.spec.Seq, b.spec.Seq) })
	var retry []*taskRecord
	s := c.m.cw.submitter
	s.mu.Lock()
	for _, rec := range under {
		if !retriesLeft(rec) {
			fails = append(fails, rec)
			continue
		}
		s.nextAttemptLocked(rec, "ActorUnavailableError", fmt.Sprintf("%s; retrying (attempt %d failed)", reason, rec.spec.Attempt+1))
		rec.worker, rec.node = nil, nil
		retry = append(retry, rec)
	}
	s.mu.Unlock()
	if len(retry) == 0 {
		return fails, false
	}
	c.queue = append(retry, c.queue...)
	start = !c.running
	c.running = true
	c.m.cw.log.Warn("retrying actor calls that were under way", "actor", c.ref.ID.Short(), "calls", len(retry), "reason", reason)
	return fails, start
}

// unavailable is the error of an actor call rec that was under way when
// its actor became unavailable (reason) and has no retry left.
func (c *actorClient) unavailable(rec *taskRecord, reason string) *ActorUnavailableError {
	return &ActorUnavailableError{ActorID: c.ref.ID, Name: c.ref.Name, Reason: reason, Attempts: int(rec.spec.Attempt) + 1}
}

// deadFor is dead, the error of the dead actor, as seen by call rec:
// when rec had been retried it says how many attempts ran (sent counts
// the attempt under way when the actor died).
func deadFor(dead error, rec *taskRecord, sent bool) error {
	ran := int(rec.spec.Attempt)
	if sent {
		ran++
	}
	de, ok := dead.(*ActorDiedError)
	if !ok || rec.spec.Attempt == 0 || ran == 0 {
		return dead
	}
	cp := *de
	cp.Attempts = ran
	return &cp
}

// dequeue removes rec from the queue of calls not sent yet; it reports
// whether rec was there (whoever takes a call off the queue or the
// in-flight set answers it).
func (c *actorClient) dequeue(rec *taskRecord) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.queue, rec)
	if i < 0 {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	return true
}

// attempts says "1 attempt" or "n attempts".
func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}
