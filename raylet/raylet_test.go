package raylet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/waitfor"
)

func TestDriverRegistersAndPrestartsWorkers(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Pool.Prestart = intp(2) })
	d := h.driver()

	if d.reg.GetKind() != gorayv1.RayletCommand_REGISTERED || d.job.IsNil() {
		t.Fatalf("registration reply = %v, want REGISTERED with a job id", d.reg)
	}
	if got := d.reg.GetGcsAddress(); got != "127.0.0.1:6379" {
		t.Errorf("GCS address in registration = %q", got)
	}
	if got := d.reg.GetStore(); got.GetFdSocket() != "/tmp/fake-store.sock" || got.GetCapacity() != 1<<20 {
		t.Errorf("store info = %v", got)
	}
	if got := d.reg.GetNode(); !bytes.Equal(got.GetNodeId(), h.r.NodeID().Bytes()) || got.GetRayletUnix() == "" {
		t.Errorf("node info = %v", got)
	}
	h.gcs.locked(func() {
		if len(h.gcs.jobs) != 1 || h.gcs.jobs[0].GetBinaryPath() != testworkerBin ||
			!bytes.Equal(h.gcs.jobs[0].GetJobId(), d.job.Bytes()) || h.gcs.jobs[0].GetState() != "RUNNING" {
			t.Errorf("GCS AddJob calls = %v", h.gcs.jobs)
		}
	})

	waitFor(t, "2 prestarted workers to register", func() bool { return len(h.workers("IDLE")) == 2 })
	st := h.stats()
	for _, w := range st.GetWorkers() {
		if !bytes.Equal(w.GetJobId(), d.job.Bytes()) || w.GetPid() == 0 || w.GetAddress().GetUnixPath() == "" {
			t.Errorf("worker stats = %v", w)
		}
	}
	if len(st.GetClients()) != 3 {
		t.Errorf("clients = %v, want the driver and 2 workers", st.GetClients())
	}
	if !slices.ContainsFunc(st.GetClients(), func(a *gorayv1.Address) bool { return a.GetUnixPath() == d.addr.GetUnixPath() }) {
		t.Errorf("clients %v lack the driver", st.GetClients())
	}

	// The worker saw the environment the raylet set: its job id and log
	// level are in its stdout log.
	wid := ids.MustFromBytes(st.GetWorkers()[0].GetWorkerId())
	logPath := filepath.Join(h.dir, "logs", "worker-"+wid.String()+".out")
	want := fmt.Sprintf("testworker registered job=%x log_level=debug", d.job.Bytes())
	waitFor(t, "the worker's log line", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), want)
	})
}

func TestDuplicateJobRejected(t *testing.T) {
	h := newHarness(t, nil)
	d := h.driver()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := h.cl.DriverSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&gorayv1.DriverMessage{Job: &gorayv1.JobInfo{JobId: d.job.Bytes(), BinaryPath: testworkerBin, BinarySha256: testworkerSHA(t)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second driver for job: err = %v, want AlreadyExists", err)
	}
}

func TestLeaseGrantReturnReuse(t *testing.T) {
	h := newHarness(t, nil)
	d := h.driver()

	l1 := h.mustLease(d.job, cpus(1))
	if l1.GetWorker().GetUnixPath() == "" || len(l1.GetLeaseId()) != ids.Size {
		t.Fatalf("lease reply = %v", l1)
	}
	if got := h.workers("LEASED"); len(got) != 1 || !bytes.Equal(got[0].GetWorkerId(), l1.GetWorker().GetWorkerId()) {
		t.Fatalf("leased workers = %v", got)
	}
	if got := h.availableCPU(); got != 1*resources.Unit {
		t.Fatalf("available CPU = %d, want 1 CPU", got)
	}
	h.returnLease(l1, false)
	if got := h.workers("IDLE"); len(got) != 1 {
		t.Fatalf("idle workers after return = %v", got)
	}
	if got := h.availableCPU(); got != 2*resources.Unit {
		t.Fatalf("available CPU after return = %d, want 2 CPUs", got)
	}

	l2 := h.mustLease(d.job, cpus(1))
	if !bytes.Equal(l2.GetWorker().GetWorkerId(), l1.GetWorker().GetWorkerId()) {
		t.Fatalf("second lease got worker %x, want reused %x", l2.GetWorker().GetWorkerId(), l1.GetWorker().GetWorkerId())
	}
	if bytes.Equal(l2.GetLeaseId(), l1.GetLeaseId()) {
		t.Fatal("second lease reused the lease id")
	}
	if n := len(h.workers("")); n != 1 {
		t.Fatalf("%d worker processes, want 1", n)
	}
	h.returnLease(l2, false)
	// Returning an ended lease again is harmless.
	h.returnLease(l2, false)
}

func TestFractionalCPU(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Resources = cpus(1) })
	d := h.driver()

	a := h.mustLease(d.job, cpus(0.5))
	b := h.mustLease(d.job, cpus(0.5))
	if got := h.availableCPU(); got != 0 {
		t.Fatalf("available CPU = %d, want 0", got)
	}

	third := make(chan *gorayv1.LeaseReply, 1)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		l, err := h.lease(ctx, d.job, cpus(0.5), ids.Nil)
		if err != nil {
			errc <- err
			return
		}
		third <- l
	}()
	waitFor(t, "the third request to queue", func() bool { return h.pendingCount() == 1 })
	if p := h.stats().GetPending()[0]; p.GetInfeasible() {
		t.Fatalf("pending %v marked infeasible", p)
	}
	select {
	case l := <-third:
		t.Fatalf("third 0.5 CPU lease granted while 1 CPU is leased: %v", l)
	default:
	}

	h.returnLease(a, false)
	var c *gorayv1.LeaseReply
	select {
	case c = <-third:
	case err := <-errc:
		t.Fatalf("third lease: %v", err)
	case <-time.After(waitfor.Generous):
		t.Fatal("third lease not granted after a return")
	}
	if got := h.availableCPU(); got != 0 {
		t.Fatalf("available CPU = %d, want 0", got)
	}
	h.returnLease(b, false)
	h.returnLease(c, false)
	if got := h.availableCPU(); got != resources.Unit {
		t.Fatalf("available CPU after returns = %d, want 1 CPU", got)
	}
}

