package ray_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

// Generators and multiple returns used by the tests.

func countTo(ctx context.Context, n int, yield func(int) error) error {
	for i := range n {
		if err := yield(i); err != nil {
			return err
		}
	}
	return nil
}

// failAt yields 0..k-1, then fails.
func failAt(ctx context.Context, k int, yield func(int) error) error {
	for i := range k {
		if err := yield(i); err != nil {
			return err
		}
	}
	return fmt.Errorf("item %d is broken", k)
}

type crashPlan struct {
	N, K int
	// Go is a file the test writes once it holds item K: the worker dies
	// then, so that items 0..K reached the caller.
	Go string
}

// crashMidStream yields 0..N-1; on its first attempt it kills its own
// worker after item K.
func crashMidStream(ctx context.Context, p crashPlan, yield func(int) error) error {
	tc, _ := ray.CurrentTask(ctx)
	for i := range p.N {
		if err := yield(i); err != nil {
			return err
		}
		if tc.Attempt == 0 && i == p.K {
			for {
				if _, err := os.Stat(p.Go); err == nil {
					break
				}
				time.Sleep(time.Millisecond)
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	return nil
}

// tracker is where a tracked generator reports, in files of a directory
// the test reads: how many items it made ("made", after each) and why it
// stopped ("stopped"). Files, not an actor: the reports must cost little
// next to the stream they watch (10,000 items under the race detector).
type tracker struct{ Dir string }

// report writes name atomically.
func (tr tracker) report(name, value string) error {
	tmp := filepath.Join(tr.Dir, name+".tmp")
	if err := os.WriteFile(tmp, []byte(value), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(tr.Dir, name))
}

type trackerState struct {
	Made    int
	Stopped string
}

// state reads the reports so far.
func (tr tracker) state(t *testing.T) trackerState {
	t.Helper()
	var st trackerState
	if b, err := os.ReadFile(filepath.Join(tr.Dir, "made")); err == nil {
		n, err := strconv.Atoi(string(b))
		if err != nil {
			t.Fatalf("made: %v", err)
		}
		st.Made = n
	}
	if b, err := os.ReadFile(filepath.Join(tr.Dir, "stopped")); err == nil {
		st.Stopped = string(b)
	}
	return st
}

// tracked yields n items (forever when n < 0), reporting to tr after each
// how many it made, and why it stopped.
func tracked(ctx context.Context, tr tracker, n int, yield func(int) error) error {
	for i := 0; n < 0 || i < n; i++ {
		if err := yield(i); err != nil {
			_ = tr.report("stopped", "yield: "+err.Error())
			return err
		}
		if err := tr.report("made", strconv.Itoa(i+1)); err != nil {
			return err
		}
	}
	return tr.report("stopped", "done")
}

func split(ctx context.Context, s string) (string, int, error) {
	if s == "" {
		return "", 0, errors.New("nothing to split")
	}
	return strings.ToUpper(s), len(s), nil
}

// halves returns two store-sized byte slices.
func halves(ctx context.Context, n int) ([]byte, []byte, error) {
	a, b := make([]byte, n), make([]byte, n)
	for i := range a {
		a[i], b[i] = 1, 2
	}
	return a, b, nil
}

func (c *Counter) Stats(ctx context.Context, k int) (int, int, string, error) {
	c.n += k
	return c.n, k, fmt.Sprint("n=", c.n), nil
}

func (c *Counter) Upto(ctx context.Context, k int, yield func(int) error) error {
	for range k {
		c.n++
		if err := yield(c.n); err != nil {
			return err
		}
	}
	return nil
}

// takeStream is a task that would read a stream passed to it.
func takeStream(ctx context.Context, s *ray.Stream[int]) (int, error) {
	r, err := s.Next(ctx)
	if err != nil {
		return 0, err
	}
	return r.Get(ctx)
}

// UptoOnce is Upto whose first instance kills its worker after item K,
// once the test holds it (file Go), leaving file Died for the next.
func (c *Counter) UptoOnce(ctx context.Context, p crashPlan, yield func(int) error) error {
	died := p.Go + ".died"
	for i := range p.N {
		if err := yield(i); err != nil {
			return err
		}
		if _, err := os.Stat(died); err != nil && i == p.K {
			for {
				if _, err := os.Stat(p.Go); err == nil {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if err := os.WriteFile(died, nil, 0o644); err != nil {
				return err
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	return nil
}

// sumStream consumes a generator from inside a task.
func sumStream(ctx context.Context, n int) (int, error) {
	s := CountTo.Remote(ctx, ray.V(n))
	defer s.Close()
	sum := 0
	for v, err := range s.Values(ctx) {
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

var (
	SumStream      = ray.Task1(sumStream)
	TakeStream     = ray.Task1(takeStream)
	UptoOnce       = ray.GeneratorMethod1((*Counter).UptoOnce)
	CountTo        = ray.Generator1(countTo)
	FailAt         = ray.Generator1(failAt)
	CrashMidStream = ray.Generator1(crashMidStream)
	Tracked        = ray.Generator2(tracked)
	Split          = ray.Task1R2(split)
	Halves         = ray.Task1R2(halves)
	Stats          = ray.Method1R3((*Counter).Stats)
	Upto           = ray.GeneratorMethod1((*Counter).Upto)
)

// collect takes a stream's values until its end or error.
func collect(ctx context.Context, s *ray.Stream[int]) (got []int, err error) {
	for v, err := range s.Values(ctx) {
		if err != nil {
			return got, err
		}
		got = append(got, v)
	}
	return got, nil
}

func TestMultipleReturns(t *testing.T) {
	ctx := testCtx(t)
	up, n := Split.Remote(ctx, ray.V("goray"))
	if got, err := n.Get(ctx); err != nil || got != 5 {
		t.Fatalf("second result: %d, %v", got, err)
	}
	if got, err := up.Get(ctx); err != nil || got != "GORAY" {
		t.Fatalf("first result: %q, %v", got, err)
	}
	if up.ID() == n.ID() {
		t.Fatalf("both results are object %s", up.ID())
	}
	// Each result can be an argument on its own.
	if got, err := Add.Remote(ctx, n, ray.V(1)).Get(ctx); err != nil || got != 6 {
		t.Fatalf("Add(second, 1) = %d, %v", got, err)
	}
	// An error fails every result.
	e1, e2 := Split.Remote(ctx, ray.V(""))
	for i, r := range []ray.ObjectRef{e1, e2} {
		var err error
		if i == 0 {
			_, err = e1.Get(ctx)
		} else {
			_, err = e2.Get(ctx)
		}
		var te *ray.TaskError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), "nothing to split") {
			t.Fatalf("result %d (%s) of a failed call: %v", i+1, r.ID(), err)
		}
	}
	// An actor method with three results.
	c := CounterA.Remote(ctx, ray.V(10))
	a, b, s := Stats.On(c).Remote(ctx, ray.V(5))
	va, err1 := a.Get(ctx)
	vb, err2 := b.Get(ctx)
	vs, err3 := s.Get(ctx)
	if err := errors.Join(err1, err2, err3); err != nil || va != 15 || vb != 5 || vs != "n=15" {
		t.Fatalf("Stats = %d, %d, %q, %v", va, vb, vs, err)
	}
}

// TestMultipleReturnsFreedIndependently: each result is its own store
// object; releasing one frees its memory while the other stays readable.
func TestMultipleReturnsFreedIndependently(t *testing.T) {
	ctx := testCtx(t)
	const n = 8 << 20
	before, err := ray.ObjectStoreUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, b := Halves.Remote(ctx, ray.V(n))
	if _, _, err := ray.Wait(ctx, []ray.Ref[[]byte]{a, b}, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both results in the store", func() bool {
		u, err := ray.ObjectStoreUsage(ctx)
		return err == nil && u.Used >= before.Used+2*n
	})
	a.Release()
	waitFor(t, "the first result freed", func() bool {
		u, err := ray.ObjectStoreUsage(ctx)
		return err == nil && u.Used < before.Used+2*n && u.Used >= before.Used+n
	})
	got, err := b.Get(ctx)
	if err != nil || len(got) != n || got[0] != 2 || got[n-1] != 2 {
		t.Fatalf("second result after the first was freed: %d bytes, %v", len(got), err)
	}
	b.Release()
	waitFor(t, "both results freed", func() bool {
		u, err := ray.ObjectStoreUsage(ctx)
		return err == nil && u.Used < before.Used+n
	})
}

func TestStream(t *testing.T) {
	ctx := testCtx(t)
	s := CountTo.Remote(ctx, ray.V(100))
	defer s.Close()
	got, err := collect(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int, 100)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Fatalf("stream gave %v", got)
	}
	if _, err := s.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after the end: %v, want io.EOF", err)
	}
}

// TestStreamItemsAsArguments: each item is an object a task can take.
func TestStreamItemsAsArguments(t *testing.T) {
	ctx := testCtx(t)
	s := CountTo.Remote(ctx, ray.V(5))
	defer s.Close()
	var sums []ray.Ref[int]
	for r, err := range s.All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, Add.Remote(ctx, r, ray.V(100)))
	}
	got, err := ray.GetAll(ctx, sums)
	if err != nil || !slices.Equal(got, []int{100, 101, 102, 103, 104}) {
		t.Fatalf("tasks on the items: %v, %v", got, err)
	}
}

// TestStreamErrorInOrder: an error at item k comes after items 0..k-1.
func TestStreamErrorInOrder(t *testing.T) {
	ctx := testCtx(t)
	const k = 7
	s := FailAt.Remote(ctx, ray.V(k))
	defer s.Close()
	got, streamErr := collect(ctx, s)
	if len(got) != k || got[k-1] != k-1 {
		t.Fatalf("items before the error: %v", got)
	}
	var te *ray.TaskError
	if !errors.As(streamErr, &te) || !strings.Contains(streamErr.Error(), "item 7 is broken") {
		t.Fatalf("the error after item %d: %v", k-1, streamErr)
	}
	if _, err := s.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after the error: %v, want io.EOF", err)
	}
}

// TestStreamBackpressure: a generator of 10,000 items consumed slowly
// never gets more than its bound ahead of its consumer.
func TestStreamBackpressure(t *testing.T) {
	ctx := testCtx(t)
	const total, bound = 10000, 16
	tr := tracker{t.TempDir()}
	s := Tracked.Options(ray.Backpressure(bound)).Remote(ctx, ray.V(tr), ray.V(total))
	defer s.Close()
	state := func() trackerState { return tr.state(t) }
	taken := 0
	check := func() trackerState {
		st := state()
		// The generator may have made the item after its last report.
		if st.Made-taken > bound || s.Buffered() > bound {
			t.Fatalf("after %d items taken the generator made %d (%d buffered): more than %d ahead", taken, st.Made, s.Buffered(), bound)
		}
		return st
	}
	for taken < total {
		if taken%2500 == 0 {
			// Let the generator run ahead as far as it may: it stops at
			// the bound.
			deadline := time.Now().Add(20 * time.Second)
			for check().Made < taken+bound {
				if time.Now().After(deadline) {
					t.Fatalf("the generator never reached the bound: made %d, taken %d", state().Made, taken)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		r, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("item %d: %v", taken, err)
		}
		if v, err := r.Get(ctx); err != nil || v != taken {
			t.Fatalf("item %d = %d, %v", taken, v, err)
		}
		r.Release()
		taken++
		if taken%50 == 0 {
			check()
		}
	}
	if _, err := s.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after %d items: %v, want io.EOF", total, err)
	}
	waitFor(t, "the generator's end", func() bool { return state().Stopped == "done" })
}

// TestStreamCloseStopsProducer: Close (and the end of Remote's context)
// stops a generator that would run forever.
func TestStreamCloseStopsProducer(t *testing.T) {
	for _, how := range []string{"Close", "context"} {
		t.Run(how, func(t *testing.T) {
			ctx := testCtx(t)
			tr := tracker{t.TempDir()}
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			s := Tracked.Options(ray.Backpressure(4)).Remote(sctx, ray.V(tr), ray.V(-1))
			for i := range 5 {
				r, err := s.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if v, err := r.Get(ctx); err != nil || v != i {
					t.Fatalf("item %d = %d, %v", i, v, err)
				}
			}
			if how == "Close" {
				s.Close()
				if _, err := s.Next(ctx); !errors.Is(err, ray.ErrStreamClosed) {
					t.Fatalf("Next after Close: %v", err)
				}
			} else {
				cancel()
			}
			var st trackerState
			waitFor(t, "the generator to stop", func() bool {
				st = tr.state(t)
				return st.Stopped != ""
			})
			if !strings.Contains(st.Stopped, "yield: ") || !strings.Contains(st.Stopped, "ray.Cancel") {
				t.Fatalf("the generator stopped with %q, want its yield cancelled", st.Stopped)
			}
			if st.Made > 5+4 {
				t.Fatalf("the generator made %d items for a consumer that took 5 with a bound of 4", st.Made)
			}
		})
	}
}

// TestStreamRetriedAfterWorkerDeath: the generator's worker dies after item
// 3; the retry runs it again from the start and the consumer sees each
// item once, in order.
func TestStreamRetriedAfterWorkerDeath(t *testing.T) {
	ctx := testCtx(t)
	consume := func(s *ray.Stream[int], goFile string) (got []int, streamErr error) {
		for v, err := range s.Values(ctx) {
			if err != nil {
				return got, err
			}
			got = append(got, v)
			if v == 3 {
				if err := os.WriteFile(goFile, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		return got, nil
	}
	plan := crashPlan{N: 10, K: 3, Go: t.TempDir() + "/go"}
	s := CrashMidStream.Options(ray.MaxRetries(2)).Remote(ctx, ray.V(plan))
	defer s.Close()
	got, err := consume(s, plan.Go)
	if err != nil || !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("items across the retry: %v, %v", got, err)
	}
	// Without retries the worker's death ends the stream after the items
	// made before it.
	plan.Go = t.TempDir() + "/go"
	s2 := CrashMidStream.Options(ray.MaxRetries(0)).Remote(ctx, ray.V(plan))
	defer s2.Close()
	got, streamErr := consume(s2, plan.Go)
	if !slices.Equal(got, []int{0, 1, 2, 3}) || !errors.Is(streamErr, ray.ErrWorkerCrashed) {
		t.Fatalf("without retries: items %v, then %v", got, streamErr)
	}
}

// TestActorGeneratorMethod: an actor method streams, in the actor's order.
func TestActorGeneratorMethod(t *testing.T) {
	ctx := testCtx(t)
	c := CounterA.Remote(ctx, ray.V(0))
	s := Upto.On(c).Remote(ctx, ray.V(5))
	defer s.Close()
	got, err := collect(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("actor stream: %v", got)
	}
	if n, err := Inc.On(c).Remote(ctx, ray.V(1)).Get(ctx); err != nil || n != 6 {
		t.Fatalf("a call after the stream: %d, %v", n, err)
	}
}

// TestActorGeneratorRetried: an actor generator method under way when its
// worker dies runs again on the restarted actor (MaxTaskRetries), and the
// caller sees each item once.
func TestActorGeneratorRetried(t *testing.T) {
	ctx := testCtx(t)
	c := CounterA.Options(ray.MaxRestarts(1), ray.MaxTaskRetries(1)).Remote(ctx, ray.V(0))
	plan := crashPlan{N: 10, K: 3, Go: t.TempDir() + "/go"}
	s := UptoOnce.On(c).Remote(ctx, ray.V(plan))
	defer s.Close()
	var got []int
	for v, err := range s.Values(ctx) {
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, v)
		if v == 3 {
			if err := os.WriteFile(plan.Go, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("items across the actor's restart: %v", got)
	}
	if _, err := os.Stat(plan.Go + ".died"); err != nil {
		t.Fatalf("the first instance did not die: %v", err)
	}
}

// TestStreamConsumerLendsItsCPU: a task holding every CPU of the node
// consumes a generator, which needs one: waiting in Next lends the task's
// CPU, as Get does.
func TestStreamConsumerLendsItsCPU(t *testing.T) {
	ctx := testCtx(t)
	got, err := SumStream.Options(ray.CPUs(2)).Remote(ctx, ray.V(100)).Get(ctx)
	if err != nil || got != 4950 {
		t.Fatalf("sum of a stream consumed by a task holding every CPU: %d, %v", got, err)
	}
}

// TestStreamNotPassable: a stream cannot be an argument.
func TestStreamNotPassable(t *testing.T) {
	ctx := testCtx(t)
	s := CountTo.Remote(ctx, ray.V(3))
	defer s.Close()
	_, err := TakeStream.Remote(ctx, ray.V(s)).Get(ctx)
	if !errors.Is(err, ray.ErrStreamNotPassable) {
		t.Fatalf("a stream as an argument: %v", err)
	}
}

// TestStreamBadOptions: a bad bound is reported by the stream.
func TestStreamBadOptions(t *testing.T) {
	ctx := testCtx(t)
	s := CountTo.Options(ray.Backpressure(-5)).Remote(ctx, ray.V(3))
	if _, err := s.Next(ctx); err == nil || !strings.Contains(err.Error(), "Backpressure(-5)") {
		t.Fatalf("Backpressure(-5): %v", err)
	}
}
