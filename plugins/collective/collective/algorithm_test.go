package collective_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/goray-dev/goray/plugins/collective/collective"
	"github.com/goray-dev/goray/sdk/transport"
)

// linkKinds are the ways ranks are connected in the algorithm tests:
// every rank on its own instance (TCP, as on n nodes), every rank on one
// instance linked through memory (as on one node), and one instance with
// in_process off (TCP loopback between its own ranks).
var linkKinds = []struct {
	name   string
	shared bool
	inProc bool
}{
	{"tcp", false, true}, {"inproc", true, true}, {"shared-tcp", true, false},
}

// algoWorld is a group of n ranks using algorithm algo over links.
func algoWorld(t *testing.T, n int, algo string, shared, inProc bool, timeout time.Duration) *world {
	cfg := testConfig()
	cfg.Algorithm, cfg.InProcess = algo, inProc
	if timeout > 0 {
		cfg.Timeout = timeout
	}
	opts := []worldOpt{withConfig(cfg)}
	if shared {
		opts = append(opts, sharedInstance())
	}
	return newWorld(t, n, opts...)
}

// allReduceBytes all-reduces fill(r) on every rank of w and returns each
// rank's result.
func allReduceBytes(t *testing.T, w *world, dt transport.DType, op transport.ReduceOp, count int64, fillRank func(r int, tn transport.Tensor)) [][]byte {
	t.Helper()
	n := len(w.ranks)
	tensors := make([]transport.Tensor, n)
	for r := range n {
		tensors[r] = newTensor(t, dt, count)
		fillRank(r, tensors[r])
	}
	w.each(func(r int) error {
		_, err := w.ranks[r].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: tensors[r], Op: op})
		return err
	})
	out := make([][]byte, n)
	for r, tn := range tensors {
		b, err := tn.Bytes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out[r] = bytes.Clone(b)
		tn.Release()
		_ = tn.Free()
	}
	return out
}

// TestAllReduceAlgorithms: recursive doubling gives exactly the ring's
// result, on every rank, for every dtype and op, for sizes that do not
// divide evenly (nothing, one element, fewer elements than ranks, odd
// counts, several ring chunks), with 2, 3 (a folded rank) and 4 ranks,
// over TCP and in-process links. The values are small integers, exact in
// every dtype, so any reduction order gives the same bits.
func TestAllReduceAlgorithms(t *testing.T) {
	noLeaks(t)
	dtypes := append(slices.Clone(reduceDTypes), transport.Int16, transport.Float16)
	for _, lk := range linkKinds {
		for _, n := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("links=%s/ranks=%d", lk.name, n), func(t *testing.T) {
				ring := algoWorld(t, n, collective.AlgorithmRing, lk.shared, lk.inProc, 0)
				rd := algoWorld(t, n, collective.AlgorithmRecursiveDoubling, lk.shared, lk.inProc, 0)
				counts := slices.Compact([]int64{0, 1, int64(n - 1), int64(n + 1), int64(2*n + 3), 1001, 40001})
				for _, dt := range dtypes {
					for _, op := range reduceOps {
						for _, count := range counts {
							if count > 1001 && op != transport.ReduceSum {
								continue // several chunks: sum on every dtype
							}
							fillRank := func(r int, tn transport.Tensor) {
								fill(t, tn, func(i int64) float64 { return value(dt, r, i) })
							}
							want := allReduceBytes(t, ring, dt, op, count, fillRank)
							got := allReduceBytes(t, rd, dt, op, count, fillRank)
							for r := range n {
								if !bytes.Equal(got[r], want[0]) || !bytes.Equal(want[r], want[0]) {
									t.Fatalf("%s %s of %d elements: rank %d's result differs between the ring and recursive doubling (or from rank 0)", dt, op, count, r)
								}
							}
							tn := newTensor(t, dt, count)
							fill(t, tn, func(int64) float64 { return 0 })
							if b, err := tn.Bytes(context.Background()); err == nil {
								copy(b, want[0])
								tn.Release()
							}
							check(t, fmt.Sprintf("%s %s of %d", dt, op, count), tn, func(i int64) float64 { return reduceAll(dt, op, n, i) })
						}
					}
				}
			})
		}
	}
}

