package collective_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/goray-dev/goray/plugins/collective/collective"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
)

var (
	reduceDTypes = []transport.DType{transport.Float32, transport.Float64, transport.Int32, transport.Int64,
		transport.Int8, transport.Uint8, transport.Bool, transport.BFloat16}
	reduceOps = []transport.ReduceOp{transport.ReduceSum, transport.ReduceProduct, transport.ReduceMin, transport.ReduceMax}
)

// sizes returns the element counts tested with n ranks: nothing, one
// element, fewer elements than ranks, a count not divisible by n, and more
// than 1 Mi (several chunks per step).
func sizes(n int) []int64 {
	return slices.Compact([]int64{0, 1, int64(n - 1), int64(1000*n + 1), largeCount})
}

func TestAllReduce(t *testing.T) {
	noLeaks(t)
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			w := newWorld(t, n)
			for _, dt := range reduceDTypes {
				for _, op := range reduceOps {
					for _, size := range sizes(n) {
						if size == largeCount && op != transport.ReduceSum && dt != transport.Float32 {
							continue // large sizes: every op on float32, every dtype with sum
						}
						t.Run(fmt.Sprintf("%s/%s/%d", dt, op, size), func(t *testing.T) {
							allReduceCase(t, w, dt, op, size)
						})
					}
				}
			}
		})
	}
}

func allReduceCase(t *testing.T, w *world, dt transport.DType, op transport.ReduceOp, size int64) {
	n := len(w.ranks)
	tensors := make([]transport.Tensor, n)
	for r := range n {
		tensors[r] = newTensor(t, dt, size)
		fill(t, tensors[r], func(i int64) float64 { return value(dt, r, i) })
	}
	w.each(func(r int) error {
		_, err := w.ranks[r].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: tensors[r], Op: op})
		return err
	})
	for r := range n {
		check(t, fmt.Sprintf("rank %d", r), tensors[r], func(i int64) float64 { return reduceAll(dt, op, n, i) })
	}
}

// TestAllReduceShapes checks that shapes other than vectors and tensors at
// unaligned offsets reduce correctly, and that an empty Op means sum.
func TestAllReduceShapes(t *testing.T) {
	noLeaks(t)
	w := newWorld(t, 3)
	// A tensor at offset 3 of its segment: float64 elements not aligned.
	tensors := make([]transport.Tensor, 3)
	for r := range tensors {
		seg := newTensor(t, transport.Uint8, 3+8*2*3*5)
		tensors[r] = transport.Tensor{DType: transport.Float64, Shape: []int64{2, 3, 5}, Device: transport.CPU,
			Buffer: transport.Buffer{Segment: seg.Buffer.Segment, Offset: 3, Length: 8 * 30}}
		fill(t, tensors[r], func(i int64) float64 { return value(transport.Float64, r, i) })
	}
	w.each(func(r int) error {
		_, err := w.ranks[r].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: tensors[r]})
		return err
	})
	for r := range tensors {
		check(t, fmt.Sprintf("rank %d", r), tensors[r], func(i int64) float64 { return reduceAll(transport.Float64, transport.ReduceSum, 3, i) })
	}
}

func TestBroadcast(t *testing.T) {
	noLeaks(t)
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			w := newWorld(t, n)
			for root := range n {
				for _, size := range []int64{0, 1, 1000*int64(n) + 1, largeCount} {
					t.Run(fmt.Sprintf("root=%d/%d", root, size), func(t *testing.T) {
						tensors := make([]transport.Tensor, n)
						for r := range n {
							tensors[r] = newTensor(t, transport.Int32, size)
							fill(t, tensors[r], func(i int64) float64 { return value(transport.Int32, r, i) })
						}
						w.each(func(r int) error {
							_, err := w.ranks[r].Broadcast(ctxT(t), &transport.BroadcastRequest{Group: w.name, Rank: r, Tensor: tensors[r], Root: root})
							return err
						})
						for r := range n {
							check(t, fmt.Sprintf("rank %d", r), tensors[r], func(i int64) float64 { return value(transport.Int32, root, i) })
						}
					})
				}
			}
		})
	}
}

func TestAllGather(t *testing.T) {
	noLeaks(t)
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			w := newWorld(t, n)
			for _, size := range []int64{0, 1, 1001, largeCount / int64(n)} {
				t.Run(fmt.Sprint(size), func(t *testing.T) {
					in := make([]transport.Tensor, n)
					out := make([]transport.Tensor, n)
					for r := range n {
						in[r] = newTensor(t, transport.Float32, size)
						fill(t, in[r], func(i int64) float64 { return value(transport.Float32, r, i) })
						out[r] = newTensor(t, transport.Float32, int64(n), size)
					}
					w.each(func(r int) error {
						_, err := w.ranks[r].AllGather(ctxT(t), &transport.AllGatherRequest{Group: w.name, Rank: r, Input: in[r], Output: out[r]})
						return err
					})
					for r := range n {
						check(t, fmt.Sprintf("rank %d output", r), out[r], func(i int64) float64 {
							return value(transport.Float32, int(i/max(size, 1)), i%max(size, 1))
						})
						check(t, fmt.Sprintf("rank %d input", r), in[r], func(i int64) float64 { return value(transport.Float32, r, i) })
					}
				})
			}
		})
	}
}

