package gcs

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/limits"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/status"
)

type actorEntry struct {
	id   ids.ID
	info *gorayv1.ActorInfo
	// changed is closed (and replaced) whenever the actor's state changes,
	// waking GetActor(wait_alive) callers.
	changed chan struct{}
}

// nsName is the key of a named actor or placement group: names are
// unique per namespace.
type nsName struct{ namespace, name string }

// nameKey is the actor's key in byName (meaningful when it is named).
func (a *actorEntry) nameKey() nsName {
	return nsName{a.info.GetNamespace(), a.info.GetName()}
}

// checkActorNamespace checks an actor namespace (limits.CheckActorNamespace;
// field names it in the error).
func checkActorNamespace(field, ns string) error {
	if err := limits.CheckActorNamespace(ns); err != nil {
		return &InvalidArgumentError{Field: field, Problem: err.Error()}
	}
	return nil
}

func (a *actorEntry) node() ids.ID   { return ids.MustFromBytes(a.info.GetAddress().GetNodeId()) }
func (a *actorEntry) worker() ids.ID { return ids.MustFromBytes(a.info.GetAddress().GetWorkerId()) }

// notifyLocked wakes every waiter on the actor; s.mu must be held.
func (a *actorEntry) notifyLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// validateAddress checks the id fields of an optional address.
func validateAddress(field string, addr *gorayv1.Address) error {
	if addr == nil {
		return nil
	}
	if _, err := parseOptionalID(field+".node_id", addr.GetNodeId()); err != nil {
		return err
	}
	_, err := parseOptionalID(field+".worker_id", addr.GetWorkerId())
	return err
}

// checkActorInfo validates what RegisterActor is told of an actor (and
// what a GCS reads back from its storage): its ids, addresses, namespace,
// and that a detached actor is named. It returns the actor's and its
// job's ids.
func checkActorInfo(in *gorayv1.ActorInfo) (id, job ids.ID, err error) {
	if id, err = parseID("actor.actor_id", in.GetActorId()); err != nil {
		return ids.Nil, ids.Nil, err
	}
	if job, err = parseID("actor.job_id", in.GetJobId()); err != nil {
		return ids.Nil, ids.Nil, err
	}
	if err := validateAddress("actor.address", in.GetAddress()); err != nil {
		return ids.Nil, ids.Nil, err
	}
	if err := validateAddress("actor.owner", in.GetOwner()); err != nil {
		return ids.Nil, ids.Nil, err
	}
	if _, err := parseOptionalID("actor.placement_group_id", in.GetPlacementGroupId()); err != nil {
		return ids.Nil, ids.Nil, err
	}
	if err := checkActorNamespace("actor.namespace", in.GetNamespace()); err != nil {
		return ids.Nil, ids.Nil, err
	}
	if in.GetDetached() && in.GetName() == "" {
		return ids.Nil, ids.Nil, &InvalidArgumentError{Field: "actor.name", Problem: "a detached actor must be named (later jobs find it by name)"}
	}
	return id, job, nil
}

