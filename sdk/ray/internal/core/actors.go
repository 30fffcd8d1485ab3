package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ActorRef identifies an actor; it is what an actor handle carries across
// processes.
type ActorRef struct {
	ID    ids.ID `msgpack:"i"`
	Name  string `msgpack:"n"`
	Class string `msgpack:"c"`
	// MaxTaskRetries is how often a call through this handle is retried
	// when its actor's worker fails while it is under way (-1: no limit;
	// see taskretry.go).
	MaxTaskRetries int `msgpack:"r,omitempty"`
}

type actorManager struct {
	cw      *CoreWorker
	mu      sync.Mutex
	clients map[ids.ID]*actorClient
}

func newActorManager(cw *CoreWorker) *actorManager {
	return &actorManager{cw: cw, clients: map[ids.ID]*actorClient{}}
}

// actorClient is this process's view of one actor: its state, address, the
// ordered queue of calls not yet sent and the calls in flight.
//
// It follows the GCS, the authority on the actor's fate: pending (alive
// and dead unset) until the actor is alive at addr; alive until the GCS
// has it RESTARTING, ALIVE elsewhere or DEAD (see watch). When the stream
// to the worker breaks first, the client is suspended — not alive, addr
// kept, calls under way pending and new calls waiting — until the GCS
// says which, however long its failure detector takes (connectionLost).
type actorClient struct {
	m     *actorManager
	ref   ActorRef
	mu    sync.Mutex
	ready chan struct{} // closed when alive or dead
	alive bool
	dead  error
	addr  *pb.Address
	// killing: this process is killing the actor (KillActor); the end of
	// its connection is then expected, not a failure to wait out.
	killing bool

	queue    []*taskRecord
	running  bool
	stream   pb.CoreWorker_PushTasksClient
	cancel   context.CancelFunc
	sendMu   sync.Mutex
	inflight map[ids.ID]*taskRecord
	seq      uint64
	leaseID  []byte
	owner    bool
	detached bool // created detached: its lease has no holder
	// envVars and workDir are what its worker gets beyond the job's
	// (TaskOptions.EnvVars, WorkingDir); a restart asks for the same.
	envVars []string
	workDir *WorkingDir
	// namespace is the namespace it was created in (ActorNamespace; "":
	// its job's).
	namespace string
	// registered, when set, is closed once this process, its creator, has
	// registered it with the GCS or failed to (actorreg.go); nil: nothing
	// to wait for.
	registered chan struct{}
	// createCancel stops a pending creation (Kill before the actor is up).
	createCancel context.CancelFunc
	// Restarts (owner only): the creation record, kept to create the actor
	// again, whose constructor arguments stay referenced while the actor
	// may restart (holdsArgs) and are released at its death.
	createRec   *taskRecord
	maxRestarts int
	holdsArgs   bool
	// watchCancel stops the watch (see watch) of the instance at addr.
	watchCancel context.CancelFunc
	// groups are the actor's declared concurrency groups and their
	// limits; nil until known (groups.go).
	groups map[string]int
}

// readyChan returns the channel closed when the actor is next alive or
// dead (a restart replaces it).
func (c *actorClient) readyChan() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready
}

// waitReady waits until the actor is alive or dead (as of now: a restart
// after that is not waited for), ctx ends or the process closes.
func (c *actorClient) waitReady(ctx context.Context) error {
	select {
	case <-c.readyChan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.m.cw.closed:
		return ErrShutdown
	}
}

// client returns the client for ref, resolving the actor through the GCS
// when this process did not create it.
func (m *actorManager) client(ref ActorRef) *actorClient {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.clients[ref.ID]; c != nil {
		return c
	}
	c := &actorClient{m: m, ref: ref, ready: make(chan struct{}), inflight: map[ids.ID]*taskRecord{}}
	m.clients[ref.ID] = c
	go c.resolve()
	return c
}

// resolve looks the actor up in the GCS and waits until it is alive or dead.
func (c *actorClient) resolve() {
	cw := c.m.cw
	if cw.gcs == nil {
		c.setDead(fmt.Errorf("no GCS connection to look the actor up"))
		return
	}
	req := &pb.GetActorRequest{ActorId: c.ref.ID.Bytes(), WaitAlive: true}
	for {
		// The GCS connection waits while the GCS is down; a long poll that
		// ends without an answer, or a GCS out of reach all the same, is
		// asked again: it still decides.
		rep, err := backoff.Retry(cw.ctx, func() (*pb.GetActorReply, error) {
			rep, err := cw.gcs.GetActor(cw.ctx, req)
			if code := status.Code(err); err != nil && code != codes.DeadlineExceeded && code != codes.Unavailable {
				return nil, backoff.Permanent(err)
			}
			return rep, err
		}, forever(2*time.Second)...)
		if err != nil {
			if cw.ctx.Err() != nil {
				c.setDead(ErrShutdown)
				return
			}
			if status.Code(err) == codes.NotFound {
				c.setDead(fmt.Errorf("the GCS does not know the actor"))
				return
			}
			c.setDead(fmt.Errorf("looking the actor up: %w", err))
			return
		}
		a := rep.Actor
		switch a.State {
		case pb.ActorState_ACTOR_STATE_ALIVE:
			c.learnGroups(a)
			c.setAlive(a.Address)
			return
		case pb.ActorState_ACTOR_STATE_DEAD:
			c.setDead(deathError(c.ref, a))
			return
		}
	}
}

