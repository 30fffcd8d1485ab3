package raylet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/waitfor"
)

// leaseReq is a lease request for job with res, named rid.
func leaseReq(job ids.ID, res resources.Set, rid string) *gorayv1.LeaseRequest {
	return &gorayv1.LeaseRequest{JobId: job.Bytes(), Resources: resourcesProto(res), RequestId: []byte(rid)}
}

func (h *harness) cancelLease(rid string) *gorayv1.CancelLeaseReply {
	h.t.Helper()
	rep, err := h.cl.CancelWorkerLease(context.Background(), &gorayv1.CancelLeaseRequest{RequestId: []byte(rid)})
	if err != nil {
		h.t.Fatalf("CancelWorkerLease(%q): %v", rid, err)
	}
	return rep
}

func (h *harness) leaseCount() int {
	h.r.sched.mu.Lock()
	defer h.r.sched.mu.Unlock()
	return len(h.r.sched.leases)
}

// flagCtx is a context whose Err becomes non-nil when cancelled is set,
// while Done never fires: it makes a lease request see a cancelled context
// only after its lease was granted.
type flagCtx struct {
	context.Context
	cancelled atomic.Bool
}

func (c *flagCtx) Err() error {
	if c.cancelled.Load() {
		return context.Canceled
	}
	return nil
}

