package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/waitfor"
)

func TestOutOfMemoryError(t *testing.T) {
	node, worker, task := ids.New(), ids.New(), ids.New()
	rec := &taskRecord{spec: &pb.TaskSpec{Function: "main.hog", TaskId: task.Bytes(), Attempt: 1, MaxRetries: 1}}
	k := &pb.MemoryKill{
		NodeId: node.Bytes(), NodeName: "n1", NodeIp: "127.0.0.2", WorkerId: worker.Bytes(), Pid: 77,
		UsedBytes: 950 << 20, TotalBytes: 1000 << 20, Threshold: 0.9, Source: "/proc/meminfo",
		Why: "it was the most recently started retriable task",
	}
	err := error(outOfMemory(rec, k))
	var oom *OutOfMemoryError
	if !errors.Is(err, ErrOutOfMemory) || !errors.As(err, &oom) || errors.Is(err, ErrWorkerCrashed) {
		t.Fatalf("want an *OutOfMemoryError matching only ErrOutOfMemory, got %T %v", err, err)
	}
	if oom.Attempts != 2 || oom.Node != node.String() || oom.NodeName != "n1" || oom.UsedBytes != 950<<20 || oom.Threshold != 0.9 {
		t.Fatalf("fields: %+v", oom)
	}
	msg := err.Error()
	for _, want := range []string{"task main.hog (" + task.Short() + ")", "last of 2 attempts", "node " + node.Short() + " (n1) at 127.0.0.2",
		"950 MiB of 1000 MiB (0.950), above the usage threshold 0.900", "worker " + worker.Short() + " (pid 77)", "most recently started retriable task",
		"memory_monitor.usage_threshold"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}

	// Returned by a parent task, it crosses a process boundary as a
	// RemoteError of its kind, and stays usable with errors.Is and As.
	if got := kindOf(err); got != KindOutOfMemory {
		t.Fatalf("kindOf = %q, want %q", got, KindOutOfMemory)
	}
	remote := error(&RemoteError{Function: "main.parent", Kind: kindOf(err), Message: msg})
	var back *OutOfMemoryError
	if !errors.Is(remote, ErrOutOfMemory) || !errors.As(remote, &back) || back.Error() != msg || errors.Is(remote, ErrWorkerCrashed) {
		t.Fatalf("across a process boundary: Is %v, As %v (%v)", errors.Is(remote, ErrOutOfMemory), back, remote)
	}
}

// TestActorOutOfMemoryErrors: an actor whose worker the memory monitor
// killed fails its calls with errors that match ErrOutOfMemory, as Ray
// raises OutOfMemoryError for them: when it died of it (ActorDiedError,
// from the GCS's death_cause) and when a call under way had no retry left
// as it restarts (ActorUnavailableError); other deaths do not match.
func TestActorOutOfMemoryErrors(t *testing.T) {
	ref := ActorRef{ID: ids.New(), Class: "main.Hog"}
	reason := "killed by the memory monitor: node n1 used 95% of its memory"
	for _, tc := range []struct {
		name string
		err  error
		oom  bool
	}{
		{"died of it", &ActorDiedError{ActorID: ref.ID, Cause: deathError(ref, &pb.ActorInfo{DeathCause: "out_of_memory", DeathReason: reason})}, true},
		{"died otherwise", &ActorDiedError{ActorID: ref.ID, Cause: deathError(ref, &pb.ActorInfo{DeathReason: "worker crashed"})}, false},
		{"restarting from it", &ActorUnavailableError{ActorID: ref.ID, Reason: reason, Cause: actorOutOfMemory(ref, reason)}, true},
		{"restarting otherwise", &ActorUnavailableError{ActorID: ref.ID, Reason: "worker crashed"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var oe *OutOfMemoryError
			if errors.Is(tc.err, ErrOutOfMemory) != tc.oom || errors.As(tc.err, &oe) != tc.oom {
				t.Fatalf("%v: matches ErrOutOfMemory %v, want %v", tc.err, !tc.oom, tc.oom)
			}
			if tc.oom && (!strings.Contains(oe.Error(), reason) || !strings.Contains(oe.Error(), ref.ID.Short())) {
				t.Fatalf("the out-of-memory error %q does not name the actor and the monitor's reason", oe.Error())
			}
		})
	}
}

