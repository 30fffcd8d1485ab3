package collective_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/plugins/collective/collective"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
)

// promptly bounds how long a failure may take to reach every rank; the
// collective timeout in these tests is much longer, so passing means the
// failure was propagated, not waited out.
const promptly = 5 * time.Second

// wantRankFailed checks that err matches ErrRankFailed and names the group
// and the failed rank.
func wantRankFailed(t *testing.T, what string, err error, group string, failed int) {
	t.Helper()
	var ce *transport.CollectiveError
	switch {
	case err == nil:
		t.Errorf("%s: no error, want one matching ErrRankFailed", what)
	case !errors.Is(err, transport.ErrRankFailed):
		t.Errorf("%s: %v, want an error matching ErrRankFailed", what, err)
	case !errors.As(err, &ce) || ce.FailedRank != failed:
		t.Errorf("%s: %v (%#v): want a CollectiveError with FailedRank %d", what, err, ce, failed)
	case !strings.Contains(err.Error(), group) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", failed)):
		t.Errorf("%s: %q does not name group %q and rank %d", what, err, group, failed)
	}
}

func allReduceReqs(t *testing.T, w *world, count int64) []*transport.AllReduceRequest {
	reqs := make([]*transport.AllReduceRequest, len(w.ranks))
	for r := range reqs {
		reqs[r] = &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: newTensor(t, transport.Float32, count)}
	}
	return reqs
}

// TestMismatchedArguments: ranks that disagree fail with ErrBadMetadata,
// at once, on every rank; the group is then broken.
func TestMismatchedArguments(t *testing.T) {
	noLeaks(t)
	cases := []struct {
		name string
		call func(t *testing.T, w *world, r int) error
		// someSucceed: ranks that cannot see the mismatch may complete
		// (in a broadcast, the ranks before the disagreeing one).
		someSucceed bool
	}{
		{"count", func(t *testing.T, w *world, r int) error {
			_, err := w.ranks[r].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: newTensor(t, transport.Float32, 1000+int64(r/2))})
			return err
		}, false},
		{"dtype", func(t *testing.T, w *world, r int) error {
			dt := transport.Float32
			if r == 1 {
				dt = transport.Int32
			}
			_, err := w.ranks[r].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: newTensor(t, dt, 100)})
			return err
		}, false},
		{"shape", func(t *testing.T, w *world, r int) error {
			shape := []int64{10, 10}
			if r == 2 {
				shape = []int64{100}
			}
			_, err := w.ranks[r].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: newTensor(t, transport.Float32, shape...)})
			return err
		}, false},
		{"op", func(t *testing.T, w *world, r int) error {
			op := transport.ReduceSum
			if r == 0 {
				op = transport.ReduceMax
			}
			_, err := w.ranks[r].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: newTensor(t, transport.Float32, 100), Op: op})
			return err
		}, false},
		{"root", func(t *testing.T, w *world, r int) error {
			_, err := w.ranks[r].Broadcast(ctxT(t), &transport.BroadcastRequest{Group: w.name, Rank: r, Tensor: newTensor(t, transport.Float32, 100), Root: min(r, 1)})
			return err
		}, true},
		{"collective", func(t *testing.T, w *world, r int) error {
			if r == 1 {
				_, err := w.ranks[r].Barrier(ctxT(t), &transport.BarrierRequest{Group: w.name, Rank: r})
				return err
			}
			_, err := w.ranks[r].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: newTensor(t, transport.Float32, 100)})
			return err
		}, false},
		{"invalid on one rank", func(t *testing.T, w *world, r int) error {
			tn := newTensor(t, transport.Float32, 100)
			if r == 1 {
				tn.Buffer.Length = 7 // does not match the shape
			}
			_, err := w.ranks[r].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: tn})
			return err
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 3, withConfig(func() collective.Config { c := testConfig(); c.Timeout = time.Minute; return c }()))
			start := time.Now()
			errs := w.try(func(r int) error { return tc.call(t, w, r) })
			if d := time.Since(start); d > promptly {
				t.Errorf("the mismatch took %v to fail every rank", d)
			}
			failed := 0
			for r, err := range errs {
				switch {
				case err == nil && tc.someSucceed:
				case !errors.Is(err, transport.ErrBadMetadata):
					t.Errorf("rank %d: %v, want an error matching ErrBadMetadata", r, err)
				default:
					failed++
				}
			}
			if failed == 0 {
				t.Error("no rank noticed the mismatch")
			}
			// The group is broken: the next call fails at once on every rank.
			for r := range w.ranks {
				_, err := w.ranks[r].Barrier(ctxT(t), &transport.BarrierRequest{Group: w.name, Rank: r})
				if !errors.Is(err, transport.ErrRankFailed) {
					t.Errorf("rank %d: barrier on a broken group: %v, want ErrRankFailed", r, err)
				}
			}
		})
	}
}

