package onesided

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// TestPaths checks which path a receive takes: zero copy (the source's own
// buffer) within a domain, an allocated copy over TCP when forced, and a
// copy into targets.
func TestPaths(t *testing.T) {
	leaktest.Goroutines(t)
	for _, tc := range []struct {
		name     string
		shm      bool
		oneAgent bool
	}{{"tcp", false, false}, {"shm", true, false}, {"one-agent", true, true}, {"one-agent-tcp", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			kv := plugin.NewMemoryKV()
			src := newTransport(t, kv, testConfig(tc.shm))
			dst := src
			if !tc.oneAgent {
				dst = newTransport(t, kv, testConfig(tc.shm))
			}
			in := tensor(t, 3, 3<<20) // 12 MiB: several 4 MiB chunks
			id := oid()
			m := extract(t, src, id, false, in)
			r, err := dst.Receive(ctxT(t), &transport.ReceiveRequest{ObjectID: id, Tensors: m.Tensors, TransportData: m.TransportData})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, s := range r.Allocated {
					_ = shmem.Unlink(s)
				}
			}()
			zeroCopy := r.Tensors[0].Buffer == in.Buffer
			if zeroCopy != tc.shm || (len(r.Allocated) == 1) == tc.shm {
				t.Fatalf("received %+v (allocated %v); zero copy %v, want %v", r.Tensors[0].Buffer, r.Allocated, zeroCopy, tc.shm)
			}
			if !slices.Equal(bytesOf(t, r.Tensors[0]), bytesOf(t, in)) {
				t.Fatal("bytes differ")
			}
			// Into a target: always a copy.
			tg := tensor(t, 0, 3<<20)
			if _, err := dst.Receive(ctxT(t), &transport.ReceiveRequest{ObjectID: id, TransportData: m.TransportData, Targets: []transport.Tensor{tg}}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(bytesOf(t, tg), bytesOf(t, in)) {
				t.Fatal("target bytes differ")
			}
			s := agentOf(t, src).Stats()
			if tc.shm && s.BytesServed != 0 {
				t.Errorf("shm path: the read server served %d bytes", s.BytesServed)
			}
			if !tc.shm && s.BytesServed != 2*in.Buffer.Length {
				t.Errorf("tcp path: the read server served %d bytes, want %d", s.BytesServed, 2*in.Buffer.Length)
			}
		})
	}
}