func TestReduceScatter(t *testing.T) {
	noLeaks(t)
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			w := newWorld(t, n)
			// Even splits and uneven ones (the first count%n ranks get one more).
			for _, count := range []int64{0, 1, int64(n) * 5, int64(n)*1000 + 1, largeCount} {
				for _, op := range []transport.ReduceOp{transport.ReduceSum, transport.ReduceMax} {
					t.Run(fmt.Sprintf("%d/%s", count, op), func(t *testing.T) {
						in := make([]transport.Tensor, n)
						out := make([]transport.Tensor, n)
						for r := range n {
							in[r] = newTensor(t, transport.Int64, count)
							fill(t, in[r], func(i int64) float64 { return value(transport.Int64, r, i) })
							c, _ := transport.ReduceScatterCount(count, n, r)
							out[r] = newTensor(t, transport.Int64, c)
						}
						w.each(func(r int) error {
							_, err := w.ranks[r].ReduceScatter(ctxT(t), &transport.ReduceScatterRequest{Group: w.name, Rank: r, Input: in[r], Output: out[r], Op: op})
							return err
						})
						for r := range n {
							_, start := transport.ReduceScatterCount(count, n, r)
							check(t, fmt.Sprintf("rank %d output", r), out[r], func(i int64) float64 { return reduceAll(transport.Int64, op, n, start+i) })
							check(t, fmt.Sprintf("rank %d input", r), in[r], func(i int64) float64 { return value(transport.Int64, r, i) })
						}
					})
				}
			}
		})
	}
}

// TestBarrier checks that no rank leaves a barrier before the last one
// enters it.
func TestBarrier(t *testing.T) {
	noLeaks(t)
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			w := newWorld(t, n)
			for late := range n {
				entered := make(chan struct{})
				start := time.Now()
				const delay = 100 * time.Millisecond
				left := make([]time.Duration, n)
				w.each(func(r int) error {
					if r == late {
						time.Sleep(delay) // the late rank: what the others must wait for
						close(entered)
					}
					_, err := w.ranks[r].Barrier(ctxT(t), &transport.BarrierRequest{Group: w.name, Rank: r})
					left[r] = time.Since(start)
					select {
					case <-entered:
					default:
						return errors.New("left the barrier before the late rank entered it")
					}
					return err
				})
				for r, d := range left {
					if d < delay {
						t.Errorf("late rank %d: rank %d left the barrier after %v", late, r, d)
					}
				}
			}
		})
	}
}

// TestSingleRank: a group of one works without connections.
func TestSingleRank(t *testing.T) {
	noLeaks(t)
	w := newWorld(t, 1)
	tn := newTensor(t, transport.Float32, 10)
	fill(t, tn, func(i int64) float64 { return float64(i) })
	ctx := ctxT(t)
	if _, err := w.ranks[0].AllReduce(ctx, &transport.AllReduceRequest{Group: w.name, Tensor: tn, Op: transport.ReduceProduct}); err != nil {
		t.Fatal(err)
	}
	out := newTensor(t, transport.Float32, 10)
	if _, err := w.ranks[0].AllGather(ctx, &transport.AllGatherRequest{Group: w.name, Input: tn, Output: out}); err != nil {
		t.Fatal(err)
	}
	check(t, "allgather", out, func(i int64) float64 { return float64(i) })
	out2 := newTensor(t, transport.Float32, 10)
	if _, err := w.ranks[0].ReduceScatter(ctx, &transport.ReduceScatterRequest{Group: w.name, Input: tn, Output: out2}); err != nil {
		t.Fatal(err)
	}
	check(t, "reducescatter", out2, func(i int64) float64 { return float64(i) })
}

// TestSharedInstance: one instance hosting every rank of a group (several
// actors of one node in one group) works like separate instances.
func TestSharedInstance(t *testing.T) {
	noLeaks(t)
	w := newWorld(t, 3, sharedInstance())
	for _, size := range []int64{2, 3001} {
		allReduceCase(t, w, transport.Float32, transport.ReduceSum, size)
	}
	if s := w.insts[0].Stats(); s.Groups != 3 {
		t.Errorf("instance hosts %d members, want 3", s.Groups)
	}
}

