package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"time"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/limits"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Task events: every state a task attempt enters, and the phases the
// timeline shows, recorded by the owner (submit, queue, dispatch, result)
// and by the worker that runs it (argument fetch, execution), and reported
// to the GCS's TaskEventService in batches. Recording appends a small
// struct to a bounded buffer under a lock held for the append alone; a full
// buffer drops the event and counts it, so the task path never waits for
// the GCS.

// Tuning of the task event buffer.
const (
	// taskEventBufferSize bounds the events a process holds between
	// flushes; beyond it events are dropped and counted.
	taskEventBufferSize = 20000
	// taskEventFlushAt wakes the flusher before its period.
	taskEventFlushAt = 2000
	// taskEventPeriod is how often the buffer is flushed.
	taskEventPeriod = 500 * time.Millisecond
	// taskEventBatch bounds one AddTaskEvents call (the GCS takes up to
	// gcs.DefaultMaxEventBatch).
	taskEventBatch = 5000
	// taskEventTimeout bounds one AddTaskEvents call.
	taskEventTimeout = 5 * time.Second
)

// Task event states and phases (the GCS's names; see gcs/taskevents.go).
const (
	evPendingArgsAvail uint8 = iota + 1
	evPendingNodeAssignment
	evSubmittedToWorker
	evRunning
	evFinished
	evFailed
)

const (
	phScheduling uint8 = iota + 1
	phFetchArgs
	phExecution
)

// taskEvent is one recorded event, kept small and allocation-free. It
// copies what it needs of the spec rather than holding it, so a finished
// task's arguments are not kept alive until the next flush.
type taskEvent struct {
	task    ids.ID
	attempt int32
	kind    pb.TaskKind
	state   uint8
	phase   uint8
	// describe: include the descriptive fields; executor: recorded by the
	// worker that runs the task.
	describe bool
	executor bool
	at       int64 // µs, with state
	start    int64 // µs, with phase
	end      int64
	function string
	name     string
	actorID  []byte
	// node and worker the owner leased (owner side).
	node, worker []byte
	actorClass   string
	errType      string
	errMsg       string
}

// eventOf starts an event of spec's attempt.
func eventOf(spec *pb.TaskSpec, describe, executor bool) taskEvent {
	ev := taskEvent{attempt: spec.Attempt, describe: describe, executor: executor}
	copy(ev.task[:], spec.TaskId)
	if describe {
		ev.function, ev.name, ev.kind, ev.actorID = spec.Function, spec.Name, spec.Kind, spec.ActorId
	}
	return ev
}

