package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// executor runs tasks pushed to this process (workers only).
type executor struct {
	cw *CoreWorker
	// procs sizes the process's scheduler to each call (procs.go).
	procs procLimit

	mu       sync.Mutex
	actor    any
	actorRef ActorRef
	// actorPlace is the placement group bundle the actor runs in; its
	// methods' child tasks follow it when it captures them.
	actorPlace *Placement
	// groups queue and run the actor's calls, each in its concurrency
	// group (groups.go).
	groups *callGroups

	// running are the cancel functions of the tasks running here;
	// cancelled the tasks cancelled before they started (bounded).
	running   map[ids.ID]context.CancelFunc
	cancelled map[ids.ID]bool
	// producers are the generator calls here; earlyAcks the acks that
	// came before their call (bounded; produce.go).
	producers map[ids.ID]*producer
	earlyAcks map[ids.ID]int64
}

// maxEarlyCancels bounds the cancellations kept for tasks not started yet.
const maxEarlyCancels = 10000

// cancel cancels task id: a running task's context ends; a task not
// started yet is answered as cancelled when its turn comes. It reports
// whether the task was running.
func (e *executor) cancel(id ids.ID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.running[id]; c != nil {
		c()
		return true
	}
	if e.cancelled == nil || len(e.cancelled) >= maxEarlyCancels {
		e.cancelled = map[ids.ID]bool{}
	}
	e.cancelled[id] = true
	return false
}

// start registers a task about to run and returns its context, or false
// when it was cancelled before it started. The context ends with the
// cause errTaskReturned when the task returns (done), which cancels none
// of its submissions, and with a ray.Cancel cause when it is cancelled,
// which does (see submitContext).
func (e *executor) start(ctx context.Context, id ids.ID, function string) (context.Context, context.CancelFunc, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancelled[id] {
		delete(e.cancelled, id)
		return nil, nil, false
	}
	ctx, cancel := context.WithCancelCause(ctx)
	if e.running == nil {
		e.running = map[ids.ID]context.CancelFunc{}
	}
	e.running[id] = func() { cancel(fmt.Errorf("ray.Cancel of task %s", function)) }
	return ctx, func() {
		e.mu.Lock()
		delete(e.running, id)
		e.mu.Unlock()
		cancel(errTaskReturned)
	}, true
}

func newExecutor(cw *CoreWorker) *executor {
	return &executor{cw: cw, procs: newProcLimit(cw.mode)}
}

type taskCtxKey struct{}

// TaskInfo describes the task a context belongs to.
type TaskInfo struct {
	TaskID   ids.ID
	Function string
	ActorID  ids.ID
	Attempt  int
	// Placement is the placement group bundle the task or actor runs in.
	Placement *Placement
}

// CurrentTask returns the task running with ctx, if any.
func CurrentTask(ctx context.Context) (TaskInfo, bool) {
	t, ok := ctx.Value(taskCtxKey{}).(TaskInfo)
	return t, ok
}

type coreWorkerService struct {
	pb.UnimplementedCoreWorkerServer
	cw *CoreWorker
}

func (s *coreWorkerService) PushTasks(stream pb.CoreWorker_PushTasksServer) error {
	e := s.cw.exec
	var sendMu sync.Mutex
	var wg sync.WaitGroup
	var producers []*producer // generator calls that came on this stream
	defer func() {
		wg.Wait()
		for _, p := range producers {
			e.dropProducer(p)
		}
	}()
	send := func(rep *pb.TaskReply) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if err := stream.Send(rep); err != nil {
			s.cw.log.Debug("sending task reply failed", "error", err)
			// The caller will never own tensors it did not receive.
			s.cw.objects.dropTensorReply(rep.Ret)
		}
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		spec := req.Spec
		ctx := stream.Context()
		if spec.GetStreaming() {
			producers = append(producers, e.addProducer(ctx, spec, send))
		}
		switch spec.Kind {
		case pb.TaskKind_TASK_KIND_NORMAL:
			send(e.run(ctx, spec, nil))
		case pb.TaskKind_TASK_KIND_ACTOR_CREATION:
			send(e.createActor(ctx, spec))
		case pb.TaskKind_TASK_KIND_ACTOR_METHOD:
			e.mu.Lock()
			self, groups := e.actor, e.groups
			e.mu.Unlock()
			if self == nil {
				send(e.systemError(spec, KindActorDied, "this worker hosts no actor"))
				continue
			}
			e.pushActorCall(ctx, groups, spec, self, send, &wg)
		}
	}
}