// TestCancelOneRank: a rank whose context is cancelled mid-collective gets
// context.Canceled; the others fail promptly with ErrRankFailed naming it,
// also those that are not its ring neighbours (with 5 ranks, rank 3 hears
// of rank 1 only through rank 0's relay); with either all-reduce
// algorithm, over TCP or in-process links (auto: every rank on one
// instance meets in memory).
func TestCancelOneRank(t *testing.T) {
	noLeaks(t)
	for _, algo := range []string{collective.AlgorithmRing, collective.AlgorithmRecursiveDoubling, collective.AlgorithmAuto} {
		for _, lk := range linkKinds[:2] {
			for _, n := range []int{3, 5} {
				t.Run(fmt.Sprintf("%s/links=%s/ranks=%d", algo, lk.name, n), func(t *testing.T) {
					cancelOneRank(t, algoWorld(t, n, algo, lk.shared, lk.inProc, time.Minute))
				})
			}
		}
	}
}

func cancelOneRank(t *testing.T, w *world) {
	n := len(w.ranks)
	reqs := allReduceReqs(t, w, 1<<18)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The last rank never calls, so the others block; rank 1 is cancelled.
	errs := make([]chan error, n-1)
	for r := range n - 1 {
		errs[r] = make(chan error, 1)
		rctx := ctxT(t)
		if r == 1 {
			rctx = ctx
		}
		go func() { _, err := w.ranks[r].AllReduce(rctx, reqs[r]); errs[r] <- err }()
	}
	until(t, "the calling ranks to start", func() bool {
		for r := range n - 1 {
			if !w.insts[r].Running(w.name, r) {
				return false
			}
		}
		return true
	})
	start := time.Now()
	cancel()
	for r := range n - 1 {
		select {
		case err := <-errs[r]:
			if r == 1 {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled rank 1: %v, want context.Canceled", err)
				}
				continue
			}
			wantRankFailed(t, fmt.Sprintf("rank %d", r), err, w.name, 1)
		case <-time.After(promptly):
			t.Fatalf("rank %d did not return after rank 1 was cancelled", r)
		}
	}
	t.Logf("every rank failed within %v", time.Since(start))
	// The last rank arrives late and learns at once.
	_, err := w.ranks[n-1].AllReduce(ctxT(t), reqs[n-1])
	wantRankFailed(t, "late rank", err, w.name, 1)
}

// TestTimeout: when a rank never takes part, the others fail with ErrTimeout
// at the configured timeout (not at their context's deadline).
func TestTimeout(t *testing.T) {
	noLeaks(t)
	cfg := testConfig()
	cfg.Timeout = 300 * time.Millisecond
	w := newWorld(t, 3, withConfig(cfg))
	reqs := allReduceReqs(t, w, 100)
	start := time.Now()
	errs := make(chan error, 2)
	for r := range 2 {
		go func() { _, err := w.ranks[r].AllReduce(ctxT(t), reqs[r]); errs <- err }()
	}
	for range 2 {
		err := <-errs
		// The first to time out breaks the group: it reports ErrTimeout, the
		// other may learn of it first and report ErrRankFailed.
		if !errors.Is(err, transport.ErrTimeout) && !errors.Is(err, transport.ErrRankFailed) {
			t.Errorf("waiting rank: %v, want ErrTimeout or ErrRankFailed", err)
		}
	}
	if d := time.Since(start); d < cfg.Timeout || d > cfg.Timeout+promptly {
		t.Errorf("failed after %v with a timeout of %v", d, cfg.Timeout)
	}
}

