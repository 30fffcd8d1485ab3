package gcs

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/waitfor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func tid(b byte) []byte { return bytes.Repeat([]byte{b}, 16) }

// report is a batch of process worker's events, from the owner's side
// (or the executor's with exec), in job.
func report(job, worker byte, exec bool, evs ...*gorayv1.TaskEvent) *gorayv1.AddTaskEventsRequest {
	req := &gorayv1.AddTaskEventsRequest{JobId: tid(job), NodeId: tid(worker + 0x10), WorkerId: tid(worker), Pid: int32(worker), Strings: []string{"main.f", "main.fail", "failing"}}
	for _, ev := range evs {
		ev.FromExecutor = exec
	}
	req.Events = evs
	return req
}

// batch is report from an owner in job.
func batch(job byte, evs ...*gorayv1.TaskEvent) *gorayv1.AddTaskEventsRequest {
	return report(job, 0xd1, false, evs...)
}

// running is an event of task id entering RUNNING at us.
func running(id byte, us int64) *gorayv1.TaskEvent {
	return &gorayv1.TaskEvent{TaskId: tid(id), RunningUs: us}
}

func mustAdd(t *testing.T, s *taskEventStore, req *gorayv1.AddTaskEventsRequest) {
	t.Helper()
	if err := s.check(req); err != nil {
		t.Fatal(err)
	}
	s.add(req)
}

