package ray_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/ray"
)

// Refs that escape the task that submitted them: returned, stored in a
// returned value or in an object. The task's ctx ends when it returns; the
// calls it submitted must go on (see submitContext in sdk/ray/internal/core).

// lag is how long the calls plusLater submits wait for their argument, so
// that they are certainly not sent yet when the submitting task returns.
const lag = 200 * time.Millisecond

// plusLater submits x + 200 (the lag in milliseconds, as SleepFor returns
// it): an Add waiting for a SleepFor, still unsent when the caller returns.
func plusLater(ctx context.Context, x int) ray.Ref[int] {
	wait := SleepFor.Options(ray.CPUs(0)).Remote(ctx, ray.V(lag))
	return Add.Options(ray.CPUs(0)).Remote(ctx, ray.V(x), wait)
}

// Holder carries a reference inside a value.
type Holder struct {
	Label string
	R     ray.Ref[int]
}

// returnRef returns the ref of a call it submitted (return F.Remote(...)).
func returnRef(ctx context.Context, x int) (ray.Ref[int], error) {
	return plusLater(ctx, x), nil
}

// returnHolder returns the ref inside a struct.
func returnHolder(ctx context.Context, x int) (Holder, error) {
	return Holder{Label: "holder", R: plusLater(ctx, x)}, nil
}

// returnPut stores the ref inside an object and returns the object's ref.
func returnPut(ctx context.Context, x int) (ray.Ref[Holder], error) {
	return ray.Put(ctx, Holder{Label: "put", R: plusLater(ctx, x)})
}

// pipeline chains stages calls after x (x+200, then +1 per further stage)
// and returns the last one's ref without waiting for any.
func pipeline(ctx context.Context, x, stages int) (ray.Ref[int], error) {
	r := plusLater(ctx, x)
	for i := 1; i < stages; i++ {
		r = Add.Options(ray.CPUs(0)).Remote(ctx, r, ray.V(1))
	}
	return r, nil
}

// ActorAndCall carries an actor handle and the ref of a call on it.
type ActorAndCall struct {
	H ray.ActorHandle[Counter]
	R ray.Ref[int]
}

// newAndInc creates an actor and calls it, and returns both without
// waiting: the creation and the call are under way when it returns.
func newAndInc(ctx context.Context, start int) (ActorAndCall, error) {
	h := CounterA.Remote(ctx, ray.V(start))
	return ActorAndCall{H: h, R: Inc.On(h).Remote(ctx, ray.V(1))}, nil
}

// queued submits a call no node can run (it needs a resource none has), so
// it is never sent.
func queued(ctx context.Context) ray.Ref[int] {
	return Add.Options(ray.Resource("unobtainium", 1)).Remote(ctx, ray.V(1), ray.V(2))
}

// returnQueued returns the ref of a call that is never sent.
func returnQueued(ctx context.Context) (ray.Ref[int], error) { return queued(ctx), nil }

// returnUntilCancelled returns the ref of an UntilCancelled call.
func returnUntilCancelled(ctx context.Context, path string) (ray.Ref[int], error) {
	return UntilCancelled.Options(ray.CPUs(0)).Remote(ctx, ray.V(path)), nil
}

// returnIgnoreCancel returns the ref of an IgnoreCancel call.
func returnIgnoreCancel(ctx context.Context, path string) (ray.Ref[int], error) {
	return IgnoreCancel.Options(ray.CPUs(0)).Remote(ctx, ray.V(path)), nil
}

// noteThenNap appends its pid to path, then returns 7 after d unless its
// ctx ends first (then ctx's error).
func noteThenNap(ctx context.Context, path string, d time.Duration) (int, error) {
	if err := appendLine(path, fmt.Sprint(os.Getpid())); err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
		return 7, nil
	}
}

// submitThenWait submits a call that is never sent and one that runs
// (noteThenNap writing to path), waits until it is cancelled, and then
// reports what became of both, as its value.
func submitThenWait(ctx context.Context, path string) (string, error) {
	unsent := queued(ctx)
	running := NoteThenNap.Options(ray.CPUs(0)).Remote(ctx, ray.V(path), ray.V(2*time.Second))
	select {
	case <-ctx.Done():
	case <-time.After(waitfor.Generous):
		return "", errors.New("never cancelled")
	}
	bg := context.Background()
	_, uerr := unsent.Get(bg)
	v, rerr := running.Get(bg)
	return fmt.Sprintf("unsent: %v; running: %d, %v", uerr, v, rerr), nil
}