func TestOOMBudgetAndDelay(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		name       string
		asked      *int
		maxRetries int
		want       int
	}{
		{"default", nil, 3, DefaultMaxOOMRetries},
		{"given", n(2), 3, 2},
		{"zero", n(0), 3, 0},
		{"no limit", n(-1), 3, -1},
		{"MaxRetries 0: never", n(5), 0, 0},
		{"MaxRetries 0, default: never", nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := oomBudget(tc.asked, tc.maxRetries); got != tc.want {
				t.Fatalf("oomBudget = %d, want %d", got, tc.want)
			}
		})
	}
	for kills, want := range map[int32]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 6: 32 * time.Second, 7: time.Minute, 1000: time.Minute} {
		if got := oomDelay(oomRetryBase, kills); got != want {
			t.Errorf("oomDelay(%d kills) = %v, want %v", kills, got, want)
		}
	}
}

// killingRaylet grants every lease to one worker and, when the test says
// so (killNext), answers the next return of a lease whose worker is
// disconnected with a kill by its memory monitor, as a raylet does for
// the worker its monitor killed.
type killingRaylet struct {
	pb.UnimplementedRayletServer
	mu       sync.Mutex
	worker   *pb.Address
	killNext bool
	kills    int
	// onKill, when set, runs as the raylet reports a kill (before the
	// owner hears of it).
	onKill func()
}

func (r *killingRaylet) RequestWorkerLease(context.Context, *pb.LeaseRequest) (*pb.LeaseReply, error) {
	return &pb.LeaseReply{LeaseId: ids.New().Bytes(), Worker: r.worker}, nil
}

func (r *killingRaylet) ReturnWorkerLease(_ context.Context, req *pb.ReturnLeaseRequest) (*pb.ReturnLeaseReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !req.GetDisconnectWorker() || !r.killNext {
		return &pb.ReturnLeaseReply{}, nil
	}
	r.killNext = false
	r.kills++
	if r.onKill != nil {
		r.onKill()
	}
	return &pb.ReturnLeaseReply{MemoryKill: &pb.MemoryKill{LeaseId: req.GetLeaseId(), WorkerId: r.worker.GetWorkerId(), Pid: 4242,
		UsedBytes: 95, TotalBytes: 100, Threshold: 0.9, Source: "/proc/meminfo", Why: "it was the most recently started retriable task"}}, nil
}