func mustList(t *testing.T, s *taskEventStore, limit int64, kv ...string) *gorayv1.ListTasksReply {
	t.Helper()
	var fs []*gorayv1.TaskFilter
	for i := 0; i+1 < len(kv); i += 2 {
		fs = append(fs, &gorayv1.TaskFilter{Key: kv[i], Value: kv[i+1]})
	}
	r, err := s.list(fs, limit)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTaskEventsMerge: the owner's and the executor's events of one
// attempt make one task, whatever order they arrive in; the executor's
// place and error win; the state is the furthest reached.
func TestTaskEventsMerge(t *testing.T) {
	s := newTaskEventStore(TaskEventLimits{})
	// The executor's events first (its batch may arrive before the owner's).
	mustAdd(t, s, report(1, 0xe1, true, &gorayv1.TaskEvent{TaskId: tid(1), Function: 2, RunningUs: 300, FetchArgsStartUs: 300, FetchArgsEndUs: 310,
		ExecutionStartUs: 310, ExecutionEndUs: 390, FailedUs: 400, ErrorType: "*errors.errorString", ErrorMessage: "boom"}))
	mustAdd(t, s, batch(1,
		&gorayv1.TaskEvent{TaskId: tid(1), Function: 2, Name: 3, PendingArgsAvailUs: 100, PendingNodeAssignmentUs: 150},
		&gorayv1.TaskEvent{TaskId: tid(1), SubmittedToWorkerUs: 200, SchedulingStartUs: 150, SchedulingEndUs: 200, LeasedNodeId: tid(0xcc), LeasedWorkerId: tid(0xe9)},
		&gorayv1.TaskEvent{TaskId: tid(1), FailedUs: 450, ErrorType: "*core.RemoteError", ErrorMessage: "task failed"},
	))
	r := mustList(t, s, 0)
	if len(r.Tasks) != 1 {
		t.Fatalf("%d tasks, want 1 merged", len(r.Tasks))
	}
	st := r.Tasks[0]
	if st.State != TaskFailed || st.Name != "failing" || st.Function != "main.fail" || !bytes.Equal(st.OwnerWorkerId, tid(0xd1)) || !bytes.Equal(st.JobId, tid(1)) {
		t.Errorf("merged task %v", st)
	}
	if !bytes.Equal(st.NodeId, tid(0xf1)) || !bytes.Equal(st.WorkerId, tid(0xe1)) || st.Pid != 0xe1 {
		t.Errorf("place %x/%x/%d, want the executor's", st.NodeId, st.WorkerId, st.Pid)
	}
	if st.ErrorMessage != "boom" || st.ErrorType != "*errors.errorString" {
		t.Errorf("error %q %q, want the executor's", st.ErrorType, st.ErrorMessage)
	}
	if len(st.States) != 5 || len(st.Phases) != 3 || !bytes.Equal(st.Phases[0].NodeId, tid(0xcc)) || st.Phases[2].Pid != 0xe1 {
		t.Errorf("states %v phases %v, want 5 states and 3 phases (scheduling on the leased node)", st.States, st.Phases)
	}
	if c := s.stateCounts(); c[TaskFailed] != 1 || c[TaskRunning] != 0 || len(c) != len(TaskStates) {
		t.Errorf("counts %v", c)
	}
	// Another attempt is another row.
	mustAdd(t, s, batch(1, &gorayv1.TaskEvent{TaskId: tid(1), Attempt: 1, PendingNodeAssignmentUs: 500}))
	if r := mustList(t, s, 0); len(r.Tasks) != 2 || r.Tasks[1].Attempt != 1 || r.Tasks[1].State != TaskPendingNodeAssignment {
		t.Errorf("tasks after a retry %v", r.Tasks)
	}
}

// TestTaskEventsEviction: beyond MaxTasks the attempts that ended first go
// first, then the oldest; evictions are counted and the counts by state
// follow.
func TestTaskEventsEviction(t *testing.T) {
	s := newTaskEventStore(TaskEventLimits{MaxTasks: 3})
	ev := func(id byte, state string) *gorayv1.TaskEvent {
		e := &gorayv1.TaskEvent{TaskId: tid(id)}
		switch state {
		case TaskRunning:
			e.RunningUs = int64(id)
		case TaskFinished:
			e.FinishedUs = int64(id)
		case TaskFailed:
			e.FailedUs = int64(id)
		}
		return e
	}
	mustAdd(t, s, batch(1, ev(1, TaskRunning), ev(2, TaskRunning), ev(3, TaskRunning)))
	mustAdd(t, s, batch(1, ev(2, TaskFinished), ev(1, TaskFailed))) // 2 ended first
	mustAdd(t, s, batch(1, ev(4, TaskRunning)))
	ids := func() string {
		var b strings.Builder
		for _, st := range mustList(t, s, 0).Tasks {
			b.WriteByte('0' + st.TaskId[0])
		}
		return b.String()
	}
	if got := ids(); got != "134" {
		t.Errorf("after one eviction %s, want 134 (the first to finish evicted)", got)
	}
	mustAdd(t, s, batch(1, ev(5, TaskRunning)))
	if got := ids(); got != "345" {
		t.Errorf("after two %s, want 345", got)
	}
	mustAdd(t, s, batch(1, ev(6, TaskRunning)))
	if got := ids(); got != "456" {
		t.Errorf("with none finished %s, want 456 (the oldest evicted)", got)
	}
	r := mustList(t, s, 0)
	if r.Evicted != 3 {
		t.Errorf("evicted %d, want 3", r.Evicted)
	}
	if c := s.stateCounts(); c[TaskRunning] != 3 || c[TaskFinished] != 0 || c[TaskFailed] != 0 {
		t.Errorf("counts %v, want 3 running", c)
	}
}

func TestTaskEventsFilters(t *testing.T) {
	s := newTaskEventStore(TaskEventLimits{})
	for i := byte(1); i <= 6; i++ {
		state := TaskFinished
		if i%2 == 0 {
			state = TaskFailed
		}
		ev := &gorayv1.TaskEvent{TaskId: tid(i), Function: 1, Kind: gorayv1.TaskKind_TASK_KIND_ACTOR_METHOD, FinishedUs: 1, LeasedNodeId: tid(0xaa + i%2)}
		if state == TaskFailed {
			ev.FinishedUs, ev.FailedUs = 0, 1
		}
		mustAdd(t, s, batch(i%3, ev))
	}
	tests := []struct {
		name    string
		limit   int64
		filters []string
		want    string // task ids' first bytes
		total   int64
		err     string
	}{
		{name: "all", want: "123456", total: 6},
		{name: "state any case", filters: []string{"state", "failed"}, want: "246", total: 3},
		{name: "two filters", filters: []string{"state", "FAILED", "job_id", strings.Repeat("02", 16)}, want: "2", total: 1},
		{name: "node", filters: []string{"node_id", strings.Repeat("ab", 16)}, want: "135", total: 3},
		{name: "kind", filters: []string{"kind", "actor_method"}, want: "123456", total: 6},
		{name: "limit keeps the newest", limit: 2, want: "56", total: 6},
		{name: "limit with filter", limit: 1, filters: []string{"state", "finished"}, want: "5", total: 3},
		{name: "nothing", filters: []string{"function", "main.g"}, want: "", total: 0},
		{name: "unknown key", filters: []string{"colour", "red"}, err: `cannot filter tasks on "colour": use one of task_id, attempt`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fs []*gorayv1.TaskFilter
			for i := 0; i < len(tt.filters); i += 2 {
				fs = append(fs, &gorayv1.TaskFilter{Key: tt.filters[i], Value: tt.filters[i+1]})
			}
			r, err := s.list(fs, tt.limit)
			if tt.err != "" {
				var ue *UnknownFilterError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			for _, st := range r.Tasks {
				got.WriteByte('0' + st.TaskId[0])
			}
			if got.String() != tt.want || r.Total != tt.total {
				t.Errorf("tasks %q total %d, want %q total %d", got.String(), r.Total, tt.want, tt.total)
			}
		})
	}
}

// TestTaskEventsBadInput: a malformed batch is refused whole, naming the
// event and the field, and stores nothing.
func TestTaskEventsBadInput(t *testing.T) {
	s := newTaskEventStore(TaskEventLimits{MaxBatch: 3})
	good := running(1, 1)
	tests := []struct {
		name string
		req  *gorayv1.AddTaskEventsRequest
		want string
	}{
		{"short task id", batch(1, good, &gorayv1.TaskEvent{TaskId: []byte{1, 2}}), "task event 1: task_id: 2 bytes, want 16"},
		{"string out of the table", batch(1, &gorayv1.TaskEvent{TaskId: tid(1), Name: 4}), "task event 0: name: string 4 of a table of 3"},
		{"phase backwards", batch(1, &gorayv1.TaskEvent{TaskId: tid(1), ExecutionStartUs: 10, ExecutionEndUs: 5}), "execution_end_us: phase execution ends (5) before it starts (10)"},
		{"negative attempt", batch(1, &gorayv1.TaskEvent{TaskId: tid(1), Attempt: -1}), "attempt: negative attempt -1"},
		{"long leased node id", batch(1, &gorayv1.TaskEvent{TaskId: tid(1), LeasedNodeId: make([]byte, 17)}), "leased_node_id: 17 bytes, at most 16"},
		{"long worker id", &gorayv1.AddTaskEventsRequest{WorkerId: make([]byte, 20)}, "task events: worker_id: 20 bytes, at most 16"},
		{"too many", batch(1, good, good, good, good), "task events: events: 4 events in one batch, at most 3"},
		{"negative drops", &gorayv1.AddTaskEventsRequest{Dropped: -5}, "dropped: negative count -5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.check(tt.req)
			var ie *InvalidTaskEventError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("check: %v, want %q", err, tt.want)
			}
		})
	}
	if r := mustList(t, s, 0); len(r.Tasks) != 0 {
		t.Errorf("refused batches stored %d tasks", len(r.Tasks))
	}
	// Long strings are cut, not refused.
	mustAdd(t, s, batch(1, &gorayv1.TaskEvent{TaskId: tid(2), FailedUs: 1, ErrorMessage: strings.Repeat("x", 100000)}))
	if r := mustList(t, s, 0); len(r.Tasks[0].ErrorMessage) > maxErrorMsgLen+4 {
		t.Errorf("error message of %d bytes stored", len(r.Tasks[0].ErrorMessage))
	}
	// Cut at a rune boundary: the reply must still marshal.
	mustAdd(t, s, batch(1, &gorayv1.TaskEvent{TaskId: tid(3), FailedUs: 1, ErrorMessage: "x" + strings.Repeat("é", maxErrorMsgLen)}))
	r := mustList(t, s, 0)
	if _, err := proto.Marshal(r); err != nil || !utf8.ValidString(r.Tasks[1].ErrorMessage) {
		t.Errorf("a cut multi-byte message: %v (valid UTF-8: %v)", err, utf8.ValidString(r.Tasks[1].ErrorMessage))
	}
}

