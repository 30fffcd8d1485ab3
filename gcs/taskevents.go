package gcs

import (
	"container/list"
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/limits"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Task states, as Ray names them, in the order a task attempt goes
// through them.
const (
	TaskPendingArgsAvail      = "PENDING_ARGS_AVAIL"
	TaskPendingNodeAssignment = "PENDING_NODE_ASSIGNMENT"
	TaskSubmittedToWorker     = "SUBMITTED_TO_WORKER"
	TaskRunning               = "RUNNING"
	TaskFinished              = "FINISHED"
	TaskFailed                = "FAILED"
)

// Task phases, as the timeline shows them.
const (
	PhaseScheduling = "scheduling"
	PhaseFetchArgs  = "fetch_args"
	PhaseExecution  = "execution"
)

// stateIndex numbers the states in the order a task attempt goes through
// them (0: unknown). An attempt's state is the furthest it reached,
// whatever order its owner's and executor's events arrive in (their
// clocks may differ); FINISHED and FAILED are both last.
func stateIndex(state string) int {
	switch state {
	case TaskPendingArgsAvail:
		return 1
	case TaskPendingNodeAssignment:
		return 2
	case TaskSubmittedToWorker:
		return 3
	case TaskRunning:
		return 4
	case TaskFinished:
		return 5
	case TaskFailed:
		return 6
	}
	return 0
}

// rankOf is stateIndex with FINISHED and FAILED equal.
func rankOf(i int) int { return min(i, 5) }

// TaskStates lists the task states in order.
var TaskStates = []string{TaskPendingArgsAvail, TaskPendingNodeAssignment, TaskSubmittedToWorker, TaskRunning, TaskFinished, TaskFailed}

// phaseNames are the phases by index.
var phaseNames = [...]string{PhaseScheduling, PhaseFetchArgs, PhaseExecution}

// TaskEventLimits bounds the task event store. Zero fields take the
// defaults.
type TaskEventLimits struct {
	// MaxTasks is how many task attempts are kept (default 100000);
	// beyond it the oldest finished ones are evicted first.
	MaxTasks int
	// MaxBatch is the most events one AddTaskEvents may carry (default
	// 10000).
	MaxBatch int
}

// Defaults of TaskEventLimits.
const (
	DefaultMaxTasks      = 100000
	DefaultMaxEventBatch = 10000
)

// Bounds of one event's strings: longer ones are cut.
const (
	maxTaskNameLen  = limits.MaxTaskNameLen
	maxErrorTypeLen = limits.MaxTaskErrorTypeLen
	maxErrorMsgLen  = limits.MaxTaskErrorMessageLen
)

func (l TaskEventLimits) withDefaults() TaskEventLimits {
	if l.MaxTasks <= 0 {
		l.MaxTasks = DefaultMaxTasks
	}
	if l.MaxBatch <= 0 {
		l.MaxBatch = DefaultMaxEventBatch
	}
	return l
}

// taskKey names one attempt of a task.
type taskKey struct {
	id      ids.ID
	attempt int32
}

// taskEntry is one stored attempt, kept flat (no allocation per event):
// the TaskStatus is built when it is listed.
type taskEntry struct {
	key                              taskKey
	jobID, actorID, nodeID, workerID []byte
	ownerWorker, ownerNode           []byte
	function, name, actorClass       string
	errType, errMsg                  string
	kind                             gorayv1.TaskKind
	pid                              int32
	// state is the furthest state's index (stateIndex); times[i] when
	// state i was entered (0: not seen).
	state  int
	times  [7]int64
	phases [3]phaseRec
	// elem is the entry in taskEventStore.order; done in .finished once
	// the attempt ended.
	elem *list.Element
	done *list.Element
}

// phaseRec is one phase of an attempt.
type phaseRec struct {
	set          bool
	start, end   int64
	node, worker []byte
	pid          int32
}

var stateNames = [...]string{"", TaskPendingArgsAvail, TaskPendingNodeAssignment, TaskSubmittedToWorker, TaskRunning, TaskFinished, TaskFailed}

// status builds the attempt's TaskStatus.
func (e *taskEntry) status() *gorayv1.TaskStatus {
	st := &gorayv1.TaskStatus{
		TaskId: e.key.id.Bytes(), Attempt: e.key.attempt, JobId: e.jobID, Function: e.function, Name: e.name, Kind: e.kind,
		ActorId: e.actorID, ActorClass: e.actorClass, State: stateNames[e.state], NodeId: e.nodeID, WorkerId: e.workerID, Pid: e.pid,
		ErrorType: e.errType, ErrorMessage: e.errMsg, OwnerWorkerId: e.ownerWorker, OwnerNodeId: e.ownerNode,
	}
	for i, t := range e.times {
		if t != 0 {
			st.States = append(st.States, &gorayv1.TaskStateTime{State: stateNames[i], TimeUs: t})
		}
	}
	for i, p := range e.phases {
		if p.set {
			st.Phases = append(st.Phases, &gorayv1.TaskPhase{Phase: phaseNames[i], StartUs: p.start, EndUs: p.end, NodeId: p.node, WorkerId: p.worker, Pid: p.pid})
		}
	}
	return st
}

// taskEventStore keeps the task events the cluster's processes report,
// merged by task attempt: a component with its own lock and a bound. It
// never blocks on anything but its lock.
type taskEventStore struct {
	limits TaskEventLimits

	mu    sync.Mutex
	tasks map[taskKey]*taskEntry
	// order holds every entry, oldest first; finished the ended ones in
	// the order they ended (evicted first).
	order    list.List
	finished list.List
	counts   [7]int64 // state index → stored attempts in it
	evicted  int64
	dropped  map[string]int64 // job (hex) → events its processes dropped
}

func newTaskEventStore(l TaskEventLimits) *taskEventStore {
	return &taskEventStore{limits: l.withDefaults(), tasks: map[taskKey]*taskEntry{}, dropped: map[string]int64{}}
}

// InvalidTaskEventError says why a batch of task events was refused.
type InvalidTaskEventError struct {
	// Index is the event's position in the batch (-1: the batch itself).
	Index  int
	Field  string
	Reason string
}

func (e *InvalidTaskEventError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("task events: %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("task event %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Bounds of one report's string table.
const (
	maxReportStrings = 2 * DefaultMaxEventBatch
)

// check validates a batch before anything of it is stored.
func (s *taskEventStore) check(req *gorayv1.AddTaskEventsRequest) error {
	if n := len(req.GetEvents()); n > s.limits.MaxBatch {
		return &InvalidTaskEventError{Index: -1, Field: "events", Reason: fmt.Sprintf("%d events in one batch, at most %d", n, s.limits.MaxBatch)}
	}
	if n := len(req.GetStrings()); n > maxReportStrings {
		return &InvalidTaskEventError{Index: -1, Field: "strings", Reason: fmt.Sprintf("%d strings in one batch, at most %d", n, maxReportStrings)}
	}
	if req.GetDropped() < 0 {
		return &InvalidTaskEventError{Index: -1, Field: "dropped", Reason: fmt.Sprintf("negative count %d", req.GetDropped())}
	}
	for _, b := range []struct {
		name string
		v    []byte
	}{{"job_id", req.GetJobId()}, {"node_id", req.GetNodeId()}, {"worker_id", req.GetWorkerId()}} {
		if len(b.v) > ids.Size {
			return &InvalidTaskEventError{Index: -1, Field: b.name, Reason: fmt.Sprintf("%d bytes, at most %d", len(b.v), ids.Size)}
		}
	}
	strs := uint32(len(req.GetStrings()))
	for i, ev := range req.GetEvents() {
		if len(ev.GetTaskId()) != ids.Size {
			return &InvalidTaskEventError{Index: i, Field: "task_id", Reason: fmt.Sprintf("%d bytes, want %d", len(ev.GetTaskId()), ids.Size)}
		}
		if ev.GetAttempt() < 0 {
			return &InvalidTaskEventError{Index: i, Field: "attempt", Reason: fmt.Sprintf("negative attempt %d", ev.GetAttempt())}
		}
		for _, f := range []struct {
			name string
			v    uint32
		}{{"function", ev.GetFunction()}, {"name", ev.GetName()}, {"actor_class", ev.GetActorClass()}} {
			if f.v > strs {
				return &InvalidTaskEventError{Index: i, Field: f.name, Reason: fmt.Sprintf("string %d of a table of %d", f.v, strs)}
			}
		}
		for _, b := range []struct {
			name string
			v    []byte
		}{{"actor_id", ev.GetActorId()}, {"leased_node_id", ev.GetLeasedNodeId()}, {"leased_worker_id", ev.GetLeasedWorkerId()}} {
			if len(b.v) > ids.Size {
				return &InvalidTaskEventError{Index: i, Field: b.name, Reason: fmt.Sprintf("%d bytes, at most %d", len(b.v), ids.Size)}
			}
		}
		for p, sp := range eventPhases(ev) {
			if sp[1] != 0 && sp[1] < sp[0] {
				return &InvalidTaskEventError{Index: i, Field: phaseNames[p] + "_end_us", Reason: fmt.Sprintf("phase %s ends (%d) before it starts (%d)", phaseNames[p], sp[1], sp[0])}
			}
		}
	}
	return nil
}

// eventTimes are an event's state times by state index.
func eventTimes(ev *gorayv1.TaskEvent) [7]int64 {
	return [7]int64{0, ev.GetPendingArgsAvailUs(), ev.GetPendingNodeAssignmentUs(), ev.GetSubmittedToWorkerUs(), ev.GetRunningUs(), ev.GetFinishedUs(), ev.GetFailedUs()}
}

// eventPhases are an event's phase spans by phase index.
func eventPhases(ev *gorayv1.TaskEvent) [3][2]int64 {
	return [3][2]int64{
		{ev.GetSchedulingStartUs(), ev.GetSchedulingEndUs()},
		{ev.GetFetchArgsStartUs(), ev.GetFetchArgsEndUs()},
		{ev.GetExecutionStartUs(), ev.GetExecutionEndUs()},
	}
}

// add stores a checked batch.
func (s *taskEventStore) add(req *gorayv1.AddTaskEventsRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := req.GetDropped(); d > 0 {
		job := hex.EncodeToString(req.GetJobId())
		if _, ok := s.dropped[job]; ok || len(s.dropped) < s.limits.MaxTasks {
			s.dropped[job] += d
		}
	}
	strs := req.GetStrings()
	str := func(i uint32) string {
		if i == 0 || int(i) > len(strs) {
			return ""
		}
		return strs[i-1]
	}
	for _, ev := range req.GetEvents() {
		s.addLocked(req, ev, str)
	}
}

func (s *taskEventStore) addLocked(req *gorayv1.AddTaskEventsRequest, ev *gorayv1.TaskEvent, str func(uint32) string) {
	k := taskKey{id: ids.ID(ev.GetTaskId()), attempt: ev.GetAttempt()}
	e := s.tasks[k]
	if e == nil {
		for len(s.tasks) >= s.limits.MaxTasks {
			s.evictLocked()
		}
		e = &taskEntry{key: k}
		e.elem = s.order.PushBack(e)
		s.tasks[k] = e
	}
	setStr := func(dst *string, v string, limit int) {
		if v != "" {
			*dst = limits.Truncate(v, limit)
		}
	}
	setBytes := func(dst *[]byte, v []byte, replace bool) {
		if len(v) > 0 && (replace || len(*dst) == 0) {
			*dst = v
		}
	}
	exec := ev.GetFromExecutor()
	setBytes(&e.jobID, req.GetJobId(), false)
	setStr(&e.function, str(ev.GetFunction()), maxTaskNameLen)
	setStr(&e.name, str(ev.GetName()), maxTaskNameLen)
	setStr(&e.actorClass, str(ev.GetActorClass()), maxTaskNameLen)
	if ev.GetKind() != gorayv1.TaskKind_TASK_KIND_NORMAL {
		e.kind = ev.GetKind()
	}
	setBytes(&e.actorID, ev.GetActorId(), false)
	node, worker, pid := ev.GetLeasedNodeId(), ev.GetLeasedWorkerId(), int32(0)
	if exec {
		node, worker, pid = req.GetNodeId(), req.GetWorkerId(), req.GetPid()
	} else {
		setBytes(&e.ownerWorker, req.GetWorkerId(), false)
		setBytes(&e.ownerNode, req.GetNodeId(), false)
	}
	// Where it ran: the executor knows best; the owner's guess (the leased
	// worker) stands until the executor reports.
	setBytes(&e.nodeID, node, exec)
	setBytes(&e.workerID, worker, exec)
	if pid > 0 {
		e.pid = pid
	}
	if ev.GetErrorType() != "" || ev.GetErrorMessage() != "" {
		// The executor's error (the task's own) wins over the owner's
		// summary of it.
		if e.errMsg == "" || exec {
			e.errType = limits.Truncate(ev.GetErrorType(), maxErrorTypeLen)
			e.errMsg = limits.Truncate(ev.GetErrorMessage(), maxErrorMsgLen)
		}
	}
	for i, t := range eventTimes(ev) {
		if t == 0 || i == 0 {
			continue
		}
		if e.times[i] == 0 {
			e.times[i] = t
		}
		if rankOf(i) > rankOf(e.state) {
			if e.state > 0 {
				s.counts[e.state]--
			}
			e.state = i
			s.counts[i]++
			if rankOf(i) == rankOf(stateIndex(TaskFinished)) {
				e.done = s.finished.PushBack(e)
			}
		}
	}
	for i, sp := range eventPhases(ev) {
		if sp[1] != 0 {
			e.phases[i] = phaseRec{set: true, start: sp[0], end: sp[1], node: node, worker: worker, pid: pid}
		}
	}
}

// evictLocked drops the attempt that ended first, else the oldest.
func (s *taskEventStore) evictLocked() {
	var e *taskEntry
	if f := s.finished.Front(); f != nil {
		e = f.Value.(*taskEntry)
	} else if o := s.order.Front(); o != nil {
		e = o.Value.(*taskEntry)
	} else {
		return
	}
	s.removeLocked(e)
	s.evicted++
}

func (s *taskEventStore) removeLocked(e *taskEntry) {
	s.order.Remove(e.elem)
	if e.done != nil {
		s.finished.Remove(e.done)
	}
	if e.state > 0 {
		s.counts[e.state]--
	}
	delete(s.tasks, e.key)
}

// TaskFilterKeys are the fields ListTasks filters on.
var TaskFilterKeys = []string{"task_id", "attempt", "job_id", "function", "name", "kind", "actor_id", "actor_class", "state", "node_id", "worker_id", "pid", "error_type", "owner_worker_id", "owner_node_id"}

// MaxTaskFilters bounds the filters of one ListTasks (the store's lock is
// held while they are matched).
const MaxTaskFilters = 32

// UnknownFilterError says a filter names a field tasks do not have.
type UnknownFilterError struct {
	Key string
}

func (e *UnknownFilterError) Error() string {
	return fmt.Sprintf("cannot filter tasks on %q: use one of %s", e.Key, strings.Join(TaskFilterKeys, ", "))
}

// taskField returns the field key of st as the rows show it.
func taskField(st *gorayv1.TaskStatus, key string) (string, bool) {
	switch key {
	case "task_id":
		return hex.EncodeToString(st.GetTaskId()), true
	case "attempt":
		return strconv.Itoa(int(st.GetAttempt())), true
	case "job_id":
		return hex.EncodeToString(st.GetJobId()), true
	case "function":
		return st.GetFunction(), true
	case "name":
		return st.GetName(), true
	case "kind":
		return TaskKindName(st.GetKind()), true
	case "actor_id":
		return hex.EncodeToString(st.GetActorId()), true
	case "actor_class":
		return st.GetActorClass(), true
	case "state":
		return st.GetState(), true
	case "node_id":
		return hex.EncodeToString(st.GetNodeId()), true
	case "worker_id":
		return hex.EncodeToString(st.GetWorkerId()), true
	case "pid":
		return strconv.Itoa(int(st.GetPid())), true
	case "error_type":
		return st.GetErrorType(), true
	case "owner_worker_id":
		return hex.EncodeToString(st.GetOwnerWorkerId()), true
	case "owner_node_id":
		return hex.EncodeToString(st.GetOwnerNodeId()), true
	}
	return "", false
}

// TaskKindName is a task kind as rows show it: NORMAL, ACTOR_CREATION or
// ACTOR_METHOD.
func TaskKindName(k gorayv1.TaskKind) string {
	return strings.TrimPrefix(k.String(), "TASK_KIND_")
}

// list returns copies of the stored attempts matching every filter,
// oldest first; with a limit, the newest limit of them.
func (s *taskEventStore) list(filters []*gorayv1.TaskFilter, limit int64) (*gorayv1.ListTasksReply, error) {
	if len(filters) > MaxTaskFilters {
		return nil, fmt.Errorf("%d filters; at most %d", len(filters), MaxTaskFilters)
	}
	for _, f := range filters {
		if _, ok := taskField(&gorayv1.TaskStatus{}, f.GetKey()); !ok {
			return nil, &UnknownFilterError{Key: f.GetKey()}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var match []*taskEntry
	for el := s.order.Front(); el != nil; el = el.Next() {
		e := el.Value.(*taskEntry)
		if len(filters) == 0 {
			match = append(match, e)
			continue
		}
		st := e.status()
		ok := true
		for _, f := range filters {
			v, _ := taskField(st, f.GetKey())
			if !strings.EqualFold(v, f.GetValue()) {
				ok = false
				break
			}
		}
		if ok {
			match = append(match, e)
		}
	}
	rep := &gorayv1.ListTasksReply{Total: int64(len(match)), Evicted: s.evicted, DroppedByJob: make(map[string]int64, len(s.dropped))}
	for k, v := range s.dropped {
		rep.DroppedByJob[k] = v
	}
	if limit > 0 && int64(len(match)) > limit {
		match = match[int64(len(match))-limit:]
	}
	// Built under the lock: later events change the entries.
	rep.Tasks = make([]*gorayv1.TaskStatus, len(match))
	for i, e := range match {
		rep.Tasks[i] = e.status()
	}
	return rep, nil
}

// stateCounts counts the stored attempts by state.
func (s *taskEventStore) stateCounts() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(TaskStates))
	for _, st := range TaskStates {
		out[st] = s.counts[stateIndex(st)]
	}
	return out
}

// TaskStateCounts returns, for each task state, how many of the stored
// task attempts are in it (every state is present, zero or not).
func (s *Server) TaskStateCounts() map[string]int64 {
	return s.taskEvents.stateCounts()
}

// taskEventService serves TaskEventService: it decodes, calls the store
// and encodes.
type taskEventService struct {
	gorayv1.UnimplementedTaskEventServiceServer
	store *taskEventStore
}

// AddTaskEvents stores a batch of one process's task events.
func (t *taskEventService) AddTaskEvents(ctx context.Context, req *gorayv1.AddTaskEventsRequest) (*gorayv1.AddTaskEventsReply, error) {
	if err := t.store.check(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	t.store.add(req)
	return &gorayv1.AddTaskEventsReply{}, nil
}

// ListTasks answers a query of the stored tasks.
func (t *taskEventService) ListTasks(ctx context.Context, req *gorayv1.ListTasksRequest) (*gorayv1.ListTasksReply, error) {
	if req.GetLimit() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "list tasks: negative limit %d", req.GetLimit())
	}
	rep, err := t.store.list(req.GetFilters(), req.GetLimit())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return rep, nil
}