func TestCancelWorkerLease(t *testing.T) {
	t.Run("waiting request is dropped", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Resources = cpus(1) })
		d := h.driver()
		held := h.mustLease(d.job, cpus(1))
		errc := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
			defer cancel()
			_, err := h.cl.RequestWorkerLease(ctx, leaseReq(d.job, cpus(1), "req-wait"))
			errc <- err
		}()
		waitFor(t, "the request to queue", func() bool { return h.pendingCount() == 1 })
		if rep := h.cancelLease("req-wait"); rep.GetReturned() {
			t.Fatal("cancelling a waiting request says a lease was returned")
		}
		if err := <-errc; status.Code(err) != codes.Canceled || !strings.Contains(err.Error(), "cancelled") {
			t.Fatalf("cancelled request: err = %v, want Canceled", err)
		}
		if n := h.pendingCount(); n != 0 {
			t.Fatalf("%d requests still pending", n)
		}
		if rep := h.cancelLease("req-wait"); rep.GetReturned() {
			t.Fatal("second cancel returned a lease")
		}
		h.returnLease(held, false)
		if got := h.availableCPU(); got != resources.Unit {
			t.Fatalf("available CPU = %d, want 1 CPU", got)
		}
		if n := h.leaseCount(); n != 0 {
			t.Fatalf("%d leases left", n)
		}
	})

	t.Run("granted lease is returned", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Resources = cpus(1) })
		d := h.driver()
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		// The reply reaches the test, but the cancel stands for a caller
		// that gave up as the lease was granted and never saw it.
		l, err := h.cl.RequestWorkerLease(ctx, leaseReq(d.job, cpus(1), "req-grant"))
		if err != nil {
			t.Fatal(err)
		}
		if got := h.availableCPU(); got != 0 {
			t.Fatalf("available CPU with the lease out = %d", got)
		}
		if rep := h.cancelLease("req-grant"); !rep.GetReturned() {
			t.Fatal("cancel after the grant did not return the lease")
		}
		if got := h.availableCPU(); got != resources.Unit {
			t.Fatalf("available CPU after cancel = %d, want 1 CPU", got)
		}
		if n := h.leaseCount(); n != 0 {
			t.Fatalf("%d leases left", n)
		}
		if ws := h.workers("IDLE"); len(ws) != 1 || !bytes.Equal(ws[0].GetWorkerId(), l.GetWorker().GetWorkerId()) {
			t.Fatalf("idle workers after cancel = %v, want the leased worker back", ws)
		}
		// Idempotent, and the lease cannot be returned a second time.
		if rep := h.cancelLease("req-grant"); rep.GetReturned() {
			t.Fatal("second cancel returned a lease again")
		}
		h.returnLease(l, false)
		if got := h.availableCPU(); got != resources.Unit {
			t.Fatalf("available CPU after a late return = %d, want 1 CPU (no double return)", got)
		}
	})

	t.Run("unknown and empty ids", func(t *testing.T) {
		h := newHarness(t, nil)
		if rep := h.cancelLease("never-seen"); rep.GetReturned() {
			t.Fatal("cancelling an unknown request returned a lease")
		}
		_, err := h.cl.CancelWorkerLease(context.Background(), &gorayv1.CancelLeaseRequest{})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("empty request id: err = %v, want InvalidArgument", err)
		}
	})

	t.Run("granted as the context ends", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Resources = cpus(1) })
		d := h.driver()
		held := h.mustLease(d.job, cpus(1))
		ctx := &flagCtx{Context: context.Background()}
		errc := make(chan error, 1)
		go func() {
			_, err := h.r.RequestWorkerLease(ctx, leaseReq(d.job, cpus(1), ""))
			errc <- err
		}()
		waitFor(t, "the request to queue", func() bool { return h.pendingCount() == 1 })
		ctx.cancelled.Store(true)
		h.returnLease(held, false) // grants the waiting request
		if err := <-errc; status.Code(err) != codes.Canceled {
			t.Fatalf("request granted after its context ended: err = %v, want Canceled", err)
		}
		if got := h.availableCPU(); got != resources.Unit {
			t.Fatalf("available CPU = %d, want 1 CPU", got)
		}
		if n := h.leaseCount(); n != 0 {
			t.Fatalf("%d leases left", n)
		}
	})

	t.Run("cancel overtakes the request", func(t *testing.T) {
		h := newHarness(t, nil)
		d := h.driver()
		if rep := h.cancelLease("req-late"); rep.GetReturned() {
			t.Fatal("cancelling a request not seen yet returned a lease")
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		_, err := h.cl.RequestWorkerLease(ctx, leaseReq(d.job, cpus(1), "req-late"))
		if status.Code(err) != codes.Canceled {
			t.Fatalf("request arriving after its cancel: err = %v, want Canceled", err)
		}
		if n, cpu := h.leaseCount(), h.availableCPU(); n != 0 || cpu != 2*resources.Unit {
			t.Fatalf("%d leases and %d CPU available, want none taken", n, cpu)
		}
		// The cancellation is used up: another request with the id is served.
		if _, err := h.cl.RequestWorkerLease(ctx, leaseReq(d.job, cpus(1), "req-late")); err != nil {
			t.Fatalf("a new request reusing the id: %v", err)
		}
	})

	t.Run("grant racing with cancel", func(t *testing.T) {
		h := newHarness(t, nil)
		d := h.driver()
		h.returnLease(h.mustLease(d.job, cpus(1)), false) // an idle worker to grant at once
		for i := range 30 {
			rid := fmt.Sprintf("race-%d", i)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := h.cl.RequestWorkerLease(ctx, leaseReq(d.job, cpus(1), rid))
				done <- err
			}()
			for range i * 50 {
				runtime.Gosched() // vary where the cancel lands
			}
			cancel()
			h.cancelLease(rid)
			<-done
			waitFor(t, "no lease left after "+rid, func() bool {
				return h.leaseCount() == 0 && h.availableCPU() == 2*resources.Unit
			})
		}
	})
}

// objectsFreed reports whether every one of objs was freed in the store.
func (s *fakeStore) objectsFreed(objs ...ids.ObjectID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range objs {
		if !slices.Contains(s.freed, o) {
			return false
		}
	}
	return true
}

func (s *fakeStore) freeCount(o ids.ObjectID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.freed {
		if f == o {
			n++
		}
	}
	return n
}