// TestCloseRankMidCollective: an instance that closes (its node going away)
// while the others are in an all-reduce waiting for it makes them fail
// promptly with ErrRankFailed naming its rank.
func TestCloseRankMidCollective(t *testing.T) {
	noLeaks(t)
	cfg := testConfig()
	cfg.Timeout = time.Minute
	w := newWorld(t, 3, withConfig(cfg))
	reqs := allReduceReqs(t, w, 1<<20)
	errs := make(chan error, 2)
	for _, r := range []int{0, 2} {
		go func() { _, err := w.ranks[r].AllReduce(ctxT(t), reqs[r]); errs <- err }()
	}
	// Ranks 0 and 2 run their all-reduce, and block: rank 2 needs rank 1's
	// data.
	until(t, "ranks 0 and 2 to start", func() bool {
		return w.insts[0].Running(w.name, 0) && w.insts[2].Running(w.name, 2)
	})
	_ = w.insts[1].Close()
	for range 2 {
		select {
		case err := <-errs:
			wantRankFailed(t, "surviving rank", err, w.name, 1)
		case <-time.After(promptly):
			t.Fatal("a surviving rank did not return")
		}
	}
}

// TestLeftRankEndsNewCollectives: once a rank has left (destroyed its
// member), no new collective can complete. A rank that started one and
// waits for a partner that knows of the leave fails promptly when the
// partner's call is refused, instead of waiting for it until the timeout;
// both name the rank that left. Rank 1 exchanges with rank 0 in both
// algorithms (ring: rank 0 is its previous rank; recursive doubling over 3
// ranks: its partner), and rank 2 is the one that leaves.
func TestLeftRankEndsNewCollectives(t *testing.T) {
	noLeaks(t)
	for _, algo := range []string{collective.AlgorithmRing, collective.AlgorithmRecursiveDoubling} {
		t.Run(algo, func(t *testing.T) {
			cfg := testConfig()
			cfg.Timeout = time.Minute
			cfg.Algorithm = algo
			w := newWorld(t, 3, withConfig(cfg))
			reqs := allReduceReqs(t, w, 1000)
			started := make(chan error, 1)
			go func() { _, err := w.ranks[1].AllReduce(ctxT(t), reqs[1]); started <- err }()
			until(t, "rank 1 to start its all-reduce", func() bool { return w.insts[1].Running(w.name, 1) })
			if _, err := w.ranks[2].DestroyGroup(ctxT(t), &transport.DestroyGroupRequest{Group: w.name, Rank: 2}); err != nil {
				t.Fatal(err)
			}
			until(t, "rank 0 to learn that rank 2 left", func() bool { return w.insts[0].Broken(w.name, 0) })
			_, err := w.ranks[0].AllReduce(ctxT(t), reqs[0])
			wantRankFailed(t, "rank 0, called after rank 2 left", err, w.name, 2)
			select {
			case err := <-started:
				wantRankFailed(t, "rank 1, under way when rank 2 left", err, w.name, 2)
			case <-time.After(promptly):
				t.Fatal("rank 1 still waits for rank 0, whose call was refused")
			}
		})
	}
}

