package collective_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/ray/collective"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// The tests run an embedded node whose config loads the real collective
// plugin binary, and actors (this test binary re-executed as workers)
// that make collective calls through the package under test.

const backend = "collective"

// testPrefix names the segments the ranks allocate, so the test can check
// that none is left.
const testPrefix = shmem.Prefix + "colltest-"

func TestMain(m *testing.M) {
	if ray.IsWorker() {
		ray.Init(context.Background()) // serves calls; never returns
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gct")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if _, err := host.BuildPlugin(dir, "github.com/goray-dev/goray/plugins/collective", "goray-transport-collective"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := filepath.Join(dir, "node.hcl")
	body := fmt.Sprintf("head {}\nplugin_dir = %q\nplugin \"transport\" %q {\n  config {\n    timeout = \"20s\"\n  }\n}\n", dir, backend)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	rt, err := ray.Init(ctx, ray.ConfigFile(cfg), ray.WithLogger(hclog.NewNullLogger()))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting goray:", err)
		return 1
	}
	code := m.Run()
	_ = rt.Shutdown(context.Background())
	if left, _ := shmem.List(testPrefix); len(left) > 0 && code == 0 {
		fmt.Fprintln(os.Stderr, "segments left behind:", left)
		code = 1
	}
	return code
}

// Req is one scripted step a rank runs.
type Req struct {
	Kind  string // allreduce, broadcast, allgather, reducescatter, barrier, rank, destroy, idle
	Group string
	DType transport.DType
	In    []float64
	Op    collective.Op
	Root  int
	// Out is the output's element count (allgather, reducescatter).
	Out int
}

// Resp is what a step returned; errors are classified here because
// collective sentinels do not cross the task boundary as themselves.
type Resp struct {
	Out                                               []float64
	Rank, World                                       int
	Err                                               string
	RankFailed, Timeout, NotFound, NotMember, BadArgs bool
	FailedRank                                        int
	Elapsed                                           time.Duration
}

// Ranker is the test's member actor.
type Ranker struct{}

// NewRanker is Ranker's constructor.
func NewRanker(ctx context.Context) (*Ranker, error) { return &Ranker{}, nil }

// Do runs one step.
func (r *Ranker) Do(ctx context.Context, q Req) (Resp, error) {
	start := time.Now()
	out, err := r.do(ctx, q)
	res := Resp{Out: out, FailedRank: -1, Elapsed: time.Since(start)}
	if q.Kind == "rank" {
		res.Rank, _ = collective.Rank(ctx, q.Group)
		res.World, _ = collective.WorldSize(ctx, q.Group)
	}
	if err != nil {
		res.Err = err.Error()
		res.RankFailed = errors.Is(err, collective.ErrRankFailed)
		res.Timeout = errors.Is(err, collective.ErrTimeout)
		res.NotFound = errors.Is(err, collective.ErrGroupNotFound)
		res.NotMember = errors.Is(err, collective.ErrNotMember)
		res.BadArgs = errors.Is(err, collective.ErrBadArgument)
		var ce *transport.CollectiveError
		if errors.As(err, &ce) {
			res.FailedRank = ce.FailedRank
		}
	}
	return res, nil
}

func (r *Ranker) do(ctx context.Context, q Req) ([]float64, error) {
	switch q.Kind {
	case "barrier":
		return nil, collective.Barrier(ctx, q.Group)
	case "destroy":
		return nil, collective.DestroyGroup(ctx, q.Group)
	case "rank", "idle":
		return nil, nil
	}
	in, err := tensorOf(ctx, q.DType, q.In)
	if err != nil {
		return nil, err
	}
	defer in.Free()
	switch q.Kind {
	case "allreduce":
		err = collective.AllReduce(ctx, q.Group, in, q.Op)
	case "broadcast":
		err = collective.Broadcast(ctx, q.Group, in, q.Root)
	case "allgather", "reducescatter":
		out, terr := transport.NewTensorIn(testPrefix, q.DType, int64(q.Out))
		if terr != nil {
			return nil, terr
		}
		defer out.Free()
		if q.Kind == "allgather" {
			err = collective.AllGather(ctx, q.Group, in, out)
		} else {
			err = collective.ReduceScatter(ctx, q.Group, in, out, q.Op)
		}
		if err != nil {
			return nil, err
		}
		return valuesOf(ctx, out)
	default:
		return nil, fmt.Errorf("unknown step %q", q.Kind)
	}
	if err != nil {
		return nil, err
	}
	return valuesOf(ctx, in)
}

