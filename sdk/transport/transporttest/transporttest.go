// Package transporttest is the conformance suite for goray tensor
// transports. A transport runs it from its own tests, in-process and through
// its plugin binary:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) (src, dst transport.Transport) {
//			return mytransport.New(), mytransport.New()
//		}, transporttest.Options{LargeSize: 16 << 20})
//	}
//
// The suite covers round trips of every dtype and many shapes (bytes are
// compared exactly), zero-length and large tensors, receiving into target
// buffers, garbage collection (and that it frees owned segments), abort and
// cancellation of pending receives, concurrent transfers, and bad metadata
// (which must give ErrBadMetadata, never a crash or a hang). It branches on
// Info, so one-sided and two-sided transports both run it.
//
// The suite's segments are named shmem.Prefix+"tt-..." and removed when the
// test ends.
package transporttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// Factory returns the two ends of a transfer: a source-side and a
// destination-side instance of the transport under test (for a plugin: two
// clients of one or two plugin processes). It is called once per subtest
// and registers its own cleanup with t.Cleanup.
type Factory func(t *testing.T) (src, dst transport.Transport)

// Inspector reports an error if the transport still holds resources
// (registrations, manifests, pinned memory) for an object after it was
// garbage-collected on the source. The suite already checks that owned
// segments are unlinked and that the object can no longer be received.
type Inspector func(ctx context.Context, objectID string) error

// DefaultLargeSize is the size of the large-tensor test.
const DefaultLargeSize = 64 << 20

// Options tune the suite. Zero fields take their defaults; new settings
// are new fields, so callers keep compiling.
type Options struct {
	// LargeSize is the size of the large-tensor test in bytes (default
	// DefaultLargeSize); slow transports may lower it.
	LargeSize int64
	// Concurrency is how many transfers the concurrency test runs at once
	// (default 16).
	Concurrency int
	// Timeout bounds every transport call the suite makes (default 30 s),
	// so a hanging transport fails instead of wedging the test binary.
	Timeout time.Duration
	// BlockCheck is how long the suite watches a receive that must block
	// (it must still be pending after that long; default 50 ms).
	BlockCheck time.Duration
	// Inspector, if set, checks that garbage collection freed everything.
	Inspector Inspector
}

func (o Options) withDefaults() Options {
	if o.LargeSize <= 0 {
		o.LargeSize = DefaultLargeSize
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.BlockCheck <= 0 {
		o.BlockCheck = 50 * time.Millisecond
	}
	return o
}

// Run runs the conformance suite against the transport made by f, tuned by
// o (Options{} for the defaults).
func Run(t *testing.T, f Factory, o Options) {
	cfg := o.withDefaults()
	tests := []struct {
		name string
		fn   func(*env)
	}{
		{"Info", testInfo},
		{"RoundTrip", testRoundTrip},
		{"ZeroLength", testZeroLength},
		{"Large", testLarge},
		{"ReceiveIntoTargets", testTargets},
		{"GarbageCollect", testGarbageCollect},
		{"Abort", testAbort},
		{"ReceiveBeforeSource", testReceiveFirst},
		{"Cancel", testCancel},
		{"Concurrent", testConcurrent},
		{"BadMetadata", testBadMetadata},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := f(t)
			if src == nil || dst == nil {
				t.Fatal("factory returned a nil transport")
			}
			e := &env{t: t, src: src, dst: dst, cfg: cfg, prefix: shmem.Prefix + "tt-" + randHex(4) + "-", st: &state{metas: map[string]*transport.ExtractMetadataResponse{}}}
			t.Cleanup(e.cleanup)
			ctx, cancel := e.ctx()
			defer cancel()
			info, err := src.Info(ctx, &transport.InfoRequest{})
			if err != nil {
				t.Fatalf("Info: %v", err)
			}
			e.info = info
			tc.fn(e)
		})
	}
}

// env is one subtest's world.
type env struct {
	t        *testing.T
	src, dst transport.Transport
	info     *transport.InfoResponse
	cfg      Options
	prefix   string
	st       *state // shared with subtests
}

type state struct {
	mu       sync.Mutex
	segments []string // created by the suite or allocated for it
	objects  []string // extracted, to collect at cleanup
	metas    map[string]*transport.ExtractMetadataResponse
}

// with returns the env for a subtest.
func (e *env) with(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// meta returns what ExtractMetadata returned for an object.
func (e *env) meta(id string) *transport.ExtractMetadataResponse {
	e.t.Helper()
	e.st.mu.Lock()
	defer e.st.mu.Unlock()
	m := e.st.metas[id]
	if m == nil {
		e.t.Fatalf("suite bug: object %s was not extracted", id)
	}
	return m
}

func (e *env) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), e.cfg.Timeout)
}

