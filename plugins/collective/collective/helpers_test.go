package collective_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/plugins/collective/collective"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// testPrefix names every segment these tests create or make the transport
// allocate; TestMain fails if any is left. It names the process, so that
// concurrent runs (say, with and without -race) do not see each other's.
var testPrefix = fmt.Sprintf("%stt-coll-unit-%d-", shmem.Prefix, os.Getpid())

// testToken is the cluster token of every test in the package: the
// plugin's data connections authenticate with it (sdk/plugin reads it
// once, so it is set before any test runs).
const testToken = "plugin-test-cluster-token"

func TestMain(m *testing.M) {
	os.Setenv("GORAY_AUTH_TOKEN", testToken)
	code := m.Run()
	shmem.Default.Purge()
	if left, err := shmem.List(testPrefix); err == nil && len(left) > 0 {
		fmt.Fprintf(os.Stderr, "shared-memory segments left behind: %v\n", left)
		_, _ = shmem.CleanupPrefix(testPrefix)
		code = 1
	}
	os.Exit(code)
}

func testConfig() collective.Config {
	c := collective.DefaultConfig()
	c.Listen = "127.0.0.1:0"
	c.SegmentPrefix = testPrefix
	c.Timeout = 10 * time.Second
	c.ChunkSize = 64 << 10
	return c
}

var groupSeq atomic.Int64

// groupName returns a name no other test uses.
func groupName(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), groupSeq.Add(1))
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// noLeaks registers (first, so it runs last) a check that the test's
// goroutines are gone and no tensor mapping is still referenced once
// everything it started is closed.
func noLeaks(t testing.TB) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			_, mapped := shmem.Default.Stats()
			if n <= before && mapped == 0 {
				return
			}
			if mapped != 0 && time.Now().After(deadline) {
				t.Errorf("%d shared-memory mappings still referenced after the test", mapped)
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("%d goroutines before the test, %d after:\n%s", before, n, buf)
				return
			}
			time.Sleep(10 * time.Millisecond) // polling, not synchronisation
		}
	})
}

// newInstance returns an instance closed at the end of the test, after
// checking that it holds nothing any more.
func newInstance(t testing.TB, kv plugin.KV, cfg collective.Config) *collective.Transport {
	t.Helper()
	tr := collective.New(collective.WithConfig(cfg), collective.WithKV(kv))
	t.Cleanup(func() {
		_ = tr.Close()
		if s := tr.Stats(); s != (collective.Stats{}) {
			t.Errorf("instance still holds %+v after Close", s)
		}
	})
	return tr
}

// until polls cond until it holds, failing the test after 10 s.
func until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitfor.Cond(t, waitfor.Generous, what, cond)
}

// world is a group of n ranks, each on its own instance (as on n nodes).
type world struct {
	t     testing.TB
	name  string
	kv    plugin.KV
	ranks []transport.Collective
	insts []*collective.Transport
	epoch string
}

type worldOpt func(*worldCfg)

type worldCfg struct {
	cfg     collective.Config
	shared  bool // one instance hosts every rank
	members bool
}

func withConfig(c collective.Config) worldOpt { return func(w *worldCfg) { w.cfg = c } }
func sharedInstance() worldOpt                { return func(w *worldCfg) { w.shared = true } }
func withMembers() worldOpt                   { return func(w *worldCfg) { w.members = true } }

// newWorld creates instances and a group of n ranks over them; the group is
// destroyed and the instances closed when the test ends.
func newWorld(t testing.TB, n int, opts ...worldOpt) *world {
	t.Helper()
	wc := worldCfg{cfg: testConfig()}
	for _, o := range opts {
		o(&wc)
	}
	w := &world{t: t, name: groupName(t), kv: plugin.NewMemoryKV()}
	for r := range n {
		if wc.shared && r > 0 {
			w.insts = append(w.insts, w.insts[0])
		} else {
			w.insts = append(w.insts, newInstance(t, w.kv, wc.cfg))
		}
		w.ranks = append(w.ranks, w.insts[r])
	}
	var members []string
	if wc.members {
		for r := range n {
			members = append(members, fmt.Sprintf("actor-%d", r))
		}
	}
	epochs := make([]string, n)
	w.each(func(r int) error {
		res, err := w.ranks[r].CreateGroup(ctxT(t), &transport.CreateGroupRequest{Group: w.name, Rank: r, WorldSize: n, Members: members})
		if err == nil {
			epochs[r] = res.Epoch
		}
		return err
	})
	for r := range epochs {
		if epochs[r] != epochs[0] || epochs[r] == "" {
			t.Fatalf("epochs differ: %q", epochs)
		}
	}
	w.epoch = epochs[0]
	t.Cleanup(w.destroy)
	return w
}

// destroy destroys every rank's member (ignoring ranks already gone).
func (w *world) destroy() {
	for r, c := range w.ranks {
		_, _ = c.DestroyGroup(context.Background(), &transport.DestroyGroupRequest{Group: w.name, Rank: r})
	}
}