func (e *executor) systemError(spec *pb.TaskSpec, kind, msg string) *pb.TaskReply {
	id, _ := ids.ObjectIDFromBytes(spec.ReturnId)
	re := &RemoteError{Function: spec.Function, TaskID: ids.MustFromBytes(spec.TaskId).String(), Kind: kind, Message: msg, Pid: os.Getpid(), Node: e.cw.nodeID.Short()}
	return &pb.TaskReply{TaskId: spec.TaskId, Ret: errorReturn(id, re), SystemError: true}
}

// loadArgs turns the spec's arguments into ArgValues; store arguments are
// pinned until release is called.
func (e *executor) loadArgs(ctx context.Context, spec *pb.TaskSpec) ([]ArgValue, func(), error) {
	args := make([]ArgValue, len(spec.Args))
	var pinned []*Value
	release := func() {
		for _, v := range pinned {
			v.Release()
		}
	}
	for i, a := range spec.Args {
		if !a.ByRef {
			args[i] = ArgValue{Format: codec.FormatOf(a.Metadata), Data: a.Data, Index: i}
			if args[i].Format == codec.FormatTransport {
				// Tensors travel by their transport, not through this RPC.
				ts, err := e.cw.receiveTensors(ctx, a.Data)
				if err != nil {
					release()
					return nil, nil, fmt.Errorf("argument %d: %w", i, err)
				}
				args[i].Tensors = ts
			}
			continue
		}
		id, _ := ids.ObjectIDFromBytes(a.Ref.GetObjectId())
		v, err := e.cw.materialize(ctx, &pb.ReturnObject{ObjectId: id[:], InStore: true, NodeId: a.NodeId}, a.Ref.GetOwner())
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("argument %d: %w", i, err)
		}
		pinned = append(pinned, v)
		args[i] = ArgValue{Format: v.Format, Data: v.Data, Index: i}
	}
	return args, release, nil
}

// run executes one task or method call and builds its reply, recording
// its task events.
func (e *executor) run(ctx context.Context, spec *pb.TaskSpec, self any) *pb.TaskReply {
	if self == nil { // an actor's calls share what its creation asked for
		e.procs.apply(spec.GetResources())
	}
	var t execTimes
	t.fetchStart = e.cw.taskStarted(spec)
	rep := e.runTask(ctx, spec, self, &t)
	class := ""
	if self != nil {
		e.mu.Lock()
		class = e.actorRef.Class
		e.mu.Unlock()
	}
	e.cw.taskExecuted(spec, &t, class, rep)
	return rep
}

// runTask executes one task or method call and builds its reply; t gets
// the times of its phases.
func (e *executor) runTask(ctx context.Context, spec *pb.TaskSpec, self any, t *execTimes) *pb.TaskReply {
	fn := Lookup(spec.Function)
	if fn == nil || (self == nil && fn.Task == nil) || (self != nil && fn.Method == nil) {
		exe, _ := os.Executable()
		return e.systemError(spec, KindFunctionNotFound, fmt.Sprintf("%q is not registered in worker binary %s; register it at package level (var X = ray.TaskN(fn)) so that the driver and its workers agree", spec.Function, exe))
	}
	if n := spec.GetNumReturns(); n < 0 || n > MaxReturns || (n > 1 && (spec.GetStreaming() || spec.TensorTransport != "")) {
		return e.systemError(spec, KindArgType, fmt.Sprintf("%d return values: want 1 to %d, and one for a generator or a tensor transport", n, MaxReturns))
	}
	if fn.Streaming != spec.GetStreaming() {
		return e.systemError(spec, KindArgType, fmt.Sprintf("%q is registered as a generator: %v, called as one: %v", spec.Function, fn.Streaming, spec.GetStreaming()))
	}
	if spec.GetStreaming() {
		p := e.producerOf(ids.MustFromBytes(spec.TaskId))
		if p == nil {
			return e.systemError(spec, KindArgType, "generator call without its stream")
		}
		defer e.dropProducer(p)
		ctx = context.WithValue(ctx, producerKey{}, p)
		rep := e.runFunction(ctx, spec, self, t, fn)
		rep.NumItems = p.finish()
		return rep
	}
	return e.runFunction(ctx, spec, self, t, fn)
}