// TestAllReduceRanksAgree: with arbitrary float32 data (where the order of
// a sum matters), every rank ends with the same bits, with either
// algorithm.
func TestAllReduceRanksAgree(t *testing.T) {
	noLeaks(t)
	for _, algo := range []string{collective.AlgorithmRing, collective.AlgorithmRecursiveDoubling} {
		for _, n := range []int{3, 4} {
			t.Run(fmt.Sprintf("%s/ranks=%d", algo, n), func(t *testing.T) {
				w := algoWorld(t, n, algo, false, true, 0)
				got := allReduceBytes(t, w, transport.Float32, transport.ReduceSum, 4099, func(r int, tn transport.Tensor) {
					b, err := tn.Bytes(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					defer tn.Release()
					_, _ = rand.Read(b)
					for i := 3; i < len(b); i += 4 {
						b[i] &= 0x3f // finite values, no NaNs
					}
				})
				for r := range n {
					if !bytes.Equal(got[r], got[0]) {
						t.Fatalf("rank %d's result differs from rank 0's", r)
					}
				}
			})
		}
	}
}

// TestAutoAlgorithm: algorithm = auto runs small all-reduces by recursive
// doubling and larger ones on the ring, both giving the right result;
// ranks whose own settings differ follow rank 0's.
func TestAutoAlgorithm(t *testing.T) {
	noLeaks(t)
	cfg := testConfig()
	cfg.RecursiveDoublingMax = 1 << 10
	w := newWorld(t, 3, withConfig(cfg))
	for _, count := range []int64{7, 256, 257, 5000} { // 256 float32 = 1 KiB: the largest by recursive doubling
		allReduceCase(t, w, transport.Float32, transport.ReduceSum, count)
	}
	// Rank 0 says ring; the others would pick recursive doubling.
	kvw := &world{t: t, name: groupName(t), kv: w.kv}
	for r := range 3 {
		c := testConfig()
		if r == 0 {
			c.Algorithm = collective.AlgorithmRing
		} else {
			c.Algorithm = collective.AlgorithmRecursiveDoubling
		}
		kvw.insts = append(kvw.insts, newInstance(t, kvw.kv, c))
		kvw.ranks = append(kvw.ranks, kvw.insts[r])
	}
	kvw.each(func(r int) error {
		_, err := kvw.ranks[r].CreateGroup(ctxT(t), &transport.CreateGroupRequest{Group: kvw.name, Rank: r, WorldSize: 3})
		return err
	})
	t.Cleanup(kvw.destroy)
	allReduceCase(t, kvw, transport.Float32, transport.ReduceSum, 11)
}

// TestAllReduceLocal: with algorithm = auto, an instance hosting every
// rank reduces all-reduces above recursive_doubling_max in memory, giving
// exactly the ring's bits (arbitrary float32 data, where the order of a
// sum matters; the ring here runs over TCP loopback between the same
// instance's ranks), for every dtype and op and uneven sizes.
func TestAllReduceLocal(t *testing.T) {
	noLeaks(t)
	dtypes := append(slices.Clone(reduceDTypes), transport.Int16, transport.Float16)
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			cfg := testConfig()
			cfg.RecursiveDoublingMax = 0 // everything but empty tensors in memory
			local := newWorld(t, n, withConfig(cfg), sharedInstance())
			ring := algoWorld(t, n, collective.AlgorithmRing, true, false, 0)
			for _, count := range []int64{1, int64(n + 1), 4099, 300007} {
				inputs := make([][]byte, n)
				for r := range inputs {
					inputs[r] = make([]byte, count*4)
					_, _ = rand.Read(inputs[r])
					for i := 3; i < len(inputs[r]); i += 4 {
						inputs[r][i] &= 0x3f // finite values, no NaNs
					}
				}
				fillIn := func(r int, tn transport.Tensor) {
					b, err := tn.Bytes(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					copy(b, inputs[r])
					tn.Release()
				}
				want := allReduceBytes(t, ring, transport.Float32, transport.ReduceSum, count, fillIn)
				got := allReduceBytes(t, local, transport.Float32, transport.ReduceSum, count, fillIn)
				for r := range n {
					if !bytes.Equal(got[r], want[0]) || !bytes.Equal(want[r], want[0]) {
						t.Fatalf("random float32 sum of %d elements: rank %d's result differs from the ring's", count, r)
					}
				}
			}
			for _, dt := range dtypes {
				for _, op := range reduceOps {
					for _, count := range []int64{1, int64(n - 1), int64(2*n + 3), 40001} {
						fillRank := func(r int, tn transport.Tensor) {
							fill(t, tn, func(i int64) float64 { return value(dt, r, i) })
						}
						want := allReduceBytes(t, ring, dt, op, count, fillRank)
						got := allReduceBytes(t, local, dt, op, count, fillRank)
						for r := range n {
							if !bytes.Equal(got[r], want[0]) {
								t.Fatalf("%s %s of %d elements: rank %d's result differs from the ring's", dt, op, count, r)
							}
						}
					}
				}
			}
		})
	}
}

