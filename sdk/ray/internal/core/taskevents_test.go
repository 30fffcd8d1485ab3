package core

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/leaktest"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/waitfor"
)

// sink records what a buffer sends; fail makes the next calls fail.
type sink struct {
	mu      sync.Mutex
	reqs    []*pb.AddTaskEventsRequest
	fail    bool
	entered chan struct{} // receives on every call when not nil
	release chan struct{} // a call waits on it when not nil
}

func (s *sink) send(ctx context.Context, req *pb.AddTaskEventsRequest) error {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.release != nil {
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return errors.New("GCS unreachable")
	}
	s.reqs = append(s.reqs, req)
	return nil
}

// totals counts the states sent (one per recorded event in these tests)
// and the drops reported.
func (s *sink) totals() (events int, dropped int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.reqs {
		for _, e := range r.Events {
			for _, t := range []int64{e.PendingArgsAvailUs, e.PendingNodeAssignmentUs, e.SubmittedToWorkerUs, e.RunningUs, e.FinishedUs, e.FailedUs} {
				if t != 0 {
					events++
				}
			}
		}
		dropped += r.Dropped
	}
	return events, dropped
}

// tev is an event of spec's attempt entering state at µs at.
func tev(spec *pb.TaskSpec, describe, exec bool, state uint8, at int64) taskEvent {
	ev := eventOf(spec, describe, exec)
	ev.state, ev.at = state, at
	return ev
}

func testSpec(n byte) *pb.TaskSpec {
	id := ids.New()
	id[0] = n
	return &pb.TaskSpec{TaskId: id.Bytes(), JobId: []byte{1, 2, 3, 4}, Function: "main.f", Name: "f", Owner: &pb.Address{WorkerId: []byte("owner")}}
}

// TestTaskEventBufferDropsUnderOverload: while the GCS does not answer,
// the buffer holds at most its bound, drops the rest and reports how many
// it dropped once the GCS answers; close sends what is left.
func TestTaskEventBufferDropsUnderOverload(t *testing.T) {
	leaktest.Goroutines(t)
	sk := &sink{entered: make(chan struct{}, 100), release: make(chan struct{})}
	b := newTaskEventBuffer(sk.send, ids.New(), ids.New(), ids.New(), 7, 10, 4)
	go b.run(time.Millisecond)
	b.add(tev(testSpec(1), false, true, evRunning, 1))
	<-sk.entered // the flusher is stuck in a call with 1 event
	for i := range 25 {
		b.add(tev(testSpec(byte(i)), true, false, evPendingArgsAvail, int64(i)+1))
	}
	close(sk.release)
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	b.close(ctx)
	events, dropped := sk.totals()
	if events != 11 || dropped != 15 {
		t.Errorf("sent %d events and %d drops, want 11 (1 + the bound of 10) and 15", events, dropped)
	}
	for _, r := range sk.reqs {
		if len(r.Events) > 4 {
			t.Errorf("a batch of %d events, bound 4", len(r.Events))
		}
	}
	// After close, events are dropped, never sent.
	b.add(tev(testSpec(9), false, false, evFinished, 1))
	if e, _ := sk.totals(); e != 11 {
		t.Errorf("an event recorded after close was sent")
	}
}

// TestTaskEventBufferFlushOnClose: close sends the buffered events (with
// the executor's place and the owner's descriptive fields) at once,
// without waiting for the period; a failed send counts as dropped.
func TestTaskEventBufferFlushOnClose(t *testing.T) {
	leaktest.Goroutines(t)
	sk := &sink{}
	node, worker := ids.New(), ids.New()
	b := newTaskEventBuffer(sk.send, ids.New(), node, worker, 42, 100, 100)
	go b.run(time.Hour)
	spec := testSpec(1)
	b.add(tev(spec, true, false, evPendingArgsAvail, 10))
	fin := tev(spec, false, true, evFinished, 20)
	fin.phase, fin.start, fin.end, fin.errType = phExecution, 12, 19, "x"
	b.add(fin)
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	b.close(ctx)
	if len(sk.reqs) != 1 || len(sk.reqs[0].Events) != 2 {
		t.Fatalf("sent %v, want one batch of 2", sk.reqs)
	}
	req := sk.reqs[0]
	if req.Pid != 42 || ids.MustFromBytes(req.NodeId) != node || ids.MustFromBytes(req.WorkerId) != worker {
		t.Errorf("report from %x/%x/%d, want this process", req.NodeId, req.WorkerId, req.Pid)
	}
	first, second := req.Events[0], req.Events[1]
	if first.PendingArgsAvailUs != 10 || first.Function == 0 || req.Strings[first.Function-1] != "main.f" || first.FromExecutor {
		t.Errorf("owner event %v (strings %q)", first, req.Strings)
	}
	if second.FinishedUs != 20 || second.ExecutionStartUs != 12 || second.ExecutionEndUs != 19 || second.Function != 0 || !second.FromExecutor || second.ErrorType != "x" {
		t.Errorf("executor event %v", second)
	}

	// A failed report counts its events as dropped in the next one.
	sk = &sink{fail: true}
	b = newTaskEventBuffer(sk.send, ids.New(), node, worker, 42, 100, 100)
	b.add(tev(spec, false, true, evRunning, 1))
	b.add(tev(spec, false, true, evFinished, 2))
	b.flush(ctx)
	sk.fail = false
	retry := tev(spec, false, true, evRunning, 3)
	retry.attempt = 1
	b.add(retry)
	b.flush(ctx)
	if events, dropped := sk.totals(); events != 1 || dropped != 2 {
		t.Errorf("after a failed report: %d events, %d dropped; want 1 and 2", events, dropped)
	}
	var nilBuf *taskEventBuffer
	nilBuf.add(tev(spec, false, false, evRunning, 1)) // a process without a GCS records nothing
	nilBuf.close(ctx)
}