func (c *actorClient) setAlive(addr *pb.Address) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setAliveLocked(addr)
}

// setAliveLocked marks the actor alive at addr and starts following it
// there in the GCS; c.mu must be held. It reports whether the actor was
// not already alive or dead.
func (c *actorClient) setAliveLocked(addr *pb.Address) bool {
	if c.alive || c.dead != nil {
		return false
	}
	c.alive, c.addr = true, addr
	close(c.ready)
	if c.watchCancel != nil {
		c.watchCancel()
		c.watchCancel = nil
	}
	if cw := c.m.cw; cw.gcs != nil && addr != nil {
		ctx, cancel := context.WithCancel(cw.ctx)
		c.watchCancel = cancel
		go c.watch(ctx, addr)
	}
	return true
}

// watch follows the actor in the GCS from its instance at addr, however
// long that takes: when the GCS no longer has it ALIVE there — its worker
// or node failed and it restarts, it runs elsewhere now, or it is dead —
// the client does the same (restart or setDead). A broken connection
// alone decides nothing (see connectionLost): the GCS learns of a worker's
// death from its raylet, and of a node's from its failure detector.
func (c *actorClient) watch(ctx context.Context, addr *pb.Address) {
	cw := c.m.cw
	mine := ids.MustFromBytes(addr.GetWorkerId())
	req := &pb.GetActorRequest{ActorId: c.ref.ID.Bytes(), WaitNotAliveOn: addr.GetWorkerId()}
	// The loop ends with ctx (its error is then of no interest) or once
	// the client followed the GCS's verdict (the operation's nil).
	_, _ = backoff.Retry(ctx, func() (struct{}, error) {
		rep, err := cw.gcs.GetActor(ctx, req)
		if ctx.Err() != nil {
			return struct{}{}, backoff.Permanent(ctx.Err())
		}
		if err == nil {
			a := rep.GetActor()
			on := ids.MustFromBytes(a.GetAddress().GetWorkerId())
			switch {
			case a.GetState() == pb.ActorState_ACTOR_STATE_DEAD:
				c.setDead(deathError(c.ref, a))
				return struct{}{}, nil
			case a.GetState() == pb.ActorState_ACTOR_STATE_RESTARTING && on == mine,
				!c.owner && a.GetState() != pb.ActorState_ACTOR_STATE_PENDING && on != mine:
				// It failed there (or, seen from a borrower, has moved on).
				c.restart(addr, a.GetDeathReason(), a.GetDeathCause())
				return struct{}{}, nil
			}
			// The GCS has not recorded this instance yet (an owner's
			// report of it still on its way), or does not know
			// wait_not_alive_on: ask again in a while.
			return struct{}{}, errNotYet
		}
		if status.Code(err) == codes.NotFound {
			c.setDead(fmt.Errorf("the GCS does not know the actor"))
			return struct{}{}, nil
		}
		cw.log.Debug("following the actor in the GCS failed; retrying", "actor", c.ref.ID.Short(), "error", err)
		return struct{}{}, err
	}, forever(2*time.Second)...)
}

// deathError is why the GCS says actor a died: a typed error when its
// death had a cause other than its own failure.
func deathError(ref ActorRef, a *pb.ActorInfo) error {
	switch a.GetDeathCause() {
	case "placement_group_removed":
		return &PlacementGroupRemovedError{Function: ref.Class, Reason: a.GetDeathReason()}
	case "out_of_memory":
		return actorOutOfMemory(ref, a.GetDeathReason())
	}
	return errors.New(a.GetDeathReason())
}

// actorOutOfMemory is the error of actor ref's worker, killed by its
// node's memory monitor (reason says so): Ray's OutOfMemoryError for the
// calls it was running.
func actorOutOfMemory(ref ActorRef, reason string) *OutOfMemoryError {
	return &OutOfMemoryError{Function: ref.Class, Reason: fmt.Sprintf("actor %s: %s", ref.ID.Short(), reason)}
}

// setDead marks the actor dead and fails every queued and in-flight call.
func (c *actorClient) setDead(reason error) {
	c.mu.Lock()
	if c.dead != nil {
		c.mu.Unlock()
		return
	}
	de := &ActorDiedError{ActorID: c.ref.ID, Name: c.ref.Name, Reason: reason.Error(), Cause: reason}
	var ade *ActorDiedError
	if errors.As(reason, &ade) {
		de = ade
	}
	c.dead = de
	var nt *ActorNameTakenError
	if errors.As(reason, &nt) {
		c.dead = nt
	}
	if !c.alive {
		close(c.ready)
	}
	c.alive = false
	queued, sent := c.queue, c.inflight
	c.queue = nil
	c.inflight = map[ids.ID]*taskRecord{}
	if c.cancel != nil {
		c.cancel()
	}
	if c.watchCancel != nil {
		c.watchCancel()
		c.watchCancel = nil
	}
	var release []codec.RefInfo
	if c.holdsArgs {
		c.holdsArgs = false
		release = c.createRec.deps
	}
	c.mu.Unlock()
	c.m.cw.objects.removeSubmitted(release)
	dead := c.diedErr()
	for _, rec := range queued {
		c.m.cw.submitter.fail(rec, deadFor(dead, rec, false))
	}
	for _, rec := range sent {
		c.m.cw.submitter.fail(rec, deadFor(dead, rec, true))
	}
	if c.owner && c.m.cw.objects != nil {
		c.m.cw.objects.kickOwnership() // it may own nothing now
	}
}