// createSealed creates and seals an object owned by owner, written by
// creator (nil: the owner).
func (h *harness) createSealed(owner *gorayv1.Address, creator ids.ID) ids.ObjectID {
	h.t.Helper()
	ctx := context.Background()
	oid := ids.ObjectIDFor(ids.New(), 1)
	req := &gorayv1.CreateObjectRequest{ObjectId: oid.Bytes(), DataSize: 8, Owner: owner}
	if !creator.IsNil() {
		req.CreatorId = creator.Bytes()
	}
	if _, err := h.cl.CreateObject(ctx, req); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.cl.SealObject(ctx, &gorayv1.SealObjectRequest{ObjectId: oid.Bytes(), Release: true}); err != nil {
		h.t.Fatal(err)
	}
	return oid
}

func TestOwnerDeathFreesObjects(t *testing.T) {
	t.Run("driver", func(t *testing.T) {
		h := newHarness(t, nil)
		d := h.driver()
		other := &gorayv1.Address{WorkerId: ids.New().Bytes()}
		writer := ids.New()
		own := h.createSealed(d.addr, ids.Nil)
		// A task return the driver owns, written by the executing worker.
		ret := h.createSealed(d.addr, writer)
		early := h.createSealed(d.addr, ids.Nil)
		foreign := h.createSealed(other, ids.Nil)
		h.store.mu.Lock()
		creator, sealer := h.store.objs[ret].client, h.store.sealedBy[ret]
		h.store.mu.Unlock()
		if creator != writer || sealer != writer {
			t.Fatalf("task return created by %s and sealed by %s, want the writer %s", creator, sealer, writer)
		}
		if _, err := h.cl.FreeObjects(context.Background(), &gorayv1.FreeObjectsRequest{ObjectIds: [][]byte{early.Bytes()}}); err != nil {
			t.Fatal(err)
		}
		if h.store.objectsFreed(own) || h.store.objectsFreed(ret) {
			t.Fatal("objects freed while their owner lives")
		}

		d.cancel()
		waitFor(t, "the driver's objects to be freed", func() bool { return h.store.objectsFreed(own, ret) })
		waitFor(t, "the job to end", func() bool {
			n := 0
			h.gcs.locked(func() { n = len(h.gcs.finished) })
			return n == 1
		})
		if h.store.objectsFreed(foreign) {
			t.Error("an object of another owner was freed")
		}
		if n := h.store.freeCount(early); n != 1 {
			t.Errorf("an object freed before its owner died was freed %d times, want once", n)
		}
	})

	t.Run("worker", func(t *testing.T) {
		h := newHarness(t, nil)
		d := h.driver()
		l := h.mustLease(d.job, cpus(1))
		owner := l.GetWorker()
		// Objects the worker owns: one it wrote, one the driver wrote for it.
		mine := h.createSealed(owner, ids.Nil)
		forIt := h.createSealed(owner, d.id)
		drivers := h.createSealed(d.addr, ids.Nil)
		sock := owner.GetUnixPath()
		if _, err := os.Stat(sock); err != nil {
			t.Fatalf("worker socket: %v", err)
		}
		pid := h.workers("LEASED")[0].GetPid()
		if err := syscall.Kill(int(pid), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the worker's objects to be freed", func() bool { return h.store.objectsFreed(mine, forIt) })
		if h.store.objectsFreed(drivers) {
			t.Error("the driver's object was freed when a worker died")
		}
		waitFor(t, "the worker to leave the stats", func() bool { return len(h.workers("")) == 0 })
		// SIGKILL left the socket behind; the raylet removes it.
		if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale worker socket %s: stat err = %v, want it removed", sock, err)
		}
	})
}

// recvDied reads d's session stream until a WORKER_DIED naming dead.
func recvDied(t *testing.T, d *testDriver, dead ids.ID) {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		for {
			c, err := d.stream.Recv()
			if err != nil {
				got <- err
				return
			}
			if c.GetKind() == gorayv1.RayletCommand_WORKER_DIED && bytes.Equal(c.GetWorkerId(), dead.Bytes()) {
				got <- nil
				return
			}
		}
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("driver %s stream ended before WORKER_DIED %s: %v", d.id.Short(), dead.Short(), err)
		}
	case <-time.After(waitfor.Generous):
		t.Fatalf("driver %s got no WORKER_DIED for %s", d.id.Short(), dead.Short())
	}
}

