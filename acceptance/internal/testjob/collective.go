package main

// Jobs of the cross-node transport tests (transports_cluster_test.go). The
// cluster runs the "collective" and "onesided" transport plugins on every
// node; the test passes the ids of two joined nodes N2 and N3 (the driver
// runs on the head).
//
//	testjob coll-ops N2 N3        four ranks (two on the head, one on N2, one
//	                              on N3) run every all-reduce op on every
//	                              dtype (3001 elements: not divisible by 4),
//	                              a 4 MiB all-reduce, broadcast, all-gather,
//	                              reduce-scatter (uneven parts) and barrier
//	testjob coll-p2p N2 N3        tensors returned by an actor on N2 travel by
//	                              the collective transport to an actor on N3
//	                              (group members: bound to their ranks), to
//	                              the head (no group) and to the driver
//	testjob coll-kill DIR N2 N3   a rank on N3 is killed by the test while
//	                              the others are in an all-reduce; they get a
//	                              typed error within the group's timeout;
//	                              the group is destroyed and re-created with
//	                              a fresh actor
//	testjob os-reads DIR N2 N3    one-sided reads of an N2 actor's tensors on
//	                              N3 (TCP), on the head and on N2 (shared
//	                              memory), after the source re-registers, and
//	                              after the test restarted N2's plugin (stale
//	                              metadata refreshed)
//	testjob os-abort DIR N2 N3    a one-sided read from a source whose plugin
//	                              the test froze times out, is aborted
//	                              (ErrAborted for later reads of the object
//	                              there) and reads work once it thaws

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goray-dev/goray/sdk/ray"
	"github.com/goray-dev/goray/sdk/ray/collective"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

const (
	collBackend = "collective"
	osBackend   = "onesided"
	// KilledRankPrefix starts the names of the segments of coll-kill's
	// ranks.
	KilledRankPrefix = shmem.Prefix + "kill-"
)

// Peer is the actor of the transport jobs: a collective rank, a tensor
// producer and a tensor consumer.
type Peer struct{ last string }

// NewPeer is Peer's constructor.
func NewPeer(ctx context.Context) (*Peer, error) { return &Peer{}, nil }

// Node returns the node the actor runs on.
func (p *Peer) Node(ctx context.Context) (string, error) { return ray.NodeID(), nil }

// Pid returns the actor's process id.
func (p *Peer) Pid(ctx context.Context) (int, error) { return os.Getpid(), nil }

// Make returns a float32 tensor [0, 1, ..., n-1] in shared memory (by the
// transport the method is registered with).
func (p *Peer) Make(ctx context.Context, n int) ([]transport.Tensor, error) {
	t, err := filledTensor(ctx, n)
	if err != nil {
		return nil, err
	}
	p.last = t.Buffer.Segment
	return []transport.Tensor{t}, nil
}

// Last returns the segment of the last tensor made.
func (p *Peer) Last(ctx context.Context) (string, error) { return p.last, nil }

// Received is what Take saw.
type Received struct {
	Sum     float64
	Segment string
	Node    string
}

// Take sums received float32 tensors, then releases them (frees the
// segments a copying receive allocated for this process).
func (p *Peer) Take(ctx context.Context, ts []transport.Tensor) (Received, error) {
	s, err := sumTensors(ctx, ts)
	if err != nil {
		return Received{}, err
	}
	r := Received{Sum: s, Segment: ts[0].Buffer.Segment, Node: ray.NodeID()}
	for _, t := range ts {
		t.Release() // sumTensors mapped them
	}
	return r, ray.ReleaseTensors(ts)
}

// Keep sums received float32 tensors and keeps them (never releases the
// segments a copying receive allocated for this process).
func (p *Peer) Keep(ctx context.Context, ts []transport.Tensor) (Received, error) {
	s, err := sumTensors(ctx, ts)
	if err != nil {
		return Received{}, err
	}
	for _, t := range ts {
		t.Release() // sumTensors mapped them
	}
	return Received{Sum: s, Segment: ts[0].Buffer.Segment, Node: ray.NodeID()}, nil
}

// Barrier waits for every member of group.
func (p *Peer) Barrier(ctx context.Context, group string) (int, error) {
	if err := collective.Barrier(ctx, group); err != nil {
		return 0, err
	}
	return collective.Rank(ctx, group)
}