// runFunction runs registered function fn for spec (runTask, once the
// function and, for a generator, its stream are found).
func (e *executor) runFunction(ctx context.Context, spec *pb.TaskSpec, self any, t *execTimes, fn *Function) *pb.TaskReply {
	args, release, err := e.loadArgs(ctx, spec)
	t.fetchEnd = nowUs()
	if err != nil {
		kind := KindObjectFreed
		switch {
		case errors.Is(err, ErrTransferFailed):
			kind = KindTransfer
		case errors.Is(err, ErrObjectLost):
			kind = KindObjectLost // its owner may rebuild it and send the task again
		}
		return e.systemError(spec, kind, err.Error())
	}
	taskID := ids.MustFromBytes(spec.TaskId)
	tctx, done, ok := e.start(e.cw.ctx, taskID, spec.Function)
	if !ok {
		release()
		return e.reply(ctx, spec, nil, &RemoteError{Kind: KindCancelled, Type: "TaskCancelledError", Message: "cancelled by ray.Cancel before it started"})
	}
	place := placementFromProto(spec.GetPlacement())
	if self != nil {
		e.mu.Lock()
		place = e.actorPlace
		e.mu.Unlock()
	}
	if p := ctx.Value(producerKey{}); p != nil {
		tctx = context.WithValue(tctx, producerKey{}, p)
	}
	tctx = context.WithValue(tctx, taskCtxKey{}, TaskInfo{
		TaskID: taskID, Function: spec.Function, ActorID: ids.MustFromBytes(spec.ActorId), Attempt: int(spec.Attempt), Placement: place,
	})
	if self == nil {
		taskStarted(spec.Function)
	}
	t.execStart = nowUs()
	result, err := e.call(tctx, fn, self, args)
	t.execEnd = nowUs()
	if err != nil && tctx.Err() != nil && e.cw.ctx.Err() == nil {
		// ray.Cancel ended its context and it gave up: a cancellation.
		err = &RemoteError{Kind: KindCancelled, Type: "TaskCancelledError", Message: "cancelled by ray.Cancel while running: " + err.Error()}
	}
	done()
	release()
	// Borrowers registered while decoding arguments must reach their owners
	// before the caller drops its hold on the arguments.
	e.cw.objects.flushBorrows(ctx)
	return e.reply(ctx, spec, result, err)
}

// call invokes user code, turning panics into errors.
func (e *executor) call(ctx context.Context, fn *Function, self any, args []ArgValue) (result any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &RemoteError{Function: fn.Name, Type: fmt.Sprintf("%T", r), Message: fmt.Sprint(r), Stack: string(debug.Stack()), Panic: true}
		}
	}()
	if self != nil {
		return fn.Method(ctx, self, args)
	}
	return fn.Task(ctx, args)
}

func (e *executor) reply(ctx context.Context, spec *pb.TaskSpec, result any, err error) *pb.TaskReply {
	retID, _ := ids.ObjectIDFromBytes(spec.ReturnId)
	taskHex := ids.MustFromBytes(spec.TaskId).String()
	if err != nil {
		var re *RemoteError
		system := false
		if r, ok := err.(*RemoteError); ok && r.TaskID == "" {
			// Raised by the runtime for this task (argument types, panics,
			// missing functions): it describes this task.
			re = r
			system = r.Kind == KindArgType || r.Kind == KindFunctionNotFound
			re.Function, re.TaskID = spec.Function, taskHex
		} else {
			// Returned by user code, possibly a child task's error: keep its
			// whole message and its category.
			re = &RemoteError{Function: spec.Function, TaskID: taskHex, Type: fmt.Sprintf("%T", err), Message: err.Error(), Kind: kindOf(err)}
		}
		re.Pid, re.Node = os.Getpid(), e.cw.nodeID.Short()
		return &pb.TaskReply{TaskId: spec.TaskId, Ret: errorReturn(retID, re), AppError: !system, SystemError: system}
	}
	if spec.TensorTransport != "" {
		// The returned tensors stay where they are; the object's value is
		// the transport's metadata, registered right after they were made.
		ts, ok := asTensors(result)
		if !ok {
			return e.reply(ctx, spec, nil, fmt.Errorf("method returns by tensor transport %q but returned %T; return transport.Tensor or []transport.Tensor", spec.TensorTransport, result))
		}
		env, err := e.cw.extractTensors(ctx, spec.TensorTransport, retID, ts)
		if err != nil {
			return e.reply(ctx, spec, nil, err)
		}
		return &pb.TaskReply{TaskId: spec.TaskId, Ret: &pb.ReturnObject{ObjectId: retID.Bytes(), Metadata: codec.FormatTransport.Meta(), Data: env, Size: int64(len(env))}}
	}
	ret, more, err := e.encodeReturns(ctx, spec, result)
	if err != nil {
		return e.reply(ctx, spec, nil, err)
	}
	return &pb.TaskReply{TaskId: spec.TaskId, Ret: ret, MoreRets: more}
}