func TestWorkerDiedBroadcast(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Pool.Prestart = intp(1) })
	d1 := h.driver()
	d2 := h.driver()
	var w1, w2 *gorayv1.WorkerStats
	waitFor(t, "a worker per job", func() bool {
		w1, w2 = nil, nil
		for _, w := range h.workers("IDLE") {
			switch {
			case bytes.Equal(w.GetJobId(), d1.job.Bytes()):
				w1 = w
			case bytes.Equal(w.GetJobId(), d2.job.Bytes()):
				w2 = w
			}
		}
		return w1 != nil && w2 != nil
	})
	w1log := filepath.Join(h.dir, "logs", "worker-"+ids.MustFromBytes(w1.GetWorkerId()).String()+".out")
	seenByW1 := func(dead []byte) bool {
		b, _ := os.ReadFile(w1log)
		return strings.Contains(string(b), fmt.Sprintf("testworker: WORKER_DIED %x\n", dead))
	}

	// A worker dies: both drivers and the other worker hear of it.
	if err := syscall.Kill(int(w2.GetPid()), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	dead := ids.MustFromBytes(w2.GetWorkerId())
	recvDied(t, d1, dead)
	recvDied(t, d2, dead)
	waitFor(t, "worker 1 to receive WORKER_DIED for worker 2", func() bool { return seenByW1(w2.GetWorkerId()) })

	// A driver's session ends: the others hear of it.
	d2.cancel()
	recvDied(t, d1, d2.id)
	waitFor(t, "worker 1 to receive WORKER_DIED for driver 2", func() bool { return seenByW1(d2.id.Bytes()) })
	if b, _ := os.ReadFile(w1log); strings.Contains(string(b), fmt.Sprintf("WORKER_DIED %x", w1.GetWorkerId())) {
		t.Error("worker 1 was told of its own death")
	}
}

// workerByID returns the raylet's record of a worker.
func (h *harness) workerByID(id []byte) *worker {
	h.r.pool.mu.Lock()
	defer h.r.pool.mu.Unlock()
	return h.r.pool.workers[ids.MustFromBytes(id)]
}

// reapLater runs the idle reaper as if an hour had passed and reports which
// of ws it decided to kill.
func (h *harness) reapLater(ws ...*worker) []bool {
	h.r.reapIdle(time.Now().Add(time.Hour))
	h.r.pool.mu.Lock()
	defer h.r.pool.mu.Unlock()
	out := make([]bool, len(ws))
	for i, w := range ws {
		out[i] = w.killing
	}
	return out
}