// TestRegistrationReuse: objects sharing a segment share one registration,
// which ends with the last of them; the cost is counted.
func TestRegistrationReuse(t *testing.T) {
	kv := plugin.NewMemoryKV()
	tr := newTransport(t, kv, testConfig(true))
	a := agentOf(t, tr)
	seg := tensor(t, 1, 2048) // 8 KiB
	x, y := seg, seg
	x.Shape, x.Buffer.Length = []int64{1024}, 4096
	y.Shape, y.Buffer.Length, y.Buffer.Offset = []int64{1024}, 4096, 4096
	v0 := a.Version()
	idX, idY := oid(), oid()
	mx := extract(t, tr, idX, true, x)
	s := a.Stats()
	if s.Registered != 1 || s.Reused != 0 || s.Registrations != 1 || s.RegisteredBytes != 8192 || s.RegisterBytes != 8192 {
		t.Fatalf("after the first object: %+v", s)
	}
	if s.RegisterLast <= 0 || s.RegisterTotal < s.RegisterLast {
		t.Fatalf("registration cost not measured: total %v last %v", s.RegisterTotal, s.RegisterLast)
	}
	if a.Version() != v0+1 {
		t.Fatalf("version %d after a registration, want %d", a.Version(), v0+1)
	}
	pubs := s.MetadataPublishes
	my := extract(t, tr, idY, true, y)
	s = a.Stats()
	if s.Registered != 1 || s.Reused != 1 || s.Registrations != 1 {
		t.Fatalf("second object on the same segment did not reuse the registration: %+v", s)
	}
	if a.Version() != v0+1 || s.MetadataPublishes != pubs {
		t.Fatalf("reusing a registration changed the metadata (version %d, publishes %d -> %d)", a.Version(), pubs, s.MetadataPublishes)
	}
	var dx, dy transportData
	_ = json.Unmarshal(mx.TransportData, &dx)
	_ = json.Unmarshal(my.TransportData, &dy)
	if dx.Tensors[0].Reg != dy.Tensors[0].Reg || dx.Key == dy.Key {
		t.Fatalf("descriptors: %+v / %+v: want one registration, two keys", dx.Tensors[0], dy.Tensors[0])
	}
	gc := func(id string) {
		t.Helper()
		if _, err := tr.GarbageCollect(ctxT(t), &transport.GarbageCollectRequest{ObjectID: id}); err != nil {
			t.Fatal(err)
		}
	}
	gc(idX)
	if s := a.Stats(); s.Registrations != 1 || s.Deregistered != 0 || !shmem.Exists(seg.Buffer.Segment) {
		t.Fatalf("registration ended while object %s uses it: %+v", idY, s)
	}
	// The collected object is no longer readable, the other one is.
	dst := newTransport(t, kv, testConfig(false))
	if _, err := receive(t, dst, idX, mx); !errors.Is(err, transport.ErrBadMetadata) || !errors.Is(err, ErrUnknownObject) {
		t.Fatalf("receive of a collected object sharing a live registration: %v", err)
	}
	got, err := receive(t, dst, idY, my)
	if err != nil || !slices.Equal(got[0], bytesOf(t, y)) {
		t.Fatalf("receive of the live object: %v", err)
	}
	gc(idY)
	if s := a.Stats(); s.Registrations != 0 || s.Deregistered != 1 || shmem.Exists(seg.Buffer.Segment) {
		t.Fatalf("after the last object: %+v (segment exists: %v)", s, shmem.Exists(seg.Buffer.Segment))
	}
	if a.Version() != v0+2 {
		t.Fatalf("version %d after deregistration, want %d", a.Version(), v0+2)
	}
	raw, err := kv.Get(ctxT(t), AgentKey(a.Name()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseAgentMetadata(a.Name(), raw)
	if err != nil || m.Version != v0+2 || len(m.Regions) != 0 {
		t.Fatalf("published metadata %+v, %v; want version %d without regions", m, err, v0+2)
	}
}

// TestStaleMetadataRefreshed: the source deregisters and registers a new
// segment for a new object; a reader whose cache is older reads it
// correctly after one refresh, and a read of the collected object fails
// cleanly after one refresh.
func TestStaleMetadataRefreshed(t *testing.T) {
	for _, shm := range []bool{false, true} {
		name := map[bool]string{false: "tcp", true: "shm"}[shm]
		t.Run(name, func(t *testing.T) {
			kv := plugin.NewMemoryKV()
			src := newTransport(t, kv, testConfig(shm))
			dst := newTransport(t, kv, testConfig(shm))
			sa, da := agentOf(t, src), agentOf(t, dst)
			id1 := oid()
			in1 := tensor(t, 1, 1<<20)
			m1 := extract(t, src, id1, true, in1)
			if _, err := receive(t, dst, id1, m1); err != nil {
				t.Fatal(err)
			}
			cached := da.cachedPeer(sa.Name())
			if cached == nil || da.Stats().MetadataRefreshes != 1 {
				t.Fatalf("reader did not cache the source's metadata (refreshes %d)", da.Stats().MetadataRefreshes)
			}
			// Source: deregister (collect) and register a new segment.
			if _, err := src.GarbageCollect(ctxT(t), &transport.GarbageCollectRequest{ObjectID: id1}); err != nil {
				t.Fatal(err)
			}
			id2 := oid()
			in2 := tensor(t, 2, 1<<20)
			m2 := extract(t, src, id2, true, in2)
			var d2 transportData
			_ = json.Unmarshal(m2.TransportData, &d2)
			if cached.Version >= d2.Version || da.cachedPeer(sa.Name()) != cached {
				t.Fatalf("test bug: reader's cache (version %d) is not older than the transport data (%d)", cached.Version, d2.Version)
			}
			got, err := receive(t, dst, id2, m2)
			if err != nil {
				t.Fatalf("receive with stale cached metadata: %v", err)
			}
			if !slices.Equal(got[0], bytesOf(t, in2)) {
				t.Fatal("bytes differ")
			}
			if n := da.Stats().MetadataRefreshes; n != 2 {
				t.Fatalf("%d metadata refreshes, want 2 (one per stale read)", n)
			}
			// Cached metadata now knows registration 2; the source
			// deregisters it behind the reader's back. The read fails at
			// the source (unknown key), the reader refreshes once and
			// reports the registration gone.
			if _, err := src.GarbageCollect(ctxT(t), &transport.GarbageCollectRequest{ObjectID: id2}); err != nil {
				t.Fatal(err)
			}
			_, err = dst.Receive(ctxT(t), &transport.ReceiveRequest{ObjectID: id2, TransportData: m2.TransportData})
			if !errors.Is(err, transport.ErrBadMetadata) || !errors.Is(err, ErrUnknownRegistration) {
				t.Fatalf("receive of a collected object: %v, want ErrBadMetadata and ErrUnknownRegistration", err)
			}
			if n := da.Stats().MetadataRefreshes; n != 3 {
				t.Fatalf("%d metadata refreshes, want 3", n)
			}
		})
	}
}

// freeze installs a read-server hook that blocks reads until the returned
// release is called (or the agent closes); entered receives a value for
// every read that reached the hook.
func freeze(t *testing.T, a *Agent) (entered <-chan struct{}, release func()) {
	ch := make(chan struct{}, 1024)
	gate := make(chan struct{})
	var once atomic.Bool
	hook := func(ctx context.Context, req request) error {
		if req.op != opRead {
			return nil
		}
		select {
		case ch <- struct{}{}:
		default:
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	a.serveHook.Store(&hook)
	release = func() {
		if once.CompareAndSwap(false, true) {
			close(gate)
		}
	}
	t.Cleanup(release)
	return ch, release
}

// TestAbortPendingRead: a read stuck at a frozen source ends promptly with
// ErrAborted, through the transport's Abort and through Xfer.Abort.
func TestAbortPendingRead(t *testing.T) {
	leaktest.Goroutines(t)
	kv := plugin.NewMemoryKV()
	src := newTransport(t, kv, testConfig(false))
	dst := newTransport(t, kv, testConfig(false))
	entered, _ := freeze(t, agentOf(t, src))
	id := oid()
	m := extract(t, src, id, false, tensor(t, 1, 4<<20))

	done := make(chan error, 1)
	go func() {
		_, err := dst.Receive(ctxT(t), &transport.ReceiveRequest{ObjectID: id, TransportData: m.TransportData})
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(waitfor.Generous):
		t.Fatal("the read never reached the source")
	}
	begin := time.Now()
	if _, err := dst.Abort(ctxT(t), &transport.AbortRequest{ObjectID: id, Reason: "test abort"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrAborted) || !strings.Contains(err.Error(), "test abort") {
			t.Fatalf("aborted receive: %v", err)
		}
		if d := time.Since(begin); d > 2*time.Second {
			t.Fatalf("abort took %v", d)
		}
	case <-time.After(waitfor.Generous):
		t.Fatal("aborted receive did not return")
	}
	if _, err := dst.Receive(ctxT(t), &transport.ReceiveRequest{ObjectID: id, TransportData: m.TransportData}); !errors.Is(err, transport.ErrAborted) {
		t.Fatalf("later receive of the aborted object: %v", err)
	}

	// The same through the agent's request API.
	da := agentOf(t, dst)
	var d transportData
	_ = json.Unmarshal(m.TransportData, &d)
	d.key, _ = parseKey(d.Key)
	desc, _ := d.desc()
	desc.Reads[0].Dst = make([]byte, desc.Reads[0].Region.Length)
	x, err := da.PostRead(ctxT(t), desc)
	if err != nil {
		t.Fatal(err)
	}
	if x.State() != XferPending || x.Path() != PathTCP {
		t.Fatalf("posted request: state %v path %v", x.State(), x.Path())
	}
	<-entered
	x.Abort("xfer abort")
	if err := x.Wait(ctxT(t)); !errors.Is(err, transport.ErrAborted) || !strings.Contains(err.Error(), "xfer abort") {
		t.Fatalf("Wait after Abort: %v", err)
	}
	if x.State() != XferAborted {
		t.Fatalf("state %v after Abort", x.State())
	}
	if s := da.Stats(); s.XfersAborted < 2 {
		t.Fatalf("stats count %d aborted requests", s.XfersAborted)
	}
}

// TestDeadline: a read stuck at a frozen source ends at its deadline with
// ErrTimeout (and context.DeadlineExceeded); the request is failed.
func TestDeadline(t *testing.T) {
	kv := plugin.NewMemoryKV()
	src := newTransport(t, kv, testConfig(false))
	dst := newTransport(t, kv, testConfig(false))
	freeze(t, agentOf(t, src))
	id := oid()
	m := extract(t, src, id, false, tensor(t, 1, 1<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, TransportData: m.TransportData})
	if !errors.Is(err, transport.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive past its deadline: %v", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("receive returned %v after its 200ms deadline", d)
	}
	if s := agentOf(t, dst).Stats(); s.XfersFailed != 1 {
		t.Fatalf("%d failed requests, want 1 (a timeout is a failure)", s.XfersFailed)
	}
	// The transport still works once the source thaws.
	agentOf(t, src).serveHook.Store(nil)
	if _, err := receive(t, dst, id, m); err != nil {
		t.Fatalf("receive after a timed-out one: %v", err)
	}
}

// TestSourceClosedMidRead: a source agent that goes away in the middle of a
// read gives a typed error, not a hang.
func TestSourceClosedMidRead(t *testing.T) {
	kv := plugin.NewMemoryKV()
	sa, err := NewAgent(ctxT(t), testConfig(false), AgentOptions{KV: kv})
	if err != nil {
		t.Fatal(err)
	}
	src := New(WithConfig(testConfig(false)), WithKV(kv))
	src.agent = sa
	small := testConfig(false)
	small.ChunkSize = MinChunkSize // many requests per read
	dst := newTransport(t, kv, small)
	var served atomic.Int64
	hook := func(ctx context.Context, req request) error {
		if served.Add(1) > 2 {
			<-ctx.Done() // stall until the agent closes
			return ctx.Err()
		}
		return nil
	}
	sa.serveHook.Store(&hook)
	in := tensor(t, 1, 1<<20)
	id := oid()
	m, err := src.ExtractMetadata(ctxT(t), &transport.ExtractMetadataRequest{ObjectID: id, Tensors: []transport.Tensor{in}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := dst.Receive(ctxT(t), &transport.ReceiveRequest{ObjectID: id, TransportData: m.TransportData})
		done <- err
	}()
	if _, ok := waitFor(func() (int64, bool) { n := served.Load(); return n, n > 2 }); !ok {
		t.Fatal("the read did not start")
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	checkClosed(t, sa)
	select {
	case err := <-done:
		if err == nil || errors.Is(err, transport.ErrTimeout) {
			t.Fatalf("receive from a closed source: %v", err)
		}
		if !errors.Is(err, ErrSourceUnreachable) && !errors.Is(err, ErrUnknownAgent) {
			t.Fatalf("receive from a closed source: %v, want ErrSourceUnreachable or ErrUnknownAgent", err)
		}
	case <-time.After(waitfor.Generous):
		t.Fatal("receive from a closed source hangs")
	}
}

// TestServerChecks sends raw requests to a read server: unknown keys,
// registrations not part of the extraction and out-of-range reads get
// typed errors; a handshake for another agent is refused.
func TestServerChecks(t *testing.T) {
	kv := plugin.NewMemoryKV()
	src := newTransport(t, kv, testConfig(false))
	sa := agentOf(t, src)
	reader := newAgent(t, kv, testConfig(false))
	a1, a2 := tensor(t, 1, 256), tensor(t, 2, 256)
	id1, id2 := oid(), oid()
	m1 := extract(t, src, id1, false, a1)
	extract(t, src, id2, false, a2)
	var d1 transportData
	_ = json.Unmarshal(m1.TransportData, &d1)
	key, _ := parseKey(d1.Key)
	reg1 := d1.Tensors[0].Reg
	reg2 := reg1 + 1

	meta, err := reader.refreshPeer(ctxT(t), sa.Name())
	if err != nil {
		t.Fatal(err)
	}
	p, err := reader.pool(meta)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req request, dst []byte) error {
		c, err := reader.getConn(ctxT(t), p)
		if err != nil {
			t.Fatal(err)
		}
		defer reader.dropConn(c.nc)
		if err := c.send(req); err != nil {
			t.Fatal(err)
		}
		return c.recv(dst)
	}
	buf := make([]byte, 1024)
	if err := ask(request{op: opRead, key: key, reg: reg1, off: 0, length: 1024}, buf); err != nil || !slices.Equal(buf, bytesOf(t, a1)) {
		t.Fatalf("valid read: %v", err)
	}
	for _, tc := range []struct {
		name string
		req  request
		want error
		st   Status
	}{
		{"unknown key", request{op: opRead, key: key ^ 1, reg: reg1, length: 8}, ErrUnknownObject, StatusUnknownObject},
		{"registration of another object", request{op: opRead, key: key, reg: reg2, length: 8}, ErrUnknownRegistration, StatusUnknownRegistration},
		{"unknown registration", request{op: opRead, key: key, reg: 999, length: 8}, ErrUnknownRegistration, StatusUnknownRegistration},
		{"past the end", request{op: opRead, key: key, reg: reg1, off: 1020, length: 8}, ErrOutOfBounds, StatusOutOfBounds},
		{"offset past the end", request{op: opRead, key: key, reg: reg1, off: 1 << 40, length: 1}, ErrOutOfBounds, StatusOutOfBounds},
		{"negative offset", request{op: opRead, key: key, reg: reg1, off: -8, length: 8}, ErrOutOfBounds, StatusOutOfBounds},
		{"huge length", request{op: opRead, key: key, reg: reg1, length: 1 << 62}, ErrOutOfBounds, StatusOutOfBounds},
		{"bad op", request{op: 9, key: key, reg: reg1, length: 8}, transport.ErrBadMetadata, StatusBadRequest},
	} {
		err := ask(tc.req, make([]byte, max(0, min(tc.req.length, 64))))
		var re *RemoteError
		if !errors.As(err, &re) || re.Status != tc.st || !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want a RemoteError with status %v matching %v", tc.name, err, tc.st, tc.want)
		}
		if tc.st != StatusBadRequest && !errors.Is(err, transport.ErrBadMetadata) {
			t.Errorf("%s: %v does not match ErrBadMetadata", tc.name, err)
		}
	}
	// A reader asking for another incarnation is refused at the handshake.
	other := *meta
	other.Incarnation = formatKey(sa.inc ^ 1)
	op, _ := reader.pool(&other)
	if _, err := reader.getConn(ctxT(t), op); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("handshake for another incarnation: %v", err)
	}
	// Descriptors checked before posting: out of the region, unknown
	// registration (after one refresh), wrong incarnation.
	desc := ReadDesc{Agent: sa.Name(), Incarnation: sa.Incarnation(), MinVersion: d1.Version, Key: key,
		Reads: []Read{{Region: RegionRef{Registration: reg1, Offset: 1000, Length: 100}, Dst: make([]byte, 100)}}}
	if _, err := reader.PostRead(ctxT(t), desc); !errors.Is(err, ErrOutOfBounds) || !errors.Is(err, transport.ErrBadMetadata) {
		t.Fatalf("PostRead out of bounds: %v", err)
	}
	before := reader.Stats().MetadataRefreshes
	desc.Reads[0].Region = RegionRef{Registration: 4242, Length: 100}
	if _, err := reader.PostRead(ctxT(t), desc); !errors.Is(err, ErrUnknownRegistration) {
		t.Fatalf("PostRead of an unknown registration: %v", err)
	}
	if n := reader.Stats().MetadataRefreshes - before; n != 1 {
		t.Fatalf("%d refreshes for an unknown registration, want 1", n)
	}
	desc.Reads[0].Region = RegionRef{Registration: reg1, Length: 100}
	desc.Incarnation = formatKey(sa.inc ^ 1)
	if _, err := reader.PostRead(ctxT(t), desc); !errors.Is(err, transport.ErrBadMetadata) || !strings.Contains(err.Error(), "restarted") {
		t.Fatalf("PostRead for another incarnation: %v", err)
	}
	desc.Incarnation = sa.Incarnation()
	desc.Reads[0].Dst = make([]byte, 3)
	if _, err := reader.PostRead(ctxT(t), desc); !errors.Is(err, transport.ErrBadMetadata) {
		t.Fatalf("PostRead with a short destination: %v", err)
	}
	// Unknown agent.
	desc.Agent = "nobody-here"
	desc.Reads[0].Dst = make([]byte, 100)
	if _, err := reader.PostRead(ctxT(t), desc); !errors.Is(err, ErrUnknownAgent) || !errors.Is(err, transport.ErrBadMetadata) {
		t.Fatalf("PostRead from an unknown agent: %v", err)
	}
}

// TestXferStates walks a request from posted to done.
func TestXferStates(t *testing.T) {
	kv := plugin.NewMemoryKV()
	src := newTransport(t, kv, testConfig(false))
	reader := newAgent(t, kv, testConfig(false))
	entered, release := freeze(t, agentOf(t, src))
	in := tensor(t, 9, 3<<20)
	m := extract(t, src, oid(), false, in)
	var d transportData
	_ = json.Unmarshal(m.TransportData, &d)
	d.key, _ = parseKey(d.Key)
	desc, _ := d.desc()
	desc.Reads[0].Dst = make([]byte, in.Buffer.Length)
	x, err := reader.PostRead(ctxT(t), desc)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	if x.State() != XferPending || x.Err() != nil {
		t.Fatalf("frozen request: %v, %v", x.State(), x.Err())
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := x.Wait(short); !errors.Is(err, transport.ErrTimeout) || x.State() != XferPending {
		t.Fatalf("Wait with a short context: %v (state %v); the request must keep running", err, x.State())
	}
	release()
	if err := x.Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if x.State() != XferDone || x.Bytes() != in.Buffer.Length || x.Duration() <= 0 {
		t.Fatalf("done request: %v, %d bytes, %v", x.State(), x.Bytes(), x.Duration())
	}
	if !slices.Equal(desc.Reads[0].Dst, bytesOf(t, in)) {
		t.Fatal("bytes differ")
	}
	x.Abort("too late") // no effect
	if x.State() != XferDone || x.Err() != nil {
		t.Fatalf("Abort after done changed the request: %v %v", x.State(), x.Err())
	}
	if s := reader.Stats(); s.XfersPosted != 1 || s.XfersDone != 1 || s.BytesRead != in.Buffer.Length || s.IdleConns == 0 {
		t.Fatalf("reader stats %+v", s)
	}
}

// TestPruneDeadAgent: a new agent removes what a dead agent of its domain
// left (owned segments, rendezvous files, metadata), and refuses a name a
// live agent uses.
func TestPruneDeadAgent(t *testing.T) {
	kv := plugin.NewMemoryKV()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	deadPid := cmd.Process.Pid
	owned, kept := tensor(t, 1, 16), tensor(t, 2, 16)
	si, _ := statSegment(owned.Buffer.Segment)
	sk, _ := statSegment(kept.Buffer.Segment)
	domain, _ := ShmDomain()
	dead := AgentMetadata{V: metaVersion, Name: "dead-agent", Incarnation: formatKey(7), Version: 3, Endpoint: "127.0.0.1:1",
		ShmDomain: domain, Pid: deadPid, PidNS: pidNamespace(), Regions: []RegionDesc{
			{ID: 1, Segment: owned.Buffer.Segment, Size: 64, Ino: si.ino, Owned: true},
			{ID: 2, Segment: kept.Buffer.Segment, Size: 64, Ino: sk.ino},
		}}
	raw, _ := json.Marshal(dead)
	if err := kv.Put(ctxT(t), AgentKey(dead.Name), raw); err != nil {
		t.Fatal(err)
	}
	id := oid()
	td, _ := json.Marshal(transportData{V: 1, Object: id, Agent: dead.Name, Inc: dead.Incarnation, Version: 3, Key: formatKey(5), Tensors: []tdTensor{}})
	if err := shmem.Publish(RendezvousName(id), td); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shmem.Unlink(RendezvousName(id)) })
	a := newAgent(t, kv, testConfig(true))
	if shmem.Exists(owned.Buffer.Segment) || !shmem.Exists(kept.Buffer.Segment) {
		t.Fatalf("owned segment exists: %v, unowned segment exists: %v; want false, true",
			shmem.Exists(owned.Buffer.Segment), shmem.Exists(kept.Buffer.Segment))
	}
	if shmem.Exists(RendezvousName(id)) {
		t.Fatal("rendezvous file of the dead agent left")
	}
	if _, err := kv.Get(ctxT(t), AgentKey(dead.Name)); !errors.Is(err, plugin.ErrKeyNotFound) {
		t.Fatalf("metadata of the dead agent: %v", err)
	}
	cfg := testConfig(true)
	cfg.Name = a.Name()
	if _, err := NewAgent(ctxT(t), cfg, AgentOptions{KV: kv}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second agent with a live agent's name: %v", err)
	}
}

// TestCloseLeavesNothing: after transfers on every path and with objects
// still extracted, Close leaves no connection, goroutine, mapping,
// registration, owned segment, rendezvous file or KV entry.
func TestCloseLeavesNothing(t *testing.T) {
	leaktest.Goroutines(t)
	kv := plugin.NewMemoryKV()
	var agents []*Agent
	var trs []*Transport
	for _, shm := range []bool{false, true, true} {
		tr := New(WithConfig(testConfig(shm)), WithKV(kv))
		a, err := tr.Agent(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		agents, trs = append(agents, a), append(trs, tr)
	}
	var owned []string
	var ids []string
	for i, src := range trs {
		in, err := transport.NewTensorIn(testPrefix, transport.Int32, 300000)
		if err != nil {
			t.Fatal(err)
		}
		owned = append(owned, in.Buffer.Segment)
		id := oid()
		ids = append(ids, id)
		m, err := src.ExtractMetadata(ctxT(t), &transport.ExtractMetadataRequest{ObjectID: id, Tensors: []transport.Tensor{in}, TransferOwnership: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, dst := range trs {
			if _, err := receive(t, dst, id, m); err != nil {
				t.Fatalf("agent %d -> %d: %v", i, slices.Index(trs, dst), err)
			}
		}
	}
	for _, tr := range trs {
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range agents {
		checkClosed(t, a)
		if _, err := kv.Get(ctxT(t), AgentKey(a.Name())); !errors.Is(err, plugin.ErrKeyNotFound) {
			t.Errorf("metadata of closed agent %s: %v", a.Name(), err)
		}
		if _, err := net.DialTimeout("tcp", a.Endpoint(), time.Second); err == nil {
			t.Errorf("read server of closed agent %s still accepts", a.Name())
		}
	}
	for _, s := range owned {
		if shmem.Exists(s) {
			t.Errorf("owned segment %s left after Close", s)
			_ = shmem.Unlink(s)
		}
	}
	for _, id := range ids {
		if shmem.Exists(RendezvousName(id)) {
			t.Errorf("rendezvous file of %s left after Close", id)
		}
	}
	if _, err := trs[0].ExtractMetadata(ctxT(t), &transport.ExtractMetadataRequest{ObjectID: oid()}); !errors.Is(err, ErrClosed) {
		t.Errorf("ExtractMetadata after Close: %v", err)
	}
}

// TestConfigure checks config parsing and that Configure starts the agent.
func TestConfigure(t *testing.T) {
	if err := Schema().Validate(); err != nil {
		t.Fatal(err)
	}
	if defaults, err := plugin.DecodeConfig[Config](nil); err != nil || defaults != DefaultConfig() {
		t.Fatalf("the config block's defaults %+v (%v), want DefaultConfig() %+v", defaults, err, DefaultConfig())
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	base := map[string]any{"listen": "127.0.0.1:0", "segment_prefix": testPrefix}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for bk, bv := range base {
			m[bk] = bv
		}
		m[k] = v
		return m
	}
	for _, tc := range []struct {
		name    string
		cfg     map[string]any
		wantErr string
	}{
		{"defaults", base, ""},
		{"name", with("name", "node-a.1"), ""},
		{"small chunks", with("chunk_size", "64KiB"), ""},
		{"one stream", with("streams", 1), ""},
		{"tcp only", with("same_node_shm", false), ""},
		{"bad name", with("name", "a/b"), "name"},
		{"tiny chunks", with("chunk_size", "1KiB"), "chunk_size"},
		{"no streams", with("streams", 0), "streams"},
		{"fractional streams", with("streams", 1.5), "streams"},
		{"too many streams", with("streams", 100), "streams"},
		{"empty namespace", with("kv_namespace", ""), "kv_namespace"},
		{"prefix outside goray-t-", with("segment_prefix", "mine-"), "segment_prefix"},
		{"listen without port", with("listen", "127.0.0.1"), "listen"},
		{"busy address", with("listen", busy.Addr().String()), "listen"},
		{"bad dial timeout", with("dial_timeout", "soon"), "dial_timeout"},
		{"unknown attribute", with("chunksize", 5), "chunksize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(WithKV(plugin.NewMemoryKV()))
			defer tr.Close()
			err := tr.ConfigSpec().Configure(context.Background(), tc.cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Configure: %v", err)
				}
				a := agentOf(t, tr)
				if a.Endpoint() == "" || tr.Health(context.Background()) != nil {
					t.Fatalf("agent not serving: %q %v", a.Endpoint(), tr.Health(context.Background()))
				}
				if n, ok := tc.cfg["name"].(string); ok && a.Name() != n {
					t.Fatalf("agent name %q, want %q", a.Name(), n)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Configure: %v, want an error mentioning %q", err, tc.wantErr)
			}
		})
	}
	t.Run("default name from the node id", func(t *testing.T) {
		t.Setenv(plugin.EnvNodeID, "abcdef0123")
		tr := New(WithKV(plugin.NewMemoryKV()), WithConfig(testConfig(true)))
		defer tr.Close()
		if n := agentOf(t, tr).Name(); !strings.HasPrefix(n, "abcdef0123-") || len(n) != len("abcdef0123-")+16 {
			t.Fatalf("agent name %q", n)
		}
	})
}

// TestInfo checks the constant capabilities.
func TestInfo(t *testing.T) {
	r, err := New().Info(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := transport.InfoResponse{Name: Name, OneSided: true, CanAbort: true, SameNode: false}
	if *r != want {
		t.Fatalf("Info = %+v, want %+v", *r, want)
	}
}