func (e *env) cleanup() {
	ctx, cancel := e.ctx()
	defer cancel()
	e.st.mu.Lock()
	objs, segs := e.st.objects, e.st.segments
	e.st.objects, e.st.segments = nil, nil
	e.st.mu.Unlock()
	for _, id := range objs {
		_, _ = e.src.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id})
	}
	for _, s := range segs {
		shmem.Default.Forget(s)
		_ = shmem.Unlink(s)
	}
	if left, err := shmem.List(e.prefix); err == nil && len(left) > 0 {
		e.t.Errorf("suite segments left behind: %v", left)
		_, _ = shmem.CleanupPrefix(e.prefix)
	}
}

func (e *env) track(seg string) {
	e.st.mu.Lock()
	e.st.segments = append(e.st.segments, seg)
	e.st.mu.Unlock()
}

func (e *env) trackObject(id string, m *transport.ExtractMetadataResponse) {
	e.st.mu.Lock()
	e.st.objects = append(e.st.objects, id)
	e.st.metas[id] = m
	e.st.mu.Unlock()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newObjectID returns a fresh 20-byte object id in hex.
func newObjectID() string { return randHex(20) }

// segment creates a suite-owned segment of size bytes.
func (e *env) segment(size int64) string {
	e.t.Helper()
	name := shmem.NewName(e.prefix)
	seg, err := shmem.Create(name, size)
	if err != nil {
		e.t.Fatalf("create segment: %v", err)
	}
	_ = seg.Close()
	e.track(name)
	return name
}

// tensor allocates a tensor in its own suite segment, filled from seed.
func (e *env) tensor(dt transport.DType, seed uint64, shape ...int64) transport.Tensor {
	e.t.Helper()
	tn := transport.Tensor{DType: dt, Shape: shape, Device: transport.CPU}
	size := tn.ByteSize()
	if size < 0 {
		e.t.Fatalf("bad test shape %v", shape)
	}
	tn.Buffer = transport.Buffer{Segment: e.segment(max(size, 1)), Length: size}
	e.fill(tn, seed)
	return tn
}

// packed allocates tensors of the given layouts in one segment, at 64-byte
// aligned offsets after a leading gap, filled from seed.
func (e *env) packed(metas []transport.TensorMeta, seed uint64) []transport.Tensor {
	e.t.Helper()
	off := int64(64)
	offs := make([]int64, len(metas))
	for i, m := range metas {
		offs[i] = off
		off += (m.ByteSize() + 63) &^ 63
	}
	seg := e.segment(off + 64)
	out := make([]transport.Tensor, len(metas))
	for i, m := range metas {
		out[i] = transport.Tensor{DType: m.DType, Shape: m.Shape, Device: transport.CPU,
			Buffer: transport.Buffer{Segment: seg, Offset: offs[i], Length: m.ByteSize()}}
		e.fill(out[i], seed+uint64(i))
	}
	return out
}

// fill writes deterministic pseudo-random bytes (0/1 for bool).
func (e *env) fill(tn transport.Tensor, seed uint64) {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	b, err := tn.Bytes(ctx)
	if err != nil {
		e.t.Fatalf("map tensor: %v", err)
	}
	defer tn.Release()
	pattern(b, seed, tn.DType == transport.Bool)
}

func pattern(b []byte, seed uint64, boolean bool) {
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		if i%8 == 0 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		v := byte(x >> (8 * (i % 8)))
		if boolean {
			v &= 1
		}
		b[i] = v
	}
}

// read returns a copy of a tensor's bytes.
func (e *env) read(tn transport.Tensor) []byte {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	b, err := tn.Bytes(ctx)
	if err != nil {
		e.t.Fatalf("map tensor %s: %v", tn.Meta(), err)
	}
	defer tn.Release()
	return slices.Clone(b)
}

// extract runs ExtractMetadata for the tensors and schedules collection.
func (e *env) extract(ctx context.Context, id string, tensors []transport.Tensor, own bool) (*transport.ExtractMetadataResponse, error) {
	r, err := e.src.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{
		ObjectID: id, Source: "src-actor", Tensors: tensors, TransferOwnership: own,
	})
	if err == nil {
		e.trackObject(id, r)
	}
	return r, err
}