// TestDestroyAndRecreate: a destroyed group's name can be used again, by
// the same and other instances, with a new epoch; the earlier incarnation's
// records never get in the way, even when a rank vanished without
// destroying its member.
func TestDestroyAndRecreate(t *testing.T) {
	noLeaks(t)
	kv := plugin.NewMemoryKV()
	insts := []*collective.Transport{newInstance(t, kv, testConfig()), newInstance(t, kv, testConfig()), newInstance(t, kv, testConfig())}
	name := groupName(t)
	w := &world{t: t, name: name, kv: kv, insts: insts}
	for _, tr := range insts {
		w.ranks = append(w.ranks, tr)
	}
	create := func() string {
		epochs := make([]string, 3)
		w.each(func(r int) error {
			res, err := w.ranks[r].CreateGroup(ctxT(t), &transport.CreateGroupRequest{Group: name, Rank: r, WorldSize: 3})
			if err == nil {
				epochs[r] = res.Epoch
			}
			return err
		})
		allReduceCase(t, w, transport.Int32, transport.ReduceSum, 777)
		return epochs[0]
	}
	e1 := create()
	w.each(func(r int) error {
		_, err := w.ranks[r].DestroyGroup(ctxT(t), &transport.DestroyGroupRequest{Group: name, Rank: r})
		return err
	})
	if keys, _ := kv.Keys(context.Background(), ""); len(keys) != 0 {
		t.Errorf("KV keys left after every rank destroyed the group: %v", keys)
	}
	e2 := create()
	if e1 == e2 {
		t.Errorf("re-created group has the same epoch %s", e1)
	}

	// Rank 0's instance vanishes without destroying its member, leaving a
	// record that names a live instance under a nonce it does not host;
	// the others start first and must wait for the new rank 0, never
	// joining the stale one.
	_ = insts[0].Close() // Close destroys, so put back a stale record by hand
	stale := fmt.Sprintf(`{"v":%d,"nonce":"00","addr":%q,"world":3}`, collective.WireVersion, insts[1].Addr())
	if err := kv.Put(context.Background(), "g/"+name+"/r/0", []byte(stale)); err != nil {
		t.Fatal(err)
	}
	for r := 1; r < 3; r++ {
		if _, err := w.ranks[r].DestroyGroup(ctxT(t), &transport.DestroyGroupRequest{Group: name, Rank: r}); err != nil {
			t.Fatal(err)
		}
	}
	insts[0] = newInstance(t, kv, testConfig())
	w.ranks[0] = insts[0]
	epochs := make([]string, 3)
	w.each(func(r int) error {
		if r == 0 {
			time.Sleep(50 * time.Millisecond) // the others meet the stale record first
		}
		res, err := w.ranks[r].CreateGroup(ctxT(t), &transport.CreateGroupRequest{Group: name, Rank: r, WorldSize: 3})
		if err == nil {
			epochs[r] = res.Epoch
		}
		return err
	})
	if epochs[0] == e2 || epochs[1] != epochs[0] || epochs[2] != epochs[0] {
		t.Errorf("epochs after re-creation: %q (previous %s)", epochs, e2)
	}
	allReduceCase(t, w, transport.Int32, transport.ReduceSum, 777)
	w.destroy()
}