// lendToCaller makes the caller a borrower of every reference inside a
// return value before the reply leaves, so none is freed in between.
func (e *executor) lendToCaller(ctx context.Context, caller *pb.Address, refs []codec.RefInfo) {
	if len(refs) == 0 {
		return
	}
	byOwner := map[ownerKey]*borrowBatch{}
	var own []ids.ObjectID
	for _, r := range refs {
		switch {
		case e.cw.isSelf(r.Owner):
			own = append(own, r.ID)
		case string(r.Owner.GetWorkerId()) == string(caller.GetWorkerId()):
		default:
			k := keyOf(r.Owner)
			if byOwner[k] == nil {
				byOwner[k] = &borrowBatch{owner: r.Owner}
			}
			byOwner[k].ids = append(byOwner[k].ids, r.ID)
		}
	}
	if len(own) > 0 {
		req := &pb.UpdateBorrowersRequest{Borrower: caller}
		for _, id := range own {
			req.Add = append(req.Add, id.Bytes())
		}
		e.cw.objects.updateBorrowers(req)
	}
	for _, b := range byOwner {
		e.cw.objects.sendBorrowers(ctx, b.owner, caller, b.ids, nil)
	}
}

// createActor runs an actor's constructor, recording its task events.
func (e *executor) createActor(ctx context.Context, spec *pb.TaskSpec) *pb.TaskReply {
	var t execTimes
	t.fetchStart = e.cw.taskStarted(spec)
	rep := e.construct(ctx, spec, &t)
	class := ""
	if fn := Lookup(spec.Function); fn != nil {
		class = fn.Class
	}
	e.cw.taskExecuted(spec, &t, class, rep)
	return rep
}

// construct runs an actor's constructor and makes this worker the actor;
// t gets the times of its phases.
func (e *executor) construct(ctx context.Context, spec *pb.TaskSpec, t *execTimes) *pb.TaskReply {
	fn := Lookup(spec.Function)
	if fn == nil || fn.Task == nil {
		rep := e.systemError(spec, KindFunctionNotFound, fmt.Sprintf("actor constructor %q is not registered in this worker binary", spec.Function))
		rep.ActorCreationFailed = true
		return rep
	}
	// The transports the actor declares must run on the node it landed on
	// (checked here, where it runs, not where it was created).
	if err := e.cw.checkTransports(ctx, spec.Transports); err != nil {
		rep := e.systemError(spec, KindActorDied, err.Error())
		rep.ActorCreationFailed = true
		return rep
	}
	e.procs.apply(spec.GetResources())
	args, release, err := e.loadArgs(ctx, spec)
	t.fetchEnd = nowUs()
	if err != nil {
		rep := e.systemError(spec, KindObjectFreed, err.Error())
		rep.ActorCreationFailed = true
		return rep
	}
	tctx := context.WithValue(e.cw.ctx, taskCtxKey{}, TaskInfo{TaskID: ids.MustFromBytes(spec.TaskId), Function: spec.Function, ActorID: ids.MustFromBytes(spec.ActorId), Placement: placementFromProto(spec.GetPlacement())})
	actorStarted(ActorRef{ID: ids.MustFromBytes(spec.ActorId), Name: spec.Name, Class: fn.Class})
	t.execStart = nowUs()
	inst, err := e.call(tctx, fn, nil, args)
	t.execEnd = nowUs()
	release()
	e.cw.objects.flushBorrows(ctx)
	if err == nil && inst == nil {
		err = errors.New("constructor returned a nil actor")
	}
	if err != nil {
		rep := e.reply(ctx, spec, nil, err)
		rep.ActorCreationFailed = true
		return rep
	}
	e.mu.Lock()
	e.actor = inst
	e.actorRef = ActorRef{ID: ids.MustFromBytes(spec.ActorId), Name: spec.Name, Class: fn.Class}
	e.actorPlace = placementFromProto(spec.GetPlacement())
	e.groups = newCallGroups(e.actorRef.ID, fn.Class, int(spec.MaxConcurrency), spec.GetConcurrencyGroups())
	e.mu.Unlock()
	e.cw.log.Info("actor started", "actor", e.actorRef.ID.Short(), "class", fn.Class, "name", spec.Name)
	go e.cw.fenceActor(e.actorRef.ID)
	retID, _ := ids.ObjectIDFromBytes(spec.ReturnId)
	return &pb.TaskReply{TaskId: spec.TaskId, Ret: &pb.ReturnObject{ObjectId: retID.Bytes(), Metadata: codec.FormatMsgpack.Meta(), Data: []byte{0xc0}}}
}