func TestCancelledLeaseTakesNothing(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		hold bool // hold the whole node first so the request queues for resources
	}{
		{name: "waiting for resources", hold: true},
		{name: "waiting for a worker", env: []string{"TESTWORKER_MODE=noregister"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.Resources = cpus(1) })
			d := h.driver(tt.env...)
			var held *gorayv1.LeaseReply
			if tt.hold {
				held = h.mustLease(d.job, cpus(1))
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := h.lease(ctx, d.job, cpus(1), ids.Nil)
				errc <- err
			}()
			waitFor(t, "the request to queue", func() bool { return h.pendingCount() == 1 })
			cancel()
			if err := <-errc; status.Code(err) != codes.Canceled {
				t.Fatalf("cancelled lease: err = %v, want Canceled", err)
			}
			waitFor(t, "the request to leave the queue", func() bool { return h.pendingCount() == 0 })
			if held != nil {
				h.returnLease(held, false)
			}
			if got := h.availableCPU(); got != resources.Unit {
				t.Fatalf("available CPU = %d, want all of it (1 CPU)", got)
			}
			if n := h.leaseCount(); n != 0 {
				t.Fatalf("%d leases left", n)
			}
		})
	}
}

func TestFairDispatchAcrossClasses(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Resources = resources.Set{resources.CPU: resources.Unit, "slot": 10 * resources.Unit}
	})
	d := h.driver()
	hold := h.mustLease(d.job, cpus(1))

	type grant struct {
		class string
		l     *gorayv1.LeaseReply
		err   error
	}
	grants := make(chan grant, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submit := func(class string, res resources.Set) {
		go func() {
			l, err := h.lease(ctx, d.job, res, ids.Nil)
			grants <- grant{class, l, err}
		}()
	}
	const flood = 6
	for i := range flood {
		submit("A", cpus(1))
		waitFor(t, "request A to queue", func() bool { return h.pendingCount() == int32(i+1) })
	}
	submit("B", resources.Set{resources.CPU: resources.Unit, "slot": resources.Unit})
	waitFor(t, "request B to queue", func() bool { return h.pendingCount() == flood+1 })

	h.returnLease(hold, false)
	var order []string
	for range flood + 1 {
		g := <-grants
		if g.err != nil {
			t.Fatalf("lease %s: %v", g.class, g.err)
		}
		order = append(order, g.class)
		h.returnLease(g.l, false)
	}
	if i := slices.Index(order, "B"); i < 0 || i > 1 {
		t.Fatalf("grant order %v: class B waited behind the flood of A", order)
	}
}

