package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"google.golang.org/protobuf/proto"
)

// Tuning of the task path.
const (
	// maxLeaseRequests caps concurrent lease requests per scheduling key.
	maxLeaseRequests = 8
	// pipelineDepth is how many short tasks may be queued on one leased
	// worker; long tasks (see slowTask) get one at a time so that other
	// workers can share the load.
	pipelineDepth = 16
	slowTask      = 2 * time.Millisecond
	// leaseLinger keeps an idle lease briefly so back-to-back submissions
	// (a loop of Remote+Get) reuse the worker instead of leasing again.
	leaseLinger = 50 * time.Millisecond
	// DefaultMaxRetries is how often a task whose worker crashed is retried.
	DefaultMaxRetries = 3
)

// ArgInput is one task argument: a value or a reference.
type ArgInput struct {
	Value  any
	Handle *Handle
}

// TaskOptions are the per-call options of a task or actor.
type TaskOptions struct {
	Resources resources.Set
	// MaxRetries < 0 means DefaultMaxRetries.
	MaxRetries int
	// MaxOOMRetries is how often a task whose worker its node's memory
	// monitor killed is retried, a budget apart from MaxRetries (nil:
	// DefaultMaxOOMRetries; < 0: no limit). A task with MaxRetries 0 is
	// not retried after a kill either. See oom.go.
	MaxOOMRetries *int
	Name          string
	// Actor options.
	MaxConcurrency int
	// MaxRestarts: how often an actor is created again after its worker
	// dies (-1: no limit).
	MaxRestarts int
	// MaxTaskRetries: how often an actor's calls under way when its
	// worker failed are retried (-1: no limit; taskretry.go).
	MaxTaskRetries int
	// Transports an actor uses; they must be registered on its node.
	Transports []string
	// Detached: the actor outlives its job and creator (namespaces.go).
	Detached bool
	// GetIfExists: creating a named actor whose name a live actor of the
	// class holds returns that actor.
	GetIfExists bool
	// Namespace is a named actor's namespace ("": the job's).
	Namespace string
	// TensorTransport makes an actor method's returned tensors travel by
	// this transport.
	TensorTransport string
	// ConcurrencyGroups are an actor's named concurrency groups and their
	// limits; ConcurrencyGroup the group an actor method call runs in
	// ("" the default group). See groups.go.
	ConcurrencyGroups map[string]int
	ConcurrencyGroup  string
	// Strategy is StrategyDefault, StrategySpread or StrategyNodeAffinity
	// (with AffinityNode and AffinitySoft).
	Strategy     int
	AffinityNode ids.ID
	AffinitySoft bool
	// Placement puts the call in a placement group's bundle (nil: none,
	// or the caller's group when it captures child tasks).
	Placement *Placement
	// NoCapture keeps a call without a Placement out of its caller's
	// capturing group (ray.DefaultScheduling).
	NoCapture bool
	// RetryErrors, when set, retries a call whose function returned an
	// error or panicked, when it returns true for that error, within the
	// call's retry budget (a task's MaxRetries, an actor call's
	// MaxTaskRetries); see errretry.go. Generator calls are not retried.
	RetryErrors func(*RemoteError) bool
	// NumReturns is how many values the function returns (0: one); see
	// returns.go.
	NumReturns int
	// Backpressure bounds a generator's items not taken yet (0:
	// DefaultBackpressure, < 0: none); see stream.go.
	Backpressure int
	// EnvVars are variables the call's worker gets beyond the job's
	// (NAME=value, sorted by name: workerenv.CheckVars), as Ray's
	// runtime_env env_vars of a task or actor: it runs only on a worker
	// started with exactly these.
	EnvVars []string
	// WorkingDir is the call's working dir (InstallWorkingDir; nil: the
	// job's): it runs only on a worker started in it.
	WorkingDir *WorkingDir
	streaming  bool
}

// taskRecord is the owner's record of a submitted task.
type taskRecord struct {
	spec     *pb.TaskSpec
	strategy *pb.SchedulingStrategy
	retID    ids.ObjectID
	deps     []codec.RefInfo // references held until the task finishes
	pending  []int           // argument indexes still to resolve
	ctx      context.Context
	state    string
	worker   []byte
	node     []byte
	errMsg   string
	sent     time.Time
	// argNode is the node holding most of the task's argument bytes (nil
	// when none is in a store); the lease is asked for there first.
	argNode  ids.ID
	argBytes map[ids.ID]int64
	// cancel ends ctx (ray.Cancel of a task not sent yet; also called when
	// the task finishes); cancelled is set once ray.Cancel asked for it,
	// so a crash of its worker is not retried.
	cancel    context.CancelFunc
	cancelled bool
	// queuedUs is when the attempt was queued for a lease (µs; task
	// events); errType names errMsg's error.
	queuedUs int64
	errType  string
	// stream is a generator call's stream (stream.go).
	stream *Stream
	// argRebuilds counts the times the task was sent again because an
	// argument of it was lost with its node (reconstruct.go).
	argRebuilds int
	// actorDeps are actors whose handles the arguments hold and whose
	// registration was under way (actorreg.go): the call waits for it.
	actorDeps []ids.ID
	// retryErr, when set, says whether an error the function returned
	// (or its panic) is retried (TaskOptions.RetryErrors; errretry.go).
	retryErr func(*RemoteError) bool
	// oomLeft is how many more kills by a memory monitor the task is
	// retried after (-1: no limit); oomKills counts the attempts killed so
	// (they do not draw on MaxRetries). See oom.go.
	oomLeft  int
	oomKills int32
	// envVars and workDir are TaskOptions.EnvVars and WorkingDir: part of
	// the scheduling key.
	envVars []string
	workDir *WorkingDir
}

