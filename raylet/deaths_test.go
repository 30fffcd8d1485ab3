package raylet

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/leaktest"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/waitfor"
)

// deathCounter counts, on the receiving node's gRPC server, the
// WorkersDied calls and the ids they carry; with hold set, the first call
// waits until release (or its context ends) before it is handled.
type deathCounter struct {
	mu    sync.Mutex
	calls int
	got   map[ids.ID]int

	hold    bool
	held    chan struct{} // closed once the first call waits
	release chan struct{}
}

func newDeathCounter(hold bool) *deathCounter {
	return &deathCounter{got: map[ids.ID]int{}, hold: hold, held: make(chan struct{}), release: make(chan struct{})}
}

func (c *deathCounter) option() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if info.FullMethod != gorayv1.Raylet_WorkersDied_FullMethodName {
			return next(ctx, req)
		}
		c.mu.Lock()
		c.calls++
		first := c.calls == 1
		c.mu.Unlock()
		if first && c.hold {
			close(c.held)
			select {
			case <-c.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		rep, err := next(ctx, req)
		c.mu.Lock()
		for _, b := range req.(*gorayv1.WorkersDiedRequest).GetWorkerIds() {
			c.got[ids.MustFromBytes(b)]++
		}
		c.mu.Unlock()
		return rep, err
	})
}

// waitHeld waits until the first call is held.
func (c *deathCounter) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-c.held:
	case <-time.After(waitfor.Generous):
		t.Fatal("no WorkersDied reached the other node")
	}
}

// counts returns the calls received and how many times each id came.
func (c *deathCounter) counts() (calls int, got map[ids.ID]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	got = make(map[ids.ID]int, len(c.got))
	for k, v := range c.got {
		got[k] = v
	}
	return c.calls, got
}

// hasAll reports whether every id of want was handled exactly once.
func (c *deathCounter) hasAll(want []ids.ID) bool {
	_, got := c.counts()
	for _, id := range want {
		if got[id] != 1 {
			return false
		}
	}
	return true
}

// deathPair is a sender node and a receiver node whose WorkersDied calls
// are counted, registered with one real GCS, each seeing the other.
func deathPair(t *testing.T, hold bool) (from, to *testNode, c *deathCounter) {
	t.Helper()
	g, addr, _ := drainGCS(t)
	c = newDeathCounter(hold)
	t.Cleanup(func() {
		if c.hold {
			select {
			case <-c.release:
			default:
				close(c.release)
			}
		}
	})
	from = newTestNode(t, addr, "127.0.0.2", cpus(1), nil)
	to = newTestNode(t, addr, "127.0.0.3", cpus(1), nil, c.option())
	from.waitAlive(g, time.Time{})
	to.waitAlive(g, time.Time{})
	from.seesPeer("the receiver in the sender's view", to.id, func(p *peerView) bool { return p.alive })
	return from, to, c
}

// drivers registers n drivers on n's node.
func (n *testNode) drivers(count int) []*testDriver {
	var ds []*testDriver
	for range count {
		ds = append(ds, n.driver())
	}
	return ds
}

// TestWorkerDeathsBatched: k drivers of one node die while a WorkersDied
// to another node is held in that node's server: the k deaths reach it in
// at most two more messages (one here: every death queued while the send
// was in flight), each id exactly once. The receiving node handles the
// batch as k single messages: the objects each dead process owned are
// freed from its store, and its local driver is told of every death
// (WORKER_DIED). Nothing is left running afterwards.
func TestWorkerDeathsBatched(t *testing.T) {
	leaktest.Goroutines(t)
	const k = 12
	from, to, c := deathPair(t, true)
	first := from.driver()
	burst := from.drivers(k)
	local := to.driver()

	// Objects on the receiving node owned by each process that dies.
	owned := map[ids.ObjectID]ids.ID{}
	for _, d := range append([]*testDriver{first}, burst...) {
		oid := to.createSealed(&gorayv1.Address{WorkerId: d.id.Bytes(), NodeId: from.id.Bytes()}, ids.Nil)
		owned[oid] = d.id
	}

	first.cancel()
	c.waitHeld(t)
	for _, d := range burst {
		d.cancel()
	}
	waitFor(t, "the burst to be queued behind the held send", func() bool {
		n, sending := from.r.cluster.deaths.pending(to.id)
		return sending && n == k
	})
	close(c.release)

	want := []ids.ID{first.id}
	for _, d := range burst {
		want = append(want, d.id)
	}
	waitFor(t, "every death to reach the other node", func() bool { return c.hasAll(want) })
	waitFor(t, "the sender to stop", func() bool { _, sending := from.r.cluster.deaths.pending(to.id); return !sending })
	calls, got := c.counts()
	if calls-1 > 2 {
		t.Errorf("%d deaths in a burst behind a send in flight took %d WorkersDied messages, want at most 2", k, calls-1)
	}
	if len(got) != len(want) {
		t.Errorf("the receiver got %d distinct ids, want %d: %v", len(got), len(want), got)
	}
	t.Logf("%d deaths: %d WorkersDied messages (the first held)", len(want), calls)

	// The batch is handled as one message per death.
	for oid, owner := range owned {
		waitFor(t, "the object of "+owner.Short()+" to be freed", func() bool { return !to.store.Contains(oid) })
	}
	recvAllDied(t, local, want)
}