func TestInfeasibleDemandReported(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Resources = cpus(1)
		c.HeartbeatPeriod = 10 * time.Millisecond
	})
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- h.r.Run(runCtx) }()
	defer func() { stopRun(); <-runDone }()

	d := h.driver()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.lease(ctx, d.job, cpus(4), ids.Nil)
		errc <- err
	}()
	waitFor(t, "the infeasible request to queue", func() bool { return h.pendingCount() == 1 })
	p := h.stats().GetPending()[0]
	if !p.GetInfeasible() || p.GetCount() != 1 || p.GetResources().GetAmounts()[resources.CPU] != 4*resources.Unit {
		t.Fatalf("pending demand = %v, want 1 infeasible request for 4 CPUs", p)
	}
	waitFor(t, "a heartbeat reporting the infeasible demand", func() bool {
		found := false
		h.gcs.locked(func() {
			for _, hb := range h.gcs.heartbeats {
				for _, pd := range hb.GetPending() {
					found = found || pd.GetInfeasible()
				}
			}
		})
		return found
	})

	// A zero-resource (actor) request is feasible and not blocked by it.
	actor := ids.New()
	zctx, zcancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer zcancel()
	l, err := h.lease(zctx, d.job, resources.Set{}, actor)
	if err != nil {
		t.Fatalf("zero-resource lease: %v", err)
	}
	if got := h.workers("ACTOR"); len(got) != 1 || !bytes.Equal(got[0].GetActorId(), actor.Bytes()) {
		t.Fatalf("actor workers = %v", got)
	}
	if !bytes.Equal(h.workers("ACTOR")[0].GetWorkerId(), l.GetWorker().GetWorkerId()) {
		t.Fatal("actor lease and worker stats disagree")
	}

	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("infeasible lease after cancel: err = %v, want Canceled", err)
	}
}

func TestWorkerKilledReleasesLease(t *testing.T) {
	for _, actor := range []bool{false, true} {
		t.Run(fmt.Sprintf("actor=%v", actor), func(t *testing.T) {
			h := newHarness(t, nil)
			d := h.driver()
			actorID := ids.Nil
			if actor {
				actorID = ids.New()
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
			defer cancel()
			l, err := h.lease(ctx, d.job, cpus(1), actorID)
			if err != nil {
				t.Fatal(err)
			}
			wid := ids.MustFromBytes(l.GetWorker().GetWorkerId())
			ws := h.workers("")
			if len(ws) != 1 {
				t.Fatalf("workers = %v", ws)
			}
			pid := ws[0].GetPid()
			if err := syscall.Kill(int(pid), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the lease's CPU to return", func() bool { return h.availableCPU() == 2*resources.Unit })
			waitFor(t, "the dead worker to leave the stats", func() bool { return len(h.workers("")) == 0 })
			waitFor(t, "the worker's store pins to be released", func() bool { return h.store.releasedClient(wid) })
			if !processGone(pid) {
				t.Fatalf("process %d still exists", pid)
			}
			if !actor {
				h.gcs.locked(func() {
					if len(h.gcs.failures) != 0 {
						t.Errorf("non-actor death reported: %v", h.gcs.failures)
					}
				})
				return
			}
			waitFor(t, "ReportWorkerFailure", func() bool {
				n := 0
				h.gcs.locked(func() { n = len(h.gcs.failures) })
				return n == 1
			})
			h.gcs.locked(func() {
				f := h.gcs.failures[0]
				if !bytes.Equal(f.GetWorkerId(), wid.Bytes()) || !bytes.Equal(f.GetNodeId(), h.r.NodeID().Bytes()) {
					t.Errorf("failure report = %v", f)
				}
				if !strings.Contains(f.GetReason(), "signal: killed") {
					t.Errorf("failure reason = %q, want it to say the process was killed", f.GetReason())
				}
			})
		})
	}
}

func TestDriverExitEndsJob(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Pool.Prestart = intp(2) })
	d := h.driver()
	waitFor(t, "prestarted workers", func() bool { return len(h.workers("IDLE")) == 2 })
	normal := h.mustLease(d.job, cpus(1))
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	if _, err := h.lease(ctx, d.job, resources.Set{}, ids.New()); err != nil {
		t.Fatal(err)
	}
	_ = normal
	// The driver leaves an unsealed object behind.
	oid := ids.ObjectIDFor(ids.New(), 1)
	if _, err := h.cl.CreateObject(ctx, &gorayv1.CreateObjectRequest{ObjectId: oid.Bytes(), DataSize: 8, Owner: d.addr}); err != nil {
		t.Fatal(err)
	}
	pids := workerPIDs(h.workers(""))
	if len(pids) != 2 {
		t.Fatalf("pids = %v, want 2 (a leased and an actor worker)", pids)
	}

	d.cancel()
	waitFor(t, "every worker of the job to exit", func() bool {
		for _, pid := range pids {
			if !processGone(pid) {
				return false
			}
		}
		return true
	})
	waitFor(t, "the job to be marked finished", func() bool {
		ok := false
		h.gcs.locked(func() {
			ok = len(h.gcs.finished) == 1 && bytes.Equal(h.gcs.finished[0], d.job.Bytes())
		})
		return ok
	})
	waitFor(t, "the driver's pins to be released", func() bool { return h.store.releasedClient(d.id) })
	h.store.mu.Lock()
	aborted := slices.Contains(h.store.aborted, oid)
	h.store.mu.Unlock()
	if !aborted {
		t.Error("the driver's unsealed object was not aborted")
	}
	waitFor(t, "all resources back", func() bool { return h.availableCPU() == 2*resources.Unit })
	if _, err := h.lease(ctx, d.job, cpus(1), ids.Nil); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("lease for a finished job: err = %v, want FailedPrecondition", err)
	}
}

