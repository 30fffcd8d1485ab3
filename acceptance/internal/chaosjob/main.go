// Command chaosjob is the driver of acceptance/chaos_test.go: a small
// mixed workload run through a node kill and a node freeze, every result
// checked.
//
//	chaosjob DIR
//	chaosjob evict DIR   a copy taken as the primary of an object whose
//	                     node died is not evicted (evict.go)
//
// The cluster it expects: a head with resource "h", a node with resource
// "kill" (the test kills it with SIGKILL) and one with "freeze" (the test
// stops it with SIGSTOP). Phase 1 puts objects, runs producer tasks (1-16
// MiB results) on both victims, pulls half of their results to the head,
// runs tasks taking other tasks' results as arguments, and calls a named
// restartable actor that lives on the "kill" node. Phase 2 starts gated
// tasks and actor calls on the victims (they wait for DIR/go), then writes
// DIR/ready. The test kills and freezes the victims, waits until the GCS
// declares both dead, starts a replacement node (resources "kill" and
// "freeze") and writes DIR/go: the driver checks every phase 2 result and
// reads the phase 1 results whose nodes died, then writes DIR/round2. The
// test resumes the frozen node (SIGCONT) and writes DIR/resumed: the driver
// checks everything once more (a late result of the frozen node must not
// replace a result) and ends with "PASS chaos", or a "FAIL <what>: why"
// line per failed check and "FAIL chaos: N of M checks failed".
//
// Each wait is bounded by $CHAOSJOB_PHASE_TIMEOUT (default 150s) so that a
// result that never comes is reported as such and the run goes on.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
)

const mib = 1 << 20

// headerLen is the size of the header a gated task puts before its data:
// the node and attempt that made it.
const headerLen = 128

var crcTable = crc64.MakeTable(crc64.ECMA)

// blob returns n bytes (n a multiple of 8) made from seed.
func blob(seed uint64, n int) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := 0; i+8 <= n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	return b
}

// sum is the checksum every check compares.
func sum(b []byte) uint64 { return crc64.Checksum(b, crcTable) }

// combine mixes a and b into a 1 MiB value.
func combine(a, b []byte) []byte {
	out := make([]byte, mib)
	for i := range out {
		out[i] = a[i%len(a)] ^ b[(i*7)%len(b)]
	}
	return out
}

// produce is the producer task.
func produce(ctx context.Context, seed uint64, n int) ([]byte, error) { return blob(seed, n), nil }

// sumFrom checksums b from offset off, on whichever node it runs.
func sumFrom(ctx context.Context, b []byte, off int) (uint64, error) {
	if off > len(b) {
		return 0, fmt.Errorf("offset %d past %d bytes", off, len(b))
	}
	return sum(b[off:]), nil
}

// combineTask is the task taking two other tasks' results.
func combineTask(ctx context.Context, a, b []byte) ([]byte, error) { return combine(a, b), nil }

// gated writes DIR/started-<seed>-<attempt> (its node id), waits for
// DIR/go and returns a header naming its node and attempt, then
// blob(seed, n).
func gated(ctx context.Context, dir string, seed uint64, n int) ([]byte, error) {
	attempt := 0
	if tc, ok := ray.CurrentTask(ctx); ok {
		attempt = tc.Attempt
	}
	if err := writeFile(filepath.Join(dir, fmt.Sprintf("started-%d-%d", seed, attempt)), ray.NodeID()); err != nil {
		return nil, err
	}
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return nil, err
	}
	h := make([]byte, headerLen)
	copy(h, fmt.Sprintf("node=%s attempt=%d ", ray.NodeID(), attempt))
	return append(h, blob(seed, n)...), nil
}

// Echo is the restartable actor: its answers depend only on the call's
// argument, so a call run twice (at-least-once) answers the same.
type Echo struct{}

// Answer is an Echo call's reply.
type Answer struct {
	K    int
	Sum  uint64
	Node string
}

// NewEcho is Echo's constructor.
func NewEcho(ctx context.Context) (*Echo, error) { return &Echo{}, nil }

