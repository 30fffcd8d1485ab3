package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
type actorClient struct {
	m     *actorManager
	ref   ActorRef
	mu    sync.Mutex
	ready chan struct{} // closed when alive or dead
	alive bool
	dead  error
	addr  *pb.Address

	queue    []*taskRecord
	running  bool
	stream   pb.CoreWorker_PushTasksClient
	cancel   context.CancelFunc
	sendMu   sync.Mutex
	inflight map[ids.ID]*taskRecord
	seq      uint64
	leaseID  []byte
	owner    bool
	// createCancel stops a pending creation (Kill before the actor is up).
	createCancel context.CancelFunc
	// Restarts (owner only): the creation record, kept to create the actor
	// again, whose constructor arguments stay referenced while the actor
	// may restart (holdsArgs) and are released at its death.
	createRec   *taskRecord
	maxRestarts int
	holdsArgs   bool
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
	for {
		rep, err := cw.gcs.GetActor(cw.ctx, &pb.GetActorRequest{ActorId: c.ref.ID.Bytes(), WaitAlive: true})
		if err != nil {
			if cw.ctx.Err() != nil {
				c.setDead(ErrShutdown)
				return
			}
			if status.Code(err) == codes.NotFound {
				c.setDead(fmt.Errorf("the GCS does not know the actor"))
				return
			}
			if status.Code(err) == codes.DeadlineExceeded {
				continue
			}
			c.setDead(fmt.Errorf("looking the actor up: %w", err))
			return
		}
		a := rep.Actor
		switch a.State {
		case pb.ActorState_ACTOR_STATE_ALIVE:
			c.setAlive(a.Address)
			return
		case pb.ActorState_ACTOR_STATE_DEAD:
			c.setDead(errors.New(a.DeathReason))
			return
		}
	}
}

func (c *actorClient) setAlive(addr *pb.Address) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.alive || c.dead != nil {
		return
	}
	c.alive, c.addr = true, addr
	close(c.ready)
}

// setDead marks the actor dead and fails every queued and in-flight call.
func (c *actorClient) setDead(reason error) {
	c.mu.Lock()
	if c.dead != nil {
		c.mu.Unlock()
		return
	}
	de := &ActorDiedError{ActorID: c.ref.ID, Name: c.ref.Name, Reason: reason.Error()}
	var ade *ActorDiedError
	if errors.As(reason, &ade) {
		de = ade
	}
	c.dead = de
	if !c.alive {
		close(c.ready)
	}
	c.alive = false
	fails := c.queue
	c.queue = nil
	for _, rec := range c.inflight {
		fails = append(fails, rec)
	}
	c.inflight = map[ids.ID]*taskRecord{}
	if c.cancel != nil {
		c.cancel()
	}
	var release []codec.RefInfo
	if c.holdsArgs {
		c.holdsArgs = false
		release = c.createRec.deps
	}
	c.mu.Unlock()
	c.m.cw.objects.removeSubmitted(release)
	for _, rec := range fails {
		c.m.cw.submitter.fail(rec, c.diedErr())
	}
}

func (c *actorClient) diedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// CreateActor starts creating an actor and returns its reference at once.
// Calls made before the actor is alive queue up and run after it starts.
func (cw *CoreWorker) CreateActor(ctx context.Context, class, ctor string, args []ArgInput, opts TaskOptions) ActorRef {
	ref := ActorRef{ID: ids.New(), Name: opts.Name, Class: class}
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
	}
	cctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	c.createCancel = cancel
	c.maxRestarts = opts.MaxRestarts
	c.mu.Unlock()
	rec := &taskRecord{spec: spec, ctx: cctx, state: statePendingArgs, strategy: strategyProto(opts)}
	if err := cw.buildArgs(ctx, rec, args); err != nil {
		cw.objects.removeSubmitted(rec.deps)
		cancel()
		c.setDead(fmt.Errorf("constructor arguments: %w", err))
		return ref
	}
	// Register before returning, so that the handle can be passed to other
	// processes (and found by name) at once.
	if cw.gcs != nil {
		info := c.info(rec)
		if _, err := cw.gcs.RegisterActor(ctx, &pb.RegisterActorRequest{Actor: info}); err != nil {
			cw.objects.removeSubmitted(rec.deps)
			cancel()
			c.setDead(errors.New(status.Convert(err).Message()))
			return ref
		}
	}
	c.mu.Lock()
	c.createRec = rec
	c.holdsArgs = c.maxRestarts != 0 // released at its death
	c.mu.Unlock()
	go c.create(rec)
	return ref
}