// Task states shown by `goray list tasks`.
const (
	statePendingArgs  = "PENDING_ARGS"
	statePendingLease = "PENDING_LEASE"
	stateRunning      = "RUNNING"
	stateFinished     = "FINISHED"
	stateFailed       = "FAILED"
)

type schedKey struct {
	key      string
	res      *pb.Resources
	strategy *pb.SchedulingStrategy
	group    []byte // placement group id, when res are a group's
	envVars  []string
	workDir  *WorkingDir
	queue    []*taskRecord
	leases   map[*lease]struct{}
	// requests are the outstanding lease requests; requesting counts those
	// not cancelled.
	requests   map[*leaseRequest]struct{}
	requesting int
	avg        time.Duration // moving average of task round trips
	measured   bool
}

// leaseRequest is one outstanding RequestWorkerLease call.
type leaseRequest struct {
	id        ids.ID
	cancel    context.CancelFunc
	cancelled bool
	// retriable and function are those of the task it was asked for.
	retriable bool
	function  string
}

type lease struct {
	id       []byte
	raylet   pb.RayletClient // the raylet that granted the lease
	worker   *pb.Address
	stream   pb.CoreWorker_PushTasksClient
	cancel   context.CancelFunc
	inflight map[ids.ID]*taskRecord
	sendMu   sync.Mutex
	key      *schedKey
	idleGen  int
	dead     bool
	// tasks counts the tasks sent on the lease.
	tasks int
	// The linger timer (lingerThenReturn): idleSince is when the lease
	// last became idle, at idleGen idleSinceGen; lingering is set while
	// the timer is armed.
	lingerTimer  *time.Timer
	lingering    bool
	idleSince    time.Time
	idleSinceGen int
}

// spread reports whether k's tasks are spread over the nodes: each task
// then gets a lease of its own (a reused lease would keep them where the
// first ones ran).
func (k *schedKey) spread() bool {
	return k.strategy.GetKind() == pb.SchedulingStrategy_SPREAD
}

type submitter struct {
	cw     *CoreWorker
	mu     sync.Mutex
	keys   map[string]*schedKey
	tasks  map[ids.ID]*taskRecord
	done   []ids.ID // finished task ids, oldest first, for bounded history
	closed bool
	// sweeping: a sweepLater is scheduled and has not started.
	sweeping bool
	// linger is how long an idle lease is kept (leaseLinger; tests
	// change it).
	linger time.Duration
	// oomBase is the delay before the first retry of a task the memory
	// monitor killed (oomRetryBase; tests change it); see oom.go.
	oomBase time.Duration
}

const taskHistory = 10000

func newSubmitter(cw *CoreWorker) *submitter {
	return &submitter{cw: cw, keys: map[string]*schedKey{}, tasks: map[ids.ID]*taskRecord{}, linger: leaseLinger, oomBase: oomRetryBase}
}

// SubmitTask submits a normal task and returns a handle to its result. It
// never blocks on the cluster; failures surface when the result is read.
func (cw *CoreWorker) SubmitTask(ctx context.Context, function string, args []ArgInput, opts TaskOptions) *Handle {
	h, _ := cw.submitTask(ctx, function, args, opts)
	return h
}

// SubmitTaskReturns is SubmitTask of a function returning
// opts.NumReturns values: a handle per value.
func (cw *CoreWorker) SubmitTaskReturns(ctx context.Context, function string, args []ArgInput, opts TaskOptions) []*Handle {
	h, more := cw.submitTask(ctx, function, args, opts)
	return append([]*Handle{h}, more...)
}

// submitTask submits a task; it returns the handle of its first return
// and those of the others.
func (cw *CoreWorker) submitTask(ctx context.Context, function string, args []ArgInput, opts TaskOptions) (h *Handle, more []*Handle) {
	taskID := cw.idgen.Next()
	retID := ids.ObjectIDFor(taskID, 1)
	res := opts.Resources
	if res == nil {
		res = resources.Set{resources.CPU: resources.Unit}
	}
	retries := opts.MaxRetries
	if retries < 0 {
		retries = DefaultMaxRetries
	}
	spec := &pb.TaskSpec{
		TaskId: taskID.Bytes(), JobId: cw.jobID.Bytes(), Kind: pb.TaskKind_TASK_KIND_NORMAL,
		Function: function, ReturnId: retID.Bytes(), Owner: cw.addr,
		Resources: &pb.Resources{Amounts: res}, MaxRetries: int32(retries), Name: opts.Name,
		NumReturns: int32(opts.NumReturns),
	}
	placeSpec(spec, placementOf(ctx, opts))
	rctx, rcancel := submitContext(ctx, cw.submitter.sweepLater)
	rec := &taskRecord{spec: spec, retID: retID, ctx: rctx, cancel: rcancel, state: statePendingArgs, strategy: strategyProto(opts), retryErr: opts.RetryErrors,
		oomLeft: oomBudget(opts.MaxOOMRetries, retries), envVars: opts.EnvVars, workDir: opts.WorkingDir}
	cw.streaming(rec, opts)
	h, more = cw.ownReturns(rec)
	s := cw.submitter
	s.track(rec)
	if err := cw.buildArgs(rctx, rec, args); err != nil {
		s.fail(rec, err)
		return h, more
	}
	if !rec.unresolved() {
		s.enqueue(rec)
	} else {
		go s.resolveThenEnqueue(rec)
	}
	return h, more
}