func TestShutdownKillsEverything(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Pool.Prestart = intp(2) })
	runDone := make(chan error, 1)
	go func() { runDone <- h.r.Run(context.Background()) }()
	waitFor(t, "node registration", func() bool {
		n := 0
		h.gcs.locked(func() { n = len(h.gcs.nodes) })
		return n == 1
	})
	h.gcs.locked(func() {
		n := h.gcs.nodes[0]
		if n.GetRayletUnix() != filepath.Join(h.dir, "raylet.sock") || n.GetSessionDir() != h.dir ||
			n.GetPid() != int32(os.Getpid()) || n.GetTotal().GetAmounts()[resources.CPU] != 2*resources.Unit ||
			n.GetLabels()["zone"] != "test" || n.GetHostname() == "" {
			t.Errorf("registered node = %v", n)
		}
	})

	d := h.driver()
	waitFor(t, "prestarted workers", func() bool { return len(h.workers("IDLE")) == 2 })
	h.mustLease(d.job, cpus(2))
	actx, acancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer acancel()
	if _, err := h.lease(actx, d.job, resources.Set{}, ids.New()); err != nil {
		t.Fatal(err)
	}
	pids := workerPIDs(h.workers(""))
	if len(pids) != 2 {
		t.Fatalf("pids = %v, want a leased and an actor worker", pids)
	}

	waiting := make(chan error, 1)
	go func() {
		_, err := h.lease(context.Background(), d.job, cpus(1), ids.Nil)
		waiting <- err
	}()
	waitFor(t, "a request to wait", func() bool { return h.pendingCount() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	if err := h.r.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for _, pid := range pids {
		if !processGone(pid) {
			t.Errorf("worker process %d survived Shutdown", pid)
		}
	}
	if err := <-waiting; status.Code(err) != codes.Unavailable {
		t.Errorf("waiting lease after Shutdown: err = %v, want Unavailable", err)
	}
	if err := <-runDone; err != nil {
		t.Errorf("Run: %v", err)
	}
	cmd, err := d.stream.Recv()
	if err != nil || cmd.GetKind() != gorayv1.RayletCommand_EXIT {
		t.Errorf("driver stream after Shutdown: %v, %v; want EXIT", cmd, err)
	}
	h.gcs.locked(func() {
		if len(h.gcs.unregistered) != 1 {
			t.Errorf("UnregisterNode calls = %d, want 1", len(h.gcs.unregistered))
		}
		// One node-wide failure report covers the actor: a failure, not a
		// kill, so that an actor with restarts left restarts elsewhere.
		if f := h.gcs.failures; len(f) != 1 || len(f[0].GetWorkerId()) != 0 ||
			!bytes.Equal(f[0].GetNodeId(), h.r.NodeID().Bytes()) || f[0].GetReason() != "node shutting down" || f[0].GetPermanent() {
			t.Errorf("failure reports = %v, want one (not permanent) for the node", f)
		}
	})
	if err := h.r.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if _, err := h.lease(ctx, d.job, cpus(1), ids.Nil); status.Code(err) != codes.Unavailable {
		t.Errorf("lease after Shutdown: err = %v, want Unavailable", err)
	}
}

func TestDisconnectWorkerKillsIt(t *testing.T) {
	h := newHarness(t, nil)
	d := h.driver()
	l := h.mustLease(d.job, cpus(1))
	pid := h.workers("LEASED")[0].GetPid()
	h.returnLease(l, true)
	waitFor(t, "the disconnected worker to exit", func() bool { return processGone(pid) })
	l2 := h.mustLease(d.job, cpus(1))
	if bytes.Equal(l2.GetWorker().GetWorkerId(), l.GetWorker().GetWorkerId()) {
		t.Fatal("a disconnected worker was leased again")
	}
}

func TestStartTimeoutKillsWorker(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Pool.Prestart = intp(1)
		c.Pool.StartTimeout = 200 * time.Millisecond
	})
	h.driver("TESTWORKER_MODE=noregister")
	var pid int32
	waitFor(t, "the worker to start", func() bool {
		ws := h.workers("STARTING")
		if len(ws) == 1 && ws[0].GetPid() != 0 {
			pid = ws[0].GetPid()
			return true
		}
		return false
	})
	waitFor(t, "the unregistered worker to be killed", func() bool { return processGone(pid) })
	waitFor(t, "the worker to leave the stats", func() bool { return len(h.workers("")) == 0 })
}