func (c *actorClient) diedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// CreateActor registers an actor in the GCS, starts creating it and returns
// its reference once registered. Calls made before the actor is alive
// queue up and run after it starts. When it cannot even be registered —
// its name is taken (*ActorNameTakenError), its arguments cannot be
// encoded, its job has finished — the error is returned, and the reference
// is of a dead actor whose Ready and calls fail with the same error.
func (cw *CoreWorker) CreateActor(ctx context.Context, class, ctor string, args []ArgInput, opts TaskOptions) (ActorRef, error) {
	ref := ActorRef{ID: ids.New(), Name: opts.Name, Class: class, MaxTaskRetries: opts.MaxTaskRetries}
	c := &actorClient{m: cw.actors, ref: ref, ready: make(chan struct{}), inflight: map[ids.ID]*taskRecord{}, owner: true}
	cw.actors.mu.Lock()
	cw.actors.clients[ref.ID] = c
	cw.actors.mu.Unlock()

	taskID := cw.idgen.Next()
	maxConc := opts.MaxConcurrency
	if maxConc <= 0 {
		maxConc = 1
	}
	spec := &pb.TaskSpec{
		TaskId: taskID.Bytes(), JobId: cw.jobID.Bytes(), Kind: pb.TaskKind_TASK_KIND_ACTOR_CREATION,
		Function: ctor, ReturnId: ids.ObjectIDFor(taskID, 1).Bytes(), Owner: cw.addr,
		Resources: &pb.Resources{Amounts: opts.Resources}, Name: opts.Name, ActorId: ref.ID.Bytes(),
		MaxConcurrency: int32(maxConc), CallerId: cw.id.Bytes(), Transports: opts.Transports,
		ConcurrencyGroups: opts.concurrencyGroups(),
	}
	placeSpec(spec, placementOf(ctx, opts))
	cctx, cancel := submitContext(ctx, nil) // a task returning the handle does not cancel the creation
	c.mu.Lock()
	c.createCancel = cancel
	c.maxRestarts = opts.MaxRestarts
	c.detached = opts.Detached
	c.envVars = opts.EnvVars
	c.workDir = opts.WorkingDir
	c.namespace = opts.Namespace
	c.groups = groupLimits(spec.ConcurrencyGroups)
	c.mu.Unlock()
	cw.objects.kickOwnership() // an owner is not reaped as idle (ownsAny)
	rec := &taskRecord{spec: spec, ctx: cctx, state: statePendingArgs, strategy: strategyProto(opts)}
	if err := cw.buildArgs(ctx, rec, args); err != nil {
		cw.objects.removeSubmitted(rec.deps)
		cancel()
		c.setDead(fmt.Errorf("constructor arguments: %w", err))
		return ref, c.diedErr()
	}
	// An unnamed actor is registered in the background, as Ray does: the
	// handle returns at once, also while the GCS is down, and a call that
	// passes it to another process waits for the registration
	// (actorreg.go). A named actor registers before returning, so that it
	// can be found by name at once and a name clash is known now.
	if cw.gcs != nil && opts.Name == "" && !opts.GetIfExists {
		c.mu.Lock()
		c.registered = make(chan struct{})
		c.mu.Unlock()
		go c.registerThenCreate(rec)
		return ref, nil
	}
	if cw.gcs != nil {
		info := c.info(rec)
		rep, err := cw.gcs.RegisterActor(ctx, &pb.RegisterActorRequest{Actor: info, GetIfExists: opts.GetIfExists})
		if err != nil {
			cw.objects.removeSubmitted(rec.deps)
			cancel()
			c.setDead(registerError(ref, err))
			return ref, c.diedErr()
		}
		if ex := rep.GetExisting(); ex != nil {
			cw.objects.removeSubmitted(rec.deps)
			cancel()
			return cw.actors.adopt(c, ex)
		}
	}
	c.mu.Lock()
	c.createRec = rec
	c.holdsArgs = c.maxRestarts != 0 // released at its death
	c.mu.Unlock()
	go c.create(rec)
	return ref, nil
}

// registerError turns a failed RegisterActor into the actor's death error:
// an *ActorNameTakenError naming the holder (a detail of the GCS's status)
// when the name is taken.
func registerError(ref ActorRef, err error) error {
	st := status.Convert(err)
	if st.Code() != codes.AlreadyExists || ref.Name == "" {
		return errors.New(st.Message())
	}
	nt := &ActorNameTakenError{Name: ref.Name, ActorID: ref.ID}
	for _, d := range st.Details() {
		if h, ok := d.(*pb.ActorInfo); ok {
			nt.Holder, _ = ids.FromBytes(h.GetActorId())
			nt.HolderClass = h.GetClassName()
			nt.Namespace = h.GetNamespace()
		}
	}
	return nt
}

// namespaceOr returns the actor's namespace (ActorNamespace), else job's.
func (c *actorClient) namespaceOr(job string) string {
	if c.namespace != "" {
		return c.namespace
	}
	return job
}

