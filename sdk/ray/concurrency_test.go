package ray_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/ray"
)

// GroupSvc is an actor with concurrency groups: "compute" (limit 2) runs
// Crunch, "health" (limit 1) runs Health and Release, and the default
// group (limit 1) runs Block and Seq.
type GroupSvc struct {
	mu              sync.Mutex
	crunching, most int
	seq             []int
	release         chan struct{} // closed by Release: Crunch and Block return
}

// SvcHealth is what Health reports.
type SvcHealth struct {
	Crunching, Most int
}

func NewGroupSvc(ctx context.Context) (*GroupSvc, error) {
	return &GroupSvc{release: make(chan struct{})}, nil
}

// wait holds a call until Release (or, as a safety net, for a minute).
func (s *GroupSvc) wait(ctx context.Context) error {
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(waitfor.Generous):
		return errors.New("never released")
	}
}

// Crunch counts itself running until released, and returns n*n.
func (s *GroupSvc) Crunch(ctx context.Context, n int) (int, error) {
	s.mu.Lock()
	s.crunching++
	s.most = max(s.most, s.crunching)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.crunching--
		s.mu.Unlock()
	}()
	return n * n, s.wait(ctx)
}

// Health reports how many Crunch calls run, and the most that ever ran at
// once.
func (s *GroupSvc) Health(ctx context.Context) (SvcHealth, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SvcHealth{Crunching: s.crunching, Most: s.most}, nil
}

// Release lets every held call return.
func (s *GroupSvc) Release(ctx context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.release:
	default:
		close(s.release)
	}
	return 0, nil
}

// Block holds its group until released.
func (s *GroupSvc) Block(ctx context.Context) (int, error) { return 0, s.wait(ctx) }

// Seq records i and returns every number recorded so far.
func (s *GroupSvc) Seq(ctx context.Context, i int) ([]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq = append(s.seq, i)
	return append([]int(nil), s.seq...), nil
}

// healthVia calls Health from another process with the group named by
// the call (a borrower of the handle).
func healthVia(ctx context.Context, h ray.ActorHandle[GroupSvc], group string) (SvcHealth, error) {
	return SvcHealthM.On(h).Options(ray.InGroup(group)).Remote(ctx).Get(ctx)
}

var (
	GroupSvcA  = ray.Actor0(NewGroupSvc, ray.ConcurrencyGroup("compute", 2), ray.ConcurrencyGroup("health", 1))
	Crunch     = ray.Method1((*GroupSvc).Crunch, ray.InGroup("compute"))
	SvcHealthM = ray.Method0((*GroupSvc).Health, ray.InGroup("health"))
	SvcRelease = ray.Method0((*GroupSvc).Release, ray.InGroup("health"))
	SvcBlock   = ray.Method0((*GroupSvc).Block)
	SvcSeq     = ray.Method1((*GroupSvc).Seq)
	HealthVia  = ray.Task2(healthVia)
)

// TestConcurrencyGroups: with the compute group saturated (2 calls
// running, 2 queued), the health method answers in its own group; compute
// never runs more than its limit; released, every call returns.
func TestConcurrencyGroups(t *testing.T) {
	ctx := testCtx(t)
	h, err := GroupSvcA.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Kill(ctx)
	var crunches []ray.Ref[int]
	for i := range 4 {
		crunches = append(crunches, Crunch.On(h).Remote(ctx, ray.V(i)))
	}
	// Each Health call answers while compute is saturated; the poll ends
	// once both compute slots are taken.
	waitFor(t, "2 Crunch calls running", func() bool {
		st, err := SvcHealthM.On(h).Remote(ctx).Get(ctx)
		if err != nil {
			t.Fatalf("health while compute is saturated: %v", err)
		}
		return st.Crunching == 2
	})
	// The default group is free too.
	if seq, err := SvcSeq.On(h).Remote(ctx, ray.V(1)).Get(ctx); err != nil || len(seq) != 1 {
		t.Fatalf("a default-group call while compute is saturated: %v, %v", seq, err)
	}
	if _, err := SvcRelease.On(h).Remote(ctx).Get(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := ray.GetAll(ctx, crunches)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != i*i {
			t.Errorf("Crunch(%d) = %d, want %d", i, v, i*i)
		}
	}
	st, err := SvcHealthM.On(h).Remote(ctx).Get(ctx)
	if err != nil || st.Most != 2 || st.Crunching != 0 {
		t.Fatalf("after release: %+v, %v; want at most 2 Crunch calls ever at once (compute's limit), none now", st, err)
	}
}