// errTaskReturned is the cause a task's context is cancelled with when the
// task returns: the normal end of the task, which cancels nothing it
// submitted (see submitContext).
var errTaskReturned = errors.New("the task returned")

// submitContext derives from ctx, the context given to Remote, the context
// a submission lives by until it is sent (its record's ctx), and the
// function that releases it. The submission follows ctx: when ctx is
// cancelled it is cancelled too, with ctx's cause — unless ctx is a task's
// context (or derived from one) that ended because the task returned
// (errTaskReturned). A task's end is not a cancellation: what it submitted
// goes on, since its refs may have escaped (returned, stored in a returned
// value or an object, passed on) and someone may wait for them. Only a real
// cancellation (ray.Cancel of the task, a context its code cancels, the
// caller's ctx in a driver) cancels the submissions made with it; then
// cancelled, when not nil, is called after the submission's context ended
// (not when ctx had ended already: check at enqueueing). ctx's values stay
// visible.
func submitContext(ctx context.Context, cancelled func()) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	follow := func() {
		if cause := context.Cause(ctx); !errors.Is(cause, errTaskReturned) {
			cancel(cause)
			if cancelled != nil {
				cancelled()
			}
		}
	}
	if ctx.Err() != nil {
		// Already ended: decide now, so that the submission is never sent.
		if cause := context.Cause(ctx); !errors.Is(cause, errTaskReturned) {
			cancel(cause)
		}
		return sctx, func() { cancel(nil) }
	}
	stop := context.AfterFunc(ctx, follow)
	return sctx, func() {
		stop()
		cancel(nil)
	}
}

// buildArgs encodes values and notes the references a task depends on.
func (cw *CoreWorker) buildArgs(ctx context.Context, rec *taskRecord, args []ArgInput) error {
	rec.spec.Args = make([]*pb.TaskArg, len(args))
	for i, a := range args {
		if a.Handle != nil {
			if a.Handle.Released() {
				return &ObjectError{ObjectID: a.Handle.ID, Kind: ErrObjectFreed, Detail: fmt.Sprintf("argument %d was released before the call", i)}
			}
			ref := a.Handle.Info()
			rec.deps = append(rec.deps, ref)
			cw.objects.addSubmitted([]codec.RefInfo{ref})
			rec.spec.Args[i] = &pb.TaskArg{ByRef: true, Ref: &pb.ObjectRef{ObjectId: ref.ID.Bytes(), Owner: ref.Owner}}
			rec.pending = append(rec.pending, i)
			continue
		}
		f, data, refs, actors, err := codec.EncodeNoting(a.Value)
		if err != nil {
			return fmt.Errorf("argument %d: %w", i, err)
		}
		if len(actors) > 0 {
			rec.actorDeps = append(rec.actorDeps, cw.actors.registering(actors)...)
		}
		if len(refs) > 0 {
			rec.deps = append(rec.deps, refs...)
			cw.objects.addSubmitted(refs)
		}
		if int64(len(data)) > cw.inlineLimit && cw.store != nil {
			// Large values go through the store once, never through the socket.
			h, err := cw.Put(ctx, a.Value)
			if err != nil {
				return fmt.Errorf("argument %d: %w", i, err)
			}
			ref := h.Info()
			rec.deps = append(rec.deps, ref)
			cw.objects.addSubmitted([]codec.RefInfo{ref})
			h.Release()
			ret, _ := cw.objects.result(ref.ID)
			rec.spec.Args[i] = &pb.TaskArg{ByRef: true, Ref: &pb.ObjectRef{ObjectId: ref.ID.Bytes(), Owner: cw.addr}, NodeId: ret.GetNodeId()}
			rec.noteArg(ret)
			continue
		}
		if f == codec.FormatRaw {
			data = append([]byte(nil), data...)
		}
		rec.spec.Args[i] = &pb.TaskArg{Metadata: f.Meta(), Data: data, Nested: refsToPB(refs)}
	}
	return nil
}

// resolveThenEnqueue waits for reference arguments, inlines small ones and
// queues the task.
func (s *submitter) resolveThenEnqueue(rec *taskRecord) {
	if err := s.cw.resolveArgs(rec); err != nil {
		s.fail(rec, err)
		return
	}
	s.enqueue(rec)
}