var (
	ReturnRef            = ray.Task1(returnRef)
	ReturnHolder         = ray.Task1(returnHolder)
	ReturnPut            = ray.Task1(returnPut)
	Pipeline             = ray.Task2(pipeline)
	ReturnQueued         = ray.Task0(returnQueued)
	ReturnUntilCancelled = ray.Task1(returnUntilCancelled)
	ReturnIgnoreCancel   = ray.Task1(returnIgnoreCancel)
	NoteThenNap          = ray.Task2(noteThenNap)
	NewAndInc            = ray.Task1(newAndInc)
	SubmitThenWait       = ray.Task1(submitThenWait)
)

// Fib is a task that submits itself. `var Fib = ray.Task1(fib)` would be an
// initialization cycle (fib refers to Fib), so it is declared here and
// assigned in init, which runs in the driver and in every worker before
// main.
var Fib *ray.TaskFunc1[int, int]

func init() { Fib = ray.Task1(fib) }

// fib computes the n-th Fibonacci number with a task per call, except
// below 7, which it computes in place: a task costs more than the sum, and
// every waiting parent holds a worker process.
func fib(ctx context.Context, n int) (int, error) {
	if n < 7 {
		return fibLocal(n), nil
	}
	a, b := Fib.Remote(ctx, ray.V(n-1)), Fib.Remote(ctx, ray.V(n-2))
	x, err := a.Get(ctx)
	if err != nil {
		return 0, err
	}
	y, err := b.Get(ctx)
	if err != nil {
		return 0, err
	}
	return x + y, nil
}

func fibLocal(n int) int {
	if n < 2 {
		return n
	}
	return fibLocal(n-1) + fibLocal(n-2)
}

func TestReturnedRefOutlivesTask(t *testing.T) {
	ctx := testCtx(t)
	inner, err := ReturnRef.Remote(ctx, ray.V(1)).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The task has returned (its ctx ended) before the call it submitted
	// could be sent.
	if v, err := inner.Get(ctx); err != nil || v != 201 {
		t.Fatalf("Get of the returned ref: %v, %v; want 201", v, err)
	}
}

func TestRefInReturnedStructOutlivesTask(t *testing.T) {
	ctx := testCtx(t)
	h, err := ReturnHolder.Remote(ctx, ray.V(2)).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := h.R.Get(ctx); err != nil || v != 202 || h.Label != "holder" {
		t.Fatalf("Get of the ref in the returned %+v: %v, %v; want 202", h, v, err)
	}
}

func TestRefInPutObjectOutlivesTask(t *testing.T) {
	ctx := testCtx(t)
	obj, err := ReturnPut.Remote(ctx, ray.V(3)).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := obj.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := h.R.Get(ctx); err != nil || v != 203 || h.Label != "put" {
		t.Fatalf("Get of the ref in the put %+v: %v, %v; want 203", h, v, err)
	}
}

func TestPipelineOfReturnedRefs(t *testing.T) {
	ctx := testCtx(t)
	// Stage 1 returns the ref of its last call; stage 2 takes that ref (a
	// call stage 1's worker owns) as its argument and does the same.
	in1, err := Pipeline.Remote(ctx, ray.V(1), ray.V(3)).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in2, err := Pipeline.Remote(ctx, in1, ray.V(3)).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := (1 + 200 + 2) + 200 + 2
	if v, err := in2.Get(ctx); err != nil || v != want {
		t.Fatalf("pipeline: %v, %v; want %d", v, err, want)
	}
	if v, err := in1.Get(ctx); err != nil || v != 1+200+2 {
		t.Fatalf("first stage: %v, %v; want %d", v, err, 1+200+2)
	}
}

func TestActorAndCallOutliveTask(t *testing.T) {
	ctx := testCtx(t)
	ac, err := NewAndInc.Remote(ctx, ray.V(40)).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.H.Kill(ctx)
	if v, err := ac.R.Get(ctx); err != nil || v != 41 {
		t.Fatalf("the returned call: %v, %v; want 41", v, err)
	}
	if v, err := Inc.On(ac.H).Remote(ctx, ray.V(1)).Get(ctx); err != nil || v != 42 {
		t.Fatalf("a call on the returned actor: %v, %v; want 42", v, err)
	}
}