// info is the actor's GCS record at creation.
func (c *actorClient) info(rec *taskRecord) *pb.ActorInfo {
	cw := c.m.cw
	return &pb.ActorInfo{
		ActorId: c.ref.ID.Bytes(), JobId: cw.jobID.Bytes(), Name: c.ref.Name, ClassName: c.ref.Class,
		State: pb.ActorState_ACTOR_STATE_PENDING, Owner: cw.addr, Resources: rec.spec.Resources,
		MaxConcurrency: rec.spec.MaxConcurrency, MaxRestarts: int32(c.maxRestarts),
		PlacementGroupId: rec.spec.GetPlacement().GetPlacementGroupId(),
		Namespace:        c.namespaceOr(cw.cfg.Namespace), Detached: c.detached,
		ConcurrencyGroups: rec.spec.ConcurrencyGroups, MaxTaskRetries: int32(c.ref.MaxTaskRetries),
	}
}

func (c *actorClient) create(rec *taskRecord) {
	cw := c.m.cw
	c.mu.Lock()
	holds, createCancel := c.holdsArgs, c.createCancel
	c.mu.Unlock()
	if !holds {
		defer cw.objects.removeSubmitted(rec.deps)
	}
	defer createCancel()
	fail := func(reason error) {
		c.setDead(reason)
		c.reportDead(reason.Error())
	}
	if err := cw.resolveArgs(rec); err != nil {
		fail(fmt.Errorf("constructor arguments: %w", err))
		return
	}
	reqID := ids.New()
	holder, holderNode := cw.id.Bytes(), cw.nodeID.Bytes()
	if c.detached {
		holder, holderNode = nil, nil // its worker outlives this process
	}
	lr := &pb.LeaseRequest{JobId: cw.jobID.Bytes(), Resources: rec.spec.Resources, ActorId: c.ref.ID.Bytes(), Function: rec.spec.Function, HolderId: holder, HolderNodeId: holderNode, RequestId: reqID.Bytes(), Strategy: rec.strategy, PlacementGroupId: rec.spec.GetPlacement().GetPlacementGroupId(), Detached: c.detached, Retriable: c.maxRestarts != 0, EnvVars: c.envVars}
	if c.workDir != nil {
		lr.WorkingDirSha256, lr.WorkingDirNode = c.workDir.SHA256, c.workDir.Node.Bytes()
	}
	g, err := cw.leaseWorker(rec.ctx, lr, rec.argNode)
	if err != nil {
		if rec.ctx.Err() != nil {
			fail(fmt.Errorf("creation cancelled: %w", context.Cause(rec.ctx)))
			return
		}
		var unsched *UnschedulableError
		var removed *PlacementGroupRemovedError
		if errors.As(err, &unsched) || errors.As(err, &removed) {
			fail(err)
			return
		}
		fail(fmt.Errorf("no worker for the actor: %w", err))
		return
	}
	lrep := g.reply
	c.leaseID = lrep.LeaseId
	dropLease := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = g.raylet.ReturnWorkerLease(ctx, &pb.ReturnLeaseRequest{LeaseId: lrep.LeaseId, DisconnectWorker: true})
	}
	cli, err := cw.peer(lrep.Worker)
	if err != nil {
		dropLease()
		fail(err)
		return
	}
	sctx, cancel := context.WithCancel(cw.ctx)
	st, err := cli.PushTasks(sctx)
	if err == nil {
		err = st.Send(&pb.TaskRequest{Spec: rec.spec})
	}
	var rep *pb.TaskReply
	if err == nil {
		rep, err = st.Recv()
	}
	if err != nil {
		cancel()
		dropLease()
		fail(fmt.Errorf("actor worker died during construction: %v", err))
		return
	}
	if rep.AppError || rep.SystemError || rep.ActorCreationFailed {
		cancel()
		dropLease()
		cause := decodeRemoteError(rep.Ret.GetData())
		fail(fmt.Errorf("constructor failed: %v", cause))
		return
	}
	if c.diedErr() != nil {
		// Killed while the constructor ran.
		cancel()
		dropLease()
		return
	}
	info := &pb.ActorInfo{ActorId: c.ref.ID.Bytes()} // only what changes
	info.State = pb.ActorState_ACTOR_STATE_ALIVE
	info.Address = lrep.Worker
	info.Pid = lrep.WorkerPid
	info.StartTimeMs = time.Now().UnixMilli()
	if cw.gcs != nil {
		// The GCS must know where the actor runs: others find it there,
		// and its fate is followed there (watch).
		_, err := backoff.Retry(cw.ctx, func() (*pb.UpdateActorReply, error) {
			rep, err := cw.gcs.UpdateActor(cw.ctx, &pb.UpdateActorRequest{Actor: info})
			if err == nil || c.diedErr() != nil {
				return rep, nil // recorded, or killed meanwhile: nothing to record
			}
			if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
				return nil, backoff.Permanent(err)
			}
			return nil, err
		}, forever(2*time.Second)...)
		if err != nil && cw.ctx.Err() == nil {
			cw.log.Warn("recording actor as alive failed", "actor", c.ref.ID.Short(), "error", err)
		}
	}
	c.mu.Lock()
	if c.dead != nil {
		// Killed meanwhile.
		c.mu.Unlock()
		cancel()
		dropLease()
		return
	}
	c.stream, c.cancel = st, cancel
	c.setAliveLocked(lrep.Worker)
	c.mu.Unlock()
	go c.recvLoop(st)
}