// resolveArgs waits for every pending reference argument of rec. Small
// values are inlined into the spec; store objects stay by reference.
func (cw *CoreWorker) resolveArgs(rec *taskRecord) error {
	for _, id := range rec.actorDeps {
		if err := cw.actors.awaitRegistered(rec.ctx, id); err != nil {
			if rec.ctx.Err() != nil {
				return cancelledError(rec.spec.Function, context.Cause(rec.ctx))
			}
			return err
		}
	}
	rec.actorDeps = nil
	for _, i := range rec.pending {
		a := rec.spec.Args[i]
		id, _ := ids.ObjectIDFromBytes(a.Ref.ObjectId)
		ret, err := cw.objects.wait(rec.ctx, id)
		if err != nil {
			if rec.ctx.Err() != nil {
				return cancelledError(rec.spec.Function, context.Cause(rec.ctx))
			}
			return err
		}
		if ret == nil {
			return &ObjectError{ObjectID: id, Kind: ErrObjectUnknown}
		}
		if codec.FormatOf(ret.Metadata) == codec.FormatError {
			return decodeRemoteError(ret.Data)
		}
		// An argument this process owns whose node died: restore or
		// rebuild it before the task needs it.
		if ret, err = cw.recoverLost(rec.ctx, id, ret); err != nil {
			return err
		}
		if ret.InStore {
			a.NodeId = ret.NodeId
			rec.noteArg(ret)
			continue
		}
		rec.spec.Args[i] = &pb.TaskArg{Metadata: ret.Metadata, Data: ret.Data, Nested: ret.Nested}
	}
	rec.pending = nil
	return nil
}

// unresolved reports whether rec waits for arguments (resolveArgs).
func (rec *taskRecord) unresolved() bool { return len(rec.pending) > 0 || len(rec.actorDeps) > 0 }

// noteArg counts a store argument's bytes toward its node, keeping argNode
// the node with the most.
func (rec *taskRecord) noteArg(ret *pb.ReturnObject) {
	node, err := ids.FromBytes(ret.GetNodeId())
	if err != nil || node.IsNil() {
		return
	}
	if rec.argBytes == nil {
		rec.argBytes = map[ids.ID]int64{}
	}
	rec.argBytes[node] += max(ret.GetSize(), 1)
	if rec.argNode.IsNil() || rec.argBytes[node] > rec.argBytes[rec.argNode] {
		rec.argNode = node
	}
}

func (s *submitter) track(rec *taskRecord) {
	s.mu.Lock()
	s.tasks[ids.MustFromBytes(rec.spec.TaskId)] = rec
	s.mu.Unlock()
	s.cw.taskSubmitted(rec)
}

// finish records the end of a task and trims history.
func (s *submitter) finishLocked(rec *taskRecord, state string) {
	rec.state = state
	s.cw.taskEnded(rec, state == stateFailed)
	if rec.cancel != nil {
		rec.cancel() // releases its context
	}
	s.done = append(s.done, ids.MustFromBytes(rec.spec.TaskId))
	for len(s.done) > taskHistory {
		delete(s.tasks, s.done[0])
		s.done = s.done[1:]
	}
}

// fail completes a task with an error.
func (s *submitter) fail(rec *taskRecord, err error) {
	var re *RemoteError
	ret := (*pb.ReturnObject)(nil)
	sysErr := err
	if errors.As(err, &re) {
		ret = errorReturn(rec.retID, re)
		sysErr = nil
	}
	s.mu.Lock()
	rec.errMsg = err.Error()
	rec.errType = errTypeName(err)
	if re != nil {
		rec.errType = errorTypeOf(re)
	}
	s.finishLocked(rec, stateFailed)
	s.mu.Unlock()
	s.cw.completeReturns(rec, ret, nil, sysErr, false)
	if rec.stream != nil {
		rec.stream.finish(-1, ret, sysErr)
	}
	s.cw.objects.removeSubmitted(rec.deps)
}

func (s *submitter) enqueue(rec *taskRecord) {
	key := resources.Set(rec.spec.Resources.GetAmounts()).Key() + strategyKey(rec.strategy)
	if len(rec.envVars) > 0 {
		key += "\x00env\x00" + strings.Join(rec.envVars, "\x00")
	}
	key += rec.workDir.key()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.fail(rec, ErrShutdown)
		return
	}
	if rec.cancelled {
		s.mu.Unlock()
		s.fail(rec, cancelledError(rec.spec.Function, errors.New("ray.Cancel")))
		return
	}
	if rec.ctx.Err() != nil {
		s.mu.Unlock()
		s.fail(rec, cancelledError(rec.spec.Function, context.Cause(rec.ctx)))
		return
	}
	k := s.keys[key]
	if k == nil {
		k = &schedKey{key: key, res: rec.spec.Resources, strategy: rec.strategy, group: rec.spec.GetPlacement().GetPlacementGroupId(), envVars: rec.envVars, workDir: rec.workDir, leases: map[*lease]struct{}{}, requests: map[*leaseRequest]struct{}{}}
		s.keys[key] = k
	}
	rec.state = statePendingLease
	s.cw.taskQueued(rec, false)
	k.queue = append(k.queue, rec)
	sends := s.dispatchLocked(k)
	s.mu.Unlock()
	s.send(sends)
}