// Mix answers k's checksum.
func (e *Echo) Mix(ctx context.Context, k int) (Answer, error) {
	return Answer{K: k, Sum: sum(blob(uint64(k), 4096)), Node: ray.NodeID()}, nil
}

// Gate waits for dir/go, then answers as Mix.
func (e *Echo) Gate(ctx context.Context, k int, dir string) (Answer, error) {
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return Answer{}, err
	}
	return e.Mix(ctx, k)
}

var (
	// Produce makes a value in its node's store.
	Produce = ray.Task2(produce)
	// SumFrom checksums a value.
	SumFrom = ray.Task2(sumFrom)
	// Combine takes two tasks' results.
	Combine = ray.Task2(combineTask)
	// Gated waits for the test's go.
	Gated = ray.Task3(gated)
	// EchoActor is the actor class.
	EchoActor = ray.Actor0(NewEcho)
	// EchoMix calls Mix.
	EchoMix = ray.Method1((*Echo).Mix)
	// EchoGate calls Gate.
	EchoGate = ray.Method2((*Echo).Gate)
)

// checker runs checks concurrently and records their failures.
type checker struct {
	mu     sync.Mutex
	wg     sync.WaitGroup
	n      int
	failed []string
}

// run runs check in the background.
func (c *checker) run(what string, check func() error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		start := time.Now()
		err := check()
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			line := fmt.Sprintf("FAIL %s: %v (after %s)", what, err, time.Since(start).Round(time.Millisecond))
			fmt.Println(line)
			c.failed = append(c.failed, line)
		}
	}()
}

// wait waits for the checks started so far.
func (c *checker) wait() { c.wg.Wait() }

// phaseCtx is a context for one phase's waits.
func phaseCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	d := 150 * time.Second
	if v, err := time.ParseDuration(os.Getenv("CHAOSJOB_PHASE_TIMEOUT")); err == nil {
		d = v
	}
	return context.WithTimeout(ctx, d)
}

// reads bounds the driver's concurrent reads of large values: the head's
// small store must hold what they pin at once.
var reads = make(chan struct{}, 3)

// read gets ref's value, one of at most cap(reads) at once.
func read(ctx context.Context, ref ray.Ref[[]byte]) ([]byte, error) {
	select {
	case reads <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a turn to read: %w", ctx.Err())
	}
	defer func() { <-reads }()
	return ref.Get(ctx)
}

// object is a value the driver knows the checksum of.
type object struct {
	name string
	ref  ray.Ref[[]byte]
	want []byte
}

func (o object) check(ctx context.Context) error {
	b, err := read(ctx, o.ref)
	if err != nil {
		return err
	}
	if len(b) != len(o.want) || sum(b) != sum(o.want) {
		return fmt.Errorf("read %d bytes with checksum %x, want %d bytes with %x", len(b), sum(b), len(o.want), sum(o.want))
	}
	return nil
}

// checkSumOn runs SumFrom of o on a node with resource res and compares.
func checkSumOn(ctx context.Context, o object, res string) error {
	got, err := SumFrom.Options(ray.Resource(res, 1), ray.MaxRetries(5)).Remote(ctx, o.ref, ray.V(0)).Get(ctx)
	if err != nil {
		return err
	}
	if got != sum(o.want) {
		return fmt.Errorf("checksum %x on %s, want %x", got, res, sum(o.want))
	}
	return nil
}

// gatedObj is a gated task's result.
type gatedObj struct {
	name   string
	seed   uint64
	ref    ray.Ref[[]byte]
	want   uint64
	victim string // the node its first attempt ran on
}

// check reads the gated result; dead are the nodes whose results must not
// be taken (they were declared dead before the gate opened). It returns
// the header.
func (g gatedObj) check(ctx context.Context, dead map[string]string) (string, error) {
	b, err := read(ctx, g.ref)
	if err != nil {
		return "", err
	}
	if len(b) < headerLen {
		return "", fmt.Errorf("%d bytes, want a header of %d", len(b), headerLen)
	}
	h := strings.TrimRight(string(b[:headerLen]), "\x00")
	if got := sum(b[headerLen:]); got != g.want {
		return h, fmt.Errorf("checksum %x, want %x (%s)", got, g.want, h)
	}
	for id, what := range dead {
		if strings.Contains(h, "node="+id+" ") {
			return h, fmt.Errorf("result made on the %s node %s after it was declared dead (%s)", what, id[:8], h)
		}
	}
	return h, nil
}