// transfer moves an extracted object to the destination: for two-sided
// transports Send and Receive run at the same time.
func (e *env) transfer(ctx context.Context, id string, meta *transport.ExtractMetadataResponse, targets []transport.Tensor) (*transport.ReceiveResponse, error) {
	owner := e.dst
	if !e.info.OneSided {
		owner = e.src
	}
	cm, err := owner.CommunicatorMetadata(ctx, &transport.CommunicatorMetadataRequest{ObjectID: id, Source: "src-actor", Destination: "dst-actor"})
	if err != nil {
		return nil, err
	}
	var sendErr error
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	if !e.info.OneSided {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, sendErr = e.src.Send(ctx, &transport.SendRequest{
				ObjectID: id, Source: "src-actor", Destination: "dst-actor",
				Tensors: meta.Tensors, TransportData: meta.TransportData, CommunicatorData: cm.Data,
			})
			if sendErr != nil {
				cancel()
			}
		}()
	}
	r, err := e.dst.Receive(ctx, &transport.ReceiveRequest{
		ObjectID: id, Source: "src-actor", Destination: "dst-actor",
		Tensors: meta.Tensors, TransportData: meta.TransportData, CommunicatorData: cm.Data,
		Targets: targets,
	})
	if err != nil {
		cancel()
	}
	wg.Wait()
	cancel()
	if r != nil {
		for _, s := range r.Allocated {
			e.track(s)
		}
	}
	if sendErr != nil {
		return nil, sendErr
	}
	return r, err
}

// roundTrip extracts, transfers and checks every byte; it returns the
// receive response.
func (e *env) roundTrip(ctx context.Context, id string, tensors, targets []transport.Tensor, own bool) *transport.ReceiveResponse {
	e.t.Helper()
	want := make([][]byte, len(tensors))
	for i, tn := range tensors {
		want[i] = e.read(tn)
	}
	meta, err := e.extract(ctx, id, tensors, own)
	if err != nil {
		e.t.Fatalf("ExtractMetadata: %v", err)
	}
	if len(meta.Tensors) != len(tensors) {
		e.t.Fatalf("ExtractMetadata returned %d tensor metas for %d tensors", len(meta.Tensors), len(tensors))
	}
	for i, tn := range tensors {
		if !meta.Tensors[i].Equal(tn.Meta()) {
			e.t.Fatalf("ExtractMetadata tensor %d: got %s, want %s", i, meta.Tensors[i], tn.Meta())
		}
	}
	r, err := e.transfer(ctx, id, meta, targets)
	if err != nil {
		e.t.Fatalf("transfer: %v", err)
	}
	e.check(r, tensors, want)
	return r
}

// check compares received tensors with the expected layouts and bytes.
func (e *env) check(r *transport.ReceiveResponse, sent []transport.Tensor, want [][]byte) {
	e.t.Helper()
	if len(r.Tensors) != len(sent) {
		e.t.Fatalf("received %d tensors, sent %d", len(r.Tensors), len(sent))
	}
	for i, got := range r.Tensors {
		if !got.Meta().Equal(sent[i].Meta()) {
			e.t.Errorf("tensor %d: received %s, sent %s", i, got.Meta(), sent[i].Meta())
			continue
		}
		if got.Buffer.Length != sent[i].Buffer.Length {
			e.t.Errorf("tensor %d: received buffer of %d bytes, want %d", i, got.Buffer.Length, sent[i].Buffer.Length)
			continue
		}
		if b := e.read(got); !slices.Equal(b, want[i]) {
			e.t.Errorf("tensor %d (%s): received bytes differ from sent bytes (first difference at %d)", i, got.Meta(), firstDiff(b, want[i]))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got no error, want one matching %v", what, target)
		return
	}
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want one matching %v", what, err, target)
	}
}

// pendingReceive starts a receive that must block and returns its result
// channel after checking that it is still pending after blockCheck.
func (e *env) pendingReceive(ctx context.Context, req *transport.ReceiveRequest) <-chan error {
	e.t.Helper()
	done := make(chan error, 1)
	go func() {
		r, err := e.dst.Receive(ctx, req)
		if r != nil {
			for _, s := range r.Allocated {
				e.track(s)
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		e.t.Fatalf("receive of object %s returned before it could (err=%v); it must block", req.ObjectID, err)
	case <-time.After(e.cfg.BlockCheck):
	}
	return done
}

// await waits for the result of a call that must now return promptly.
func (e *env) await(done <-chan error, what string) error {
	e.t.Helper()
	limit := min(e.cfg.Timeout, promptly)
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		e.t.Fatalf("%s did not return within %v", what, limit)
		return nil
	}
}

// promptly bounds how long an aborted or cancelled call may take to return.
const promptly = 5 * time.Second