// sweepLater fails, soon, the tasks queued for a lease whose submit context
// was cancelled: one that waits for a lease no node grants (or while every
// worker is busy) would otherwise stay queued. Cancellations arriving
// together share one sweep.
func (s *submitter) sweepLater() {
	s.mu.Lock()
	if s.sweeping {
		s.mu.Unlock()
		return
	}
	s.sweeping = true
	s.mu.Unlock()
	go func() {
		s.mu.Lock()
		s.sweeping = false
		var fails []*taskRecord
		var sends []sendItem
		for _, k := range s.keys {
			n := len(k.queue)
			k.queue = slices.DeleteFunc(k.queue, func(rec *taskRecord) bool {
				if rec.ctx.Err() != nil {
					fails = append(fails, rec)
					return true
				}
				return false
			})
			if len(k.queue) < n {
				sends = append(sends, s.dispatchLocked(k)...) // withdraws lease requests no longer needed
			}
		}
		s.mu.Unlock()
		s.send(sends)
		for _, rec := range fails {
			s.fail(rec, cancelledError(rec.spec.Function, context.Cause(rec.ctx)))
		}
	}()
}

type sendItem struct {
	l   *lease
	rec *taskRecord
}

// dispatchLocked assigns queued tasks to leases and asks for more leases.
func (s *submitter) dispatchLocked(k *schedKey) []sendItem {
	var out []sendItem
	depth := 1
	if k.measured && k.avg < slowTask {
		depth = pipelineDepth
	}
	now := time.Now()
	for len(k.queue) > 0 {
		var best *lease
		for l := range k.leases {
			if l.dead || len(l.inflight) >= depth || (best != nil && len(l.inflight) >= len(best.inflight)) {
				continue
			}
			if k.spread() && l.tasks > 0 {
				continue
			}
			if len(l.inflight) > 0 && l.busySince(now) > slowTask {
				// Something on this worker runs long: queueing more behind
				// it would stall them; wait for another lease instead.
				continue
			}
			best = l
		}
		if best == nil {
			break
		}
		rec := k.queue[0]
		k.queue = k.queue[1:]
		if rec.ctx.Err() != nil {
			go s.fail(rec, cancelledError(rec.spec.Function, context.Cause(rec.ctx)))
			continue
		}
		best.inflight[ids.MustFromBytes(rec.spec.TaskId)] = rec
		best.idleGen++
		best.tasks++
		rec.state = stateRunning
		rec.worker = best.worker.WorkerId
		rec.node = best.worker.NodeId
		if rec.stream != nil {
			rec.spec.StreamConsumed = rec.stream.dispatched(best.worker)
		}
		rec.sent = time.Now()
		s.cw.taskDispatched(rec, rec.sent, rec.node, rec.worker)
		out = append(out, sendItem{best, rec})
	}
	want := len(k.queue)
	if want > maxLeaseRequests {
		want = maxLeaseRequests
	}
	for k.requesting < want {
		k.requesting++
		ctx, cancel := context.WithCancel(s.cw.ctx)
		req := &leaseRequest{id: ids.New(), cancel: cancel}
		if len(k.queue) > 0 {
			// For the memory monitor, which kills retriable work first
			// and names what it killed.
			next := k.queue[min(k.requesting-1, len(k.queue)-1)].spec
			req.retriable, req.function = next.MaxRetries > 0, next.Function
		}
		k.requests[req] = struct{}{}
		var prefer ids.ID
		if k.strategy == nil && len(k.queue) > 0 {
			// Locality: ask where the next task's arguments are.
			prefer = k.queue[min(k.requesting-1, len(k.queue)-1)].argNode
		}
		go s.requestLease(ctx, k, req, prefer)
	}
	if len(k.queue) == 0 && k.requesting > 0 {
		// Nothing left to run: withdraw the waiting requests. A request the
		// raylet grants at this very moment is handed back by
		// CancelWorkerLease (see requestLease).
		for req := range k.requests {
			if !req.cancelled {
				req.cancelled = true
				req.cancel()
				k.requesting--
			}
		}
	}
	return out
}

// busySince returns how long the oldest task in flight on l has been out.
func (l *lease) busySince(now time.Time) time.Duration {
	var oldest time.Duration
	for _, rec := range l.inflight {
		if d := now.Sub(rec.sent); d > oldest {
			oldest = d
		}
	}
	return oldest
}

func (s *submitter) send(items []sendItem) {
	for _, it := range items {
		it.l.sendMu.Lock()
		err := it.l.stream.Send(&pb.TaskRequest{Spec: it.rec.spec})
		it.l.sendMu.Unlock()
		if err != nil {
			// The receive loop sees the broken stream and retries the task.
			s.cw.log.Debug("sending task failed", "task", ids.MustFromBytes(it.rec.spec.TaskId).Short(), "error", err)
		}
	}
}