// TestOOMRetriesHaveTheirOwnBudget: a task whose worker the memory
// monitor killed is retried within MaxOOMRetries, which the kills draw on
// instead of MaxRetries (Ray's task_oom_retries): after its kills a task
// still has its MaxRetries for a crash, and when the kills' budget is
// spent it fails with an OutOfMemoryError however many MaxRetries are
// left. MaxRetries 0 means no retry after a kill either, and a task
// cancelled while it waits out its delay fails at once.
func TestOOMRetriesHaveTheirOwnBudget(t *testing.T) {
	dir, err := os.MkdirTemp("", "go")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := func(v int) *int { return &v }
	for i, tc := range []struct {
		name       string
		maxRetries int
		oomRetries *int
		failures   string // per attempt: k killed by the monitor, c crashed; then it answers
		wantOOM    bool   // the task fails with OutOfMemoryError after the failures
	}{
		{"kills do not draw on MaxRetries", 1, n(2), "kkc", false},
		{"the kills' budget spent", 3, n(1), "kk", true},
		{"MaxRetries 0: no retry after a kill", 0, nil, "k", true},
		{"no limit", 1, n(-1), "kkkkk", false},
		{"default budget", 1, nil, "kkk", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, addr := startTCPFakeWorker(t, "w", ids.New())
			r := &killingRaylet{worker: addr}
			rc, err := rpc.Dial(serveRaylet(t, filepath.Join(dir, fmt.Sprintf("raylet%d.sock", i)), r), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rc.Close() })
			cw := submitterTestWorker(t, pb.NewRayletClient(rc))
			cw.submitter.oomBase = time.Millisecond

			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
			defer cancel()
			release := w.holdReplies()
			h := cw.SubmitTask(ctx, "main.hog", nil, TaskOptions{MaxRetries: tc.maxRetries, MaxOOMRetries: tc.oomRetries})
			for attempt, f := range tc.failures {
				waitUntil(t, fmt.Sprintf("attempt %d to run", attempt), func() bool { return w.callCount() == attempt+1 })
				if f == 'k' {
					r.mu.Lock()
					r.killNext = true
					r.mu.Unlock()
				}
				w.cutStreams()
			}
			if !tc.wantOOM {
				waitUntil(t, "the last attempt to run", func() bool { return w.callCount() == len(tc.failures)+1 })
			}
			release()
			v, err := cw.Get(ctx, h)
			var oom *OutOfMemoryError
			switch {
			case tc.wantOOM && (!errors.As(err, &oom) || oom.Attempts != len(tc.failures)):
				t.Fatalf("got %v, %v; want an OutOfMemoryError after %d attempts", v, err, len(tc.failures))
			case !tc.wantOOM && (err != nil || string(v.Data) != "w"):
				t.Fatalf("got %v, %v; want the worker's answer after %d failed attempts", v, err, len(tc.failures))
			}
			if got := w.callCount(); got != len(tc.failures)+map[bool]int{true: 0, false: 1}[tc.wantOOM] {
				t.Fatalf("the worker got %d attempts", got)
			}
		})
	}

	t.Run("cancelled while it waits to run again", func(t *testing.T) {
		w, addr := startTCPFakeWorker(t, "w", ids.New())
		r := &killingRaylet{worker: addr, killNext: true}
		rc, err := rpc.Dial(serveRaylet(t, filepath.Join(dir, "rayletc.sock"), r), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rc.Close() })
		cw := submitterTestWorker(t, pb.NewRayletClient(rc))
		cw.submitter.oomBase = time.Hour // waits until cancelled

		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		defer w.holdReplies()()
		tctx, tcancel := context.WithCancel(ctx)
		h := cw.SubmitTask(tctx, "main.hog", nil, TaskOptions{MaxRetries: 1})
		waitUntil(t, "the first attempt to run", func() bool { return w.callCount() == 1 })
		w.cutStreams()
		waitUntil(t, "the kill to be reported", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.kills == 1
		})
		tcancel()
		_, err = cw.Get(ctx, h)
		if !errors.Is(err, ErrTaskCancelled) {
			t.Fatalf("got %v; want the task cancelled", err)
		}
		if got := w.callCount(); got != 1 {
			t.Fatalf("the worker got %d attempts; want the retry never sent", got)
		}
	})
}

// TestOOMKillOfACancelledTask: a task its caller cancels just as the
// memory monitor's kill of its worker is reported (it had retries left)
// fails as cancelled, not as out of memory. A hog run once cancelled in
// that moment and got an OutOfMemoryError ("its last of 1 attempts").
func TestOOMKillOfACancelledTask(t *testing.T) {
	dir := t.TempDir()
	w, addr := startTCPFakeWorker(t, "w", ids.New())
	r := &killingRaylet{worker: addr, killNext: true}
	rc, err := rpc.Dial(serveRaylet(t, filepath.Join(dir, "raylet.sock"), r), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Close() })
	cw := submitterTestWorker(t, pb.NewRayletClient(rc))
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	defer w.holdReplies()()
	tctx, tcancel := context.WithCancel(ctx)
	r.onKill = tcancel
	h := cw.SubmitTask(tctx, "main.hog", nil, TaskOptions{MaxRetries: 1})
	waitUntil(t, "the first attempt to run", func() bool { return w.callCount() == 1 })
	w.cutStreams()
	if _, err := cw.Get(ctx, h); !errors.Is(err, ErrTaskCancelled) || errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("got %v; want the task cancelled", err)
	}
}

// submitterTestWorker is a driver-like core worker whose raylet is rc:
// enough to submit tasks to fake workers.
func submitterTestWorker(t *testing.T, rc pb.RayletClient) *CoreWorker {
	t.Helper()
	cw := newTestWorker(t)
	cw.log = hclog.NewNullLogger()
	cw.conns, cw.connOf = map[string]*grpc.ClientConn{}, map[string]string{}
	cw.nodeID = ids.New()
	cw.raylet = rc
	cw.submitter = newSubmitter(cw)
	t.Cleanup(func() {
		cw.submitter.close()
		cw.connsMu.Lock()
		for _, c := range cw.conns {
			_ = c.Close()
		}
		cw.connsMu.Unlock()
	})
	return cw
}