// reportDead records the actor's death in the GCS (owner only).
func (c *actorClient) reportDead(reason string) {
	cw := c.m.cw
	if cw.gcs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = cw.gcs.UpdateActor(ctx, &pb.UpdateActorRequest{Actor: &pb.ActorInfo{
		ActorId: c.ref.ID.Bytes(), State: pb.ActorState_ACTOR_STATE_DEAD, DeathReason: reason, EndTimeMs: time.Now().UnixMilli(),
	}})
}

// SubmitActorTask queues a method call. Calls from one process run in the
// order they were submitted.
func (cw *CoreWorker) SubmitActorTask(ctx context.Context, actor ActorRef, method string, args []ArgInput, opts TaskOptions) *Handle {
	h, _ := cw.submitActorTask(ctx, actor, method, args, opts)
	return h
}

// SubmitActorTaskReturns is SubmitActorTask of a method returning
// opts.NumReturns values: a handle per value.
func (cw *CoreWorker) SubmitActorTaskReturns(ctx context.Context, actor ActorRef, method string, args []ArgInput, opts TaskOptions) []*Handle {
	h, more := cw.submitActorTask(ctx, actor, method, args, opts)
	return append([]*Handle{h}, more...)
}

// submitActorTask queues a method call; it returns the handle of its
// first return and those of the others.
func (cw *CoreWorker) submitActorTask(ctx context.Context, actor ActorRef, method string, args []ArgInput, opts TaskOptions) (h *Handle, more []*Handle) {
	taskID := cw.idgen.Next()
	retID := ids.ObjectIDFor(taskID, 1)
	spec := &pb.TaskSpec{
		TaskId: taskID.Bytes(), JobId: cw.jobID.Bytes(), Kind: pb.TaskKind_TASK_KIND_ACTOR_METHOD,
		Function: method, ReturnId: retID.Bytes(), Owner: cw.addr, ActorId: actor.ID.Bytes(), CallerId: cw.id.Bytes(),
		TensorTransport: opts.TensorTransport, MaxRetries: int32(actor.MaxTaskRetries),
		ConcurrencyGroup: opts.ConcurrencyGroup, NumReturns: int32(opts.NumReturns),
	}
	rctx, rcancel := submitContext(ctx, nil)
	rec := &taskRecord{spec: spec, retID: retID, ctx: rctx, cancel: rcancel, state: statePendingArgs, retryErr: opts.RetryErrors}
	cw.streaming(rec, opts)
	h, more = cw.ownReturns(rec)
	cw.submitter.track(rec)
	if err := cw.buildArgs(ctx, rec, args); err != nil {
		cw.submitter.fail(rec, err)
		return h, more
	}
	c := cw.actors.client(actor)
	if err := c.checkGroup(rec); err != nil {
		cw.submitter.fail(rec, err)
		return h, more
	}
	c.mu.Lock()
	if c.dead != nil {
		c.mu.Unlock()
		cw.submitter.fail(rec, c.diedErr())
		return h, more
	}
	c.queue = append(c.queue, rec)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		c.runFirst(rec)
	}
	return h, more
}