func TestWorkersThatCannotStartFailLeases(t *testing.T) {
	tests := []struct {
		name string
		bin  string
		env  []string
		want string
	}{
		{name: "binary removed", bin: "goray-app", want: "goray-app cannot be read"},
		{name: "crashing worker", bin: "", env: []string{"TESTWORKER_MODE=crash"}, want: "exit status 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			bin := testworkerBin
			if tt.bin != "" {
				// Removed after the driver registered (this test's process,
				// whose executable is not the job's, is the driver).
				bin = filepath.Join(t.TempDir(), tt.bin)
				copyExecutable(t, testworkerBin, bin)
			}
			d, err := h.tryDriver(bin, tt.env...)
			if err != nil {
				t.Fatal(err)
			}
			if tt.bin != "" {
				if err := os.Remove(bin); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
			defer cancel()
			_, err = h.lease(ctx, d.job, cpus(1), ids.Nil)
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("lease: err = %v, want FailedPrecondition mentioning %q", err, tt.want)
			}
			if got := h.availableCPU(); got != 2*resources.Unit {
				t.Fatalf("available CPU = %d after failed lease", got)
			}
		})
	}
}

func TestIdleWorkersReaped(t *testing.T) {
	t.Run("run loop", func(t *testing.T) {
		h := newHarness(t, func(c *Config) {
			c.Pool.Prestart = intp(2)
			c.Pool.MaxIdle = intp(0)
			c.Pool.IdleTimeout = 50 * time.Millisecond
			c.GCS = nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		runDone := make(chan error, 1)
		go func() { runDone <- h.r.Run(ctx) }()
		defer func() { cancel(); <-runDone }()
		h.driver()
		// A worker may be reaped before the other registers: collect the
		// pids of registered workers as they appear.
		pids := map[int32]bool{}
		waitFor(t, "workers to register", func() bool {
			for _, pid := range workerPIDs(h.workers("IDLE")) {
				pids[pid] = true
			}
			return len(pids) == 2
		})
		waitFor(t, "idle workers to be reaped", func() bool {
			if len(h.workers("")) != 0 {
				return false
			}
			for pid := range pids {
				if !processGone(pid) {
					return false
				}
			}
			return true
		})
	})
	t.Run("keeps MaxIdle", func(t *testing.T) {
		h := newHarness(t, func(c *Config) {
			c.Pool.Prestart = intp(3)
			c.Pool.MaxIdle = intp(1)
		})
		h.driver()
		waitFor(t, "workers to register", func() bool { return len(h.workers("IDLE")) == 3 })
		// Not yet idle for IdleTimeout (60s default): nothing is reaped.
		h.r.reapIdle(time.Now())
		if n := len(h.workers("IDLE")); n != 3 {
			t.Fatalf("%d idle workers after an early reap, want 3", n)
		}
		h.r.reapIdle(time.Now().Add(time.Hour))
		waitFor(t, "surplus idle workers to exit", func() bool { return len(h.workers("")) == 1 })
	})
}

func TestWorkerOutputCopied(t *testing.T) {
	var buf syncBuffer
	h := newHarness(t, func(c *Config) {
		c.Pool.Prestart = intp(1)
		c.WorkerOutput = &buf
	})
	d := h.driver()
	var w *gorayv1.WorkerStats
	waitFor(t, "the worker to register", func() bool {
		ws := h.workers("IDLE")
		if len(ws) == 1 {
			w = ws[0]
		}
		return w != nil
	})
	wid := ids.MustFromBytes(w.GetWorkerId())
	want := fmt.Sprintf("(worker %s pid=%d) testworker registered job=%x", wid.Short(), w.GetPid(), d.job.Bytes())
	waitFor(t, "the prefixed output line", func() bool { return strings.Contains(buf.String(), want) })
	waitFor(t, "the line in the log file", func() bool {
		b, _ := os.ReadFile(filepath.Join(h.dir, "logs", "worker-"+wid.String()+".out"))
		return strings.Contains(string(b), "testworker registered")
	})
}

func TestHeartbeatDeadAndShutdownNodeCloseDone(t *testing.T) {
	t.Run("heartbeat says dead", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.HeartbeatPeriod = 10 * time.Millisecond })
		h.gcs.locked(func() { h.gcs.dead = true })
		ctx, cancel := context.WithCancel(context.Background())
		runDone := make(chan error, 1)
		go func() { runDone <- h.r.Run(ctx) }()
		defer func() { cancel(); <-runDone }()
		select {
		case <-h.r.Done():
		case <-time.After(waitfor.Generous):
			t.Fatal("Done not closed after the GCS declared the node dead")
		}
		h.gcs.locked(func() {
			hb := h.gcs.heartbeats[0]
			if !bytes.Equal(hb.GetNodeId(), h.r.NodeID().Bytes()) || hb.GetAvailable().GetAmounts()[resources.CPU] != 2*resources.Unit || hb.GetStoreCapacity() != 1<<20 {
				t.Errorf("heartbeat = %v", hb)
			}
		})
	})
	t.Run("ShutdownNode", func(t *testing.T) {
		h := newHarness(t, nil)
		select {
		case <-h.r.Done():
			t.Fatal("Done closed before ShutdownNode")
		default:
		}
		if _, err := h.cl.ShutdownNode(context.Background(), &gorayv1.ShutdownNodeRequest{Reason: "test"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.r.Done():
		default:
			t.Fatal("Done not closed by ShutdownNode")
		}
	})
}