func TestReaperSparesOwnersAndHolders(t *testing.T) {
	t.Run("owns objects", func(t *testing.T) {
		h := newHarness(t, func(c *Config) {
			c.Pool.Prestart = intp(1)
			c.Pool.MaxIdle = intp(0)
		})
		owning := h.driver("TESTWORKER_MODE=owner")
		plain := h.driver()
		var ow, pw *worker
		waitFor(t, "both workers to register and the owner to report", func() bool {
			ow, pw = nil, nil
			h.r.pool.mu.Lock()
			defer h.r.pool.mu.Unlock()
			for _, w := range h.r.pool.workers {
				if w.state != stateIdle {
					continue
				}
				switch w.job.id {
				case owning.job:
					if w.ownsObjects {
						ow = w
					}
				case plain.job:
					pw = w
				}
			}
			return ow != nil && pw != nil
		})
		if got := h.reapLater(ow, pw); !slices.Equal(got, []bool{false, true}) {
			t.Fatalf("reaped (owner, plain) = %v, want only the plain worker", got)
		}
		waitFor(t, "the plain worker to exit", func() bool { return len(h.workers("")) == 1 })
		if ws := h.workers("IDLE"); len(ws) != 1 || !bytes.Equal(ws[0].GetWorkerId(), ow.id.Bytes()) {
			t.Fatalf("workers after reaping = %v, want the owner", ws)
		}
	})

	t.Run("holds leases", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Pool.MaxIdle = intp(0) })
		d := h.driver()
		x := h.mustLease(d.job, cpus(1))
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		// x's worker submits a task: it holds y's lease.
		req := leaseReq(d.job, cpus(1), "")
		req.HolderId = x.GetWorker().GetWorkerId()
		y, err := h.cl.RequestWorkerLease(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		h.returnLease(x, false)
		xw, yw := h.workerByID(x.GetWorker().GetWorkerId()), h.workerByID(y.GetWorker().GetWorkerId())
		if got := h.reapLater(xw, yw); slices.Contains(got, true) {
			t.Fatalf("reaped (holder, leased) = %v, want neither", got)
		}
		h.returnLease(y, false)
		if got := h.reapLater(xw, yw); !slices.Equal(got, []bool{true, true}) {
			t.Fatalf("reaped (former holder, idle) = %v, want both", got)
		}
		waitFor(t, "both workers to exit", func() bool { return len(h.workers("")) == 0 })
	})
}

func (h *harness) notifyBlocked(wid []byte, blocked bool) error {
	_, err := h.cl.NotifyTaskBlocked(context.Background(), &gorayv1.TaskBlockedRequest{WorkerId: wid, Blocked: blocked})
	return err
}

func (h *harness) mustNotifyBlocked(wid []byte, blocked bool) {
	h.t.Helper()
	if err := h.notifyBlocked(wid, blocked); err != nil {
		h.t.Fatalf("NotifyTaskBlocked(%v): %v", blocked, err)
	}
}

// leaseAsync requests a lease in the background.
func (h *harness) leaseAsync(job ids.ID, res resources.Set) (<-chan *gorayv1.LeaseReply, <-chan error) {
	ok, errc := make(chan *gorayv1.LeaseReply, 1), make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		l, err := h.lease(ctx, job, res, ids.Nil)
		if err != nil {
			errc <- err
			return
		}
		ok <- l
	}()
	return ok, errc
}