// TestSeveralGroups: an instance serves several groups at once, and ranks
// of different groups interleave their collectives.
func TestSeveralGroups(t *testing.T) {
	noLeaks(t)
	kv := plugin.NewMemoryKV()
	insts := []*collective.Transport{newInstance(t, kv, testConfig()), newInstance(t, kv, testConfig()), newInstance(t, kv, testConfig())}
	// Group a: ranks on instances 0,1,2; group b: ranks on 2,0 (rank 0 on instance 2).
	a, b := groupName(t), groupName(t)
	type rankOf struct {
		group string
		rank  int
		inst  int
		world int
	}
	all := []rankOf{{a, 0, 0, 3}, {a, 1, 1, 3}, {a, 2, 2, 3}, {b, 0, 2, 2}, {b, 1, 0, 2}}
	run := func(f func(x rankOf) error) {
		errs := make(chan error, len(all))
		for _, x := range all {
			go func() { errs <- f(x) }()
		}
		for range all {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	run(func(x rankOf) error {
		_, err := insts[x.inst].CreateGroup(ctxT(t), &transport.CreateGroupRequest{Group: x.group, Rank: x.rank, WorldSize: x.world})
		return err
	})
	tensors := map[string]transport.Tensor{}
	for _, x := range all {
		tn := newTensor(t, transport.Int32, 5000)
		fill(t, tn, func(i int64) float64 { return value(transport.Int32, x.rank, i) })
		tensors[fmt.Sprint(x.group, x.rank)] = tn
	}
	for range 3 {
		run(func(x rankOf) error {
			_, err := insts[x.inst].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: x.group, Rank: x.rank, Tensor: tensors[fmt.Sprint(x.group, x.rank)], Op: transport.ReduceMax})
			return err
		})
	}
	for _, x := range all {
		check(t, fmt.Sprintf("%s rank %d", x.group, x.rank), tensors[fmt.Sprint(x.group, x.rank)], func(i int64) float64 {
			return reduceAll(transport.Int32, transport.ReduceMax, x.world, i)
		})
	}
	run(func(x rankOf) error {
		_, err := insts[x.inst].DestroyGroup(ctxT(t), &transport.DestroyGroupRequest{Group: x.group, Rank: x.rank})
		return err
	})
	for i, tr := range insts {
		if s := tr.Stats(); s.Groups != 0 || s.OpenConns != 0 {
			t.Errorf("instance %d holds %+v after every group was destroyed", i, s)
		}
	}
}

// TestAllGatherInPlace: the input may be this rank's block of the output.
func TestAllGatherInPlace(t *testing.T) {
	noLeaks(t)
	const n, size = 3, 1001
	w := newWorld(t, n)
	out := make([]transport.Tensor, n)
	in := make([]transport.Tensor, n)
	for r := range n {
		out[r] = newTensor(t, transport.Int16, n*size)
		in[r] = transport.Tensor{DType: transport.Int16, Shape: []int64{size}, Device: transport.CPU,
			Buffer: transport.Buffer{Segment: out[r].Buffer.Segment, Offset: int64(2 * size * r), Length: 2 * size}}
		fill(t, in[r], func(i int64) float64 { return value(transport.Int16, r, i) })
	}
	w.each(func(r int) error {
		_, err := w.ranks[r].AllGather(ctxT(t), &transport.AllGatherRequest{Group: w.name, Rank: r, Input: in[r], Output: out[r]})
		return err
	})
	for r := range n {
		check(t, fmt.Sprintf("rank %d", r), out[r], func(i int64) float64 { return value(transport.Int16, int(i/size), i%size) })
	}
}

// TestDestroyRightAfter: each rank destroys its member as soon as its own
// collective returns, while the others may still be receiving its last
// bytes; every collective must still succeed, and the name is reused at
// once.
func TestDestroyRightAfter(t *testing.T) {
	noLeaks(t)
	const n = 3
	kv := plugin.NewMemoryKV()
	w := &world{t: t, name: groupName(t), kv: kv}
	for range n {
		tr := newInstance(t, kv, testConfig())
		w.insts = append(w.insts, tr)
		w.ranks = append(w.ranks, tr)
	}
	tensors := make([]transport.Tensor, n)
	for r := range n {
		tensors[r] = newTensor(t, transport.Float32, 300_001)
	}
	for round := range 5 {
		for r := range n {
			fill(t, tensors[r], func(i int64) float64 { return value(transport.Float32, r, i) })
		}
		w.each(func(r int) error {
			ctx := ctxT(t)
			if _, err := w.ranks[r].CreateGroup(ctx, &transport.CreateGroupRequest{Group: w.name, Rank: r, WorldSize: n}); err != nil {
				return fmt.Errorf("round %d: create: %w", round, err)
			}
			_, err := w.ranks[r].AllReduce(ctx, &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: tensors[r]})
			if _, derr := w.ranks[r].DestroyGroup(ctx, &transport.DestroyGroupRequest{Group: w.name, Rank: r}); derr != nil && err == nil {
				err = derr
			}
			if err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
			return nil
		})
		for r := range n {
			check(t, fmt.Sprintf("round %d rank %d", round, r), tensors[r], func(i int64) float64 { return reduceAll(transport.Float32, transport.ReduceSum, n, i) })
		}
	}
}