func TestRecursiveTask(t *testing.T) {
	ctx := testCtx(t)
	if v, err := Fib.Remote(ctx, ray.V(10)).Get(ctx); err != nil || v != 55 {
		t.Fatalf("Fib(10) = %v, %v; want 55", v, err)
	}
}

func TestCancelEscapedRef(t *testing.T) {
	ctx := testCtx(t)
	t.Run("Running", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "starts")
		inner, err := ReturnUntilCancelled.Remote(ctx, ray.V(path)).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		startedPids(t, path, 1)
		// The driver borrows inner; its owner is the worker that ran
		// returnUntilCancelled, which Cancel asks.
		if err := ray.Cancel(ctx, inner); err != nil {
			t.Fatal(err)
		}
		if _, err := inner.Get(ctx); !errors.Is(err, ray.ErrTaskCancelled) || !strings.Contains(err.Error(), "while running") {
			t.Fatalf("Get of a cancelled escaped ref: %v, want ErrTaskCancelled while running", err)
		}
	})
	t.Run("NotStarted", func(t *testing.T) {
		inner, err := ReturnQueued.Remote(ctx).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ray.Cancel(ctx, inner); err != nil {
			t.Fatal(err)
		}
		if _, err := inner.Get(ctx); !errors.Is(err, ray.ErrTaskCancelled) {
			t.Fatalf("Get of a cancelled escaped ref: %v, want ErrTaskCancelled", err)
		}
	})
	t.Run("Force", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "starts")
		inner, err := ReturnIgnoreCancel.Remote(ctx, ray.V(path)).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(startedPids(t, path, 1)[0])
		if err := ray.Cancel(ctx, inner, ray.Force()); err != nil {
			t.Fatal(err)
		}
		if _, err := inner.Get(ctx); !errors.Is(err, ray.ErrTaskCancelled) || errors.Is(err, ray.ErrWorkerCrashed) {
			t.Fatalf("Get of a force-cancelled escaped ref: %v, want ErrTaskCancelled", err)
		}
		waitFor(t, "the force-cancelled task's worker to exit", func() bool { return syscall.Kill(pid, 0) != nil })
	})
	t.Run("BorrowedPut", func(t *testing.T) {
		obj, err := ReturnPut.Remote(ctx, ray.V(4)).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = ray.Cancel(ctx, obj)
		if !errors.Is(err, ray.ErrNotCancellable) || !strings.Contains(err.Error(), "its owner") {
			t.Fatalf("Cancel of a borrowed Put: %v, want ErrNotCancellable from its owner", err)
		}
	})
}

func TestCancelledTaskCancelsUnsentSubmissions(t *testing.T) {
	ctx := testCtx(t)
	path := filepath.Join(t.TempDir(), "starts")
	r := SubmitThenWait.Remote(ctx, ray.V(path))
	startedPids(t, path, 1) // its running child has started
	if err := ray.Cancel(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := r.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// What it submitted and was not sent yet is cancelled with it; what
	// runs already goes on (ray.Cancel it by its ref to stop it).
	if !strings.Contains(got, "unsent: ") || !strings.Contains(got, "cancelled before it ran: ray.Cancel of task") ||
		!strings.HasSuffix(got, "running: 7, <nil>") {
		t.Fatalf("after cancelling the submitting task: %q; want the unsent call cancelled by the ray.Cancel and the running one done", got)
	}
}

func TestCancelledCtxWithdrawsQueuedTask(t *testing.T) {
	ctx := testCtx(t)
	// In a driver, ending the ctx given to Remote still cancels a call not
	// sent yet, also one waiting for a worker that never comes.
	cctx, cancel := context.WithCancel(ctx)
	r := queued(cctx)
	cancel()
	if _, err := r.Get(ctx); !errors.Is(err, ray.ErrTaskCancelled) || !strings.Contains(err.Error(), "cancelled before it ran: context canceled") {
		t.Fatalf("Get of a queued call whose ctx was cancelled: %v, want ErrTaskCancelled", err)
	}
}