// checkAnswer compares an Echo answer.
func checkAnswer(a Answer, err error, k int) error {
	if err != nil {
		return err
	}
	if want := sum(blob(uint64(k), 4096)); a.K != k || a.Sum != want {
		return fmt.Errorf("answer %+v, want k %d sum %x", a, k, want)
	}
	return nil
}

func run(ctx context.Context, dir string) (*checker, error) {
	c := &checker{}
	nodes, err := ray.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	victims := map[string]string{} // resource → node id
	for _, n := range nodes {
		for _, r := range []string{"kill", "freeze"} {
			if n.Alive && n.Resources[r] > 0 {
				victims[r] = n.ID
			}
		}
	}
	if len(victims) != 2 {
		return nil, fmt.Errorf("want a live node with resource kill and one with freeze, have %v", victims)
	}
	fmt.Println("kill node:", victims["kill"])
	fmt.Println("freeze node:", victims["freeze"])

	// Phase 1. Put objects (on the head, some spilled by the later ones).
	var puts []object
	for i, m := range []int{1, 3, 16, 8, 2, 12} {
		want := blob(uint64(100+i), m*mib)
		r, err := ray.Put(ctx, want)
		if err != nil {
			return nil, fmt.Errorf("put %d: %w", i, err)
		}
		puts = append(puts, object{name: fmt.Sprintf("put %d (%d MiB)", i, m), ref: r, want: want})
	}
	// Producers on each victim (more than its store holds: some spill).
	prod := map[string][]object{}
	for v, vr := range []string{"kill", "freeze"} {
		for i, m := range []int{1, 4, 16, 2, 8, 16} {
			seed := uint64(1000*(v+1) + i)
			r := Produce.Options(ray.Resource(vr, 1), ray.MaxRetries(5)).Remote(ctx, ray.V(seed), ray.V(m*mib))
			prod[vr] = append(prod[vr], object{name: fmt.Sprintf("%s producer %d (%d MiB)", vr, i, m), ref: r, want: blob(seed, m*mib)})
		}
	}
	// Tasks taking other tasks' results: one on the freeze node, one on
	// the head.
	var combs []object
	for i, res := range []string{"freeze", "h"} {
		a, b := prod["kill"][2*i+1], prod["freeze"][2*i+1]
		r := Combine.Options(ray.Resource(res, 1), ray.MaxRetries(5)).Remote(ctx, a.ref, b.ref)
		combs = append(combs, object{name: fmt.Sprintf("combine %d on %s", i, res), ref: r, want: combine(a.want, b.want)})
	}
	echo := EchoActor.Options(ray.Name("chaos-echo"), ray.MaxRestarts(-1), ray.MaxTaskRetries(-1), ray.Resource("kill", 1)).Remote(ctx)
	pctx, cancel := phaseCtx(ctx)
	defer cancel()
	for k := range 5 {
		c.run(fmt.Sprintf("phase 1 actor call %d", k), func() error {
			a, err := EchoMix.On(echo).Remote(pctx, ray.V(k)).Get(pctx)
			if err == nil && a.Node != victims["kill"] {
				return fmt.Errorf("the actor runs on %s, want the kill node", a.Node)
			}
			return checkAnswer(a, err, k)
		})
	}
	// Half the producers' results are pulled to the head (a second copy).
	for _, vr := range []string{"kill", "freeze"} {
		for i, o := range prod[vr] {
			if i%2 == 0 {
				c.run("phase 1 "+o.name+" read on the head", func() error { return checkSumOn(pctx, o, "h") })
			} else {
				c.run("phase 1 "+o.name+" made", func() error {
					// Made, not copied here: only half get a second copy.
					_, _, err := ray.Wait(pctx, []ray.Ref[[]byte]{o.ref}, 1, ray.NoTimeout, ray.FetchLocal(false))
					return err
				})
			}
		}
	}
	for _, o := range combs {
		c.run("phase 1 "+o.name, func() error { return checkSumOn(pctx, o, "h") })
	}
	c.wait()
	fmt.Println("phase 1 done")

	// Phase 2: work under way on the victims when they fail.
	var gatedObjs []gatedObj
	for v, vr := range []string{"kill", "freeze"} {
		for j, m := range []int{4, 16} {
			seed := uint64(3000 + 10*v + j)
			r := Gated.Options(ray.Resource(vr, 1), ray.MaxRetries(5)).Remote(ctx, ray.V(dir), ray.V(seed), ray.V(m*mib))
			gatedObjs = append(gatedObjs, gatedObj{name: fmt.Sprintf("gated %s task %d (%d MiB)", vr, j, m), seed: seed, ref: r, want: sum(blob(seed, m*mib)), victim: victims[vr]})
		}
	}
	// Tasks on the head whose argument is a gated task's result.
	var gatedSums []ray.Ref[uint64]
	for _, g := range gatedObjs {
		gatedSums = append(gatedSums, SumFrom.Options(ray.Resource("h", 1), ray.MaxRetries(5)).Remote(ctx, g.ref, ray.V(headerLen)))
	}
	// Actor calls under way and queued.
	type call struct {
		k   int
		ref ray.Ref[Answer]
	}
	var calls []call
	for k := 100; k < 103; k++ {
		calls = append(calls, call{k, EchoGate.On(echo).Remote(ctx, ray.V(k), ray.V(dir))})
	}
	for k := 103; k < 108; k++ {
		calls = append(calls, call{k, EchoMix.On(echo).Remote(ctx, ray.V(k))})
	}
	// Every gated task started on its victim.
	for _, g := range gatedObjs {
		p := filepath.Join(dir, fmt.Sprintf("started-%d-0", g.seed))
		if err := pollFile(pctx, p); err != nil {
			return c, fmt.Errorf("%s never started: %w", g.name, err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return c, err
		}
		if string(b) != g.victim {
			return c, fmt.Errorf("%s started on %s, want %s", g.name, b, g.victim)
		}
	}
	fmt.Println("phase 2 under way")
	if err := writeFile(filepath.Join(dir, "ready"), ""); err != nil {
		return c, err
	}
	if err := pollFile(ctx, filepath.Join(dir, "go")); err != nil {
		return c, err
	}
	fmt.Println("victims dead, replacement up")
	cancel()
	pctx, cancel = phaseCtx(ctx)
	defer cancel()
	dead := map[string]string{victims["kill"]: "killed", victims["freeze"]: "frozen"}
	for _, g := range gatedObjs {
		c.run("phase 2 "+g.name, func() error {
			h, err := g.check(pctx, dead)
			if err == nil {
				fmt.Printf("%s: %s\n", g.name, h)
			}
			return err
		})
	}
	for i, r := range gatedSums {
		g := gatedObjs[i]
		c.run("phase 2 sum of "+g.name+" on the head", func() error {
			got, err := r.Get(pctx)
			if err == nil && got != g.want {
				err = fmt.Errorf("checksum %x, want %x", got, g.want)
			}
			return err
		})
	}
	for _, cl := range calls {
		c.run(fmt.Sprintf("phase 2 actor call %d", cl.k), func() error {
			a, err := cl.ref.Get(pctx)
			return checkAnswer(a, err, cl.k)
		})
	}
	for k := 110; k < 113; k++ {
		c.run(fmt.Sprintf("phase 2 actor call %d", k), func() error {
			a, err := EchoMix.On(echo).Remote(pctx, ray.V(k)).Get(pctx)
			return checkAnswer(a, err, k)
		})
	}
	c.run("phase 2 actor found by name", func() error {
		h, err := ray.GetActor[Echo](pctx, "chaos-echo")
		if err != nil {
			return err
		}
		a, err := EchoMix.On(h).Remote(pctx, ray.V(120)).Get(pctx)
		if err == nil && (a.Node == victims["kill"] || a.Node == victims["freeze"]) {
			return fmt.Errorf("answered on the dead node %s", a.Node)
		}
		return checkAnswer(a, err, 120)
	})
	// The victims' phase 1 results: those not pulled anywhere as
	// arguments of tasks on the head (rebuilt from lineage), those with a
	// copy on the head read on the replacement.
	for _, vr := range []string{"kill", "freeze"} {
		for i, o := range prod[vr] {
			if i%2 == 1 {
				c.run("phase 2 "+o.name+" (its node died) as an argument on the head", func() error { return checkSumOn(pctx, o, "h") })
			} else {
				c.run("phase 2 "+o.name+" (copy on the head) read on the replacement", func() error { return checkSumOn(pctx, o, "kill") })
			}
		}
	}
	c.wait()
	fmt.Println("phase 2 done")
	if err := writeFile(filepath.Join(dir, "round2"), ""); err != nil {
		return c, err
	}
	if err := pollFile(ctx, filepath.Join(dir, "resumed")); err != nil {
		return c, err
	}

	// Phase 3: the frozen node came back and was told it is dead. Every
	// result reads the same, none made by a dead node.
	cancel()
	pctx, cancel = phaseCtx(ctx)
	defer cancel()
	for _, g := range gatedObjs {
		c.run("phase 3 "+g.name, func() error { _, err := g.check(pctx, dead); return err })
	}
	for _, o := range puts {
		c.run("phase 3 "+o.name, func() error { return o.check(pctx) })
	}
	for _, vr := range []string{"kill", "freeze"} {
		for _, o := range prod[vr] {
			c.run("phase 3 "+o.name+" read by the driver", func() error { return o.check(pctx) })
		}
	}
	for _, o := range combs {
		c.run("phase 3 "+o.name+" read by the driver", func() error { return o.check(pctx) })
	}
	for k := 130; k < 133; k++ {
		c.run(fmt.Sprintf("phase 3 actor call %d", k), func() error {
			a, err := EchoMix.On(echo).Remote(pctx, ray.V(k)).Get(pctx)
			return checkAnswer(a, err, k)
		})
	}
	c.wait()
	// Every object stays referenced to the end: goray rebuilds a lost
	// object only while the by-reference arguments of the task that made
	// it exist (it does not pin lineage as Ray does; docs/architecture.md,
	// "Lineage reconstruction"), and a value read early must not let the
	// garbage collector free an argument a later rebuild needs.
	runtime.KeepAlive(puts)
	runtime.KeepAlive(prod)
	runtime.KeepAlive(combs)
	runtime.KeepAlive(gatedObjs)
	fmt.Println("phase 3 done")
	return c, nil
}

func main() {
	// In a worker this serves tasks and never returns.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rt, err := ray.Init(ctx, ray.WorkerOutput(os.Stderr))
	if err != nil {
		fmt.Println("FAIL: init:", err)
		os.Exit(1)
	}
	code, mode := 0, "chaos"
	switch {
	case len(os.Args) == 3 && os.Args[1] == "evict":
		mode = "evict"
		if err := runEvict(ctx, os.Args[2]); err != nil {
			fmt.Println("FAIL evict:", err)
			code = 1
		}
	case len(os.Args) != 2:
		fmt.Println("FAIL: usage: chaosjob DIR | chaosjob evict DIR")
		code = 2
	default:
		c, err := run(ctx, os.Args[1])
		if c != nil {
			c.wait()
		}
		switch {
		case err != nil:
			fmt.Println("FAIL chaos:", err)
			code = 1
		case len(c.failed) > 0:
			fmt.Printf("FAIL chaos: %d of %d checks failed\n", len(c.failed), c.n)
			code = 1
		default:
			fmt.Printf("chaos: %d checks passed\n", c.n)
		}
	}
	if err := rt.Shutdown(context.Background()); err != nil {
		fmt.Println("FAIL: shutdown:", err)
		code = 1
	}
	if code == 0 {
		fmt.Println("PASS", mode)
	}
	os.Exit(code)
}

// writeFile writes path atomically.
func writeFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// pollFile returns once path exists or ctx ends.
func pollFile(ctx context.Context, path string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}