func (s *submitter) requestLease(ctx context.Context, k *schedKey, req *leaseRequest, prefer ids.ID) {
	lr := &pb.LeaseRequest{JobId: s.cw.jobID.Bytes(), Resources: k.res, HolderId: s.cw.id.Bytes(), HolderNodeId: s.cw.nodeID.Bytes(), RequestId: req.id.Bytes(), Strategy: k.strategy, PlacementGroupId: k.group, Retriable: req.retriable, Function: req.function, EnvVars: k.envVars}
	if k.workDir != nil {
		lr.WorkingDirSha256, lr.WorkingDirNode = k.workDir.SHA256, k.workDir.Node.Bytes()
	}
	g, err := s.cw.leaseWorker(ctx, lr, prefer)
	withdrawn := ctx.Err() != nil
	s.mu.Lock()
	delete(k.requests, req)
	if !req.cancelled {
		k.requesting--
	}
	req.cancel()
	if err != nil {
		var fails []*taskRecord
		var sends []sendItem
		var unsched *UnschedulableError
		var removed *PlacementGroupRemovedError
		switch {
		case withdrawn:
			// Withdrawn (or shutting down); leaseWorker handed back a lease
			// granted just as we cancelled.
			if !s.closed && len(k.queue) > 0 {
				sends = s.dispatchLocked(k)
			}
		case errors.As(err, &unsched), errors.As(err, &removed):
			// No node will ever run these tasks.
			fails = k.queue
			k.queue = nil
		case !s.closed && len(k.queue) > 0 && k.requesting == 0 && len(k.leases) == 0:
			// Nothing else can run these tasks: fail them rather than retry
			// a raylet that refuses (or is gone) in a loop.
			fails = k.queue
			k.queue = nil
		}
		s.mu.Unlock()
		s.send(sends)
		for _, rec := range fails {
			if unsched != nil {
				s.fail(rec, &UnschedulableError{Function: rec.spec.Function, Reason: unsched.Reason})
				continue
			}
			if removed != nil {
				s.fail(rec, &PlacementGroupRemovedError{Function: rec.spec.Function, Reason: removed.Reason})
				continue
			}
			s.fail(rec, fmt.Errorf("goray: leasing a worker for %s: %w", rec.spec.Function, err))
		}
		return
	}
	s.mu.Unlock()
	rep := g.reply
	l := &lease{id: rep.LeaseId, raylet: g.raylet, worker: rep.Worker, inflight: map[ids.ID]*taskRecord{}, key: k}
	if err := s.openStream(l); err != nil {
		s.returnLease(l, true)
		s.mu.Lock()
		sends := s.dispatchLocked(k)
		s.mu.Unlock()
		s.send(sends)
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.cancel()
		return
	}
	k.leases[l] = struct{}{}
	sends := s.dispatchLocked(k)
	idle := len(l.inflight) == 0
	gen := l.idleGen
	s.mu.Unlock()
	s.send(sends)
	if idle {
		s.lingerThenReturn(l, gen)
	}
	go s.recvLoop(l)
}

func (s *submitter) openStream(l *lease) error {
	cli, err := s.cw.peer(l.worker)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(s.cw.ctx)
	st, err := cli.PushTasks(ctx)
	if err != nil {
		cancel()
		return err
	}
	l.stream, l.cancel = st, cancel
	return nil
}

func (s *submitter) recvLoop(l *lease) {
	for {
		rep, err := l.stream.Recv()
		if err != nil {
			s.leaseFailed(l, err)
			return
		}
		tid := ids.MustFromBytes(rep.TaskId)
		if rep.StreamItem {
			s.mu.Lock()
			rec := l.inflight[tid]
			s.mu.Unlock()
			s.cw.streamItem(rec, rep)
			continue
		}
		errType, errMsg := s.cw.noteReplyError(rep)
		argLost := argLostReply(rep)
		var again *taskRecord // the function failed and is retried (errretry.go)
		if rep.AppError && !argLost {
			again = s.retriedOnError(l, tid, rep)
		}
		s.mu.Lock()
		rec := l.inflight[tid]
		delete(l.inflight, tid)
		k := l.key
		var rebuild *taskRecord // an argument was lost: rebuilt, sent again
		if rec != nil && argLost && s.argRebuildLocked(rec) {
			rebuild, rec = rec, nil
		}
		if rec != nil && rec == again && !s.closed {
			s.requeueOnErrorLocked(rec, k, errType, errMsg)
			rec = nil
		}
		if rec != nil {
			rt := time.Since(rec.sent)
			if !k.measured {
				k.avg, k.measured = rt, true
			} else {
				k.avg = (k.avg*7 + rt) / 8
			}
			state := stateFinished
			if rep.AppError || rep.SystemError {
				state = stateFailed
				rec.errType, rec.errMsg = errType, errMsg
			}
			s.finishLocked(rec, state)
		}
		sends := s.dispatchLocked(k)
		idle := len(l.inflight) == 0
		gen := l.idleGen
		s.mu.Unlock()
		if rec != nil {
			s.cw.completeReply(rec, rep)
			s.cw.objects.removeSubmitted(rec.deps)
		}
		if rebuild != nil {
			go s.cw.rebuildArgs(rebuild, rep, errType, errMsg)
		}
		s.send(sends)
		if idle {
			s.lingerThenReturn(l, gen)
		}
	}
}

// lingerThenReturn returns an idle lease unless it is used again soon:
// once it has had nothing to do (idle since idleGen gen) for leaseLinger.
// One timer per lease serves every idle spell: a loop of Remote and Get
// makes the lease idle once per call, and a timer (and goroutine) per
// spell would cost more than the call itself (callpath.go). When the
// timer fires early for the current spell it waits out the rest.
func (s *submitter) lingerThenReturn(l *lease, gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.dead || l.idleGen != gen || len(l.inflight) > 0 {
		return // used again meanwhile: its next idle spell calls again
	}
	l.idleSince, l.idleSinceGen = time.Now(), gen
	if l.lingering {
		return
	}
	l.lingering = true
	linger := s.lingerLocked(l)
	if l.lingerTimer == nil {
		l.lingerTimer = time.AfterFunc(linger, func() { s.lingerExpired(l) })
		return
	}
	l.lingerTimer.Reset(linger)
}