// runFirst starts sending the queue of an idle client, whose only call is
// rec. When rec needs no waiting — the actor is alive with its stream
// open and no call under way, rec's arguments resolved — it is sent from
// the submitting goroutine
// (a synchronous call then costs no goroutine of its own: callpath.go);
// whatever needs waiting, and calls queued meanwhile, go to run.
func (c *actorClient) runFirst(rec *taskRecord) {
	if c.trySend(rec) {
		c.mu.Lock()
		if len(c.queue) == 0 || c.dead != nil {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
	go c.run()
}

// trySend sends rec, the head of the queue, if that needs no waiting: the
// actor is alive, its stream open and rec's arguments resolved. It
// reports whether it sent rec. Only a client with no call under way
// sends this way: behind calls not answered yet the stream's flow-control
// window may be full (an actor applying back-pressure), and Send would
// block the caller, whose Remote never waits for the cluster.
func (c *actorClient) trySend(rec *taskRecord) bool {
	c.mu.Lock()
	if c.dead != nil || !c.alive || c.stream == nil || len(c.inflight) > 0 || len(c.queue) == 0 || c.queue[0] != rec ||
		rec.unresolved() || rec.ctx.Err() != nil {
		c.mu.Unlock()
		return false
	}
	st := c.stream
	spec := c.takeHeadLocked(rec)
	c.mu.Unlock()
	c.sendSpec(st, spec)
	return true
}

// takeHeadLocked takes rec, the head of the queue, off it to be sent to
// the actor's current instance: it numbers it and records it under way.
// c.mu is held. It returns the spec to send (a retry replaces rec.spec:
// taskretry.go).
func (c *actorClient) takeHeadLocked(rec *taskRecord) *pb.TaskSpec {
	cw := c.m.cw
	c.queue = c.queue[1:]
	c.seq++
	rec.spec.Seq = c.seq
	if rec.stream != nil {
		rec.spec.StreamConsumed = rec.stream.dispatched(c.addr)
	}
	spec, addr := rec.spec, c.addr
	c.inflight[ids.MustFromBytes(spec.TaskId)] = rec
	cw.submitter.mu.Lock()
	rec.state, rec.worker, rec.node = stateRunning, addr.WorkerId, addr.NodeId
	cw.taskDispatched(rec, time.Now(), addr.NodeId, addr.WorkerId)
	cw.submitter.mu.Unlock()
	return spec
}

// sendSpec sends a call taken off the queue on st.
func (c *actorClient) sendSpec(st pb.CoreWorker_PushTasksClient, spec *pb.TaskSpec) {
	c.sendMu.Lock()
	err := st.Send(&pb.TaskRequest{Spec: spec})
	c.sendMu.Unlock()
	if err != nil {
		// The call stays under way: the stream's end decides its fate.
		c.m.cw.log.Debug("sending actor call failed", "actor", c.ref.ID.Short(), "error", err)
	}
}

// run sends queued calls in order, resolving their arguments first. The
// call at the head stays queued until it is sent, so that calls requeued
// for a retry (taskretry.go) go before it; a call that fails is answered
// by whoever takes it off the queue (dequeue, or setDead).
func (c *actorClient) run() {
	cw := c.m.cw
	for {
		c.mu.Lock()
		if len(c.queue) == 0 || c.dead != nil {
			c.running = false
			c.mu.Unlock()
			return
		}
		rec := c.queue[0]
		c.mu.Unlock()

		err := c.waitUsable(rec)
		if err == nil {
			err = c.diedErr()
		}
		if err == nil {
			err = c.checkGroup(rec)
		}
		if err == nil && rec.unresolved() {
			err = cw.resolveArgs(rec)
		}
		if err == nil {
			err = c.send(rec)
		}
		if err != nil && !errors.Is(err, errNotHead) && c.dequeue(rec) {
			cw.submitter.fail(rec, err)
		}
	}
}

// errNotHead: the call is not at the head of the queue any more (calls
// were requeued before it, or it was answered meanwhile); it is not sent.
var errNotHead = errors.New("actor call not at the head of the queue")

// send sends rec on the stream to the actor's current instance, waiting
// (again) while the actor is restarting or suspended.
func (c *actorClient) send(rec *taskRecord) error {
	for {
		st, err := c.ensureStream()
		if errors.Is(err, errNotAlive) {
			if err := c.waitUsable(rec); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		c.mu.Lock()
		if c.dead != nil {
			c.mu.Unlock()
			return c.diedErr()
		}
		if !c.alive || c.stream != st {
			c.mu.Unlock()
			continue // lost or restarted since: wait for the next instance
		}
		if len(c.queue) == 0 || c.queue[0] != rec {
			c.mu.Unlock()
			return errNotHead
		}
		spec := c.takeHeadLocked(rec)
		c.mu.Unlock()
		c.sendSpec(st, spec)
		return nil
	}
}

// waitUsable waits until the actor is alive (again, after a restart) or
// dead, for rec (whose context or the process's end stop the wait).
func (c *actorClient) waitUsable(rec *taskRecord) error {
	for {
		if err := c.waitReady(rec.ctx); err != nil {
			if err == ErrShutdown {
				return err
			}
			return cancelledError(rec.spec.Function, context.Cause(rec.ctx))
		}
		c.mu.Lock()
		usable := c.alive || c.dead != nil
		c.mu.Unlock()
		if usable {
			return nil
		}
	}
}

// errNotAlive: the actor is not alive now (restarting, or its connection
// lost); wait for it.
var errNotAlive = errors.New("actor not alive")

func (c *actorClient) ensureStream() (pb.CoreWorker_PushTasksClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead != nil {
		return nil, c.dead
	}
	if !c.alive || c.addr == nil {
		return nil, errNotAlive
	}
	if c.stream != nil {
		return c.stream, nil
	}
	cw := c.m.cw
	cli, err := cw.peer(c.addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(cw.ctx)
	st, err := cli.PushTasks(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	c.stream, c.cancel = st, cancel
	go c.recvLoop(st)
	return st, nil
}

func (c *actorClient) recvLoop(st pb.CoreWorker_PushTasksClient) {
	cw := c.m.cw
	for {
		rep, err := st.Recv()
		if err != nil {
			if cw.ctx.Err() != nil {
				return
			}
			c.connectionLost(st, err)
			return
		}
		tid := ids.MustFromBytes(rep.TaskId)
		c.mu.Lock()
		rec := c.inflight[tid]
		if rep.StreamItem {
			c.mu.Unlock()
			cw.streamItem(rec, rep)
			continue
		}
		delete(c.inflight, tid)
		c.mu.Unlock()
		if rec == nil {
			cw.objects.dropTensorReply(rep.Ret)
			continue
		}
		errType, errMsg := cw.noteReplyError(rep)
		if rep.AppError && retryOnError(rec, rep) && c.requeueOnError(rec, errType, errMsg) {
			continue
		}
		cw.submitter.mu.Lock()
		state := stateFinished
		if rep.AppError || rep.SystemError {
			state = stateFailed
			rec.errType, rec.errMsg = errType, errMsg
		}
		cw.submitter.finishLocked(rec, state)
		cw.submitter.mu.Unlock()
		cw.completeReply(rec, rep)
		cw.objects.removeSubmitted(rec.deps)
	}
}

// connectionLost handles the end of the stream st to the actor's worker.
// It decides nothing: the GCS, the authority, learns of the worker's death
// from its raylet, or of its node's from the failure detector (seconds
// later with the default health checks), and watch follows its verdict
// (restart or death) however long that takes. Meanwhile the client is
// suspended: calls under way stay pending and new calls wait, each bounded
// by its own context — unless the worker turns out to be alive (probe).
func (c *actorClient) connectionLost(st pb.CoreWorker_PushTasksClient, cause error) {
	cw := c.m.cw
	reason := fmt.Errorf("connection to the actor's worker lost: %v", status.Convert(cause).Message())
	if cw.gcs == nil {
		c.setDead(reason)
		return
	}
	c.mu.Lock()
	if c.stream != st || !c.alive || c.dead != nil || c.killing {
		c.mu.Unlock()
		return // an older stream, already replaced; or the kill under way ends it
	}
	c.alive, c.stream = false, nil
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	c.ready = make(chan struct{})
	addr := c.addr
	c.mu.Unlock()
	cw.log.Warn("lost the connection to the actor's worker; waiting for the GCS to say whether it restarts", "actor", c.ref.ID.Short(), "error", reason)
	go c.probe(addr, reason)
}

// probe asks the suspended client's worker at addr, now and then, whether
// it is alive — the stream broke, not the worker (a connection reset
// between machines) — and if it answers as that worker, resumes: calls
// under way are retried when their MaxTaskRetries allow, else fail with
// ActorUnavailableError (they may have run), and later calls go on a new
// stream. It stops once the client is not suspended at addr any more (the
// GCS's verdict came first).
func (c *actorClient) probe(addr *pb.Address, lost error) {
	cw := c.m.cw
	delay := 500 * time.Millisecond
	for {
		select {
		case <-time.After(delay):
		case <-cw.ctx.Done():
			return
		}
		delay = min(2*delay, 5*time.Second)
		c.mu.Lock()
		suspended := !c.alive && c.dead == nil && c.addr == addr
		c.mu.Unlock()
		if !suspended {
			return
		}
		cli, err := cw.peer(addr)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(cw.ctx, 2*time.Second)
		rep, err := cli.ListOwned(ctx, &pb.ListOwnedRequest{})
		cancel()
		if err != nil || ids.MustFromBytes(rep.GetOwner().GetWorkerId()) != ids.MustFromBytes(addr.GetWorkerId()) {
			continue
		}
		c.mu.Lock()
		if c.alive || c.dead != nil || c.addr != addr {
			c.mu.Unlock()
			return
		}
		c.alive = true
		close(c.ready)
		fails, start := c.requeueInflightLocked(lost.Error())
		c.mu.Unlock()
		cw.log.Info("the actor's worker is alive; reconnecting", "actor", c.ref.ID.Short())
		if start {
			go c.run()
		}
		for _, r := range fails {
			cw.submitter.fail(r, c.unavailable(r, lost.Error()))
		}
		return
	}
}

// restart handles the failure of the actor's instance at from while the
// GCS restarts it: calls under way are requeued for a retry when their
// MaxTaskRetries allow (taskretry.go), else fail with
// ActorUnavailableError; queued ones wait; the owner creates the actor
// again, other callers wait for the GCS to say where it runs now. The
// client was alive or suspended at from.
func (c *actorClient) restart(from *pb.Address, reason, cause string) {
	cw := c.m.cw
	c.mu.Lock()
	if c.dead != nil || c.addr != from {
		c.mu.Unlock()
		return
	}
	if c.alive {
		c.ready = make(chan struct{})
	}
	c.alive, c.addr, c.stream = false, nil, nil
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	if c.watchCancel != nil {
		c.watchCancel()
		c.watchCancel = nil
	}
	why := "its worker failed and it restarts: " + reason
	fails, start := c.requeueInflightLocked(why)
	var rec *taskRecord
	if c.owner && c.createRec != nil {
		// A fresh creation context: Kill during the restart cancels it.
		rec = c.createRec
		var cancel context.CancelFunc
		rec.ctx, cancel = context.WithCancel(cw.ctx)
		c.createCancel = cancel
	}
	c.mu.Unlock()
	cw.log.Warn("actor worker died; the actor restarts", "actor", c.ref.ID.Short(), "reason", reason)
	if start {
		go c.run() // sends the retried calls once the actor is back
	}
	for _, r := range fails {
		err := c.unavailable(r, why)
		if cause == "out_of_memory" {
			err.Cause = actorOutOfMemory(c.ref, reason)
		}
		cw.submitter.fail(r, err)
	}
	if rec != nil {
		go c.create(rec)
	} else {
		go c.resolve()
	}
}

// Ready waits until the actor is alive; it returns the death error when the
// actor died first.
func (cw *CoreWorker) ActorReady(ctx context.Context, ref ActorRef) error {
	c := cw.actors.client(ref)
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	return c.diedErr()
}

// KillActor ends an actor at once, whatever its state: the GCS records it
// DEAD first (the authority every holder of the handle follows, and which
// frees its name), a creation under way is stopped (its lease request
// withdrawn) and the process hosting it is told to exit. Pending and later
// calls fail with ActorDiedError; the actor does not restart.
//
// With restart (Ray's no_restart=False) only the process is ended, as a
// crash would end it: the GCS restarts the actor when it has restarts left
// (counting this one) and records it dead, saying its restarts ran out,
// when it has none. An actor with no live instance (pending, or restarting
// already) is left as it is.
func (cw *CoreWorker) KillActor(ctx context.Context, ref ActorRef, restart bool) error {
	c := cw.actors.client(ref)
	reason := "killed by ray.Kill"
	// The GCS must know the actor before it can record its death.
	if err := cw.actors.awaitRegistered(ctx, ref.ID); err != nil {
		return fmt.Errorf("goray: killing actor %s: %w", ref.ID.Short(), err)
	}
	if c.diedErr() != nil {
		return nil
	}
	if restart {
		c.mu.Lock()
		addr := c.addr
		c.mu.Unlock()
		// The worker exits at once; the connection's end is the failure
		// the GCS restarts the actor from.
		if err := cw.exitInstance(ctx, addr, reason+" (it may restart)"); err != nil {
			return fmt.Errorf("goray: killing actor %s: %w", ref.ID.Short(), err)
		}
		return nil
	}
	if cw.gcs != nil {
		// Once the GCS records the death the worker exits (fenceActor),
		// possibly before setDead below: its connection's end is expected.
		c.mu.Lock()
		c.killing = true
		c.mu.Unlock()
		if _, err := cw.gcs.UpdateActor(ctx, &pb.UpdateActorRequest{Actor: &pb.ActorInfo{
			ActorId: ref.ID.Bytes(), State: pb.ActorState_ACTOR_STATE_DEAD, DeathReason: reason, EndTimeMs: time.Now().UnixMilli(),
		}}); err != nil {
			c.mu.Lock()
			c.killing = false
			c.mu.Unlock()
			return fmt.Errorf("goray: recording the kill of actor %s: %w", ref.ID.Short(), err)
		}
	}
	c.setDead(errors.New(reason))
	c.mu.Lock()
	addr, createCancel := c.addr, c.createCancel
	c.mu.Unlock()
	if createCancel != nil {
		createCancel()
	}
	// The instance this process knows of; one it does not (a borrower's
	// lookup still under way) ends itself when it sees the GCS record
	// (fenceActor).
	_ = cw.exitInstance(ctx, addr, reason)
	return nil
}

// exitInstance tells the actor's worker at addr (nil: none known) to exit
// at once. A worker gone already (Unavailable) is no error.
func (cw *CoreWorker) exitInstance(ctx context.Context, addr *pb.Address, reason string) error {
	if addr == nil {
		return nil
	}
	cli, err := cw.peer(addr)
	if err != nil {
		return err
	}
	if _, err := cli.Exit(ctx, &pb.ExitRequest{Reason: reason, Force: true}); err != nil && status.Code(err) != codes.Unavailable {
		return err
	}
	return nil
}

// LookupActor finds the live actor with the given name in this job's
// namespace (see LookupActorIn).
func (cw *CoreWorker) LookupActor(ctx context.Context, name string) (ActorRef, error) {
	return cw.LookupActorIn(ctx, cw.cfg.Namespace, name)
}

func (m *actorManager) close() {
	m.mu.Lock()
	cs := make([]*actorClient, 0, len(m.clients))
	for _, c := range m.clients {
		cs = append(cs, c)
	}
	m.mu.Unlock()
	for _, c := range cs {
		c.setDead(ErrShutdown)
	}
}

// DeadActor returns a reference to an actor that failed before creation,
// and the error every call on it (and Ready) fails with.
func (cw *CoreWorker) DeadActor(class string, reason error) (ActorRef, error) {
	ref := ActorRef{ID: ids.New(), Class: class}
	c := &actorClient{m: cw.actors, ref: ref, ready: make(chan struct{}), inflight: map[ids.ID]*taskRecord{}, owner: true}
	cw.actors.mu.Lock()
	cw.actors.clients[ref.ID] = c
	cw.actors.mu.Unlock()
	c.setDead(reason)
	return ref, c.diedErr()
}

// fenceActor ends this worker, which hosts actor id, once the GCS has the
// actor alive elsewhere or dead: say its owner restarted it on another
// node after this one was declared dead while the worker lived on (a
// frozen or cut-off raylet). A superseded instance never answers calls.
// It waits through PENDING (until the owner records this instance) and
// RESTARTING.
func (cw *CoreWorker) fenceActor(id ids.ID) {
	if cw.gcs == nil {
		return
	}
	req := &pb.GetActorRequest{ActorId: id.Bytes(), WaitAlive: true, WaitNotAliveOn: cw.id.Bytes()}
	// The loop ends with the worker, or when the GCS does not know the
	// actor (the operation's nil).
	_, _ = backoff.Retry(cw.ctx, func() (struct{}, error) {
		rep, err := cw.gcs.GetActor(cw.ctx, req)
		if cw.ctx.Err() != nil {
			return struct{}{}, backoff.Permanent(cw.ctx.Err())
		}
		if err == nil {
			a := rep.GetActor()
			on := ids.MustFromBytes(a.GetAddress().GetWorkerId())
			if a.GetState() == pb.ActorState_ACTOR_STATE_DEAD || a.GetState() == pb.ActorState_ACTOR_STATE_ALIVE && on != cw.id {
				cw.log.Warn("this worker's actor died or runs elsewhere now; exiting", "actor", id.Short(), "state", a.GetState(), "reason", a.GetDeathReason())
				os.Exit(0)
			}
			return struct{}{}, errNotYet
		}
		if status.Code(err) == codes.NotFound {
			return struct{}{}, nil
		}
		return struct{}{}, err
	}, forever(2*time.Second)...)
}