// ReduceReq is one all-reduce of Reduce.
type ReduceReq struct {
	Group string
	N     int
	// Marker, when set, is written (with the pid) right before the call.
	Marker string
}

// ReduceRes is what Reduce saw; errors are classified here because the
// collective sentinels do not cross the task boundary as themselves.
type ReduceRes struct {
	First                float64
	Err                  string
	RankFailed, Timeout  bool
	FailedRank           int
	ElapsedMs, FinishedU int64
}

// Reduce all-reduces (sum) N float32 elements of value rank+1.
func (p *Peer) Reduce(ctx context.Context, q ReduceReq) (ReduceRes, error) {
	rank, err := collective.Rank(ctx, q.Group)
	if err != nil {
		return ReduceRes{}, err
	}
	// A killed rank cannot free its tensor: the prefix lets the test find
	// and remove it (segments of killed processes are not collected).
	t, err := transport.NewTensorIn(KilledRankPrefix, transport.Float32, int64(q.N))
	if err != nil {
		return ReduceRes{}, err
	}
	defer t.Free()
	b, err := t.Bytes(ctx)
	if err != nil {
		return ReduceRes{}, err
	}
	defer t.Release()
	for i := 0; i < q.N; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(rank+1)))
	}
	if q.Marker != "" {
		if err := writeFile(q.Marker, strconv.Itoa(os.Getpid())); err != nil {
			return ReduceRes{}, err
		}
	}
	start := time.Now()
	err = collective.AllReduce(ctx, q.Group, t, collective.Sum)
	res := ReduceRes{ElapsedMs: time.Since(start).Milliseconds(), FinishedU: time.Now().UnixMilli(), FailedRank: -1}
	if err != nil {
		res.Err = err.Error()
		res.RankFailed = errors.Is(err, collective.ErrRankFailed)
		res.Timeout = errors.Is(err, collective.ErrTimeout)
		var ce *transport.CollectiveError
		if errors.As(err, &ce) {
			res.FailedRank = ce.FailedRank
		}
		return res, nil
	}
	res.First = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	return res, nil
}

// Ops runs the battery of coll-ops as one member of group; every member
// runs the same calls in the same order and checks its results.
func (p *Peer) Ops(ctx context.Context, group string) (string, error) {
	rank, err := collective.Rank(ctx, group)
	if err != nil {
		return "", err
	}
	world, err := collective.WorldSize(ctx, group)
	if err != nil {
		return "", err
	}
	const n = 3001 // not divisible by 4 ranks
	checked := 0
	for _, dt := range transport.DTypes {
		for _, op := range []collective.Op{collective.Sum, collective.Product, collective.Min, collective.Max} {
			t, err := typedTensor(ctx, dt, n, func(i int) float64 { return opsValue(dt, i, rank) })
			if err != nil {
				return "", err
			}
			err = collective.AllReduce(ctx, group, t, op)
			if err == nil {
				err = checkTensor(ctx, t, func(i int) float64 { return opsWant(dt, op, i, world) })
			}
			_ = t.Free()
			if err != nil {
				return "", fmt.Errorf("all-reduce %s of %s: %w", op, dt, err)
			}
			checked++
		}
	}
	// A 4 MiB all-reduce (many pipeline chunks), one element more than a
	// multiple of the world size.
	big := 1<<20 + 1
	t, err := typedTensor(ctx, transport.Float32, big, func(i int) float64 { return float64(i%7 + rank) })
	if err != nil {
		return "", err
	}
	err = collective.AllReduce(ctx, group, t, collective.Sum)
	if err == nil {
		err = checkTensor(ctx, t, func(i int) float64 { return float64(world*(i%7) + world*(world-1)/2) })
	}
	_ = t.Free()
	if err != nil {
		return "", fmt.Errorf("4 MiB all-reduce: %w", err)
	}
	// Broadcast from the last rank.
	root := world - 1
	t, err = typedTensor(ctx, transport.Int32, n, func(i int) float64 {
		if rank == root {
			return float64(1000 + i)
		}
		return 0
	})
	if err != nil {
		return "", err
	}
	err = collective.Broadcast(ctx, group, t, root)
	if err == nil {
		err = checkTensor(ctx, t, func(i int) float64 { return float64(1000 + i) })
	}
	_ = t.Free()
	if err != nil {
		return "", fmt.Errorf("broadcast: %w", err)
	}
	// All-gather of 1001 elements per rank.
	const part = 1001
	in, err := typedTensor(ctx, transport.Int64, part, func(i int) float64 { return float64(rank*10000 + i) })
	if err != nil {
		return "", err
	}
	out, err := transport.NewTensor(transport.Int64, int64(world), part)
	if err == nil {
		err = collective.AllGather(ctx, group, in, out)
		if err == nil {
			err = checkTensor(ctx, out, func(i int) float64 { return float64((i/part)*10000 + i%part) })
		}
		_ = out.Free()
	}
	_ = in.Free()
	if err != nil {
		return "", fmt.Errorf("all-gather: %w", err)
	}
	// Reduce-scatter of n elements: parts of 751, 750, 750 and 750.
	in, err = typedTensor(ctx, transport.Float64, n, func(i int) float64 { return float64(i + rank) })
	if err != nil {
		return "", err
	}
	count, start := collective.PartOf(n, world, rank)
	out, err = transport.NewTensor(transport.Float64, count)
	if err == nil {
		err = collective.ReduceScatter(ctx, group, in, out, collective.Sum)
		if err == nil {
			err = checkTensor(ctx, out, func(i int) float64 { return float64(world*(int(start)+i) + world*(world-1)/2) })
		}
		_ = out.Free()
	}
	_ = in.Free()
	if err != nil {
		return "", fmt.Errorf("reduce-scatter: %w", err)
	}
	if err := collective.Barrier(ctx, group); err != nil {
		return "", fmt.Errorf("barrier: %w", err)
	}
	return fmt.Sprintf("rank %d of %d on %s: %d all-reduces (every op × %d dtypes), 4 MiB all-reduce, broadcast, all-gather, reduce-scatter (%d elements here), barrier ok",
		rank, world, ray.NodeID()[:8], checked, len(transport.DTypes), count), nil
}