// lingerLocked is how long l is kept idle: leaseLinger, or nothing for a
// spread key's lease that ran its task (one task per lease).
func (s *submitter) lingerLocked(l *lease) time.Duration {
	if l.key.spread() && l.tasks > 0 {
		return 0
	}
	return s.linger
}

// lingerExpired runs when l's linger timer fires: it returns l if it has
// been idle for its whole linger, waits out the rest of a later idle
// spell, and leaves a busy lease to its next idle spell.
func (s *submitter) lingerExpired(l *lease) {
	s.mu.Lock()
	if l.dead || len(l.inflight) > 0 || l.idleGen != l.idleSinceGen {
		// Busy, or its idle spell not recorded yet: lingerThenReturn arms
		// the timer again when it is idle.
		l.lingering = false
		s.mu.Unlock()
		return
	}
	if rest := s.lingerLocked(l) - time.Since(l.idleSince); rest > 0 {
		l.lingerTimer.Reset(rest)
		s.mu.Unlock()
		return
	}
	l.lingering = false
	l.dead = true
	delete(l.key.leases, l)
	s.mu.Unlock()
	_ = l.stream.CloseSend()
	l.cancel()
	s.returnLease(l, false)
}

// returnLease returns l to its raylet, which says whether its memory
// monitor killed the worker (nil: it did not, or the call failed).
func (s *submitter) returnLease(l *lease, disconnect bool) *pb.MemoryKill {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := l.raylet.ReturnWorkerLease(ctx, &pb.ReturnLeaseRequest{LeaseId: l.id, DisconnectWorker: disconnect})
	if err != nil {
		s.cw.log.Debug("returning lease failed", "error", err)
	}
	return rep.GetMemoryKill()
}

// leaseFailed handles a broken stream: retry or fail the tasks on it.
// Before it decides, it returns the lease to its raylet, which says
// whether its memory monitor killed the worker: such a kill is retried
// within the tasks' MaxOOMRetries, not their MaxRetries (as Ray's owner
// asks the raylet for a worker's failure cause). Meanwhile the lease is
// out of its key, so nothing more is sent on it.
func (s *submitter) leaseFailed(l *lease, cause error) {
	s.mu.Lock()
	if l.dead && len(l.inflight) == 0 {
		s.mu.Unlock()
		return
	}
	wasDead := l.dead
	l.dead = true
	delete(l.key.leases, l)
	s.mu.Unlock()
	var oom *pb.MemoryKill // the node's memory monitor killed the worker
	if !wasDead {
		oom = s.returnLease(l, true)
	}
	s.mu.Lock()
	e, ok := s.endLeaseLocked(leaseEnd{l: l, cause: cause, oom: oom})
	s.mu.Unlock()
	if !ok { // no task was on it (or another end took them)
		l.cancel()
		return
	}
	s.finishLeaseEnd(e)
}

// leaseEnd is what ending a lease left to do once submitter.mu is
// released (finishLeaseEnd).
type leaseEnd struct {
	l     *lease
	cause error
	node  string // the death reason of l's node ("": not dead)
	// oom is the memory monitor's kill of l's worker, when it killed it.
	oom     *pb.MemoryKill
	fails   []*taskRecord
	retried int
	// later are tasks the memory monitor killed, retried after a delay
	// (requeueAfterKill).
	later []*taskRecord
	sends []sendItem
}

// endLeaseLocked ends lease e.l, whose stream broke with e.cause or whose
// node was declared dead (e.node, the node's death reason): the tasks
// on it that may run again (retries left, not cancelled) go back to the
// head of their key's queue as their next attempt — those the memory
// monitor killed (e.oom) after a delay, within their MaxOOMRetries — and
// the others are returned to be failed. Once it has run, nothing that
// arrives on l's stream is taken as a task's result: a reply to an attempt
// of a lease that ended finds no task (recvLoop), so a node that comes
// back after being declared dead has its late results ignored. It reports
// false when l had ended already. s.mu must be held.
func (s *submitter) endLeaseLocked(e leaseEnd) (leaseEnd, bool) {
	l := e.l
	if l.dead && len(l.inflight) == 0 {
		return leaseEnd{}, false
	}
	l.dead = true
	delete(l.key.leases, l)
	var retry []*taskRecord
	for _, rec := range l.inflight {
		switch {
		case s.closed || rec.cancelled:
			e.fails = append(e.fails, rec)
		case e.oom != nil:
			if !rec.takeOOMRetry() {
				e.fails = append(e.fails, rec)
				continue
			}
			s.nextAttemptLocked(rec, "OutOfMemoryError", e.oom.Describe()+"; retrying")
			e.later = append(e.later, rec)
		case rec.crashRetriesLeft():
			s.nextAttemptLocked(rec, "WorkerCrashedError", e.reason()+"; retrying")
			retry = append(retry, rec)
		default:
			e.fails = append(e.fails, rec)
		}
	}
	l.inflight = nil
	k := l.key
	k.queue = append(retry, k.queue...)
	e.retried = len(retry) + len(e.later)
	e.sends = s.dispatchLocked(k)
	return e, true
}

// crashRetriesLeft reports whether task rec may run again after a
// failure that draws on MaxRetries (a crash, an error retried with
// RetryErrors, a lost result rebuilt): the attempts the memory monitor
// killed do not count.
func (rec *taskRecord) crashRetriesLeft() bool {
	return int(rec.spec.Attempt-rec.oomKills) < int(rec.spec.MaxRetries)
}