func (s *coreWorkerService) GetObjectStatus(ctx context.Context, req *pb.GetObjectStatusRequest) (*pb.GetObjectStatusReply, error) {
	id, err := ids.ObjectIDFromBytes(req.ObjectId)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "object_id: %v", err)
	}
	t := s.cw.objects
	t.mu.Lock()
	o := t.objs[id]
	t.mu.Unlock()
	if o == nil || !o.owned {
		if s.cw.idgen.Owns(id.TaskID()) {
			return &pb.GetObjectStatusReply{Status: pb.GetObjectStatusReply_FREED}, nil
		}
		return &pb.GetObjectStatusReply{Status: pb.GetObjectStatusReply_UNKNOWN}, nil
	}
	ret, err := t.wait(ctx, id)
	if err != nil {
		var oe *ObjectError
		if errors.As(err, &oe) {
			return &pb.GetObjectStatusReply{Status: pb.GetObjectStatusReply_FREED}, nil
		}
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		// A system error on the owner side travels as an error object.
		return &pb.GetObjectStatusReply{Status: pb.GetObjectStatusReply_READY, Object: errorReturn(id, systemRemoteError(err))}, nil
	}
	return &pb.GetObjectStatusReply{Status: pb.GetObjectStatusReply_READY, Object: ret}, nil
}

// systemRemoteError converts a local system error for another process.
func systemRemoteError(err error) *RemoteError {
	var wc *WorkerCrashedError
	re := &RemoteError{Message: err.Error(), Type: fmt.Sprintf("%T", err), Kind: kindOf(err)}
	if errors.As(err, &wc) {
		re.Function = wc.Function
	}
	return re
}

func (s *coreWorkerService) UpdateBorrowers(ctx context.Context, req *pb.UpdateBorrowersRequest) (*pb.UpdateBorrowersReply, error) {
	unknown := s.cw.objects.updateBorrowers(req)
	rep := &pb.UpdateBorrowersReply{}
	for _, id := range unknown {
		rep.Unknown = append(rep.Unknown, id.Bytes())
	}
	return rep, nil
}

func (s *coreWorkerService) Exit(ctx context.Context, req *pb.ExitRequest) (*pb.ExitReply, error) {
	if s.cw.mode != ModeWorker {
		return nil, status.Error(codes.FailedPrecondition, "a driver does not exit on request")
	}
	s.cw.log.Info("exiting on request", "reason", req.Reason)
	if req.Force {
		os.Exit(0)
	}
	go func() {
		s.cw.Close()
		os.Exit(0)
	}()
	return &pb.ExitReply{}, nil
}

func (s *coreWorkerService) CancelTask(ctx context.Context, req *pb.CancelTaskRequest) (*pb.CancelTaskReply, error) {
	id, err := ids.FromBytes(req.GetTaskId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "cancel task: %v", err)
	}
	return &pb.CancelTaskReply{Running: s.cw.exec.cancel(id)}, nil
}

func (s *coreWorkerService) CancelObject(ctx context.Context, req *pb.CancelObjectRequest) (*pb.CancelObjectReply, error) {
	id, err := ids.ObjectIDFromBytes(req.GetObjectId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "cancel object: %v", err)
	}
	if err := s.cw.CancelTask(ctx, id, req.GetForce()); err != nil {
		var nc *notCancellableError
		if errors.As(err, &nc) {
			return nil, status.Error(codes.FailedPrecondition, nc.reason)
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &pb.CancelObjectReply{}, nil
}

func (s *coreWorkerService) ListOwned(ctx context.Context, req *pb.ListOwnedRequest) (*pb.ListOwnedReply, error) {
	return s.cw.ListOwned(), nil
}

// ListOwned reports the tasks this process submitted and the objects it owns.
func (cw *CoreWorker) ListOwned() *pb.ListOwnedReply {
	rep := &pb.ListOwnedReply{Owner: cw.addr, Tasks: cw.submitter.listTasks()}
	t := cw.objects
	t.mu.Lock()
	for id, o := range t.objs {
		if !o.owned {
			continue
		}
		st := "PENDING"
		if o.done {
			st = "READY"
			if o.err != nil || (o.ret != nil && codec.FormatOf(o.ret.Metadata) == codec.FormatError) {
				st = "FAILED"
			}
		}
		os := &pb.ObjectState{ObjectId: id.Bytes(), Size: o.size, LocalRefs: int64(o.local), SubmittedRefs: int64(o.submitted), Borrowers: int64(len(o.borrowers)), State: st}
		if o.ret != nil {
			os.InStore, os.NodeId = o.ret.InStore, o.ret.NodeId
		}
		if o.task != nil {
			os.CallSite = o.task.spec.Function
		} else {
			os.CallSite = "put"
		}
		rep.Objects = append(rep.Objects, os)
	}
	t.mu.Unlock()
	return rep
}