// info is the actor's GCS record at creation.
func (c *actorClient) info(rec *taskRecord) *pb.ActorInfo {
	cw := c.m.cw
	return &pb.ActorInfo{
		ActorId: c.ref.ID.Bytes(), JobId: cw.jobID.Bytes(), Name: c.ref.Name, ClassName: c.ref.Class,
		State: pb.ActorState_ACTOR_STATE_PENDING, Owner: cw.addr, Resources: rec.spec.Resources,
		MaxConcurrency: rec.spec.MaxConcurrency, MaxRestarts: int32(c.maxRestarts),
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
	g, err := cw.leaseWorker(rec.ctx, &pb.LeaseRequest{JobId: cw.jobID.Bytes(), Resources: rec.spec.Resources, ActorId: c.ref.ID.Bytes(), Function: rec.spec.Function, HolderId: cw.id.Bytes(), RequestId: reqID.Bytes(), Strategy: rec.strategy}, rec.argNode)
	if err != nil {
		if rec.ctx.Err() != nil {
			fail(fmt.Errorf("creation cancelled: %w", context.Cause(rec.ctx)))
			return
		}
		var unsched *UnschedulableError
		if errors.As(err, &unsched) {
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
		if _, err := cw.gcs.UpdateActor(cw.ctx, &pb.UpdateActorRequest{Actor: info}); err != nil {
			cw.log.Warn("recording actor as alive failed", "actor", c.ref.ID.Short(), "error", err)
		}
	}
	c.mu.Lock()
	c.stream, c.cancel = st, cancel
	c.mu.Unlock()
	go c.recvLoop(st)
	c.setAlive(lrep.Worker)
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
	taskID := cw.idgen.Next()
	retID := ids.ObjectIDFor(taskID, 1)
	spec := &pb.TaskSpec{
		TaskId: taskID.Bytes(), JobId: cw.jobID.Bytes(), Kind: pb.TaskKind_TASK_KIND_ACTOR_METHOD,
		Function: method, ReturnId: retID.Bytes(), Owner: cw.addr, ActorId: actor.ID.Bytes(), CallerId: cw.id.Bytes(),
		TensorTransport: opts.TensorTransport,
	}
	rec := &taskRecord{spec: spec, retID: retID, ctx: ctx, state: statePendingArgs}
	cw.objects.newOwned(retID, rec, 1)
	h := cw.wrapHandle(retID, cw.addr)
	cw.submitter.track(rec)
	if err := cw.buildArgs(ctx, rec, args); err != nil {
		cw.submitter.fail(rec, err)
		return h
	}
	c := cw.actors.client(actor)
	c.mu.Lock()
	if c.dead != nil {
		c.mu.Unlock()
		cw.submitter.fail(rec, c.diedErr())
		return h
	}
	c.queue = append(c.queue, rec)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go c.run()
	}
	return h
}

// run sends queued calls in order, resolving their arguments first.
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
		c.queue = c.queue[1:]
		c.mu.Unlock()

		if err := c.waitUsable(rec); err != nil {
			cw.submitter.fail(rec, err)
			continue
		}
		if err := c.diedErr(); err != nil {
			cw.submitter.fail(rec, err)
			continue
		}
		if len(rec.pending) > 0 {
			if err := cw.resolveArgs(rec); err != nil {
				cw.submitter.fail(rec, err)
				continue
			}
		}
		st, err := c.ensureStream()
		if err != nil {
			cw.submitter.fail(rec, err)
			continue
		}
		tid := ids.MustFromBytes(rec.spec.TaskId)
		c.mu.Lock()
		if c.dead != nil {
			c.mu.Unlock()
			cw.submitter.fail(rec, c.dead)
			continue
		}
		c.seq++
		rec.spec.Seq = c.seq
		addr := c.addr
		c.inflight[tid] = rec
		c.mu.Unlock()
		cw.submitter.mu.Lock()
		rec.state, rec.worker, rec.node = stateRunning, addr.WorkerId, addr.NodeId
		cw.submitter.mu.Unlock()
		c.sendMu.Lock()
		err = st.Send(&pb.TaskRequest{Spec: rec.spec})
		c.sendMu.Unlock()
		if err != nil {
			cw.log.Debug("sending actor call failed", "actor", c.ref.ID.Short(), "error", err)
		}
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
			return cancelledError(rec.spec.Function, err)
		}
		c.mu.Lock()
		usable := c.alive || c.dead != nil
		c.mu.Unlock()
		if usable {
			return nil
		}
	}
}

func (c *actorClient) ensureStream() (pb.CoreWorker_PushTasksClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stream != nil {
		return c.stream, nil
	}
	if !c.alive || c.addr == nil {
		return nil, &ActorUnavailableError{ActorID: c.ref.ID, Name: c.ref.Name, Reason: "its worker died just now"}
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
			c.connectionLost(err)
			return
		}
		tid := ids.MustFromBytes(rep.TaskId)
		c.mu.Lock()
		rec := c.inflight[tid]
		delete(c.inflight, tid)
		c.mu.Unlock()
		if rec == nil {
			cw.objects.dropTensorReply(rep.Ret)
			continue
		}
		cw.submitter.mu.Lock()
		state := stateFinished
		if rep.AppError || rep.SystemError {
			state = stateFailed
		}
		cw.submitter.finishLocked(rec, state)
		cw.submitter.mu.Unlock()
		cw.objects.complete(rec.retID, rep.Ret, nil, true)
		cw.objects.removeSubmitted(rec.deps)
	}
}