func TestUnknownWorkerRejected(t *testing.T) {
	h := newHarness(t, nil)
	stream, err := h.cl.WorkerSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&gorayv1.WorkerMessage{WorkerId: ids.New().Bytes()}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown worker: err = %v, want NotFound", err)
	}
}

func TestStoreRPCs(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	owner := ids.New()
	oid := ids.ObjectIDFor(ids.New(), 0)

	cr, err := h.cl.CreateObject(ctx, &gorayv1.CreateObjectRequest{
		ObjectId: oid.Bytes(), DataSize: 100, Metadata: []byte("m"), Owner: &gorayv1.Address{WorkerId: owner.Bytes()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cr.GetOffset() != 0 {
		t.Fatalf("offset = %d", cr.GetOffset())
	}
	if _, err := h.cl.SealObject(ctx, &gorayv1.SealObjectRequest{ObjectId: oid.Bytes(), Release: true}); err != nil {
		t.Fatal(err)
	}
	h.store.mu.Lock()
	sealer := h.store.sealedBy[oid]
	h.store.mu.Unlock()
	if sealer != owner {
		t.Fatalf("sealed by %s, want the creator %s", sealer, owner)
	}

	reader := ids.New()
	missing := ids.ObjectIDFor(ids.New(), 0)
	gr, err := h.cl.GetObjects(ctx, &gorayv1.GetObjectsRequest{ObjectIds: [][]byte{oid.Bytes(), missing.Bytes()}, ClientId: reader.Bytes()})
	if err != nil {
		t.Fatal(err)
	}
	if got := gr.GetObjects(); len(got) != 2 || !got[0].GetFound() || got[0].GetDataSize() != 100 || string(got[0].GetMetadata()) != "m" || got[1].GetFound() {
		t.Fatalf("GetObjects = %v", got)
	}
	st := h.stats()
	if st.GetStoreUsed() != 100 || st.GetStoreObjects() != 1 || len(st.GetStoreObjectsList()) != 1 {
		t.Fatalf("store stats: used %d objects %d list %v", st.GetStoreUsed(), st.GetStoreObjects(), st.GetStoreObjectsList())
	}
	if _, err := h.cl.ReleaseObjects(ctx, &gorayv1.ReleaseObjectsRequest{ObjectIds: [][]byte{oid.Bytes()}, ClientId: reader.Bytes()}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.cl.FreeObjects(ctx, &gorayv1.FreeObjectsRequest{ObjectIds: [][]byte{oid.Bytes()}}); err != nil {
		t.Fatal(err)
	}
	h.store.mu.Lock()
	released, freed := h.store.releases[reader], h.store.freed
	h.store.mu.Unlock()
	if !slices.Equal(released, []ids.ObjectID{oid}) || !slices.Equal(freed, []ids.ObjectID{oid}) {
		t.Fatalf("released %v freed %v", released, freed)
	}
	if _, err := h.cl.GetObjects(ctx, &gorayv1.GetObjectsRequest{ObjectIds: [][]byte{[]byte("short")}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad object id: err = %v, want InvalidArgument", err)
	}
}

func TestStoreErrorCodes(t *testing.T) {
	oid := ids.ObjectIDFor(ids.New(), 7)
	tests := []struct {
		name string
		err  error
		code codes.Code
	}{
		{"store full", storeFullError{oid}, codes.ResourceExhausted},
		{"wrapped store full", fmt.Errorf("create: %w", storeFullError{oid}), codes.ResourceExhausted},
		{"exists", fmt.Errorf("object %s already exists", oid), codes.AlreadyExists},
		{"other", errors.New("object " + oid.String() + " is not sealed"), codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.store.createErr = tt.err
			_, err := h.cl.CreateObject(context.Background(), &gorayv1.CreateObjectRequest{ObjectId: oid.Bytes(), DataSize: 1})
			if status.Code(err) != tt.code {
				t.Fatalf("code = %v, want %v (err %v)", status.Code(err), tt.code, err)
			}
			if status.Convert(err).Message() != tt.err.Error() {
				t.Fatalf("message = %q, want %q", status.Convert(err).Message(), tt.err.Error())
			}
		})
	}
}

func TestResolvePoolDefaults(t *testing.T) {
	tests := []struct {
		name string
		cpus float64
		pool config.WorkerPool
		want poolSettings
	}{
		{"defaults 8 CPUs", 8, config.WorkerPool{}, poolSettings{prestart: 2, maxIdle: 8, idleTimeout: DefaultIdleTimeout, startTimeout: DefaultStartTimeout, maxStarting: 8}},
		{"defaults 1 CPU", 1, config.WorkerPool{}, poolSettings{prestart: 1, maxIdle: 1, idleTimeout: DefaultIdleTimeout, startTimeout: DefaultStartTimeout, maxStarting: 2}},
		{"explicit", 4, config.WorkerPool{Prestart: intp(0), MaxIdle: intp(3), IdleTimeout: time.Second, StartTimeout: 2 * time.Second},
			poolSettings{prestart: 0, maxIdle: 3, idleTimeout: time.Second, startTimeout: 2 * time.Second, maxStarting: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolvePool(tt.pool, cpus(tt.cpus)); got != tt.want {
				t.Fatalf("resolvePool = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A process that holds leases (it submitted tasks or created actors) and
// dies must not keep their resources.
func TestLeaseHolderDeathReturnsItsLeases(t *testing.T) {
	h := newHarness(t, nil)
	d := h.driver()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	// The holder: a worker leased with 0 CPUs (like an actor that submits tasks).
	holderLease, err := h.lease(ctx, d.job, resources.Set{}, ids.Nil)
	if err != nil {
		t.Fatal(err)
	}
	holder := holderLease.GetWorker().GetWorkerId()
	// It leases a second worker with 1 CPU for its own tasks.
	held, err := h.cl.RequestWorkerLease(ctx, &gorayv1.LeaseRequest{JobId: d.job.Bytes(), Resources: resourcesProto(cpus(1)), HolderId: holder})
	if err != nil {
		t.Fatal(err)
	}
	if h.availableCPU() != 1*resources.Unit {
		t.Fatalf("available CPU %d with one 1-CPU lease out", h.availableCPU())
	}
	var holderPid int32
	for _, w := range h.workers("") {
		if bytes.Equal(w.GetWorkerId(), holder) {
			holderPid = w.GetPid()
		}
	}
	if holderPid == 0 {
		t.Fatal("holder worker not in stats")
	}
	if err := syscall.Kill(int(holderPid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead holder's lease to return its CPU", func() bool { return h.availableCPU() == 2*resources.Unit })
	// The worker behind the returned lease is reusable.
	if _, err := h.cl.ReturnWorkerLease(ctx, &gorayv1.ReturnLeaseRequest{LeaseId: held.GetLeaseId()}); err != nil {
		t.Fatalf("returning an already returned lease: %v", err)
	}
}

// TestRemoteLeaseHolderDeathReturnsItsLeases: a process of another node
// that holds a lease here (it submitted a task that runs here) and dies,
// as told by its node's WorkersDied, no longer holds the lease: its CPU
// comes back and the worker behind it, whose task has no one to return
// to, is killed (Ray kills the workers leased by an owner that died). A
// task of a removed placement group whose children ran on another node
// left their leases held until its job ended.
func TestRemoteLeaseHolderDeathReturnsItsLeases(t *testing.T) {
	h := newHarness(t, nil)
	d := h.driver()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	remote := ids.New() // a worker of another node
	held, err := h.cl.RequestWorkerLease(ctx, &gorayv1.LeaseRequest{JobId: d.job.Bytes(), Resources: resourcesProto(cpus(1)), HolderId: remote.Bytes()})
	if err != nil {
		t.Fatal(err)
	}
	if h.availableCPU() != 1*resources.Unit {
		t.Fatalf("available CPU %d with one 1-CPU lease out", h.availableCPU())
	}
	pid := held.GetWorkerPid()
	if _, err := h.r.WorkersDied(ctx, &gorayv1.WorkersDiedRequest{NodeId: ids.New().Bytes(), WorkerIds: [][]byte{remote.Bytes()}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead remote holder's lease to return its CPU", func() bool { return h.availableCPU() == 2*resources.Unit })
	waitFor(t, "the worker of the dead holder's lease to be gone", func() bool {
		for _, w := range h.workers("") {
			if bytes.Equal(w.GetWorkerId(), held.GetWorker().GetWorkerId()) {
				return false
			}
		}
		return true
	})
	waitFor(t, "the worker's process to exit", func() bool { return processGone(pid) })
}

// BenchmarkLeaseGrantReturn measures one scheduler round: a lease request
// granted to an idle worker and returned.
func BenchmarkLeaseGrantReturn(b *testing.B) {
	h := newHarness(b, nil)
	d := h.driver()
	ctx := context.Background()
	if _, err := h.cl.ReturnWorkerLease(ctx, &gorayv1.ReturnLeaseRequest{LeaseId: h.mustLease(d.job, cpus(1)).GetLeaseId()}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := h.lease(ctx, d.job, cpus(1), ids.Nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.cl.ReturnWorkerLease(ctx, &gorayv1.ReturnLeaseRequest{LeaseId: l.GetLeaseId()}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDeadNodesLeaseHoldersLoseTheirLeases: when a node is declared dead,
// the leases that processes of that node held here end and their workers
// are stopped (the processes died with their node); a lease held from a
// live node stays. Before, they kept their CPUs until their job ended.
func TestDeadNodesLeaseHoldersLoseTheirLeases(t *testing.T) {
	h := newHarness(t, nil)
	d := h.driver()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	doomed, live := ids.New(), ids.New()
	h.gcs.locked(func() {
		h.gcs.nodes = append(h.gcs.nodes, &gorayv1.NodeInfo{NodeId: doomed.Bytes(), State: "ALIVE"}, &gorayv1.NodeInfo{NodeId: live.Bytes(), State: "ALIVE"})
	})
	h.r.syncCluster(ctx)
	lease := func(node ids.ID) *gorayv1.LeaseReply {
		t.Helper()
		l, err := h.cl.RequestWorkerLease(ctx, &gorayv1.LeaseRequest{JobId: d.job.Bytes(), Resources: resourcesProto(cpus(1)),
			HolderId: ids.New().Bytes(), HolderNodeId: node.Bytes()})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	gone, kept := lease(doomed), lease(live)
	if h.availableCPU() != 0 {
		t.Fatalf("available CPU %d with two 1-CPU leases out", h.availableCPU())
	}
	h.gcs.locked(func() {
		for i, n := range h.gcs.nodes {
			if bytes.Equal(n.GetNodeId(), doomed.Bytes()) {
				h.gcs.nodes[i] = &gorayv1.NodeInfo{NodeId: doomed.Bytes(), State: "DEAD", DeathReason: "missed 5 health checks"}
			}
		}
	})
	h.r.syncCluster(ctx)
	waitFor(t, "the dead node's holder's lease to return its CPU", func() bool { return h.availableCPU() == 1*resources.Unit })
	waitFor(t, "the worker of that lease to exit", func() bool { return processGone(gone.GetWorkerPid()) })
	alive := false
	for _, w := range h.workers("") {
		alive = alive || bytes.Equal(w.GetWorkerId(), kept.GetWorker().GetWorkerId())
	}
	if !alive || processGone(kept.GetWorkerPid()) {
		t.Fatal("the worker leased to a process of a live node was stopped")
	}
}

// TestLeaseWorkingDirMissingFailsOnlyItsLeases: a lease naming a working
// dir no node has fails (FailedPrecondition naming the archive) instead of
// waiting for a worker that cannot start, and a plain lease of the same
// job is still granted.
func TestLeaseWorkingDirMissingFailsOnlyItsLeases(t *testing.T) {
	h := newHarness(t, nil)
	d := h.driver()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	sum := strings.Repeat("cd", 32)
	req := &gorayv1.LeaseRequest{JobId: d.job.Bytes(), Resources: resourcesProto(cpus(1)), WorkingDirSha256: sum, WorkingDirNode: h.r.cfg.NodeID.Bytes()}
	_, err := h.cl.RequestWorkerLease(ctx, req)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "working dir (archive sha256 "+sum) || !strings.Contains(err.Error(), "this node has no such archive") {
		t.Fatalf("lease with a missing working dir: %v; want FailedPrecondition naming the archive", err)
	}
	l := h.mustLease(d.job, cpus(1))
	h.returnLease(l, false)
}