var (
	PeerActor     = ray.Actor0(NewPeer)
	PeerNode      = ray.Method0((*Peer).Node)
	PeerPid       = ray.Method0((*Peer).Pid)
	PeerMake      = ray.Method1((*Peer).Make)
	PeerMakeColl  = PeerMake.TensorTransport(collBackend)
	PeerMakeOS    = PeerMake.TensorTransport(osBackend)
	PeerLast      = ray.Method0((*Peer).Last)
	PeerTake      = ray.Method1((*Peer).Take)
	PeerKeep      = ray.Method1((*Peer).Keep)
	PeerBarrier   = ray.Method1((*Peer).Barrier)
	PeerReduce    = ray.Method1((*Peer).Reduce)
	PeerOps       = ray.Method1((*Peer).Ops)
	peerTransport = ray.Transports(collBackend, osBackend)
)

// peerOn creates a Peer pinned to node and checks it runs there.
func peerOn(ctx context.Context, node string) (ray.ActorHandle[Peer], error) {
	a := PeerActor.Options(peerTransport, ray.NodeAffinity(node, false)).Remote(ctx)
	got, err := PeerNode.On(a).Remote(ctx).Get(ctx)
	if err != nil {
		return a, fmt.Errorf("actor on node %s: %w", node[:8], err)
	}
	if got != node {
		return a, fmt.Errorf("actor pinned to %s runs on %s", node[:8], got[:8])
	}
	return a, nil
}