// RegisterActor inserts the actor in state PENDING with the server's start
// time. It fails with NameTakenError when a non-DEAD actor has the same
// non-empty name in the same namespace (a dead actor's name is free),
// AlreadyExistsError when the id is registered, and JobFinishedError when
// the actor's job has finished. With get_if_exists a live holder of the
// name of the same class is no error: nothing is registered and the reply
// carries the holder, decided under the lock that registers names, so
// concurrent creators all get the one actor. A detached actor must be
// named; it is recorded without an owner (the GCS owns it).
func (s *Server) RegisterActor(ctx context.Context, req *gorayv1.RegisterActorRequest) (_ *gorayv1.RegisterActorReply, err error) {
	var d durable
	defer d.wait(ctx, &err) // after the unlock below: answer once the change is durable
	in := req.GetActor()
	if in == nil {
		return nil, &InvalidArgumentError{Field: "actor", Problem: "required"}
	}
	id, jobID, err := checkActorInfo(in)
	if err != nil {
		return nil, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.actors[id]; ok {
		return nil, &AlreadyExistsError{Kind: "actor", ID: id}
	}
	if j, ok := s.jobs[jobID]; ok && j.GetState() == StateFinished {
		return nil, &JobFinishedError{ID: jobID, Op: fmt.Sprintf("register actor %s", id)}
	}
	name := in.GetName()
	key := nsName{in.GetNamespace(), name}
	if name != "" {
		if holder, ok := s.byName[key]; ok {
			h := s.actors[holder].info
			if req.GetGetIfExists() && h.GetClassName() == in.GetClassName() {
				return &gorayv1.RegisterActorReply{Existing: cloneMsg(h)}, nil
			}
			nt := &NameTakenError{Name: name, Namespace: key.namespace, Holder: holder, Class: h.GetClassName()}
			if req.GetGetIfExists() {
				nt.WantClass = in.GetClassName()
			}
			return nil, nt
		}
	}
	info := cloneMsg(in)
	if info.GetDetached() {
		info.Owner = nil // the GCS owns it
	}
	info.State = gorayv1.ActorState_ACTOR_STATE_PENDING
	info.StartTimeMs = s.nowMs()
	info.EndTimeMs = 0
	info.DeathReason = ""
	a := &actorEntry{id: id, info: info, changed: make(chan struct{})}
	s.actors[id] = a
	s.actorSeq = append(s.actorSeq, id)
	if name != "" {
		s.byName[key] = id
	}
	s.saveActorLocked(a)
	d = s.durableNow()
	s.log.Debug("actor registered", "actor", id.Short(), "name", name, "namespace", key.namespace, "detached", info.GetDetached(), "class", info.GetClassName(), "job", jobID.Short())
	s.publishLocked(Event{Kind: EventActorRegistered, Actor: info})
	return &gorayv1.RegisterActorReply{}, nil
}

// UpdateActor merges the non-zero fields state, address, pid, death_reason
// and end_time_ms into the actor. State PENDING (the zero value) means "no
// change". Updates to a DEAD actor are ignored: an actor never comes back.
// An actor that becomes ALIVE on a node already declared dead dies at once.
func (s *Server) UpdateActor(ctx context.Context, req *gorayv1.UpdateActorRequest) (_ *gorayv1.UpdateActorReply, err error) {
	var d durable
	defer d.wait(ctx, &err) // after the unlock below: answer once the change is durable
	in := req.GetActor()
	if in == nil {
		return nil, &InvalidArgumentError{Field: "actor", Problem: "required"}
	}
	id, err := parseID("actor.actor_id", in.GetActorId())
	if err != nil {
		return nil, err
	}
	if err := validateAddress("actor.address", in.GetAddress()); err != nil {
		return nil, err
	}
	switch st := in.GetState(); st {
	case gorayv1.ActorState_ACTOR_STATE_PENDING, gorayv1.ActorState_ACTOR_STATE_ALIVE, gorayv1.ActorState_ACTOR_STATE_DEAD:
	default:
		return nil, &InvalidArgumentError{Field: "actor.state", Problem: fmt.Sprintf("unknown state %d", st)}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.pruneHistoryLocked() // before the unlock, after the loops (history.go)
	a, ok := s.actors[id]
	if !ok {
		return nil, &NotFoundError{Kind: "actor", ID: id}
	}
	if a.info.GetState() == gorayv1.ActorState_ACTOR_STATE_DEAD {
		s.log.Debug("ignoring update of dead actor", "actor", id.Short(), "state", in.GetState())
		return &gorayv1.UpdateActorReply{}, nil
	}
	if in.GetAddress() != nil {
		a.info.Address = cloneMsg(in.GetAddress())
	}
	if in.GetPid() != 0 {
		a.info.Pid = in.GetPid()
	}
	if in.GetEndTimeMs() != 0 {
		a.info.EndTimeMs = in.GetEndTimeMs()
	}
	switch in.GetState() {
	case gorayv1.ActorState_ACTOR_STATE_DEAD:
		reason := in.GetDeathReason()
		if reason == "" {
			reason = "actor died"
		}
		if a.info.GetState() != gorayv1.ActorState_ACTOR_STATE_DEAD {
			a.info.DeathCause = "" // killed, or its constructor failed: not a failure's
		}
		s.markActorDeadLocked(a, reason)
	case gorayv1.ActorState_ACTOR_STATE_ALIVE:
		if n, ok := s.nodes[a.node()]; ok && n.info.GetState() == StateDead {
			s.markActorDeadLocked(a, fmt.Sprintf("node %s died: %s", a.node().Short(), n.info.GetDeathReason()))
			break
		}
		if a.info.GetState() != gorayv1.ActorState_ACTOR_STATE_ALIVE {
			a.info.State = gorayv1.ActorState_ACTOR_STATE_ALIVE
			a.info.DeathCause = "" // (the failure it restarted from is over)
			s.log.Debug("actor alive", "actor", id.Short(), "name", a.info.GetName(), "pid", a.info.GetPid())
			a.notifyLocked()
			s.publishLocked(Event{Kind: EventActorStateChanged, Actor: a.info})
		}
	default:
		if in.GetDeathReason() != "" {
			a.info.DeathReason = in.GetDeathReason()
		}
	}
	s.saveActorLocked(a)
	d = s.durableNow()
	return &gorayv1.UpdateActorReply{}, nil
}

// markActorDeadLocked makes a DEAD with reason, frees its name (lookups of
// it say not found from now on, as in Ray) and wakes its waiters; s.mu must
// be held. It does nothing if a is already dead.
func (s *Server) markActorDeadLocked(a *actorEntry, reason string) {
	if a.info.GetState() == gorayv1.ActorState_ACTOR_STATE_DEAD {
		return
	}
	a.info.State = gorayv1.ActorState_ACTOR_STATE_DEAD
	s.hist.actors.push(a.id)
	if name := a.info.GetName(); name != "" && s.byName[a.nameKey()] == a.id {
		delete(s.byName, a.nameKey())
	}
	a.info.DeathReason = reason
	if a.info.GetEndTimeMs() == 0 {
		a.info.EndTimeMs = s.nowMs()
	}
	s.saveActorLocked(a)
	s.log.Info("actor dead", "actor", a.id.Short(), "name", a.info.GetName(), "reason", reason)
	a.notifyLocked()
	s.publishLocked(Event{Kind: EventActorStateChanged, Actor: a.info})
}

// actorFailedLocked handles the death of a's worker (or node): an ALIVE
// actor with restarts left (max_restarts, -1 for no limit) whose owner's
// node is alive becomes RESTARTING — its owner creates it again and
// reports it ALIVE — unless the worker was stopped on purpose (permanent);
// any other actor dies. A detached actor is created again by the process
// that created it, so it restarts only while its job runs (see
// detachedRestartableLocked). cause is the failure's death_cause
// (DeathCauseOutOfMemory, or ""), kept while it restarts and when it dies.
// s.mu must be held.
func (s *Server) actorFailedLocked(a *actorEntry, reason, cause string, permanent bool) {
	switch a.info.GetState() {
	case gorayv1.ActorState_ACTOR_STATE_DEAD, gorayv1.ActorState_ACTOR_STATE_RESTARTING:
		return // already handled (a node report after the worker's)
	}
	a.info.DeathCause = cause // of this failure (DeathCauseOutOfMemory, or none)
	max := a.info.GetMaxRestarts()
	exhausted := max == 0 || (max > 0 && a.info.GetNumRestarts() >= max)
	ownerNode, _ := ids.FromBytes(a.info.GetOwner().GetNodeId())
	n, ok := s.nodes[ownerNode]
	ownerGone := ok && n.info.GetState() == StateDead
	creatorGone := false
	if a.info.GetDetached() && !exhausted {
		creatorGone = !s.detachedRestartableLocked(a)
	}
	if permanent || exhausted || ownerGone || creatorGone || a.info.GetState() != gorayv1.ActorState_ACTOR_STATE_ALIVE {
		if exhausted && max != 0 {
			reason = fmt.Sprintf("%s (restarted %d times, max_restarts %d)", reason, a.info.GetNumRestarts(), max)
		}
		if creatorGone && !permanent {
			reason = fmt.Sprintf("%s (a detached actor is created again by the job that created it, and job %s has finished)", reason, ids.MustFromBytes(a.info.GetJobId()).Short())
		}
		s.markActorDeadLocked(a, reason)
		return
	}
	a.info.State = gorayv1.ActorState_ACTOR_STATE_RESTARTING
	a.info.NumRestarts++
	a.info.DeathReason = reason // the failure it restarts from
	s.saveActorLocked(a)
	s.log.Info("actor restarting", "actor", a.id.Short(), "name", a.info.GetName(), "restart", a.info.GetNumRestarts(), "reason", reason)
	a.notifyLocked()
	s.publishLocked(Event{Kind: EventActorStateChanged, Actor: a.info})
}

// lookupActorLocked finds an actor by id, or by namespace and name when id
// is Nil; s.mu must be held.
func (s *Server) lookupActorLocked(id ids.ID, ns, name string) (*actorEntry, error) {
	if id.IsNil() {
		aid, ok := s.byName[nsName{ns, name}]
		if !ok {
			return nil, &NotFoundError{Kind: "actor", Name: name, Namespace: ns}
		}
		return s.actors[aid], nil
	}
	a, ok := s.actors[id]
	if !ok {
		return nil, &NotFoundError{Kind: "actor", ID: id}
	}
	return a, nil
}

// waitError is returned when a GetActor or GetPlacementGroup wait ends
// with its context. It unwraps to the context's error and carries the
// matching gRPC status.
type waitError struct {
	what string // "actor %s to be alive"
	id   ids.ID
	err  error
}

func (e *waitError) Error() string {
	return fmt.Sprintf("waiting for "+e.what+": %v", e.id, e.err)
}

func (e *waitError) Unwrap() error { return e.err }

func (e *waitError) GRPCStatus() *status.Status {
	return status.New(status.FromContextError(e.err).Code(), e.Error())
}

// GetActor returns an actor by actor_id, or by name: the actor holding the
// name in namespace, which is never a DEAD one (a dead actor's name is
// free, so looking it up is NotFoundError). With wait_alive it blocks while the actor is
// PENDING or RESTARTING; with wait_not_alive_on (a worker id) while it is
// ALIVE on that worker; in both cases until ctx ends.
func (s *Server) GetActor(ctx context.Context, req *gorayv1.GetActorRequest) (*gorayv1.GetActorReply, error) {
	var id ids.ID
	name := req.GetName()
	if len(req.GetActorId()) > 0 {
		var err error
		if id, err = parseID("actor_id", req.GetActorId()); err != nil {
			return nil, err
		}
	} else if name == "" {
		return nil, &InvalidArgumentError{Field: "actor_id", Problem: "actor_id or name is required"}
	}
	notOn, err := parseOptionalID("wait_not_alive_on", req.GetWaitNotAliveOn())
	if err != nil {
		return nil, err
	}
	if err := checkActorNamespace("namespace", req.GetNamespace()); err != nil {
		return nil, err
	}
	for {
		s.mu.Lock()
		a, err := s.lookupActorLocked(id, req.GetNamespace(), name)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		st := a.info.GetState()
		wait := req.GetWaitAlive() && (st == gorayv1.ActorState_ACTOR_STATE_PENDING || st == gorayv1.ActorState_ACTOR_STATE_RESTARTING)
		if !notOn.IsNil() && st == gorayv1.ActorState_ACTOR_STATE_ALIVE && a.worker() == notOn {
			wait = true
		}
		if !wait {
			info := cloneMsg(a.info)
			s.mu.Unlock()
			return &gorayv1.GetActorReply{Actor: info}, nil
		}
		// Keep waiting on this actor even if the name is later reused.
		id = a.id
		ch := a.changed
		s.mu.Unlock()
		s.waiters.Add(1)
		select {
		case <-ch:
			s.waiters.Add(-1)
		case <-ctx.Done():
			s.waiters.Add(-1)
			return nil, &waitError{what: "actor %s to be alive", id: id, err: ctx.Err()}
		}
	}
}

// ListActors returns every actor, alive and dead, in registration order.
func (s *Server) ListActors(context.Context, *gorayv1.ListActorsRequest) (*gorayv1.ListActorsReply, error) {
	return &gorayv1.ListActorsReply{Actors: s.Actors()}, nil
}

// ReportWorkerFailure handles the failure of every actor hosted by
// worker_id or, when worker_id is empty, every actor on node_id: it dies,
// or restarts when it may (see actorFailedLocked). The node itself is not
// marked dead.
func (s *Server) ReportWorkerFailure(ctx context.Context, req *gorayv1.ReportWorkerFailureRequest) (_ *gorayv1.ReportWorkerFailureReply, err error) {
	var d durable
	defer d.wait(ctx, &err) // after the unlock below: answer once the change is durable
	worker, err := parseOptionalID("worker_id", req.GetWorkerId())
	if err != nil {
		return nil, err
	}
	node, err := parseOptionalID("node_id", req.GetNodeId())
	if err != nil {
		return nil, err
	}
	if worker.IsNil() && node.IsNil() {
		return nil, &InvalidArgumentError{Field: "worker_id", Problem: "worker_id or node_id is required"}
	}
	reason := req.GetReason()
	match := func(a *actorEntry) bool { return a.worker() == worker }
	if worker.IsNil() {
		match = func(a *actorEntry) bool { return a.node() == node }
		if reason == "" {
			reason = fmt.Sprintf("node %s failed", node.Short())
		}
	} else if reason == "" {
		reason = fmt.Sprintf("worker %s failed", worker.Short())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.pruneHistoryLocked() // before the unlock, after the loops (history.go)
	cause := ""
	if req.GetOutOfMemory() {
		cause = DeathCauseOutOfMemory
	}
	for _, aid := range s.actorSeq {
		if a := s.actors[aid]; match(a) {
			s.actorFailedLocked(a, reason, cause, req.GetPermanent())
		}
	}
	d = s.durableNow()
	return &gorayv1.ReportWorkerFailureReply{}, nil
}