var (
	RankerActor = ray.Actor0(NewRanker)
	Do          = ray.Method1((*Ranker).Do)
)

func tensorOf(ctx context.Context, dt transport.DType, vs []float64) (transport.Tensor, error) {
	t, err := transport.NewTensorIn(testPrefix, dt, int64(len(vs)))
	if err != nil {
		return t, err
	}
	b, err := t.Bytes(ctx)
	if err != nil {
		_ = t.Free()
		return t, err
	}
	defer t.Release()
	for i, v := range vs {
		switch dt {
		case transport.Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		case transport.Float64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
		case transport.Int64:
			binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
		case transport.Int32:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v)))
		default:
			_ = t.Free()
			return t, fmt.Errorf("dtype %s not in the test", dt)
		}
	}
	return t, nil
}

func valuesOf(ctx context.Context, t transport.Tensor) ([]float64, error) {
	b, err := t.Bytes(ctx)
	if err != nil {
		return nil, err
	}
	defer t.Release()
	n := int(transport.NumElements(t.Shape))
	out := make([]float64, n)
	for i := range out {
		switch t.DType {
		case transport.Float32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		case transport.Float64:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		case transport.Int64:
			out[i] = float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
		case transport.Int32:
			out[i] = float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
	}
	return out, nil
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newRankers creates n member actors declaring the backend.
func newRankers(t *testing.T, ctx context.Context, n int) []ray.ActorHandle[Ranker] {
	t.Helper()
	as := make([]ray.ActorHandle[Ranker], n)
	for i := range as {
		as[i] = RankerActor.Options(ray.Transports(backend)).Remote(ctx)
	}
	for _, a := range as {
		if err := a.Ready(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, a := range as {
			_ = a.Kill(context.Background())
		}
	})
	return as
}

// all runs one step per actor concurrently (collectives need every rank)
// and returns the responses in actor order.
func all(t *testing.T, ctx context.Context, as []ray.ActorHandle[Ranker], step func(i int) Req) []Resp {
	t.Helper()
	refs := make([]ray.Ref[Resp], len(as))
	for i, a := range as {
		refs[i] = Do.On(a).Remote(ctx, ray.V(step(i)))
	}
	out := make([]Resp, len(as))
	for i, r := range refs {
		v, err := r.Get(ctx)
		if err != nil {
			t.Fatalf("actor %d: %v", i, err)
		}
		out[i] = v
	}
	return out
}

func noErrors(t *testing.T, what string, rs []Resp) {
	t.Helper()
	failed := false
	for i, r := range rs {
		if r.Err != "" {
			t.Errorf("%s: actor %d: %s", what, i, r.Err)
			failed = true
		}
	}
	if failed {
		t.FailNow()
	}
}

func ramp(n int, scale, off float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = scale*float64(i) + off
	}
	return out
}

func TestCollectivesAmongActors(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	as := newRankers(t, ctx, 3)
	g, err := collective.CreateGroup(ctx, "g1", backend, collective.Members(as...))
	if err != nil {
		t.Fatal(err)
	}
	defer collective.DestroyGroup(context.Background(), "g1")
	if g.WorldSize() != 3 || g.Rank(as[2].ID()) != 2 || g.Backend != backend {
		t.Fatalf("group %+v", g)
	}
	if _, err := collective.CreateGroup(ctx, "g1", backend, collective.Members(as...)); !errors.Is(err, collective.ErrGroupExists) {
		t.Fatalf("second CreateGroup: %v, want ErrGroupExists", err)
	}

	rs := all(t, ctx, as, func(int) Req { return Req{Kind: "rank", Group: "g1"} })
	for i, r := range rs {
		if r.Rank != i || r.World != 3 {
			t.Fatalf("actor %d: rank %d of %d", i, r.Rank, r.World)
		}
	}

	// All-reduce, 7 elements over 3 ranks (not divisible), every op on
	// float32 and int64 (rank r contributes ramp*(r+1)+r).
	const n = 7
	for _, dt := range []transport.DType{transport.Float32, transport.Int64, transport.Float64, transport.Int32} {
		for _, op := range []collective.Op{collective.Sum, collective.Product, collective.Min, collective.Max} {
			rs := all(t, ctx, as, func(r int) Req {
				return Req{Kind: "allreduce", Group: "g1", DType: dt, In: ramp(n, float64(r+1), float64(r)), Op: op}
			})
			noErrors(t, fmt.Sprintf("allreduce %s %s", op, dt), rs)
			for i := 0; i < n; i++ {
				var want float64
				for r := 0; r < 3; r++ {
					v := float64(r+1)*float64(i) + float64(r)
					switch {
					case r == 0:
						want = v
					case op == collective.Sum:
						want += v
					case op == collective.Product:
						want *= v
					case op == collective.Min:
						want = min(want, v)
					case op == collective.Max:
						want = max(want, v)
					}
				}
				for r, res := range rs {
					if res.Out[i] != want {
						t.Fatalf("allreduce %s %s: rank %d element %d = %v, want %v", op, dt, r, i, res.Out[i], want)
					}
				}
			}
		}
	}

	// Broadcast from rank 2.
	rs = all(t, ctx, as, func(r int) Req {
		return Req{Kind: "broadcast", Group: "g1", DType: transport.Float32, In: ramp(5, float64(r), 1), Root: 2}
	})
	noErrors(t, "broadcast", rs)
	for r, res := range rs {
		if !slices.Equal(res.Out, ramp(5, 2, 1)) {
			t.Fatalf("broadcast: rank %d has %v", r, res.Out)
		}
	}

	// All-gather: every rank ends with [rank 0's, rank 1's, rank 2's].
	rs = all(t, ctx, as, func(r int) Req {
		return Req{Kind: "allgather", Group: "g1", DType: transport.Int64, In: ramp(4, 0, float64(10*r)), Out: 12}
	})
	noErrors(t, "allgather", rs)
	var want []float64
	for r := 0; r < 3; r++ {
		want = append(want, ramp(4, 0, float64(10*r))...)
	}
	for r, res := range rs {
		if !slices.Equal(res.Out, want) {
			t.Fatalf("allgather: rank %d has %v, want %v", r, res.Out, want)
		}
	}

	// Reduce-scatter of 8 elements over 3 ranks: parts of 3, 3 and 2.
	rs = all(t, ctx, as, func(r int) Req {
		count, _ := collective.PartOf(8, 3, r)
		return Req{Kind: "reducescatter", Group: "g1", DType: transport.Float64, In: ramp(8, 1, float64(r)), Op: collective.Sum, Out: int(count)}
	})
	noErrors(t, "reducescatter", rs)
	for r, res := range rs {
		count, start := collective.PartOf(8, 3, r)
		if len(res.Out) != int(count) {
			t.Fatalf("reducescatter: rank %d got %d elements, want %d", r, len(res.Out), count)
		}
		for i, v := range res.Out {
			e := float64(start) + float64(i)
			if want := 3*e + 0 + 1 + 2; v != want {
				t.Fatalf("reducescatter: rank %d element %d = %v, want %v", r, i, v, want)
			}
		}
	}

	noErrors(t, "barrier", all(t, ctx, as, func(int) Req { return Req{Kind: "barrier", Group: "g1"} }))

	// Arguments refused before they reach the backend do not break the
	// group.
	rs = all(t, ctx, as[:1], func(int) Req {
		return Req{Kind: "broadcast", Group: "g1", DType: transport.Float32, In: []float64{1}, Root: 3}
	})
	if !rs[0].BadArgs {
		t.Fatalf("broadcast from rank 3 of 3: %+v", rs[0])
	}
	noErrors(t, "barrier after a refused call", all(t, ctx, as, func(int) Req { return Req{Kind: "barrier", Group: "g1"} }))
}

func TestDestroyAndRecreate(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	as := newRankers(t, ctx, 3)
	if _, err := collective.CreateGroup(ctx, "g2", backend, collective.Members(as[:2]...)); err != nil {
		t.Fatal(err)
	}
	rs := all(t, ctx, as[:2], func(r int) Req {
		return Req{Kind: "allreduce", Group: "g2", DType: transport.Float32, In: []float64{float64(r + 1)}}
	})
	noErrors(t, "first allreduce", rs)
	if rs[0].Out[0] != 3 {
		t.Fatalf("sum %v", rs[0].Out)
	}
	// A non-member cannot take part.
	if r := all(t, ctx, as[2:], func(int) Req { return Req{Kind: "barrier", Group: "g2"} })[0]; !r.NotMember {
		t.Fatalf("barrier of a non-member: %+v", r)
	}

	// Destroyed from the driver: the members' next call finds nothing.
	if err := collective.DestroyGroup(ctx, "g2"); err != nil {
		t.Fatal(err)
	}
	if err := collective.DestroyGroup(ctx, "g2"); err != nil {
		t.Fatalf("destroying twice: %v", err)
	}
	if _, err := collective.GetGroup(ctx, "g2"); !errors.Is(err, collective.ErrGroupNotFound) {
		t.Fatalf("GetGroup after destroy: %v", err)
	}
	if r := all(t, ctx, as[:1], func(int) Req { return Req{Kind: "barrier", Group: "g2"} })[0]; !r.NotFound {
		t.Fatalf("barrier after destroy: %+v", r)
	}

	// Re-created with other members in another order: the members that
	// held the old group join the new one at their next call.
	order := []ray.ActorHandle[Ranker]{as[2], as[1], as[0]}
	if _, err := collective.CreateGroup(ctx, "g2", backend, collective.Members(order...)); err != nil {
		t.Fatal(err)
	}
	rs = all(t, ctx, order, func(r int) Req {
		return Req{Kind: "allgather", Group: "g2", DType: transport.Int32, In: []float64{float64(r)}, Out: 3}
	})
	noErrors(t, "allgather after re-create", rs)
	for _, res := range rs {
		if !slices.Equal(res.Out, []float64{0, 1, 2}) {
			t.Fatalf("allgather after re-create: %v", res.Out)
		}
	}
	// Every member destroys the group itself (Ray's pattern).
	noErrors(t, "destroy in members", all(t, ctx, order, func(int) Req { return Req{Kind: "destroy", Group: "g2"} }))
	if _, err := collective.GetGroup(ctx, "g2"); !errors.Is(err, collective.ErrGroupNotFound) {
		t.Fatalf("GetGroup after the members destroyed it: %v", err)
	}
}

func TestRankFailure(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	as := newRankers(t, ctx, 3)
	const timeout = 2 * time.Second
	if _, err := collective.CreateGroup(ctx, "g3", backend, collective.Members(as...), collective.Timeout(timeout)); err != nil {
		t.Fatal(err)
	}
	defer collective.DestroyGroup(context.Background(), "g3")
	noErrors(t, "barrier", all(t, ctx, as, func(int) Req { return Req{Kind: "barrier", Group: "g3"} }))

	// Rank 2 never joins the all-reduce: the call that runs out of time
	// breaks the group, and the other rank fails at once.
	rs := all(t, ctx, as, func(r int) Req {
		if r == 2 {
			return Req{Kind: "idle"}
		}
		return Req{Kind: "allreduce", Group: "g3", DType: transport.Float32, In: []float64{1, 2, 3}}
	})
	for r, res := range rs[:2] {
		if !res.Timeout && !res.RankFailed {
			t.Fatalf("rank %d: %+v, want ErrTimeout or ErrRankFailed", r, res)
		}
		// Ended by the group's timeout, not by anything much longer (the
		// bound leaves room for a loaded machine: this is no speed test).
		if res.Elapsed > timeout+15*time.Second {
			t.Fatalf("rank %d failed after %v (timeout %v)", r, res.Elapsed, timeout)
		}
	}
	if !rs[0].Timeout && !rs[1].Timeout {
		t.Fatalf("no rank timed out: %+v", rs[:2])
	}
	// Later calls fail at once: the group is broken.
	rs = all(t, ctx, as[:1], func(int) Req { return Req{Kind: "barrier", Group: "g3"} })
	if !rs[0].RankFailed || rs[0].Elapsed > timeout || !strings.Contains(rs[0].Err, "broken") {
		t.Fatalf("call on a broken group: %+v", rs[0])
	}

	// Destroyed and created again, with a fresh actor for rank 2.
	if err := collective.DestroyGroup(ctx, "g3"); err != nil {
		t.Fatal(err)
	}
	fresh := newRankers(t, ctx, 1)
	members := []ray.ActorHandle[Ranker]{as[0], as[1], fresh[0]}
	if _, err := collective.CreateGroup(ctx, "g3", backend, collective.Members(members...), collective.Timeout(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	rs = all(t, ctx, members, func(r int) Req {
		return Req{Kind: "allreduce", Group: "g3", DType: transport.Float32, In: []float64{float64(r)}, Op: collective.Max}
	})
	noErrors(t, "allreduce after re-create", rs)
	for _, res := range rs {
		if res.Out[0] != 2 {
			t.Fatalf("max after re-create: %v", res.Out)
		}
	}
}

func TestOutsideActorsAndBadArguments(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	tn, err := transport.NewTensorIn(testPrefix, transport.Float32, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Free()
	if err := collective.AllReduce(ctx, "g4", tn, collective.Sum); !errors.Is(err, collective.ErrNotMember) {
		t.Fatalf("AllReduce from the driver: %v, want ErrNotMember", err)
	}
	if err := collective.AllReduce(ctx, "g4", tn, "mean"); !errors.Is(err, collective.ErrBadArgument) {
		t.Fatalf("unknown op: %v", err)
	}
	for _, name := range []string{"", "a/b", strings.Repeat("x", collective.MaxNameLen+1)} {
		if _, err := collective.CreateGroup(ctx, name, backend, nil); !errors.Is(err, collective.ErrBadArgument) {
			t.Fatalf("CreateGroup(%q): %v", name, err)
		}
	}
	as := newRankers(t, ctx, 1)
	if _, err := collective.CreateGroup(ctx, "g4", backend, nil); !errors.Is(err, collective.ErrBadArgument) {
		t.Fatalf("no members: %v", err)
	}
	if _, err := collective.CreateGroup(ctx, "g4", backend, collective.Members(as[0], as[0])); !errors.Is(err, collective.ErrBadArgument) {
		t.Fatalf("duplicate member: %v", err)
	}
	if _, err := collective.CreateGroup(ctx, "g4", "", collective.Members(as...)); !errors.Is(err, collective.ErrBadArgument) {
		t.Fatalf("no backend: %v", err)
	}
	if r := all(t, ctx, as, func(int) Req { return Req{Kind: "barrier", Group: "nope"} })[0]; !r.NotFound {
		t.Fatalf("undeclared group: %+v", r)
	}
}