// TestCreateGroupErrors covers the rendezvous' refusals.
func TestCreateGroupErrors(t *testing.T) {
	noLeaks(t)
	kv := plugin.NewMemoryKV()
	a, b := newInstance(t, kv, testConfig()), newInstance(t, kv, testConfig())
	ctx := ctxT(t)

	t.Run("invalid requests", func(t *testing.T) {
		for _, req := range []*transport.CreateGroupRequest{
			nil,
			{Group: "", WorldSize: 1},
			{Group: "g", WorldSize: 0},
			{Group: "g", WorldSize: transport.MaxWorldSize + 1},
			{Group: "g", Rank: 2, WorldSize: 2},
			{Group: "g", Rank: -1, WorldSize: 2},
			{Group: "g", WorldSize: 2, Members: []string{"x"}},
			{Group: "g", WorldSize: 2, Members: []string{"x", "x"}},
		} {
			_, err := a.CreateGroup(ctx, req)
			if !errors.Is(err, transport.ErrBadMetadata) {
				t.Errorf("CreateGroup(%+v): %v, want ErrBadMetadata", req, err)
			}
		}
	})

	t.Run("world size mismatch", func(t *testing.T) {
		name := groupName(t)
		errs := make(chan error, 2)
		go func() {
			_, err := a.CreateGroup(ctx, &transport.CreateGroupRequest{Group: name, Rank: 0, WorldSize: 2, Timeout: time.Minute})
			errs <- err
		}()
		go func() {
			_, err := b.CreateGroup(ctx, &transport.CreateGroupRequest{Group: name, Rank: 1, WorldSize: 3, Timeout: time.Minute})
			errs <- err
		}()
		for range 2 {
			select {
			case err := <-errs:
				if !errors.Is(err, transport.ErrBadMetadata) {
					t.Errorf("CreateGroup with mismatched world sizes: %v, want ErrBadMetadata", err)
				}
			case <-time.After(promptly):
				t.Fatal("a rank with a mismatched world size did not fail promptly")
			}
		}
	})

	t.Run("exists", func(t *testing.T) {
		name := groupName(t)
		if _, err := a.CreateGroup(ctx, &transport.CreateGroupRequest{Group: name, WorldSize: 1}); err != nil {
			t.Fatal(err)
		}
		_, err := a.CreateGroup(ctx, &transport.CreateGroupRequest{Group: name, WorldSize: 1})
		if !errors.Is(err, transport.ErrGroupExists) {
			t.Errorf("second CreateGroup: %v, want ErrGroupExists", err)
		}
		if _, err := a.DestroyGroup(ctx, &transport.DestroyGroupRequest{Group: name}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("missing rank", func(t *testing.T) {
		for rank := range 2 { // rank 0 waiting for joins, rank 1 waiting for rank 0
			start := time.Now()
			_, err := a.CreateGroup(ctx, &transport.CreateGroupRequest{Group: groupName(t), Rank: rank, WorldSize: 2, Timeout: 200 * time.Millisecond})
			if !errors.Is(err, transport.ErrTimeout) {
				t.Errorf("rank %d alone: %v, want ErrTimeout", rank, err)
			}
			if d := time.Since(start); d > promptly {
				t.Errorf("rank %d alone: failed after %v, timeout 200ms", rank, d)
			}
		}
	})

	t.Run("destroy while joining", func(t *testing.T) {
		name := groupName(t)
		errc := make(chan error, 1)
		go func() {
			_, err := a.CreateGroup(ctx, &transport.CreateGroupRequest{Group: name, Rank: 1, WorldSize: 2, Timeout: time.Minute})
			errc <- err
		}()
		deadline := time.Now().Add(promptly)
		for a.Stats().Groups == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // polling for the member to exist
		}
		if _, err := a.DestroyGroup(ctx, &transport.DestroyGroupRequest{Group: name, Rank: 1}); err != nil {
			t.Errorf("DestroyGroup while joining: %v", err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, transport.ErrGroupNotFound) {
				t.Errorf("CreateGroup destroyed while joining: %v, want ErrGroupNotFound", err)
			}
		case <-time.After(promptly):
			t.Fatal("CreateGroup did not return after DestroyGroup")
		}
	})

	t.Run("unknown group", func(t *testing.T) {
		_, err := a.DestroyGroup(ctx, &transport.DestroyGroupRequest{Group: "nope"})
		if !errors.Is(err, transport.ErrGroupNotFound) {
			t.Errorf("DestroyGroup of an unknown group: %v", err)
		}
		_, err = a.AllReduce(ctx, &transport.AllReduceRequest{Group: "nope", Tensor: newTensor(t, transport.Float32, 1)})
		var ce *transport.CollectiveError
		if !errors.Is(err, transport.ErrGroupNotFound) || !errors.As(err, &ce) || ce.Op != transport.OpAllReduce || ce.Group != "nope" {
			t.Errorf("AllReduce on an unknown group: %v, want ErrGroupNotFound as a CollectiveError", err)
		}
	})

	if s := a.Stats(); s.Groups != 0 || s.OpenConns != 0 {
		t.Errorf("instance holds %+v after failed rendezvous", s)
	}
	if keys, _ := kv.Keys(ctx, ""); len(keys) != 0 {
		t.Errorf("KV keys left after failed rendezvous: %v", keys)
	}
}

// TestUnsupported: tensors on a device and dtypes without arithmetic.
func TestUnsupported(t *testing.T) {
	noLeaks(t)
	w := newWorld(t, 1)
	tn := newTensor(t, transport.Float32, 4)
	tn.Device = "cuda:0"
	_, err := w.ranks[0].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: w.name, Tensor: tn})
	if !errors.Is(err, transport.ErrNotSupported) {
		t.Errorf("AllReduce of a cuda tensor: %v, want ErrNotSupported", err)
	}
}