// each runs f for every rank at once and fails the test on any error.
func (w *world) each(f func(r int) error) {
	w.t.Helper()
	if errs := w.try(f); errs != nil {
		for r, err := range errs {
			if err != nil {
				w.t.Errorf("rank %d: %v", r, err)
			}
		}
		w.t.FailNow()
	}
}

// try runs f for every rank at once and returns the errors (nil if none).
func (w *world) try(f func(r int) error) []error {
	errs := make([]error, len(w.ranks))
	var wg sync.WaitGroup
	for r := range w.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// ---------------------------------------------------------------- tensors

// newTensor allocates a tensor freed when the test ends.
func newTensor(t testing.TB, dt transport.DType, shape ...int64) transport.Tensor {
	t.Helper()
	tn, err := transport.NewTensorIn(testPrefix, dt, shape...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tn.Free() })
	return tn
}

// values are test data: small integers, exact in every dtype, so any
// reduction order gives the same result.
func value(dt transport.DType, rank int, i int64) float64 {
	switch dt {
	case transport.Bool:
		return float64((i + int64(rank)) % 3 % 2)
	case transport.Uint8:
		return float64((i*7 + int64(rank)*3) % 4)
	}
	return float64((i*7+int64(rank)*3)%5) - 2
}

// put and get convert between float64 and a dtype's bytes.
func put(dt transport.DType, b []byte, v float64) {
	switch dt {
	case transport.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case transport.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	case transport.BFloat16:
		binary.LittleEndian.PutUint16(b, uint16(math.Float32bits(float32(v))>>16))
	case transport.Float16:
		binary.LittleEndian.PutUint16(b, f16Int(v))
	case transport.Int8, transport.Uint8, transport.Bool:
		b[0] = byte(int8(v))
	case transport.Int16:
		binary.LittleEndian.PutUint16(b, uint16(int16(v)))
	case transport.Int32:
		binary.LittleEndian.PutUint32(b, uint32(int32(v)))
	case transport.Int64:
		binary.LittleEndian.PutUint64(b, uint64(int64(v)))
	default:
		panic("no test encoding for " + dt)
	}
}

func get(dt transport.DType, b []byte) float64 {
	switch dt {
	case transport.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case transport.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case transport.BFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case transport.Float16:
		h := binary.LittleEndian.Uint16(b)
		exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
		v := 0.0
		if exp != 0 {
			v = math.Ldexp(1+frac/1024, exp-15) // normal numbers: all the tests use
		}
		if h&0x8000 != 0 {
			v = -v
		}
		return v
	case transport.Int8:
		return float64(int8(b[0]))
	case transport.Uint8, transport.Bool:
		return float64(b[0])
	case transport.Int16:
		return float64(int16(binary.LittleEndian.Uint16(b)))
	case transport.Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case transport.Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	}
	panic("no test encoding for " + dt)
}

// fill writes f(i) into every element of tn.
func fill(t testing.TB, tn transport.Tensor, f func(i int64) float64) {
	t.Helper()
	b, err := tn.Bytes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Release()
	es := int64(tn.DType.ElementSize())
	for i := int64(0); i*es < int64(len(b)); i++ {
		put(tn.DType, b[i*es:], f(i))
	}
}

// check compares every element of tn with want(i), reporting the first
// few differences.
func check(t testing.TB, what string, tn transport.Tensor, want func(i int64) float64) {
	t.Helper()
	b, err := tn.Bytes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Release()
	es := int64(tn.DType.ElementSize())
	bad := 0
	for i := int64(0); i*es < int64(len(b)); i++ {
		if got, w := get(tn.DType, b[i*es:]), want(i); got != w && !(math.IsNaN(got) && math.IsNaN(w)) {
			if bad++; bad <= 3 {
				t.Errorf("%s: element %d = %v, want %v", what, i, got, w)
			}
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d elements differ", what, bad)
	}
}

// reduceAll folds op over the ranks' values of element i.
func reduceAll(dt transport.DType, op transport.ReduceOp, n int, i int64) float64 {
	acc := value(dt, 0, i)
	for r := 1; r < n; r++ {
		v := value(dt, r, i)
		switch op {
		case transport.ReduceSum:
			acc += v
		case transport.ReduceProduct:
			acc *= v
		case transport.ReduceMin:
			acc = min(acc, v)
		case transport.ReduceMax:
			acc = max(acc, v)
		}
	}
	if dt == transport.Bool && acc != 0 {
		if op == transport.ReduceSum || op == transport.ReduceProduct {
			acc = 1 // or / and
		}
	}
	return acc
}

// f16Int encodes v, an integer of magnitude below 2048 (exact in binary16).
func f16Int(v float64) uint16 {
	var sign uint16
	if v < 0 {
		sign, v = 0x8000, -v
	}
	if v == 0 {
		return sign
	}
	frac, exp := math.Frexp(v) // v = frac × 2^exp, frac in [0.5, 1)
	return sign | uint16(exp-1+15)<<10 | uint16((frac*2-1)*1024)
}