func peersOn(ctx context.Context, nodes ...string) ([]ray.ActorHandle[Peer], error) {
	var out []ray.ActorHandle[Peer]
	for _, n := range nodes {
		a, err := peerOn(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// ------------------------------------------------------------ values

// opsValue is rank r's element i in the all-reduce battery: 1, 2 or 3
// (small integers are exact in every dtype, and their products over 4
// ranks fit int8); for bool, true unless (i+r) % 3 == 0.
func opsValue(dt transport.DType, i, r int) float64 {
	if dt == transport.Bool {
		if (i+r)%3 == 0 {
			return 0
		}
		return 1
	}
	return float64(1 + (i+r)%3)
}

func opsWant(dt transport.DType, op collective.Op, i, world int) float64 {
	want := opsValue(dt, i, 0)
	for r := 1; r < world; r++ {
		v := opsValue(dt, i, r)
		switch op {
		case collective.Sum:
			want += v
		case collective.Product:
			want *= v
		case collective.Min:
			want = min(want, v)
		case collective.Max:
			want = max(want, v)
		}
	}
	if dt == transport.Bool && want != 0 {
		want = 1 // sum is a logical or
	}
	return want
}

// typedTensor makes an n-element tensor of dt with element i = f(i).
func typedTensor(ctx context.Context, dt transport.DType, n int, f func(int) float64) (transport.Tensor, error) {
	t, err := transport.NewTensor(dt, int64(n))
	if err != nil {
		return t, err
	}
	b, err := t.Bytes(ctx)
	if err != nil {
		_ = t.Free()
		return t, err
	}
	defer t.Release()
	es := dt.ElementSize()
	for i := 0; i < n; i++ {
		if err := putElem(b[i*es:], dt, f(i)); err != nil {
			_ = t.Free()
			return t, err
		}
	}
	return t, nil
}

// checkTensor compares every element with want(i).
func checkTensor(ctx context.Context, t transport.Tensor, want func(int) float64) error {
	b, err := t.Bytes(ctx)
	if err != nil {
		return err
	}
	defer t.Release()
	es := t.DType.ElementSize()
	n := int(transport.NumElements(t.Shape))
	for i := 0; i < n; i++ {
		if got, w := getElem(b[i*es:], t.DType), want(i); got != w {
			return fmt.Errorf("element %d of %d is %v, want %v", i, n, got, w)
		}
	}
	return nil
}

func putElem(b []byte, dt transport.DType, v float64) error {
	switch dt {
	case transport.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case transport.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	case transport.Int8:
		b[0] = byte(int8(v))
	case transport.Uint8:
		b[0] = byte(v)
	case transport.Bool:
		b[0] = 0
		if v != 0 {
			b[0] = 1
		}
	case transport.Int16:
		binary.LittleEndian.PutUint16(b, uint16(int16(v)))
	case transport.Int32:
		binary.LittleEndian.PutUint32(b, uint32(int32(v)))
	case transport.Int64:
		binary.LittleEndian.PutUint64(b, uint64(int64(v)))
	case transport.BFloat16:
		binary.LittleEndian.PutUint16(b, uint16(math.Float32bits(float32(v))>>16))
	case transport.Float16:
		h, err := halfOf(v)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint16(b, h)
	default:
		return fmt.Errorf("dtype %s", dt)
	}
	return nil
}

func getElem(b []byte, dt transport.DType) float64 {
	switch dt {
	case transport.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case transport.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
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
	case transport.BFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case transport.Float16:
		return halfValue(binary.LittleEndian.Uint16(b))
	}
	return math.NaN()
}

// halfOf encodes a whole number in [0, 2048] as IEEE float16 (exactly).
func halfOf(v float64) (uint16, error) {
	if v != math.Trunc(v) || v < 0 || v > 2048 {
		return 0, fmt.Errorf("float16 test values are whole numbers in [0, 2048], got %v", v)
	}
	u := uint(v)
	if u == 0 {
		return 0, nil
	}
	e := bits.Len(u) - 1
	return uint16(uint(e+15)<<10 | (u<<(10-e))&0x3ff), nil
}

// halfValue decodes a normal (or zero) IEEE float16.
func halfValue(h uint16) float64 {
	exp, mant := int(h>>10)&0x1f, float64(h&0x3ff)
	if exp == 0 {
		return math.Ldexp(mant, -24)
	}
	v := math.Ldexp(1+mant/1024, exp-15)
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// ------------------------------------------------------------ jobs

// runCollOps: a group of four ranks on three nodes runs the battery.
func runCollOps(ctx context.Context, n2, n3 string) error {
	head := ray.NodeID()
	ranks, err := peersOn(ctx, head, n2, head, n3)
	if err != nil {
		return err
	}
	if _, err := collective.CreateGroup(ctx, "ops", collBackend, collective.Members(ranks...)); err != nil {
		return err
	}
	refs := make([]ray.Ref[string], len(ranks))
	for i, a := range ranks {
		refs[i] = PeerOps.On(a).Remote(ctx, ray.V("ops"))
	}
	for i, r := range refs {
		line, err := r.Get(ctx)
		if err != nil {
			return fmt.Errorf("rank %d: %w", i, err)
		}
		fmt.Println("ops:", line)
	}
	if err := collective.DestroyGroup(ctx, "ops"); err != nil {
		return err
	}
	if _, err := collective.GetGroup(ctx, "ops"); !errors.Is(err, collective.ErrGroupNotFound) {
		return fmt.Errorf("group after DestroyGroup: %v", err)
	}
	fmt.Println("collectives across nodes: ok")
	return nil
}

// runCollP2P moves tensors by the collective transport across nodes.
func runCollP2P(ctx context.Context, n2, n3 string) error {
	const n = 1<<20 + 3
	want := float64(n) * float64(n-1) / 2
	peers, err := peersOn(ctx, n2, n3, ray.NodeID())
	if err != nil {
		return err
	}
	src, dst, other := peers[0], peers[1], peers[2]
	// The producer and the first consumer are ranks of a group: the
	// transfer is bound to their ranks.
	if _, err := collective.CreateGroup(ctx, "pair", collBackend, collective.Members(src, dst)); err != nil {
		return err
	}
	b0, b1 := PeerBarrier.On(src).Remote(ctx, ray.V("pair")), PeerBarrier.On(dst).Remote(ctx, ray.V("pair"))
	if _, err := ray.GetAll(ctx, []ray.Ref[int]{b0, b1}); err != nil {
		return fmt.Errorf("joining the pair: %w", err)
	}
	ref := PeerMakeColl.On(src).Remote(ctx, ray.V(n))
	seg, err := PeerLast.On(src).Remote(ctx).Get(ctx)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		to   ray.ActorHandle[Peer]
	}{{"group ranks N2 -> N3", dst}, {"no group N2 -> head", other}} {
		got, err := PeerTake.On(c.to).Remote(ctx, ref).Get(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if got.Sum != want {
			return fmt.Errorf("%s: sum %v, want %v", c.name, got.Sum, want)
		}
		if got.Segment == seg {
			return fmt.Errorf("%s: received in the source's segment %s", c.name, seg)
		}
		fmt.Printf("collective send/recv %s: ok (%s received on %s)\n", c.name, humanBytes(4*n), got.Node[:8])
	}
	// The driver reads it too (Send on N2, Receive on the head).
	ts, err := ref.Get(ctx)
	if err != nil {
		return fmt.Errorf("driver get: %w", err)
	}
	if s, err := sumTensors(ctx, ts); err != nil || s != want {
		return fmt.Errorf("driver sum %v, %v; want %v", s, err, want)
	}
	for _, t := range ts {
		t.Release()
	}
	if err := ray.ReleaseTensors(ts); err != nil {
		return err
	}
	if shmem.Exists(ts[0].Buffer.Segment) {
		return fmt.Errorf("the driver's received segment %s survived ReleaseTensors", ts[0].Buffer.Segment)
	}
	fmt.Println("collective driver get across nodes: ok")
	// Collected on the source's node once the last reference is gone.
	ref.Release()
	if err := waitGone(ctx, seg); err != nil {
		return err
	}
	fmt.Println("collective garbage collection on the source node: ok")
	return collective.DestroyGroup(ctx, "pair")
}

// runCollKill: the test kills rank 2 (on N3) while ranks 0 and 2 are in an
// all-reduce; rank 1 calls once the kill is done.
func runCollKill(ctx context.Context, dir, n2, n3 string) error {
	const timeout = 5 * time.Second
	ranks, err := peersOn(ctx, ray.NodeID(), n2, n3)
	if err != nil {
		return err
	}
	if _, err := collective.CreateGroup(ctx, "kill", collBackend, collective.Members(ranks...), collective.Timeout(timeout)); err != nil {
		return err
	}
	var joins []ray.Ref[int]
	for _, a := range ranks {
		joins = append(joins, PeerBarrier.On(a).Remote(ctx, ray.V("kill")))
	}
	if _, err := ray.GetAll(ctx, joins); err != nil {
		return fmt.Errorf("forming the group: %w", err)
	}
	const n = 1 << 16
	r0 := PeerReduce.On(ranks[0]).Remote(ctx, ray.V(ReduceReq{Group: "kill", N: n}))
	victim := PeerReduce.On(ranks[2]).Remote(ctx, ray.V(ReduceReq{Group: "kill", N: n, Marker: filepath.Join(dir, "victim")}))
	if err := pollFile(ctx, filepath.Join(dir, "killed")); err != nil {
		return err
	}
	killed := time.Now()
	res0, err := r0.Get(ctx)
	if err != nil {
		return fmt.Errorf("rank 0: %w", err)
	}
	after := time.Since(killed)
	fmt.Printf("rank 0 after the kill: %s (rank failed %v, timeout %v, failed rank %d) %v after the kill\n", res0.Err, res0.RankFailed, res0.Timeout, res0.FailedRank, after.Round(time.Millisecond))
	if !res0.RankFailed && !res0.Timeout {
		return fmt.Errorf("rank 0 after the kill: want ErrRankFailed or ErrTimeout, got %q", res0.Err)
	}
	if after > timeout+2*time.Second {
		return fmt.Errorf("rank 0 failed %v after the kill, the group's timeout is %v", after, timeout)
	}
	if _, err := victim.Get(ctx); !errors.Is(err, ray.ErrActorDied) {
		return fmt.Errorf("the killed rank's call: want ErrActorDied, got %v", err)
	}
	start := time.Now()
	res1, err := PeerReduce.On(ranks[1]).Remote(ctx, ray.V(ReduceReq{Group: "kill", N: n})).Get(ctx)
	if err != nil {
		return fmt.Errorf("rank 1: %w", err)
	}
	fmt.Printf("rank 1 after the kill: %s (rank failed %v, timeout %v) in %v\n", res1.Err, res1.RankFailed, res1.Timeout, time.Since(start).Round(time.Millisecond))
	if !res1.RankFailed && !res1.Timeout || time.Since(start) > timeout+2*time.Second {
		return fmt.Errorf("rank 1 after the kill: want a typed error within %v, got %q", timeout, res1.Err)
	}
	fmt.Println("killed rank: typed errors within the timeout")

	// Destroy and re-create the group with a fresh actor for rank 2.
	if err := collective.DestroyGroup(ctx, "kill"); err != nil {
		return fmt.Errorf("destroy: %w", err)
	}
	fresh, err := peerOn(ctx, n3)
	if err != nil {
		return err
	}
	ranks[2] = fresh
	if _, err := collective.CreateGroup(ctx, "kill", collBackend, collective.Members(ranks...), collective.Timeout(20*time.Second)); err != nil {
		return fmt.Errorf("re-create: %w", err)
	}
	var refs []ray.Ref[ReduceRes]
	for _, a := range ranks {
		refs = append(refs, PeerReduce.On(a).Remote(ctx, ray.V(ReduceReq{Group: "kill", N: n})))
	}
	for i, r := range refs {
		res, err := r.Get(ctx)
		if err != nil || res.Err != "" || res.First != 6 {
			return fmt.Errorf("rank %d after re-create: %+v, %v (want 1+2+3 = 6)", i, res, err)
		}
	}
	fmt.Println("destroyed and re-created: ok")
	return collective.DestroyGroup(ctx, "kill")
}

// runOneSidedReads: reads of an N2 producer's tensors on N3 (TCP), the
// head and N2 (shared memory); again after the source re-registered and
// after the test restarted N2's plugin.
func runOneSidedReads(ctx context.Context, dir, n2, n3 string) error {
	const n = 3<<20 + 5 // 12 MiB: several chunks on several streams
	want := float64(n) * float64(n-1) / 2
	peers, err := peersOn(ctx, n2, n3, ray.NodeID(), n2)
	if err != nil {
		return err
	}
	src, readers := peers[0], []struct {
		name     string
		a        ray.ActorHandle[Peer]
		zeroCopy bool
	}{{"N2 -> N3 over TCP", peers[1], false}, {"N2 -> head through shared memory", peers[2], true}, {"within N2", peers[3], true}}
	read := func(what string, ref ray.Ref[[]transport.Tensor], seg string) error {
		for _, r := range readers {
			got, err := PeerTake.On(r.a).Remote(ctx, ref).Get(ctx)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", what, r.name, err)
			}
			if got.Sum != want {
				return fmt.Errorf("%s, %s: sum %v, want %v", what, r.name, got.Sum, want)
			}
			if (got.Segment == seg) != r.zeroCopy {
				return fmt.Errorf("%s, %s: received in segment %s (source's %s), zero copy expected: %v", what, r.name, got.Segment, seg, r.zeroCopy)
			}
		}
		fmt.Printf("one-sided %s: ok on N3 (TCP), the head and N2 (shared memory)\n", what)
		return nil
	}
	ref1 := PeerMakeOS.On(src).Remote(ctx, ray.V(n))
	seg1, err := PeerLast.On(src).Remote(ctx).Get(ctx)
	if err != nil {
		return err
	}
	if err := read("first read", ref1, seg1); err != nil {
		return err
	}
	// The source deregisters the first tensor and registers a new one: the
	// readers' cached metadata is older than the new object's.
	ref1.Release()
	if err := waitGone(ctx, seg1); err != nil {
		return err
	}
	ref2 := PeerMakeOS.On(src).Remote(ctx, ray.V(n))
	seg2, err := PeerLast.On(src).Remote(ctx).Get(ctx)
	if err != nil {
		return err
	}
	if err := read("read after the source re-registered", ref2, seg2); err != nil {
		return err
	}
	// The test restarts N2's plugin: a new agent incarnation under the same
	// name, on another port.
	if err := signalAndWait(dir, "ready", "restarted"); err != nil {
		return err
	}
	start := time.Now()
	_, err = PeerTake.On(readers[0].a).Remote(ctx, ref2).Get(ctx)
	if !errors.Is(err, ray.ErrTransferFailed) {
		return fmt.Errorf("read of an object whose source plugin restarted: want ErrTransferFailed, got %v", err)
	}
	fmt.Printf("object of the dead agent: typed error in %v\n", time.Since(start).Round(time.Millisecond))
	ref2.Release()
	ref3 := PeerMakeOS.On(src).Remote(ctx, ray.V(n))
	seg3, err := PeerLast.On(src).Remote(ctx).Get(ctx)
	if err != nil {
		return err
	}
	if err := read("read after the source's plugin restarted (stale metadata refreshed)", ref3, seg3); err != nil {
		return err
	}
	ref3.Release()
	return waitGone(ctx, seg3)
}

// runOneSidedAbort: a read from a frozen source times out and is aborted.
func runOneSidedAbort(ctx context.Context, dir, n2, n3 string) error {
	const n = 1 << 20
	peers, err := peersOn(ctx, n2, n3)
	if err != nil {
		return err
	}
	src, dst := peers[0], peers[1]
	ref := PeerMakeOS.On(src).Remote(ctx, ray.V(n))
	seg, err := PeerLast.On(src).Remote(ctx).Get(ctx)
	if err != nil {
		return err
	}
	if err := signalAndWait(dir, "ready", "frozen"); err != nil {
		return err
	}
	start := time.Now()
	_, err = PeerTake.On(dst).Remote(ctx, ref).Get(ctx)
	if !errors.Is(err, ray.ErrTransferFailed) || !timedOut(err) {
		return fmt.Errorf("read from a frozen source: want a timed-out transfer, got %v after %v", err, time.Since(start).Round(time.Millisecond))
	}
	fmt.Printf("pending read timed out after %v: %v\n", time.Since(start).Round(10*time.Millisecond), err)
	// The timed-out read was aborted on N3's plugin: later reads of the
	// object there fail at once with ErrAborted (the abort may still be on
	// its way for the first retry, which then times out again).
	aborted := false
	for attempt := 0; attempt < 3 && !aborted; attempt++ {
		_, err = PeerTake.On(dst).Remote(ctx, ref).Get(ctx)
		aborted = err != nil && strings.Contains(err.Error(), "aborted")
		fmt.Printf("read again: %v\n", err)
	}
	if !aborted {
		return errors.New("the timed-out read was not aborted on the reader's node")
	}
	fmt.Println("pending read aborted: ok")
	if err := signalAndWait(dir, "timedout", "thawed"); err != nil {
		return err
	}
	ref2 := PeerMakeOS.On(src).Remote(ctx, ray.V(n))
	got, err := PeerTake.On(dst).Remote(ctx, ref2).Get(ctx)
	if err != nil || got.Sum != float64(n)*float64(n-1)/2 {
		return fmt.Errorf("read after the thaw: %+v, %v", got, err)
	}
	fmt.Println("after the thaw: ok")
	ref.Release()
	ref2.Release()
	return waitGone(ctx, seg)
}

// waitGone waits until segment seg is unlinked (the source collected it).
func waitGone(ctx context.Context, seg string) error {
	for shmem.Exists(seg) {
		runtime.GC()
		select {
		case <-ctx.Done():
			return fmt.Errorf("segment %s still exists after its reference was released: %w", seg, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// timedOut reports whether a transfer error that crossed a task boundary
// (where only goray's own error kinds survive) says the transfer ran out of
// time.
func timedOut(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "timed out") || strings.Contains(msg, "deadline") || strings.Contains(msg, "DeadlineExceeded")
}

func humanBytes(n int) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// testjob recv-leak N2 N3: tensors received by copy and never released do
// not outlive their process. A peer on N3 receives (one-sided, over TCP) a
// tensor made on N2 and keeps it; its worker is killed with SIGKILL and the
// copy's segment must disappear (its raylet unlinks it). The driver then
// receives a tensor of N2 by the collective transport (a copy), keeps it
// and exits: it prints the segment
// ("driver segment NAME"), which the test checks is gone after the exit.
func runRecvLeak(ctx context.Context, n2, n3 string) error {
	src, err := peerOn(ctx, n2)
	if err != nil {
		return err
	}
	reader, err := peerOn(ctx, n3)
	if err != nil {
		return err
	}
	ref := PeerMakeOS.On(src).Remote(ctx, ray.V(1<<18))
	srcSeg, err := PeerLast.On(src).Remote(ctx).Get(ctx)
	if err != nil {
		return err
	}
	got, err := PeerKeep.On(reader).Remote(ctx, ref).Get(ctx)
	if err != nil {
		return fmt.Errorf("receive on N3: %w", err)
	}
	if got.Segment == srcSeg || !shmem.Exists(got.Segment) {
		return fmt.Errorf("N3 received into %s (source's %s, exists %v), want a copy of its own", got.Segment, srcSeg, shmem.Exists(got.Segment))
	}
	pid, err := PeerPid.On(reader).Remote(ctx).Get(ctx)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for shmem.Exists(got.Segment) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the killed reader's received segment %s is still there", got.Segment)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	fmt.Println("received segment of a killed worker: unlinked")
	ref.Release()
	// The collective transport always copies into the receiver's memory.
	ref2 := PeerMakeColl.On(src).Remote(ctx, ray.V(1<<18))
	if srcSeg, err = PeerLast.On(src).Remote(ctx).Get(ctx); err != nil {
		return err
	}
	ts, err := ref2.Get(ctx)
	if err != nil {
		return fmt.Errorf("driver receive: %w", err)
	}
	if ts[0].Buffer.Segment == srcSeg || !shmem.Exists(ts[0].Buffer.Segment) {
		return fmt.Errorf("the driver received into %s (source's %s), want a copy of its own", ts[0].Buffer.Segment, srcSeg)
	}
	fmt.Println("driver segment", ts[0].Buffer.Segment)
	return nil // exits without ReleaseTensors
}

// testjob transports-where N2 N3: an actor's declared transports are
// checked on the node it runs on, not the driver's. Only N2 runs the shm
// transport (the head does not): an actor declaring it pinned to N2 works,
// one pinned to N3 dies naming N3.
func runTransportsWhere(ctx context.Context, n2, n3 string) error {
	ok := PeerActor.Options(ray.Transports("shm"), ray.NodeAffinity(n2, false)).Remote(ctx)
	if node, err := PeerNode.On(ok).Remote(ctx).Get(ctx); err != nil || node != n2 {
		return fmt.Errorf("actor declaring shm on N2 (which runs it): node %q, %v", node, err)
	}
	bad := PeerActor.Options(ray.Transports("shm"), ray.NodeAffinity(n3, false)).Remote(ctx)
	_, err := PeerNode.On(bad).Remote(ctx).Get(ctx)
	want := fmt.Sprintf(`transport "shm" is not registered on node %s`, n3[:8])
	if !errors.Is(err, ray.ErrActorDied) || !strings.Contains(err.Error(), want) {
		return fmt.Errorf("actor declaring shm on N3 (which does not run it): %v, want ErrActorDied saying %s", err, want)
	}
	fmt.Println("actor transports checked on the actor's node: ok")
	return nil
}