// BenchmarkTaskEventAdd is the cost recording adds to the task path.
func BenchmarkTaskEventAdd(b *testing.B) {
	sk := &sink{}
	buf := newTaskEventBuffer(sk.send, ids.New(), ids.New(), ids.New(), 1, taskEventBufferSize, taskEventBatch)
	go buf.run(taskEventPeriod)
	spec := testSpec(1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			buf.add(tev(spec, false, true, evRunning, nowUs()))
		}
	})
	b.StopTimer()
	buf.close(context.Background())
}

// TestTaskEventCoalescing: the events of one attempt seen from one side
// travel as one message with all its states and phases; the other side's
// and other attempts' as others; batches hold at most the bound of
// messages.
func TestTaskEventCoalescing(t *testing.T) {
	sk := &sink{}
	b := newTaskEventBuffer(sk.send, ids.New(), ids.New(), ids.New(), 1, 100, 2)
	a, c := testSpec(1), testSpec(2)
	b.add(tev(a, true, false, evPendingArgsAvail, 1))
	b.add(tev(a, false, false, evPendingNodeAssignment, 2))
	b.add(tev(a, true, true, evRunning, 3))
	sub := tev(a, false, false, evSubmittedToWorker, 3)
	sub.phase, sub.start, sub.end, sub.node, sub.worker = phScheduling, 2, 3, []byte("n"), []byte("w")
	b.add(sub)
	b.add(tev(c, true, false, evPendingArgsAvail, 4))
	retry := tev(a, true, false, evPendingNodeAssignment, 5)
	retry.attempt = 1
	b.add(retry)
	b.flush(context.Background())
	if len(sk.reqs) != 2 || len(sk.reqs[0].Events) != 2 || len(sk.reqs[1].Events) != 2 {
		t.Fatalf("reports %v, want 2 of 2 messages", sk.reqs)
	}
	owner := sk.reqs[0].Events[0]
	if owner.FromExecutor || owner.PendingArgsAvailUs != 1 || owner.PendingNodeAssignmentUs != 2 || owner.SubmittedToWorkerUs != 3 ||
		owner.SchedulingEndUs != 3 || string(owner.LeasedNodeId) != "n" || owner.Function != 1 {
		t.Errorf("owner's message %v, want 3 states, the scheduling phase and the leased node", owner)
	}
	if ex := sk.reqs[0].Events[1]; !ex.FromExecutor || ex.RunningUs != 3 || ex.PendingArgsAvailUs != 0 {
		t.Errorf("executor's message %v", ex)
	}
	if m := sk.reqs[1].Events[1]; m.Attempt != 1 {
		t.Errorf("the retry's message %v, want attempt 1 on its own", m)
	}
}

// TestReplyError: the owner's event of a failed task carries the error
// its reply holds, so the GCS has the message even before the worker's
// event arrives.
func TestReplyError(t *testing.T) {
	failed := &pb.TaskReply{AppError: true, Ret: errorReturn(ids.ObjectIDFor(ids.New(), 1), &RemoteError{Type: "*errors.errorString", Message: "failed on purpose"})}
	for _, tc := range []struct {
		name     string
		events   bool
		rep      *pb.TaskReply
		typ, msg string
	}{
		{"failed reply", true, failed, "*errors.errorString", "failed on purpose"},
		{"undecodable error", true, &pb.TaskReply{SystemError: true}, "TaskError", "the task failed"},
		{"success", true, &pb.TaskReply{}, "", ""},
		{"events off", false, failed, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cw := &CoreWorker{}
			if tc.events {
				cw.events = &taskEventBuffer{}
			}
			if typ, msg := cw.noteReplyError(tc.rep); typ != tc.typ || msg != tc.msg {
				t.Errorf("noteReplyError = %q, %q; want %q, %q", typ, msg, tc.typ, tc.msg)
			}
		})
	}
}

// TestErrTypeName: task events name goray's own errors by their bare type
// name, whatever path failed the task.
func TestErrTypeName(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&ActorUnavailableError{}, "ActorUnavailableError"},
		{&ActorDiedError{}, "ActorDiedError"},
		{errors.New("plain"), "*errors.errorString"},
		{context.DeadlineExceeded, "context.deadlineExceededError"},
	} {
		if got := errTypeName(tc.err); got != tc.want {
			t.Errorf("errTypeName(%#v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