// TestDoublingFailures: recursive doubling and the in-memory all-reduce
// fail like the ring (a cancelled rank: TestCancelOneRank): a rank calling
// another collective makes every rank fail with ErrBadMetadata; an
// instance closing mid-call makes the others fail with ErrRankFailed
// naming its rank. Nothing hangs: the collective timeout is a minute.
func TestDoublingFailures(t *testing.T) {
	noLeaks(t)
	for _, lk := range linkKinds[:2] {
		for _, n := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("links=%s/ranks=%d/mismatch", lk.name, n), func(t *testing.T) {
				w := algoWorld(t, n, collective.AlgorithmRecursiveDoubling, lk.shared, lk.inProc, time.Minute)
				mismatch(t, w, 100)
			})
		}
	}
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("local/ranks=%d/mismatch", n), func(t *testing.T) {
			mismatch(t, algoWorld(t, n, collective.AlgorithmAuto, true, true, time.Minute), 1<<16)
		})
		t.Run(fmt.Sprintf("local/ranks=%d/count", n), func(t *testing.T) {
			w := algoWorld(t, n, collective.AlgorithmAuto, true, true, time.Minute)
			errs := w.try(func(r int) error {
				_, err := w.ranks[r].AllReduce(ctxT(t), &transport.AllReduceRequest{Group: w.name, Rank: r, Tensor: newTensor(t, transport.Float32, 1<<16+int64(r/2))})
				return err
			})
			for r, err := range errs {
				if !errors.Is(err, transport.ErrBadMetadata) {
					t.Errorf("rank %d: %v, want an error matching ErrBadMetadata", r, err)
				}
			}
		})
	}
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("links=tcp/ranks=%d/close", n), func(t *testing.T) {
			w := algoWorld(t, n, collective.AlgorithmRecursiveDoubling, false, true, time.Minute)
			reqs := allReduceReqs(t, w, 1000)
			gone := n - 1
			errs := make(chan error, n-1)
			for r := range gone {
				go func() { _, err := w.ranks[r].AllReduce(ctxT(t), reqs[r]); errs <- err }()
			}
			// Whether the others are blocked yet or not, the outcome is the same.
			_ = w.insts[gone].Close()
			for range gone {
				select {
				case err := <-errs:
					wantRankFailed(t, "surviving rank", err, w.name, gone)
				case <-time.After(promptly):
					t.Fatal("a surviving rank did not return")
				}
			}
		})
	}
}

// mismatch has the last rank of w call Barrier while the others all-reduce
// count float32s: every rank fails promptly with ErrBadMetadata.
func mismatch(t *testing.T, w *world, count int64) {
	n := len(w.ranks)
	reqs := allReduceReqs(t, w, count)
	start := time.Now()
	errs := w.try(func(r int) error {
		if r == n-1 {
			_, err := w.ranks[r].Barrier(ctxT(t), &transport.BarrierRequest{Group: w.name, Rank: r})
			return err
		}
		_, err := w.ranks[r].AllReduce(ctxT(t), reqs[r])
		return err
	})
	if d := time.Since(start); d > promptly {
		t.Errorf("the mismatch took %v to fail every rank", d)
	}
	for r, err := range errs {
		if !errors.Is(err, transport.ErrBadMetadata) {
			t.Errorf("rank %d: %v, want an error matching ErrBadMetadata", r, err)
		}
	}
}
