package ray_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/ray"
)

// Tasks and actors used by the tests, registered at package level so the
// re-executed test binary (the workers) has them too.

func add(ctx context.Context, a, b int) (int, error) { return a + b, nil }

func fail(ctx context.Context, msg string) (int, error) { return 0, errors.New(msg) }

func explode(ctx context.Context, msg string) (int, error) { panic(msg) }

func sleepFor(ctx context.Context, d time.Duration) (int, error) {
	time.Sleep(d)
	return int(d / time.Millisecond), nil
}

func byteLen(ctx context.Context, b []byte) (int, error) { return len(b), nil }

func makeBytes(ctx context.Context, n int) ([]byte, error) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b, nil
}

// crashUntil kills its own worker process on every attempt below ok.
func crashUntil(ctx context.Context, ok int) (int, error) {
	tc, _ := ray.CurrentTask(ctx)
	if tc.Attempt < ok {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return tc.Attempt, nil
}

type Box struct {
	Label string
	Inner ray.Ref[[]byte]
}

// sumInner reads a reference nested in its argument.
func sumInner(ctx context.Context, b Box) (int, error) {
	data, err := b.Inner.Get(ctx)
	if err != nil {
		return 0, err
	}
	s := 0
	for _, x := range data {
		s += int(x)
	}
	return s, nil
}

// Counter is a stateful actor.
type Counter struct {
	n    int
	held ray.Ref[[]byte]
	gate chan struct{}
}

func NewCounter(ctx context.Context, start int) (*Counter, error) {
	if start < 0 {
		return nil, fmt.Errorf("start must be >= 0, got %d", start)
	}
	return &Counter{n: start, gate: make(chan struct{})}, nil
}
func (c *Counter) Inc(ctx context.Context, by int) (int, error) { c.n += by; return c.n, nil }
func (c *Counter) Pid(ctx context.Context) (int, error)         { return os.Getpid(), nil }

// Hold keeps a borrowed reference in actor state.
func (c *Counter) Hold(ctx context.Context, b Box) (int, error) { c.held = b.Inner; return 0, nil }

// Held reads the held reference.
func (c *Counter) Held(ctx context.Context) (int, error) {
	data, err := c.held.Get(ctx)
	return len(data), err
}

// Meet returns only when two calls are inside it at once.
func (c *Counter) Meet(ctx context.Context) (int, error) {
	select {
	case c.gate <- struct{}{}:
	case <-c.gate:
	case <-time.After(waitfor.Generous):
		return 0, errors.New("no second call arrived: calls did not run concurrently")
	}
	return 1, nil
}

// incVia calls an actor whose handle it received as an argument.
func incVia(ctx context.Context, h ray.ActorHandle[Counter]) (int, error) {
	return Inc.On(h).Remote(ctx, ray.V(100)).Get(ctx)
}

// crashChild runs a child task that always crashes its worker and returns
// the child's error unchanged.
func crashChild(ctx context.Context, _ int) (int, error) {
	_, err := CrashUntil.Options(ray.MaxRetries(0)).Remote(ctx, ray.V(1)).Get(ctx)
	return 0, err
}

// untilCancelled writes "<pid>\n" to path (appending: one line per
// attempt), then waits for its context to end (ray.Cancel) and returns its
// error; after 30 s it gives up with a different error.
func untilCancelled(ctx context.Context, path string) (int, error) {
	if err := appendLine(path, fmt.Sprint(os.Getpid())); err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(waitfor.Generous):
		return 0, errors.New("never cancelled")
	}
}