// TestCallInGroup: a call's InGroup moves it out of its method's group: a
// default-group method called in "health" answers while the default group
// is held.
func TestCallInGroup(t *testing.T) {
	ctx := testCtx(t)
	h, err := GroupSvcA.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Kill(ctx)
	blocked := SvcBlock.On(h).Remote(ctx)
	// Seq runs in the default group, held by Block: called in "health",
	// it answers now.
	if seq, err := SvcSeq.On(h).Options(ray.InGroup("health")).Remote(ctx, ray.V(7)).Get(ctx); err != nil || len(seq) != 1 || seq[0] != 7 {
		t.Fatalf("Seq in health while the default group is held: %v, %v", seq, err)
	}
	queued := SvcSeq.On(h).Remote(ctx, ray.V(8)) // waits for Block
	if _, err := SvcRelease.On(h).Remote(ctx).Get(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := blocked.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if seq, err := queued.Get(ctx); err != nil || len(seq) != 2 {
		t.Fatalf("Seq queued behind Block: %v, %v", seq, err)
	}
}

// TestDefaultGroupOrder: an actor with groups runs its default-group calls
// one at a time, in the order they were made, as before groups existed.
func TestDefaultGroupOrder(t *testing.T) {
	ctx := testCtx(t)
	h, err := GroupSvcA.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Kill(ctx)
	const calls = 50
	var last ray.Ref[[]int]
	for i := range calls {
		last = SvcSeq.On(h).Remote(ctx, ray.V(i))
	}
	seq, err := last.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range seq {
		if v != i {
			t.Fatalf("default-group calls ran out of order: %v", seq)
		}
	}
	if len(seq) != calls {
		t.Fatalf("%d calls ran before the last, want %d", len(seq), calls)
	}
}

// TestUnknownConcurrencyGroup: a call naming a group the actor does not
// declare fails with an *UnknownConcurrencyGroupError naming the group and
// the actor's groups, from the creator and from another process; the
// actor goes on serving.
func TestUnknownConcurrencyGroup(t *testing.T) {
	ctx := testCtx(t)
	h, err := GroupSvcA.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Kill(ctx)
	_, err = SvcHealthM.On(h).Options(ray.InGroup("gpu")).Remote(ctx).Get(ctx)
	var ue *ray.UnknownConcurrencyGroupError
	if !errors.Is(err, ray.ErrUnknownConcurrencyGroup) || !errors.As(err, &ue) || ue.Group != "gpu" || len(ue.Groups) != 2 || ue.Groups["compute"] != 2 {
		t.Fatalf("call in an undeclared group: %v; want an *UnknownConcurrencyGroupError for gpu with the actor's 2 groups", err)
	}
	want := []string{`concurrency group "gpu"`, `"compute" (limit 2), "health" (limit 1) and the default group`}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	// From a worker that borrowed the handle.
	_, err = HealthVia.Remote(ctx, ray.V(h), ray.V("gpu")).Get(ctx)
	if !errors.Is(err, ray.ErrUnknownConcurrencyGroup) {
		t.Fatalf("call in an undeclared group from another process: %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if _, err := HealthVia.Remote(ctx, ray.V(h), ray.V("compute")).Get(ctx); err != nil {
		t.Fatalf("call in a declared group from another process: %v", err)
	}
}

// TestConcurrencyGroupOptionsChecked: an unnamed group, a name or a limit
// out of bounds, or too many groups keep the actor from being created,
// with an error naming the problem.
func TestConcurrencyGroupOptionsChecked(t *testing.T) {
	ctx := testCtx(t)
	var many []ray.Option // with GroupSvcA's 2, one too many
	for i := range ray.MaxConcurrencyGroups - 1 {
		many = append(many, ray.ConcurrencyGroup(fmt.Sprint("g", i), 1))
	}
	for _, tc := range []struct {
		opts []ray.Option
		want string
	}{
		{[]ray.Option{ray.ConcurrencyGroup("", 2)}, `ConcurrencyGroup("", 2): a group needs a name`},
		{[]ray.Option{ray.ConcurrencyGroup("io", 0)}, `ConcurrencyGroup("io", 0): the limit must be from 1 to 1048576`},
		{[]ray.Option{ray.ConcurrencyGroup("io", ray.MaxGroupLimit+1)}, `ConcurrencyGroup("io", 1048577): the limit must be from 1 to 1048576`},
		{[]ray.Option{ray.ConcurrencyGroup(strings.Repeat("g", 257), 1)}, `the name has 257 bytes, more than the 256 allowed`},
		{many, `257 concurrency groups, more than the 256 allowed`},
	} {
		h, err := GroupSvcA.Options(tc.opts...).New(ctx)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v; want an error saying %s", err, tc.want)
		}
		if err := h.Ready(ctx); !errors.Is(err, ray.ErrActorDied) {
			t.Errorf("Ready of an actor whose options say %s: %v, want ErrActorDied", tc.want, err)
		}
	}
}