// taskEventBuffer holds recorded events until the flusher sends them.
type taskEventBuffer struct {
	send   func(context.Context, *pb.AddTaskEventsRequest) error
	jobID  []byte
	node   []byte
	worker []byte
	pid    int32
	max    int
	batch  int

	mu      sync.Mutex
	buf     []taskEvent
	spare   []taskEvent
	dropped int64
	closed  bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// newTaskEventBuffer returns a buffer of at most max events that send
// delivers in batches of at most batch, for the process worker of node
// (job and pid say whose events they are).
func newTaskEventBuffer(send func(context.Context, *pb.AddTaskEventsRequest) error, job, node, worker ids.ID, pid int, max, batch int) *taskEventBuffer {
	return &taskEventBuffer{
		send: send, jobID: job.Bytes(), node: node.Bytes(), worker: worker.Bytes(), pid: int32(pid), max: max, batch: batch,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// add records ev; a full (or closed) buffer drops it and counts it. Safe
// on a nil buffer (a process without a GCS records nothing).
func (b *taskEventBuffer) add(ev taskEvent) {
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.closed || len(b.buf) >= b.max {
		b.dropped++
		b.mu.Unlock()
		return
	}
	b.buf = append(b.buf, ev)
	n := len(b.buf)
	b.mu.Unlock()
	if n == taskEventFlushAt {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

// run flushes every period (or sooner when the buffer fills) until close.
func (b *taskEventBuffer) run(period time.Duration) {
	defer close(b.done)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		case <-b.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), taskEventTimeout)
		b.flush(ctx)
		cancel()
	}
}

// close stops the flusher and sends what is left, within ctx. Later
// events are dropped. Safe on a nil buffer and more than once.
func (b *taskEventBuffer) close(ctx context.Context) {
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	<-b.done
	b.flush(ctx)
}

// flush sends the buffered events and the drop count, the events of one
// attempt seen from one side coalesced into one message. Events a failed
// call did not deliver are counted as dropped.
func (b *taskEventBuffer) flush(ctx context.Context) {
	b.mu.Lock()
	evs := b.buf
	b.buf, b.spare = b.spare[:0], nil
	dropped := b.dropped
	b.dropped = 0
	b.mu.Unlock()
	all := evs
	for len(evs) > 0 || dropped > 0 {
		req, n := b.request(evs)
		req.Dropped = dropped
		if err := b.send(ctx, req); err != nil {
			b.mu.Lock()
			b.dropped += dropped + int64(len(evs))
			b.mu.Unlock()
			break
		}
		dropped = 0
		evs = evs[n:]
	}
	// Keep the array for the next round (without the specs it points to).
	clear(all)
	b.mu.Lock()
	if b.spare == nil {
		b.spare = all[:0]
	}
	b.mu.Unlock()
}

// coalesceKey names one attempt seen from one side.
type coalesceKey struct {
	task     ids.ID
	attempt  int32
	executor bool
}

// request builds a report of the first events of evs, at most b.batch
// messages, and says how many events it took.
func (b *taskEventBuffer) request(evs []taskEvent) (*pb.AddTaskEventsRequest, int) {
	req := &pb.AddTaskEventsRequest{JobId: b.jobID, NodeId: b.node, WorkerId: b.worker, Pid: b.pid}
	idx := map[coalesceKey]*pb.TaskEvent{}
	strs := map[string]uint32{}
	str := func(v string) uint32 {
		if v == "" {
			return 0
		}
		i, ok := strs[v]
		if !ok {
			req.Strings = append(req.Strings, v)
			i = uint32(len(req.Strings))
			strs[v] = i
		}
		return i
	}
	n := 0
	for ; n < len(evs); n++ {
		ev := &evs[n]
		k := coalesceKey{ev.task, ev.attempt, ev.executor}
		m := idx[k]
		if m == nil {
			if len(req.Events) >= b.batch {
				break
			}
			m = &pb.TaskEvent{TaskId: ev.task.Bytes(), Attempt: ev.attempt, FromExecutor: ev.executor}
			idx[k] = m
			req.Events = append(req.Events, m)
		}
		if ev.describe {
			m.Function, m.Name, m.Kind, m.ActorId = str(ev.function), str(ev.name), ev.kind, ev.actorID
		}
		if ev.actorClass != "" {
			m.ActorClass = str(ev.actorClass)
		}
		if ev.errType != "" || ev.errMsg != "" {
			// Cut as the GCS would, so that long messages cannot make a
			// report too large to send.
			m.ErrorType = limits.Truncate(ev.errType, limits.MaxTaskErrorTypeLen)
			m.ErrorMessage = limits.Truncate(ev.errMsg, limits.MaxTaskErrorMessageLen)
		}
		if len(ev.node) > 0 {
			m.LeasedNodeId, m.LeasedWorkerId = ev.node, ev.worker
		}
		switch ev.state {
		case evPendingArgsAvail:
			m.PendingArgsAvailUs = ev.at
		case evPendingNodeAssignment:
			m.PendingNodeAssignmentUs = ev.at
		case evSubmittedToWorker:
			m.SubmittedToWorkerUs = ev.at
		case evRunning:
			m.RunningUs = ev.at
		case evFinished:
			m.FinishedUs = ev.at
		case evFailed:
			m.FailedUs = ev.at
		}
		switch ev.phase {
		case phScheduling:
			m.SchedulingStartUs, m.SchedulingEndUs = ev.start, ev.end
		case phFetchArgs:
			m.FetchArgsStartUs, m.FetchArgsEndUs = ev.start, ev.end
		case phExecution:
			m.ExecutionStartUs, m.ExecutionEndUs = ev.start, ev.end
		}
	}
	return req, n
}

func nowUs() int64 { return time.Now().UnixMicro() }

// Owner-side recording. Each is one append; the callers may hold the
// submitter's lock (the buffer's lock is a leaf).

// taskSubmitted records a new task (or a new attempt of one).
func (cw *CoreWorker) taskSubmitted(rec *taskRecord) {
	if cw.events == nil {
		return
	}
	ev := eventOf(rec.spec, true, false)
	ev.state, ev.at = evPendingArgsAvail, nowUs()
	cw.events.add(ev)
}

// taskQueued records a task waiting for a worker lease.
func (cw *CoreWorker) taskQueued(rec *taskRecord, describe bool) {
	if cw.events == nil {
		return
	}
	rec.queuedUs = nowUs()
	ev := eventOf(rec.spec, describe, false)
	ev.state, ev.at = evPendingNodeAssignment, rec.queuedUs
	cw.events.add(ev)
}

// taskDispatched records a task sent to the worker at node, worker; its
// scheduling phase ran from when it was queued (zero: not queued, an
// actor call) until now.
func (cw *CoreWorker) taskDispatched(rec *taskRecord, now time.Time, node, worker []byte) {
	if cw.events == nil {
		return
	}
	ev := eventOf(rec.spec, false, false)
	ev.state, ev.at, ev.node, ev.worker = evSubmittedToWorker, now.UnixMicro(), node, worker
	if rec.queuedUs > 0 {
		ev.phase, ev.start, ev.end = phScheduling, min(rec.queuedUs, ev.at), ev.at
	}
	cw.events.add(ev)
}

// taskEnded records the owner's end of a task attempt (the worker that ran
// it reports its end too, with the error's details; the owner's is the one
// that survives a worker killed before its next report).
func (cw *CoreWorker) taskEnded(rec *taskRecord, failed bool) {
	if cw.events == nil {
		return
	}
	ev := eventOf(rec.spec, false, false)
	ev.state, ev.at = evFinished, nowUs()
	if failed {
		ev.state, ev.errType, ev.errMsg = evFailed, rec.errType, rec.errMsg
	}
	cw.events.add(ev)
}

// Executor-side recording.

// execTimes are the phases of one execution, in µs (zero: not reached).
type execTimes struct {
	fetchStart, fetchEnd int64
	execStart, execEnd   int64
}

// taskStarted records that this worker started running spec.
func (cw *CoreWorker) taskStarted(spec *pb.TaskSpec) int64 {
	at := nowUs()
	if cw.events != nil {
		ev := eventOf(spec, true, true)
		ev.state, ev.at = evRunning, at
		cw.events.add(ev)
	}
	return at
}

// taskExecuted records the phases of an execution and how it ended, from
// its reply.
func (cw *CoreWorker) taskExecuted(spec *pb.TaskSpec, t *execTimes, class string, rep *pb.TaskReply) {
	if cw.events == nil {
		return
	}
	if t.fetchEnd > 0 {
		ev := eventOf(spec, false, true)
		ev.phase, ev.start, ev.end = phFetchArgs, t.fetchStart, t.fetchEnd
		cw.events.add(ev)
	}
	end := eventOf(spec, false, true)
	end.state, end.at, end.actorClass = evFinished, nowUs(), class
	if t.execEnd > 0 {
		end.phase, end.start, end.end = phExecution, t.execStart, t.execEnd
	}
	if rep.GetAppError() || rep.GetSystemError() || rep.GetActorCreationFailed() {
		end.state = evFailed
		end.errType, end.errMsg = replyError(rep)
	}
	cw.events.add(end)
}

// replyError names the error of a failed task's reply: its type and
// message (a generic pair when the reply carries no decodable error).
func replyError(rep *pb.TaskReply) (typ, msg string) {
	if ret := rep.GetRet(); ret != nil && codec.FormatOf(ret.Metadata) == codec.FormatError {
		var re *RemoteError
		if errors.As(decodeRemoteError(ret.Data), &re) {
			return errorTypeOf(re), re.Message
		}
	}
	return "TaskError", "the task failed"
}

// noteReplyError keeps, for the owner's event, the error of a failed
// reply (decoded only when events are on and the task failed; called
// before the submitter's lock is taken).
func (cw *CoreWorker) noteReplyError(rep *pb.TaskReply) (typ, msg string) {
	if cw.events == nil || !(rep.GetAppError() || rep.GetSystemError()) {
		return "", ""
	}
	return replyError(rep)
}

// errTypeName names the type of an error the owner failed a task with,
// as task events show it: goray's own errors by their bare type name
// ("ActorUnavailableError", not "*core.ActorUnavailableError"), the same
// whichever path failed the task; other errors as %T.
func errTypeName(err error) string {
	t := reflect.TypeOf(err)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Name() == "" || t.PkgPath() != corePkgPath {
		return fmt.Sprintf("%T", err)
	}
	return t.Name()
}

// corePkgPath is this package's import path.
var corePkgPath = reflect.TypeFor[RemoteError]().PkgPath()

// errorTypeOf names a task's error: the system error's kind, else the Go
// type of what user code returned or panicked with.
func errorTypeOf(re *RemoteError) string {
	if re.Kind != "" {
		return re.Kind
	}
	if re.Panic {
		return "panic: " + re.Type
	}
	return re.Type
}

// EnvTaskEvents set to "0" turns task events off in a process (for
// measuring their cost; `goray list tasks` then misses its tasks).
const EnvTaskEvents = "GORAY_TASK_EVENTS"

// startTaskEvents makes the buffer of a process with a GCS and starts its
// flusher (called once the node, job and GCS are known).
func (cw *CoreWorker) startTaskEvents(pid int) {
	if cw.gcsCC == nil || os.Getenv(EnvTaskEvents) == "0" {
		return
	}
	cli := pb.NewTaskEventServiceClient(cw.gcsCC)
	send := func(ctx context.Context, req *pb.AddTaskEventsRequest) error {
		_, err := cli.AddTaskEvents(ctx, req)
		if err != nil {
			cw.log.Debug("reporting task events failed", "events", len(req.Events), "error", err)
		}
		return err
	}
	cw.events = newTaskEventBuffer(send, cw.jobID, cw.nodeID, cw.id, pid, taskEventBufferSize, taskEventBatch)
	go cw.events.run(taskEventPeriod)
}

// stopTaskEvents sends the last events, within d.
func (cw *CoreWorker) stopTaskEvents(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cw.events.close(ctx)
}