// ignoreCancel writes its pid to path like untilCancelled, then sleeps 30 s
// whatever its context says.
func ignoreCancel(ctx context.Context, path string) (int, error) {
	if err := appendLine(path, fmt.Sprint(os.Getpid())); err != nil {
		return 0, err
	}
	time.Sleep(30 * time.Second) // deliberately deaf to ctx
	return 1, nil
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Wait is untilCancelled as an actor method.
func (c *Counter) Wait(ctx context.Context, path string) (int, error) {
	return untilCancelled(ctx, path)
}

// parent submits a child task and waits for it while holding its CPU.
func parent(ctx context.Context, x int) (int, error) {
	return Add.Remote(ctx, ray.V(x), ray.V(1000)).Get(ctx)
}

var (
	Parent         = ray.Task1(parent)
	CrashChild     = ray.Task1(crashChild)
	Add            = ray.Task2(add)
	Fail           = ray.Task1(fail)
	Explode        = ray.Task1(explode)
	SleepFor       = ray.Task1(sleepFor)
	ByteLen        = ray.Task1(byteLen)
	MakeBytes      = ray.Task1(makeBytes)
	CrashUntil     = ray.Task1(crashUntil)
	SumInner       = ray.Task1(sumInner)
	IncVia         = ray.Task1(incVia)
	CounterA       = ray.Actor1(NewCounter)
	Inc            = ray.Method1((*Counter).Inc)
	Pid            = ray.Method0((*Counter).Pid)
	Hold           = ray.Method1((*Counter).Hold)
	Held           = ray.Method0((*Counter).Held)
	Meet           = ray.Method0((*Counter).Meet)
	Wait           = ray.Method1((*Counter).Wait)
	UntilCancelled = ray.Task1(untilCancelled)
	IgnoreCancel   = ray.Task1(ignoreCancel)
)

var rt *ray.Runtime

func TestMain(m *testing.M) {
	ctx := context.Background()
	if ray.IsWorker() {
		ray.Init(ctx) // serves tasks; never returns
	}
	var err error
	rt, err = ray.Init(ctx, ray.NumCPUs(2), ray.ObjectStoreMemory(256<<20), ray.WorkerOutput(nil))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = rt.Shutdown(ctx)
	os.Exit(code)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTasksAndRefArgs(t *testing.T) {
	ctx := testCtx(t)
	a := Add.Remote(ctx, ray.V(1), ray.V(2))
	b := Add.Remote(ctx, a, ray.V(10)) // reference argument, resolved first
	c := Add.Remote(ctx, a, b)
	got, err := c.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != 16 {
		t.Fatalf("Add(a, Add(a, 10)) = %d, want 16", got)
	}
}

func TestManyTasks(t *testing.T) {
	ctx := testCtx(t)
	var refs []ray.Ref[int]
	for i := 0; i < 500; i++ {
		refs = append(refs, Add.Remote(ctx, ray.V(i), ray.V(i)))
	}
	vals, err := ray.GetAll(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v != 2*i {
			t.Fatalf("task %d = %d, want %d", i, v, 2*i)
		}
	}
}

func TestPutGetValues(t *testing.T) {
	ctx := testCtx(t)
	type rec struct {
		Name string
		Vals []float64
	}
	in := rec{"x", []float64{1.5, 2.5}}
	r, err := ray.Put(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out.Name != "x" || len(out.Vals) != 2 || out.Vals[1] != 2.5 {
		t.Fatalf("got %+v", out)
	}
}

func TestLargeBytesZeroCopyAndFree(t *testing.T) {
	ctx := testCtx(t)
	before, err := ray.ObjectStoreUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8 << 20
	payload := bytes.Repeat([]byte{7}, n)
	r, err := ray.Put(ctx, payload)
	if err != nil {
		t.Fatal(err)
	}
	payload[0] = 9 // Put copied: later changes do not leak into the object
	buf, err := ray.GetBuffer(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(buf.Bytes()) != n || buf.Bytes()[0] != 7 || buf.Bytes()[n-1] != 7 {
		t.Fatalf("buffer: len %d first %d", len(buf.Bytes()), buf.Bytes()[0])
	}
	buf.Release()
	// A task reads the large argument from shared memory.
	if got, err := ByteLen.Remote(ctx, r).Get(ctx); err != nil || got != n {
		t.Fatalf("ByteLen = %d, %v; want %d", got, err, n)
	}
	mid, err := ray.ObjectStoreUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if mid.Used < before.Used+n {
		t.Fatalf("store use %d after a %d-byte put, before %d", mid.Used, n, before.Used)
	}
	r.Release()
	if _, err := r.Get(ctx); !errors.Is(err, ray.ErrObjectFreed) {
		t.Fatalf("Get after Release: want ErrObjectFreed, got %v", err)
	}
	waitFor(t, "store space freed", func() bool {
		u, err := ray.ObjectStoreUsage(ctx)
		return err == nil && u.Used < before.Used+n
	})
}

func TestLargeTaskResult(t *testing.T) {
	ctx := testCtx(t)
	const n = 3 << 20
	r := MakeBytes.Remote(ctx, ray.V(n))
	b, err := r.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != n || b[n-1] != byte((n-1)%251) {
		t.Fatalf("result len %d", len(b))
	}
	// The large result stays in shared memory and feeds another task.
	if got, err := ByteLen.Remote(ctx, r).Get(ctx); err != nil || got != n {
		t.Fatalf("ByteLen(result) = %d, %v", got, err)
	}
}

func TestNestedRefsStayAlive(t *testing.T) {
	ctx := testCtx(t)
	inner, err := ray.Put(ctx, bytes.Repeat([]byte{1}, 200<<10))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := ray.Put(ctx, Box{Label: "b", Inner: inner})
	if err != nil {
		t.Fatal(err)
	}
	inner.Release() // only the outer object keeps it alive now
	box, err := outer.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := box.Inner.Get(ctx); err != nil || len(got) != 200<<10 {
		t.Fatalf("nested ref: %d bytes, %v", len(got), err)
	}
	// A task receives the struct by value and reads the nested reference.
	if got, err := SumInner.Remote(ctx, ray.V(box)).Get(ctx); err != nil || got != 200<<10 {
		t.Fatalf("SumInner = %d, %v", got, err)
	}
}

func TestBorrowerKeepsObjectAlive(t *testing.T) {
	ctx := testCtx(t)
	c := CounterA.Remote(ctx, ray.V(0))
	inner, err := ray.Put(ctx, bytes.Repeat([]byte{3}, 150<<10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Hold.On(c).Remote(ctx, ray.V(Box{Inner: inner})).Get(ctx); err != nil {
		t.Fatal(err)
	}
	inner.Release()
	runtime.GC()
	if n, err := Held.On(c).Remote(ctx).Get(ctx); err != nil || n != 150<<10 {
		t.Fatalf("actor's borrowed ref: %d, %v", n, err)
	}
}

func TestWaitAndTimeout(t *testing.T) {
	ctx := testCtx(t)
	fast := SleepFor.Remote(ctx, ray.V(time.Millisecond))
	slow := SleepFor.Options(ray.CPUs(0)).Remote(ctx, ray.V(30*time.Second)) // holds no CPU while it sleeps
	ready, notReady, err := ray.Wait(ctx, []ray.Ref[int]{slow, fast}, 1, ray.NoTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 1 || ready[0].ID() != fast.ID() || len(notReady) != 1 {
		t.Fatalf("ready %v notReady %v", ready, notReady)
	}
	// A timeout of 0 looks once, as Ray's ray.wait(timeout=0): asking for
	// both returns at once with the one that is ready (it waited for slow
	// before, as if 0 meant no limit).
	ready, notReady, err = ray.Wait(ctx, []ray.Ref[int]{slow, fast}, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 1 || ready[0].ID() != fast.ID() || len(notReady) != 1 || notReady[0].ID() != slow.ID() {
		t.Fatalf("Wait with timeout 0: %d ready, %d not ready; want fast ready and slow not", len(ready), len(notReady))
	}
	// A ctx that ends bounds a wait without limit; what is ready is
	// returned without an error.
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	ready, _, err = ray.Wait(short, []ray.Ref[int]{slow, fast}, 2, ray.NoTimeout)
	cancelShort()
	if err != nil || len(ready) != 1 {
		t.Fatalf("Wait until ctx ends: %d ready, %v; want fast ready and no error", len(ready), err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = slow.Get(short)
	var te *ray.GetTimeoutError
	if !errors.Is(err, ray.ErrGetTimeout) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &te) {
		t.Fatalf("Get past deadline: want GetTimeoutError, got %v", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := slow.Get(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with cancelled ctx: want context.Canceled, got %v", err)
	}
}

// TestWaitReturnsAtMostNum ports test_basic.py's waits: of ten ready refs,
// Wait with num 2 returns exactly the first two (Ray's 2 and 8, where goray
// returned all ten), a loop of Wait(refs, 1) takes one at a time, and refs
// naming one object twice or a num outside 1..len(refs) are refused.
func TestWaitReturnsAtMostNum(t *testing.T) {
	ctx := testCtx(t)
	var refs []ray.Ref[int]
	for i := range 10 {
		r, err := ray.Put(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	ready, notReady, err := ray.Wait(ctx, refs, 2, ray.NoTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 2 || len(notReady) != 8 || ready[0].ID() != refs[0].ID() || ready[1].ID() != refs[1].ID() || notReady[0].ID() != refs[2].ID() {
		t.Fatalf("Wait(10 ready, 2): %d ready, %d not ready; want the first 2 and the other 8", len(ready), len(notReady))
	}
	rest, rounds := refs, 0
	for len(rest) > 0 {
		var got []ray.Ref[int]
		if got, rest, err = ray.Wait(ctx, rest, 1, ray.NoTimeout); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("Wait(refs, 1) returned %d ready", len(got))
		}
		rounds++
	}
	if rounds != len(refs) {
		t.Fatalf("a loop of Wait(refs, 1) took %d rounds for %d refs", rounds, len(refs))
	}
	for _, tc := range []struct {
		name string
		refs []ray.Ref[int]
		num  int
		want string
	}{
		{"same object twice", []ray.Ref[int]{refs[0], refs[1], refs[0]}, 1, "refs 0 and 2 are the same object"},
		{"num 0", refs[:3], 0, "num is 0, want 1..3"},
		{"num past the refs", refs[:3], 4, "num is 4, want 1..3"},
		{"negative num", refs[:3], -1, "num is -1, want 1..3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := ray.Wait(ctx, tc.refs, tc.num, ray.NoTimeout); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error saying %q, got %v", tc.want, err)
			}
		})
	}
	if ready, notReady, err := ray.Wait(ctx, []ray.Ref[int]{}, 0, ray.NoTimeout); err != nil || len(ready)+len(notReady) != 0 {
		t.Fatalf("Wait of no refs: %v %v %v", ready, notReady, err)
	}
}

func TestErrors(t *testing.T) {
	ctx := testCtx(t)
	_, err := Fail.Remote(ctx, ray.V("boom")).Get(ctx)
	var te *ray.TaskError
	if !errors.As(err, &te) || te.Message != "boom" || te.Panic || !errors.Is(err, ray.ErrTaskFailed) {
		t.Fatalf("task error: got %#v", err)
	}
	_, err = Explode.Remote(ctx, ray.V("kaboom")).Get(ctx)
	if !errors.As(err, &te) || !te.Panic || !errors.Is(err, ray.ErrPanic) || te.Message != "kaboom" {
		t.Fatalf("panic: got %v", err)
	}
	if !strings.Contains(te.Stack, "explode") {
		t.Fatalf("remote stack does not name the panicking function:\n%s", te.Stack)
	}
	// The worker survived the panic: the next task runs fine.
	if v, err := Add.Remote(ctx, ray.V(2), ray.V(2)).Get(ctx); err != nil || v != 4 {
		t.Fatalf("after panic: %d, %v", v, err)
	}
	// An error in an argument's task propagates to the dependent task.
	_, err = Add.Remote(ctx, Fail.Remote(ctx, ray.V("upstream")), ray.V(1)).Get(ctx)
	if !errors.As(err, &te) || te.Message != "upstream" {
		t.Fatalf("propagated error: %v", err)
	}
}

func unregistered(ctx context.Context, x int) (int, error) { return x, nil }

func TestFunctionNotFoundAndArgType(t *testing.T) {
	ctx := testCtx(t)
	// Registered after Init, in the driver only: workers do not have it.
	late := ray.Task1(unregistered)
	_, err := late.Remote(ctx, ray.V(1)).Get(ctx)
	if !errors.Is(err, ray.ErrFunctionNotFound) || !strings.Contains(err.Error(), "unregistered") {
		t.Fatalf("missing function: got %v", err)
	}
	_, err = ray.CallByName[int](ctx, "no.such/function", 1).Get(ctx)
	if !errors.Is(err, ray.ErrFunctionNotFound) {
		t.Fatalf("unknown name: got %v", err)
	}
	_, err = ray.CallByName[int](ctx, Add.Name(), "one", 2).Get(ctx)
	if !errors.Is(err, ray.ErrArgType) || !strings.Contains(err.Error(), "argument 0") {
		t.Fatalf("wrong argument type: got %v", err)
	}
	_, err = ray.CallByName[int](ctx, Add.Name(), 1).Get(ctx)
	if !errors.Is(err, ray.ErrArgType) {
		t.Fatalf("wrong argument count: got %v", err)
	}
	if v, err := ray.CallByName[int](ctx, Add.Name(), 20, 22).Get(ctx); err != nil || v != 42 {
		t.Fatalf("CallByName = %d, %v", v, err)
	}
}

func TestWorkerCrashRetries(t *testing.T) {
	ctx := testCtx(t)
	got, err := CrashUntil.Options(ray.MaxRetries(2)).Remote(ctx, ray.V(1)).Get(ctx)
	if err != nil || got != 1 {
		t.Fatalf("crash once then succeed: %d, %v", got, err)
	}
	_, err = CrashUntil.Options(ray.MaxRetries(1)).Remote(ctx, ray.V(5)).Get(ctx)
	var wc *ray.WorkerCrashedError
	if !errors.As(err, &wc) || !errors.Is(err, ray.ErrWorkerCrashed) || wc.Attempts != 2 {
		t.Fatalf("crash every time: got %v", err)
	}
}

func TestActors(t *testing.T) {
	ctx := testCtx(t)
	c := CounterA.Options(ray.Name("counter-1")).Remote(ctx, ray.V(10))
	var refs []ray.Ref[int]
	for i := 0; i < 200; i++ {
		refs = append(refs, Inc.On(c).Remote(ctx, ray.V(1)))
	}
	vals, err := ray.GetAll(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v != 11+i {
			t.Fatalf("call %d saw %d: calls ran out of order", i, v)
		}
	}
	// Found by name, and callable from a task that receives the handle.
	h, err := ray.GetActor[Counter](ctx, "counter-1")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := IncVia.Remote(ctx, ray.V(h)).Get(ctx); err != nil || v != 310 {
		t.Fatalf("IncVia = %d, %v; want 310", v, err)
	}
	if _, err := ray.GetActor[Counter](ctx, "nobody"); !errors.Is(err, ray.ErrActorNotFound) {
		t.Fatalf("unknown name: %v", err)
	}
	// A second live actor cannot take the name.
	dup := CounterA.Options(ray.Name("counter-1")).Remote(ctx, ray.V(0))
	if err := dup.Ready(ctx); !errors.Is(err, ray.ErrActorDied) || !strings.Contains(err.Error(), "already taken") {
		t.Fatalf("duplicate name: %v", err)
	}
	// Kill: later calls fail with ActorDiedError.
	if err := c.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = Inc.On(c).Remote(ctx, ray.V(1)).Get(ctx)
	var ad *ray.ActorDiedError
	if !errors.As(err, &ad) || !strings.Contains(ad.Reason, "killed") {
		t.Fatalf("call after kill: %v", err)
	}
}

func TestActorConstructorError(t *testing.T) {
	ctx := testCtx(t)
	c := CounterA.Remote(ctx, ray.V(-1))
	_, err := Inc.On(c).Remote(ctx, ray.V(1)).Get(ctx)
	if !errors.Is(err, ray.ErrActorDied) || !strings.Contains(err.Error(), "start must be >= 0") {
		t.Fatalf("constructor error: %v", err)
	}
}

func TestActorProcessDies(t *testing.T) {
	ctx := testCtx(t)
	c := CounterA.Remote(ctx, ray.V(0))
	pid, err := Pid.On(c).Remote(ctx).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, err = Inc.On(c).Remote(ctx, ray.V(1)).Get(ctx)
	if !errors.Is(err, ray.ErrActorDied) {
		t.Fatalf("call on a killed actor process: %v", err)
	}
}

func TestActorConcurrency(t *testing.T) {
	ctx := testCtx(t)
	c := CounterA.Options(ray.MaxConcurrency(2)).Remote(ctx, ray.V(0))
	a, b := Meet.On(c).Remote(ctx), Meet.On(c).Remote(ctx)
	if _, err := ray.GetAll(ctx, []ray.Ref[int]{a, b}); err != nil {
		t.Fatal(err)
	}
}

func TestObjectsFreedByGC(t *testing.T) {
	ctx := testCtx(t)
	before, err := ray.ObjectStoreUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var made atomic.Int64
	func() {
		for i := 0; i < 4; i++ {
			r, err := ray.Put(ctx, bytes.Repeat([]byte{1}, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			made.Add(1)
			_ = r
		}
	}()
	waitFor(t, "unreachable refs collected and freed", func() bool {
		runtime.GC()
		u, err := ray.ObjectStoreUsage(ctx)
		return err == nil && u.Used <= before.Used
	})
}

func TestClusterResources(t *testing.T) {
	ctx := testCtx(t)
	waitFor(t, "node resources reported", func() bool {
		r, err := ray.ClusterResources(ctx)
		return err == nil && r["CPU"] == 2
	})
}

// waitFor polls cond until it holds, for at most waitfor.Generous.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitfor.Cond(t, waitfor.Generous, what, cond)
}

func TestStoreFullIsAClearError(t *testing.T) {
	ctx := testCtx(t)
	u, err := ray.ObjectStoreUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ray.Put(ctx, make([]byte, u.Capacity+1))
	if !errors.Is(err, ray.ErrStoreFull) || !strings.Contains(err.Error(), "object store full") {
		t.Fatalf("put larger than the store: want ErrStoreFull, got %v", err)
	}
	// The store still works afterwards.
	if _, err := ray.Put(ctx, make([]byte, 1<<20)); err != nil {
		t.Fatalf("put after a failed put: %v", err)
	}
}

func TestTypedErrorsCrossProcesses(t *testing.T) {
	ctx := testCtx(t)
	_, err := CrashChild.Remote(ctx, ray.V(0)).Get(ctx)
	var wc *ray.WorkerCrashedError
	if !errors.Is(err, ray.ErrWorkerCrashed) || !errors.As(err, &wc) || !errors.Is(err, ray.ErrTaskFailed) {
		t.Fatalf("a child's crash returned by the parent: want ErrWorkerCrashed and *WorkerCrashedError, got %v", err)
	}
	if !strings.Contains(err.Error(), "crashUntil") {
		t.Fatalf("the message lost the child's details: %v", err)
	}
}

func TestCancelledBeforeRun(t *testing.T) {
	ctx := testCtx(t)
	cctx, cancel := context.WithCancel(ctx)
	blocker := SleepFor.Options(ray.CPUs(0)).Remote(ctx, ray.V(2*time.Second))
	r := Add.Remote(cctx, blocker, ray.V(1)) // waits for its argument
	cancel()
	_, err := r.Get(ctx)
	if !errors.Is(err, ray.ErrTaskCancelled) || !strings.Contains(err.Error(), "cancelled before it ran") {
		t.Fatalf("want ErrTaskCancelled, got %v", err)
	}
}

// startedPids waits until path holds n lines and returns them.
func startedPids(t *testing.T, path string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if lines := strings.Fields(string(b)); len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: fewer than %d starts after 30s", path, n)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

func TestCancel(t *testing.T) {
	ctx := testCtx(t)
	t.Run("Queued", func(t *testing.T) {
		// No node has this resource: the task waits for a worker forever.
		r := Add.Options(ray.Resource("unobtainium", 1)).Remote(ctx, ray.V(1), ray.V(2))
		if err := ray.Cancel(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Get(ctx); !errors.Is(err, ray.ErrTaskCancelled) {
			t.Fatalf("Get of a cancelled queued task: %v, want ErrTaskCancelled", err)
		}
	})
	t.Run("Running", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "starts")
		r := UntilCancelled.Remote(ctx, ray.V(path))
		startedPids(t, path, 1)
		if err := ray.Cancel(ctx, r); err != nil {
			t.Fatal(err)
		}
		_, err := r.Get(ctx)
		if !errors.Is(err, ray.ErrTaskCancelled) || !strings.Contains(err.Error(), "while running") || !strings.Contains(err.Error(), "context canceled") {
			t.Fatalf("Get of a cancelled running task: %v, want ErrTaskCancelled saying it was running", err)
		}
	})
	t.Run("Force", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "starts")
		r := IgnoreCancel.Remote(ctx, ray.V(path)) // default MaxRetries: 3
		pid, _ := strconv.Atoi(startedPids(t, path, 1)[0])
		if err := ray.Cancel(ctx, r, ray.Force()); err != nil {
			t.Fatal(err)
		}
		_, err := r.Get(ctx)
		if !errors.Is(err, ray.ErrTaskCancelled) || errors.Is(err, ray.ErrWorkerCrashed) {
			t.Fatalf("Get of a force-cancelled task: %v, want ErrTaskCancelled (not a crash)", err)
		}
		waitFor(t, "the force-cancelled task's worker to exit", func() bool { return syscall.Kill(pid, 0) != nil })
		if b, _ := os.ReadFile(path); strings.Count(string(b), "\n") != 1 {
			t.Fatalf("the cancelled task ran %d times, want once (never retried):\n%s", strings.Count(string(b), "\n"), b)
		}
	})
	t.Run("Finished", func(t *testing.T) {
		r := Add.Remote(ctx, ray.V(1), ray.V(2))
		if v, err := r.Get(ctx); err != nil || v != 3 {
			t.Fatalf("Add: %v, %v", v, err)
		}
		if err := ray.Cancel(ctx, r); err != nil {
			t.Fatal(err)
		}
		if v, err := r.Get(ctx); err != nil || v != 3 {
			t.Fatalf("Get after cancelling a finished task: %v, %v; want its value", v, err)
		}
	})
	t.Run("ActorCalls", func(t *testing.T) {
		c := CounterA.Remote(ctx, ray.V(0))
		defer c.Kill(ctx)
		path := filepath.Join(t.TempDir(), "starts")
		running := Wait.On(c).Remote(ctx, ray.V(path))
		queued := Inc.On(c).Remote(ctx, ray.V(5)) // behind it: the actor runs one call at a time
		startedPids(t, path, 1)
		if err := ray.Cancel(ctx, queued); err != nil {
			t.Fatal(err)
		}
		if err := ray.Cancel(ctx, running); err != nil {
			t.Fatal(err)
		}
		if _, err := running.Get(ctx); !errors.Is(err, ray.ErrTaskCancelled) {
			t.Fatalf("running actor call: %v, want ErrTaskCancelled", err)
		}
		if _, err := queued.Get(ctx); !errors.Is(err, ray.ErrTaskCancelled) || !strings.Contains(err.Error(), "before it started") {
			t.Fatalf("queued actor call: %v, want ErrTaskCancelled before it started", err)
		}
		if v, err := Inc.On(c).Remote(ctx, ray.V(1)).Get(ctx); err != nil || v != 1 {
			t.Fatalf("the actor after the cancellations: %v, %v; want 1 (the cancelled Inc never ran)", v, err)
		}
		if err := ray.Cancel(ctx, running, ray.Force()); !errors.Is(err, ray.ErrNotCancellable) {
			t.Fatalf("Force on an actor call: %v, want ErrNotCancellable", err)
		}
	})
	t.Run("NotATask", func(t *testing.T) {
		r, err := ray.Put(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		if err := ray.Cancel(ctx, r); !errors.Is(err, ray.ErrNotCancellable) {
			t.Fatalf("Cancel of a Put: %v, want ErrNotCancellable", err)
		}
	})
}

// callUntil calls Inc on c until the result is not ErrActorUnavailable (a
// call sent to the dead worker) and returns it.
func callUntil(t *testing.T, ctx context.Context, c ray.ActorHandle[Counter]) (int, error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := Inc.On(c).Remote(ctx, ray.V(1)).Get(ctx)
		if !errors.Is(err, ray.ErrActorUnavailable) || time.Now().After(deadline) {
			return v, err
		}
	}
}

func TestActorRestarts(t *testing.T) {
	ctx := testCtx(t)
	t.Run("UntilExhausted", func(t *testing.T) {
		c := CounterA.Options(ray.MaxRestarts(1)).Remote(ctx, ray.V(10))
		if v, err := Inc.On(c).Remote(ctx, ray.V(1)).Get(ctx); err != nil || v != 11 {
			t.Fatalf("Inc: %v, %v", v, err)
		}
		pid, err := Pid.On(c).Remote(ctx).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		// Restarted: the constructor ran again (state 10), on a new worker.
		if v, err := callUntil(t, ctx, c); err != nil || v != 11 {
			t.Fatalf("Inc after the first crash: %v, %v; want 11 from a restarted actor", v, err)
		}
		pid2, err := Pid.On(c).Remote(ctx).Get(ctx)
		if err != nil || pid2 == pid {
			t.Fatalf("the restarted actor's pid: %d, %v (first worker %d)", pid2, err, pid)
		}
		// A task holding the handle reaches the restarted actor.
		if v, err := IncVia.Remote(ctx, ray.V(c)).Get(ctx); err != nil || v != 111 {
			t.Fatalf("a borrower's call after the restart: %v, %v; want 111", v, err)
		}
		_ = syscall.Kill(pid2, syscall.SIGKILL)
		_, err = callUntil(t, ctx, c)
		var ad *ray.ActorDiedError
		if !errors.As(err, &ad) || !strings.Contains(ad.Reason, "max_restarts 1") {
			t.Fatalf("after the restarts ran out: %v, want ActorDiedError saying so", err)
		}
	})
	t.Run("KillDoesNotRestart", func(t *testing.T) {
		c := CounterA.Options(ray.MaxRestarts(-1)).Remote(ctx, ray.V(0))
		if _, err := Inc.On(c).Remote(ctx, ray.V(1)).Get(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := Inc.On(c).Remote(ctx, ray.V(1)).Get(ctx); !errors.Is(err, ray.ErrActorDied) {
			t.Fatalf("a killed actor with restarts left: %v, want ErrActorDied", err)
		}
	})
	// test_actor_failures.py's ray.kill(actor, no_restart=False): the
	// process ends, the actor comes back with fresh state while it has
	// restarts, and the kill counts as one.
	t.Run("KillAllowRestart", func(t *testing.T) {
		c := CounterA.Options(ray.MaxRestarts(1)).Remote(ctx, ray.V(10))
		if v, err := Inc.On(c).Remote(ctx, ray.V(1)).Get(ctx); err != nil || v != 11 {
			t.Fatalf("Inc: %v, %v", v, err)
		}
		pid, err := Pid.On(c).Remote(ctx).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Kill(ctx, ray.AllowRestart()); err != nil {
			t.Fatal(err)
		}
		if v, err := callUntil(t, ctx, c); err != nil || v != 11 {
			t.Fatalf("Inc after Kill(AllowRestart): %v, %v; want 11 from a restarted actor", v, err)
		}
		if pid2, err := Pid.On(c).Remote(ctx).Get(ctx); err != nil || pid2 == pid {
			t.Fatalf("the restarted actor's pid: %d, %v (first worker %d)", pid2, err, pid)
		}
		if err := ray.Kill(ctx, c, ray.AllowRestart()); err != nil {
			t.Fatal(err)
		}
		_, err = callUntil(t, ctx, c)
		var ad *ray.ActorDiedError
		if !errors.As(err, &ad) || !strings.Contains(ad.Reason, "max_restarts 1") {
			t.Fatalf("Kill(AllowRestart) with no restart left: %v, want ActorDiedError saying its restarts ran out", err)
		}
	})
	t.Run("Unlimited", func(t *testing.T) {
		c := CounterA.Options(ray.MaxRestarts(-1)).Remote(ctx, ray.V(0))
		defer c.Kill(ctx)
		for i := 0; i < 3; i++ {
			pid, err := Pid.On(c).Remote(ctx).Get(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if v, err := callUntil(t, ctx, c); err != nil || v != 1 {
				t.Fatalf("restart %d: %v, %v; want 1", i+1, v, err)
			}
		}
	})
}

func TestKillPendingActor(t *testing.T) {
	ctx := testCtx(t)
	// No node has this resource: the actor stays pending.
	c := CounterA.Options(ray.Resource("unobtainium", 1)).Remote(ctx, ray.V(0))
	call := Inc.On(c).Remote(ctx, ray.V(1))
	if err := c.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := call.Get(ctx)
	var ad *ray.ActorDiedError
	if !errors.As(err, &ad) || !strings.Contains(ad.Reason, "killed") {
		t.Fatalf("call on a pending actor killed: %v", err)
	}
	if err := c.Ready(ctx); !errors.Is(err, ray.ErrActorDied) {
		t.Fatalf("Ready after kill: %v", err)
	}
}

func TestNestedTasksDoNotDeadlock(t *testing.T) {
	ctx := testCtx(t)
	// Four parents on a 2-CPU node, each waiting on a child that needs a CPU:
	// without lending the waiting parents' CPUs, no child could ever run.
	var refs []ray.Ref[int]
	for i := 0; i < 4; i++ {
		refs = append(refs, Parent.Remote(ctx, ray.V(i)))
	}
	got, err := ray.GetAll(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 1000+i {
			t.Fatalf("parent %d = %d", i, v)
		}
	}
}