// recvAllDied reads d's session stream until it got a WORKER_DIED for
// each of dead.
func recvAllDied(t *testing.T, d *testDriver, dead []ids.ID) {
	t.Helper()
	left := map[ids.ID]bool{}
	for _, id := range dead {
		left[id] = true
	}
	got := make(chan error, 1)
	go func() {
		for len(left) > 0 {
			c, err := d.stream.Recv()
			if err != nil {
				got <- err
				return
			}
			if c.GetKind() == gorayv1.RayletCommand_WORKER_DIED {
				delete(left, ids.MustFromBytes(c.GetWorkerId()))
			}
		}
		got <- nil
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("driver %s stream ended before every WORKER_DIED (%d left): %v", d.id.Short(), len(left), err)
		}
	case <-time.After(waitfor.Generous):
		d.cancel() // ends the reader
		<-got
		t.Fatalf("driver %s was not told of %d of %d deaths", d.id.Short(), len(left), len(dead))
	}
}

// TestLoneWorkerDeath: one death with nothing in flight reaches the other
// node in one message.
func TestLoneWorkerDeath(t *testing.T) {
	leaktest.Goroutines(t)
	from, _, c := deathPair(t, false)
	d := from.driver()
	d.cancel()
	waitFor(t, "the death to reach the other node", func() bool { return c.hasAll([]ids.ID{d.id}) })
	if calls, _ := c.counts(); calls != 1 {
		t.Errorf("one death took %d WorkersDied messages, want 1", calls)
	}
}

// TestWorkerDeathsBound: deaths queued for a node beyond the bound while
// a send to it is in flight drop the oldest ones for that node, counted
// and logged; the newest `limit` still arrive in one message.
func TestWorkerDeathsBound(t *testing.T) {
	leaktest.Goroutines(t)
	from, to, c := deathPair(t, true)
	const limit, extra = 16, 5
	dn := from.r.cluster.deaths
	dn.mu.Lock()
	dn.limit = limit
	dn.mu.Unlock()

	firstID := ids.New()
	dn.died(firstID)
	c.waitHeld(t)
	var queued []ids.ID
	for range limit + extra {
		id := ids.New()
		queued = append(queued, id)
		dn.died(id)
	}
	close(c.release)
	kept := append([]ids.ID{firstID}, queued[extra:]...)
	waitFor(t, "the newest deaths to reach the other node", func() bool { return c.hasAll(kept) })
	waitFor(t, "the sender to stop", func() bool { _, sending := dn.pending(to.id); return !sending })
	calls, got := c.counts()
	for _, id := range queued[:extra] {
		if got[id] != 0 {
			t.Errorf("death %s beyond the bound arrived", id.Short())
		}
	}
	if calls != 2 {
		t.Errorf("%d WorkersDied messages, want 2 (the held one and the rest)", calls)
	}
	if n := dn.dropped.Load(); n != extra {
		t.Errorf("dropped = %d, want %d", n, extra)
	}
	if n := from.r.MetricsStats().WorkerDeathsDropped; n != extra {
		t.Errorf("MetricsStats().WorkerDeathsDropped = %d, want %d (goray_worker_deaths_dropped_total)", n, extra)
	}
	if from.count("worker deaths not told to a node") != 1 {
		t.Errorf("no warning of the dropped deaths in the log:\n%s", from.logs.String())
	}
}

// TestWorkerDeathsPeerDies: deaths queued for a node that then dies are
// dropped with it: once the sender's view has the node dead, its queue is
// gone, even while a send to it is under way, and nothing more is sent.
func TestWorkerDeathsPeerDies(t *testing.T) {
	leaktest.Goroutines(t)
	from, to, c := deathPair(t, true)
	dn := from.r.cluster.deaths
	dn.died(ids.New())
	c.waitHeld(t)
	for range 3 {
		dn.died(ids.New())
	}
	if n, _ := dn.pending(to.id); n != 3 {
		t.Fatalf("pending = %d, want 3", n)
	}
	to.shutdown() // unregistered from the GCS; its server still holds the call
	from.seesPeer("the receiver dead in the sender's view", to.id, func(p *peerView) bool { return !p.alive })
	if n, sending := dn.pending(to.id); sending {
		t.Errorf("the dead node still has %d deaths queued", n)
	}
	close(c.release)
	from.stop() // waits for the senders
	if calls, _ := c.counts(); calls != 1 {
		t.Errorf("%d WorkersDied calls reached the node, want only the held one", calls)
	}
}

// pending returns how many deaths peer's sender has still to send (not
// counting a send under way) and whether it has a sender.
func (d *deathNotifier) pending(peer ids.ID) (n int, sending bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.peers[peer]
	if st == nil {
		return 0, false
	}
	return int(d.base + uint64(len(d.log)) - max(st.next, d.base)), true
}