// TestTaskEventsService: over real gRPC with the cluster token, the
// service stores batches, counts drops per job and answers queries; a
// caller without the token, or with another, is refused.
func TestTaskEventsService(t *testing.T) {
	leaktest.Goroutines(t)
	creds, err := auth.New(auth.GenerateToken(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(rpc.ServerOptions(creds)...)
	s.Register(g)
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	defer func() { g.Stop(); <-served }()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()

	dial := func(c *auth.Credentials) gorayv1.TaskEventServiceClient {
		cc, err := rpc.Dial(lis.Addr().String(), c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return gorayv1.NewTaskEventServiceClient(cc)
	}
	cli := dial(creds)
	if _, err := cli.AddTaskEvents(ctx, &gorayv1.AddTaskEventsRequest{JobId: tid(7), Dropped: 3, Events: []*gorayv1.TaskEvent{running(1, 1)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AddTaskEvents(ctx, &gorayv1.AddTaskEventsRequest{Events: []*gorayv1.TaskEvent{{TaskId: tid(1)[:3]}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad batch: %v, want InvalidArgument", err)
	}
	r, err := cli.ListTasks(ctx, &gorayv1.ListTasksRequest{Filters: []*gorayv1.TaskFilter{{Key: "state", Value: "running"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tasks) != 1 || r.DroppedByJob[strings.Repeat("07", 16)] != 3 {
		t.Errorf("reply %v, want the task and 3 drops of job 07…", r)
	}
	if c := s.TaskStateCounts(); c[TaskRunning] != 1 {
		t.Errorf("TaskStateCounts %v", c)
	}
	if _, err := cli.ListTasks(ctx, &gorayv1.ListTasksRequest{Filters: []*gorayv1.TaskFilter{{Key: "colour"}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown filter: %v, want InvalidArgument", err)
	}

	wrong, err := auth.New("not-the-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*auth.Credentials{"no token": nil, "wrong token": wrong} {
		stranger := dial(c)
		if _, err := stranger.AddTaskEvents(ctx, &gorayv1.AddTaskEventsRequest{Events: []*gorayv1.TaskEvent{running(9, 1)}}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: AddTaskEvents: %v, want Unauthenticated", name, err)
		}
		if _, err := stranger.ListTasks(ctx, &gorayv1.ListTasksRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: ListTasks: %v, want Unauthenticated", name, err)
		}
	}
	if c := s.TaskStateCounts(); c[TaskRunning] != 1 {
		t.Errorf("a stranger's events were stored: %v", c)
	}
}

// TestTaskEventsTooManyFilters: a query cannot hold the store's lock with
// an unbounded list of filters.
func TestTaskEventsTooManyFilters(t *testing.T) {
	s := newTaskEventStore(TaskEventLimits{})
	fs := make([]*gorayv1.TaskFilter, MaxTaskFilters+1)
	for i := range fs {
		fs[i] = &gorayv1.TaskFilter{Key: "state", Value: "FINISHED"}
	}
	if _, err := s.list(fs, 0); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("list with %d filters: %v, want refused", len(fs), err)
	}
	if _, err := s.list(fs[:MaxTaskFilters], 0); err != nil {
		t.Fatalf("list with %d filters: %v", MaxTaskFilters, err)
	}
}