// connectionLost finds out why the actor's stream broke: the GCS learns of
// the death from the raylet; wait for it briefly.
func (c *actorClient) connectionLost(cause error) {
	cw := c.m.cw
	reason := fmt.Errorf("connection to the actor's worker lost: %v", status.Convert(cause).Message())
	c.mu.Lock()
	lost := c.addr
	c.mu.Unlock()
	if cw.gcs != nil {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && cw.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(cw.ctx, 2*time.Second)
			rep, err := cw.gcs.GetActor(ctx, &pb.GetActorRequest{ActorId: c.ref.ID.Bytes()})
			cancel()
			if err == nil && rep.Actor.State == pb.ActorState_ACTOR_STATE_DEAD {
				reason = errors.New(rep.Actor.DeathReason)
				break
			}
			if err == nil && (rep.Actor.State == pb.ActorState_ACTOR_STATE_RESTARTING ||
				rep.Actor.State == pb.ActorState_ACTOR_STATE_ALIVE && string(rep.Actor.Address.GetWorkerId()) != string(lost.GetWorkerId())) {
				c.restart(rep.Actor.DeathReason)
				return
			}
			select {
			case <-time.After(50 * time.Millisecond):
			case <-cw.ctx.Done():
			}
		}
	}
	c.setDead(reason)
	if c.owner {
		c.reportDead(reason.Error())
	}
}

// restart handles the death of the actor's worker while the GCS restarts
// it: calls under way fail with ActorUnavailableError, queued ones wait;
// the owner creates the actor again, other callers wait for the GCS to say
// where it runs now.
func (c *actorClient) restart(reason string) {
	cw := c.m.cw
	c.mu.Lock()
	if c.dead != nil || !c.alive {
		c.mu.Unlock()
		return
	}
	c.alive, c.addr, c.stream = false, nil, nil
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	c.ready = make(chan struct{})
	inflight := c.inflight
	c.inflight = map[ids.ID]*taskRecord{}
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
	for _, r := range inflight {
		cw.submitter.fail(r, &ActorUnavailableError{ActorID: c.ref.ID, Name: c.ref.Name, Reason: reason})
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

// KillActor ends an actor's process at once; pending and later calls fail
// with ActorDiedError.
func (cw *CoreWorker) KillActor(ctx context.Context, ref ActorRef) error {
	c := cw.actors.client(ref)
	reason := "killed by ray.Kill"
	c.mu.Lock()
	pending := !c.alive && c.dead == nil
	createCancel := c.createCancel
	c.mu.Unlock()
	if pending && createCancel != nil {
		// Still being created by this process: stop the creation (its lease
		// request is withdrawn) and record the death.
		createCancel()
		c.setDead(errors.New(reason))
		c.reportDead(reason)
		return nil
	}
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	addr, dead := c.addr, c.dead
	c.mu.Unlock()
	if dead != nil {
		return nil
	}
	if cw.gcs != nil {
		if _, err := cw.gcs.UpdateActor(ctx, &pb.UpdateActorRequest{Actor: &pb.ActorInfo{
			ActorId: ref.ID.Bytes(), State: pb.ActorState_ACTOR_STATE_DEAD, DeathReason: reason, EndTimeMs: time.Now().UnixMilli(),
		}}); err != nil {
			return fmt.Errorf("goray: recording the kill of actor %s: %w", ref.ID.Short(), err)
		}
	}
	c.setDead(errors.New(reason))
	if cli, err := cw.peer(addr); err == nil {
		_, _ = cli.Exit(ctx, &pb.ExitRequest{Reason: reason, Force: true})
	}
	return nil
}

// LookupActor finds a live (or the latest dead) actor by name.
func (cw *CoreWorker) LookupActor(ctx context.Context, name string) (ActorRef, error) {
	if cw.gcs == nil {
		return ActorRef{}, ErrNotInitialized
	}
	rep, err := cw.gcs.GetActor(ctx, &pb.GetActorRequest{Name: name})
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return ActorRef{}, fmt.Errorf("%w: no actor named %q", ErrActorNotFound, name)
		}
		return ActorRef{}, fmt.Errorf("goray: looking up actor %q: %w", name, err)
	}
	id, err := ids.FromBytes(rep.Actor.ActorId)
	if err != nil {
		return ActorRef{}, err
	}
	return ActorRef{ID: id, Name: rep.Actor.Name, Class: rep.Actor.ClassName}, nil
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

// DeadActor returns a reference to an actor that failed before creation;
// every call on it fails with reason.
func (cw *CoreWorker) DeadActor(class string, reason error) ActorRef {
	ref := ActorRef{ID: ids.New(), Class: class}
	c := &actorClient{m: cw.actors, ref: ref, ready: make(chan struct{}), inflight: map[ids.ID]*taskRecord{}, owner: true}
	cw.actors.mu.Lock()
	cw.actors.clients[ref.ID] = c
	cw.actors.mu.Unlock()
	c.setDead(reason)
	return ref
}