func TestNotifyTaskBlockedLendsCPU(t *testing.T) {
	t.Run("lend and take back", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Resources = cpus(1) })
		d := h.driver()
		a := h.mustLease(d.job, cpus(1))
		bc, berr := h.leaseAsync(d.job, cpus(1))
		waitFor(t, "the second request to wait", func() bool { return h.pendingCount() == 1 })

		h.mustNotifyBlocked(a.GetWorker().GetWorkerId(), true)
		var b *gorayv1.LeaseReply
		select {
		case b = <-bc:
		case err := <-berr:
			t.Fatalf("second lease: %v", err)
		case <-time.After(waitfor.Generous):
			t.Fatal("the second request was not granted the blocked worker's CPU")
		}
		if got := h.availableCPU(); got != 0 {
			t.Fatalf("available CPU with A blocked and B leased = %d, want 0", got)
		}
		h.mustNotifyBlocked(a.GetWorker().GetWorkerId(), true) // repeated: no-op
		if got := h.availableCPU(); got != 0 {
			t.Fatalf("available CPU after a repeated blocked report = %d, want 0", got)
		}

		h.mustNotifyBlocked(a.GetWorker().GetWorkerId(), false)
		if got := h.availableCPU(); got != -resources.Unit {
			t.Fatalf("available CPU after A resumed = %d, want -1 CPU (oversubscribed)", got)
		}
		cc, cerr := h.leaseAsync(d.job, cpus(1))
		waitFor(t, "a third request to wait", func() bool { return h.pendingCount() == 1 })
		h.returnLease(b, false)
		if got := h.availableCPU(); got != 0 {
			t.Fatalf("available CPU after B returned = %d, want 0", got)
		}
		// Dispatch ran inside the return: the request is still waiting.
		if n := h.pendingCount(); n != 1 {
			t.Fatalf("pending = %d, want the third request still waiting", n)
		}
		h.returnLease(a, false)
		var c *gorayv1.LeaseReply
		select {
		case c = <-cc:
		case err := <-cerr:
			t.Fatalf("third lease: %v", err)
		case <-time.After(waitfor.Generous):
			t.Fatal("the third request was not granted after the returns")
		}
		h.returnLease(c, false)
		if got := h.availableCPU(); got != resources.Unit {
			t.Fatalf("available CPU at the end = %d, want 1 CPU", got)
		}
	})

	t.Run("nothing granted while oversubscribed", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Resources = cpus(1) })
		d := h.driver()
		a := h.mustLease(d.job, cpus(1))
		h.mustNotifyBlocked(a.GetWorker().GetWorkerId(), true)
		b := h.mustLease(d.job, cpus(1))
		h.mustNotifyBlocked(a.GetWorker().GetWorkerId(), false)
		if got := h.availableCPU(); got != -resources.Unit {
			t.Fatalf("available CPU = %d, want -1 CPU", got)
		}
		// A fractional request does not fit a negative balance either.
		_, errc := h.leaseAsync(d.job, cpus(0.5))
		waitFor(t, "the request to wait", func() bool { return h.pendingCount() == 1 })
		h.returnLease(b, false)
		if n := h.pendingCount(); n != 1 {
			t.Fatalf("pending = %d with 0 CPU available, want 1", n)
		}
		select {
		case err := <-errc:
			t.Fatalf("waiting request failed: %v", err)
		default:
		}
		h.returnLease(a, false)
		waitFor(t, "the request to be granted", func() bool { return h.pendingCount() == 0 })
	})

	t.Run("return while blocked", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Resources = cpus(1) })
		d := h.driver()
		a := h.mustLease(d.job, cpus(1))
		h.mustNotifyBlocked(a.GetWorker().GetWorkerId(), true)
		if got := h.availableCPU(); got != resources.Unit {
			t.Fatalf("available CPU with A blocked = %d, want 1 CPU", got)
		}
		h.returnLease(a, false)
		if got := h.availableCPU(); got != resources.Unit {
			t.Fatalf("available CPU after returning a blocked lease = %d, want 1 CPU", got)
		}
		// The worker's next lease starts unblocked; a late resume report is a no-op.
		h.mustNotifyBlocked(a.GetWorker().GetWorkerId(), false)
		if got := h.availableCPU(); got != resources.Unit {
			t.Fatalf("available CPU after a stale resume = %d, want 1 CPU", got)
		}
	})

	t.Run("death while blocked", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Resources = cpus(1) })
		d := h.driver()
		a := h.mustLease(d.job, cpus(1))
		h.mustNotifyBlocked(a.GetWorker().GetWorkerId(), true)
		pid := h.workers("LEASED")[0].GetPid()
		if err := syscall.Kill(int(pid), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the worker to leave the stats", func() bool { return len(h.workers("")) == 0 })
		if got := h.availableCPU(); got != resources.Unit {
			t.Fatalf("available CPU after a blocked worker died = %d, want 1 CPU", got)
		}
	})

	t.Run("unknown and invalid workers", func(t *testing.T) {
		h := newHarness(t, nil)
		d := h.driver()
		if err := h.notifyBlocked(ids.New().Bytes(), true); status.Code(err) != codes.NotFound {
			t.Fatalf("unknown worker: err = %v, want NotFound", err)
		}
		if err := h.notifyBlocked([]byte("short"), true); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("bad worker id: err = %v, want InvalidArgument", err)
		}
		if err := h.notifyBlocked(d.id.Bytes(), true); err != nil {
			t.Fatalf("a driver's report: %v, want a no-op", err)
		}
		if got := h.availableCPU(); got != 2*resources.Unit {
			t.Fatalf("available CPU = %d after no-op reports", got)
		}
	})
}