// nextAttemptLocked records rec's attempt FAILED with errType and errMsg
// in the task events and makes rec its next attempt, queued for a lease
// (and queued in the task events); the caller puts rec back in a queue.
// s.mu must be held.
func (s *submitter) nextAttemptLocked(rec *taskRecord, errType, errMsg string) {
	rec.errType, rec.errMsg = errType, errMsg
	s.cw.taskEnded(rec, true)
	rec.errType, rec.errMsg = "", ""
	// A send of the old spec may still be marshalling it.
	rec.spec = proto.Clone(rec.spec).(*pb.TaskSpec)
	rec.spec.Attempt++
	rec.state = statePendingLease
	s.cw.taskQueued(rec, true)
}

// reason says why e's lease ended: its node died, or its connection was
// lost.
func (e *leaseEnd) reason() string {
	w := ids.MustFromBytes(e.l.worker.GetWorkerId()).Short()
	if e.node != "" {
		n, _ := ids.FromBytes(e.l.worker.GetNodeId())
		return fmt.Sprintf("worker %s: its node %s was declared dead (%s)", w, n.Short(), e.node)
	}
	return fmt.Sprintf("connection to worker %s lost: %v", w, e.cause)
}

// finishLeaseEnd does what ending a lease left to do without
// submitter.mu: the stream is cancelled, the tasks with no retry left
// failed and the retried ones sent (those the memory monitor killed once
// their delay is over). The lease was returned to its raylet before
// (leaseFailed), unless its node died: a dead node would not answer.
func (s *submitter) finishLeaseEnd(e leaseEnd) {
	l := e.l
	l.cancel()
	reason := e.reason()
	if e.oom != nil {
		reason = e.oom.Describe()
	}
	for _, rec := range e.fails {
		if e.oom != nil && !rec.cancelled {
			if rec.oomLeft != 0 && rec.ctx.Err() != nil {
				// It had a retry left but its caller cancelled it (the
				// context given to Remote) while its lease was ending.
				s.fail(rec, cancelledError(rec.spec.Function, context.Cause(rec.ctx)))
				continue
			}
			s.fail(rec, outOfMemory(rec, e.oom))
			continue
		}
		if rec.cancelled {
			s.fail(rec, &RemoteError{Function: rec.spec.Function, Kind: KindCancelled, Type: "TaskCancelledError",
				Message: "cancelled by ray.Cancel while running (its worker was stopped: " + reason + ")"})
			continue
		}
		s.fail(rec, &WorkerCrashedError{Function: rec.spec.Function, TaskID: ids.MustFromBytes(rec.spec.TaskId), Attempts: int(rec.spec.Attempt) + 1, Reason: reason})
	}
	if e.retried > 0 {
		s.cw.log.Warn("worker lost; retrying its tasks", "worker", ids.MustFromBytes(l.worker.WorkerId).Short(), "tasks", e.retried, "reason", reason)
	}
	for _, rec := range e.later {
		go s.requeueAfterKill(rec, l.key)
	}
	s.send(e.sends)
}

// nodeDied ends at once every lease on node, which was declared dead
// (reason): their tasks are retried elsewhere within their MaxRetries, or
// fail with a WorkerCrashedError naming the node. The node may only be
// frozen or cut off, its connections open: nothing else would end them.
func (s *submitter) nodeDied(node ids.ID, reason string) {
	s.mu.Lock()
	// Out of every key first, so that no retried task is dispatched to
	// another of the node's leases.
	var gone []*lease
	for _, k := range s.keys {
		for l := range k.leases {
			if !l.dead && string(l.worker.GetNodeId()) == string(node[:]) {
				gone = append(gone, l)
				delete(k.leases, l)
			}
		}
	}
	var ends []leaseEnd
	for _, l := range gone {
		if e, ok := s.endLeaseLocked(leaseEnd{l: l, node: reason}); ok {
			ends = append(ends, e)
		}
	}
	s.mu.Unlock()
	for _, e := range ends {
		s.finishLeaseEnd(e)
	}
}

func (s *submitter) close() {
	s.mu.Lock()
	s.closed = true
	var fails []*taskRecord
	for _, k := range s.keys {
		fails = append(fails, k.queue...)
		k.queue = nil
		for l := range k.leases {
			for _, rec := range l.inflight {
				fails = append(fails, rec)
			}
			l.inflight = map[ids.ID]*taskRecord{}
			l.dead = true
			l.cancel()
		}
		for req := range k.requests {
			req.cancel()
		}
	}
	s.mu.Unlock()
	for _, rec := range fails {
		s.fail(rec, ErrShutdown)
	}
}

// listTasks returns the recorded tasks.
func (s *submitter) listTasks() []*pb.TaskState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pb.TaskState, 0, len(s.tasks))
	for id, rec := range s.tasks {
		out = append(out, &pb.TaskState{
			TaskId: id.Bytes(), Name: rec.spec.Name, Function: rec.spec.Function, State: rec.state,
			Attempt: rec.spec.Attempt, WorkerId: rec.worker, NodeId: rec.node, ActorId: rec.spec.ActorId, Error: rec.errMsg,
		})
	}
	return out
}
