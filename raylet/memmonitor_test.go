package raylet

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/raylet/internal/memory"
)

// fakeMemory is a memory.Reader a test sets.
type fakeMemory struct {
	mu  sync.Mutex
	u   memory.Usage
	err error
}

func (f *fakeMemory) set(used int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.u = memory.Usage{Used: used, Total: 1000, Source: "fake"}
	f.err = err
}

func (f *fakeMemory) Read() (memory.Usage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.u, f.err
}

// fakeWorkers is a memoryWorkers whose kills close nothing until the
// test says the worker exited.
type fakeWorkers struct {
	cands  []memoryCandidate
	killed []string // reasons, in order
	exits  map[*worker]chan struct{}
	refuse bool
}

func (f *fakeWorkers) memoryCandidates() []memoryCandidate { return f.cands }

func (f *fakeWorkers) killForMemory(w *worker, reason string) (<-chan struct{}, bool) {
	if f.refuse {
		return nil, false
	}
	f.killed = append(f.killed, reason)
	ch := make(chan struct{})
	f.exits[w] = ch
	// The pool forgets a killed worker.
	for i, c := range f.cands {
		if c.w == w {
			f.cands = append(f.cands[:i], f.cands[i+1:]...)
			break
		}
	}
	return ch, true
}

func newTestMonitor(t *testing.T, mem *fakeMemory, ws *fakeWorkers) *memoryMonitor {
	t.Helper()
	m := newMemoryMonitor(Config{
		NodeID: ids.New(), NodeName: "n1", NodeIP: "127.0.0.9",
		MemoryMonitor: config.MemoryMonitor{UsageThreshold: 0.9, RefreshInterval: time.Millisecond},
	}, hclog.NewNullLogger(), ws)
	m.reader = mem
	return m
}

func TestMemoryMonitorKills(t *testing.T) {
	t0 := time.Now()
	older := memoryCandidate{w: &worker{id: ids.New()}, leaseID: ids.New(), holder: ids.New(), pid: 11, retriable: true, function: "main.old", granted: t0}
	newer := memoryCandidate{w: &worker{id: ids.New()}, leaseID: ids.New(), holder: older.holder, pid: 12, retriable: true, function: "main.hog", granted: t0.Add(time.Second)}
	actor := memoryCandidate{w: &worker{id: ids.New()}, leaseID: ids.New(), holder: older.holder, actorID: ids.New(), pid: 13, retriable: true, function: "main.NewA", granted: t0.Add(2 * time.Second)}
	mem := &fakeMemory{}
	ws := &fakeWorkers{cands: []memoryCandidate{older, newer, actor}, exits: map[*worker]chan struct{}{}}
	m := newTestMonitor(t, mem, ws)

	mem.set(900, nil) // at the threshold: not above
	if k := m.check(t0); k != nil || len(ws.killed) != 0 {
		t.Fatalf("at the threshold: killed %v", ws.killed)
	}
	if s := m.stats(); s.GetUsedBytes() != 900 || s.GetTotalBytes() != 1000 || s.GetKills() != 0 || s.GetThreshold() != 0.9 {
		t.Fatalf("stats below the threshold: %v", s)
	}

	mem.set(950, nil)
	k := m.check(t0)
	if k == nil || len(ws.killed) != 1 {
		t.Fatalf("above the threshold: no kill (%v)", ws.killed)
	}
	if ids.MustFromBytes(k.GetWorkerId()) != newer.w.id {
		t.Fatalf("killed worker pid %d, want the newest retriable task (pid %d), not the actor", k.GetPid(), newer.pid)
	}
	for _, want := range []string{"killed by the memory monitor", "n1", "127.0.0.9", "950 B of 1000 B (0.950)", "threshold 0.900", "fake", "pid 12", "most recently started retriable task"} {
		if !strings.Contains(ws.killed[0], want) {
			t.Errorf("kill reason %q does not say %q", ws.killed[0], want)
		}
	}
	if got := m.killOf(newer.leaseID); got == nil || got.GetFunction() != "main.hog" || got.GetUsedBytes() != 950 {
		t.Fatalf("killOf(the killed lease) = %v", got)
	}
	if got := m.killOf(older.leaseID); got != nil {
		t.Fatalf("killOf(a lease not killed) = %v, want nil", got)
	}

	// Until the killed worker exits, nothing else is killed.
	if k := m.check(t0.Add(time.Second)); k != nil {
		t.Fatalf("killed %v while the last kill had not exited", k)
	}
	close(ws.exits[newer.w])
	if k := m.check(t0.Add(time.Second)); k == nil || ids.MustFromBytes(k.GetWorkerId()) != older.w.id {
		t.Fatalf("after the exit: killed %v, want the older task", k)
	}
	// A worker that never exits holds the monitor back only memoryKillWait.
	if k := m.check(t0.Add(2 * time.Second)); k != nil {
		t.Fatalf("killed %v before memoryKillWait passed", k)
	}
	k = m.check(t0.Add(time.Second + memoryKillWait + time.Millisecond))
	if k == nil || ids.MustFromBytes(k.GetWorkerId()) != actor.w.id || !strings.Contains(ws.killed[2], "no task was left") {
		t.Fatalf("with only the actor left: killed %v (%v)", k, ws.killed)
	}
	s := m.stats()
	if s.GetKills() != 3 || s.GetLastKill().GetPid() != 13 || s.GetRefreshMs() != 1 {
		t.Fatalf("stats after three kills: %v", s)
	}
	if m.killCount() != 3 {
		t.Fatalf("killCount = %d, want 3", m.killCount())
	}
}

func TestMemoryMonitorNothingToKill(t *testing.T) {
	mem := &fakeMemory{}
	ws := &fakeWorkers{exits: map[*worker]chan struct{}{}}
	m := newTestMonitor(t, mem, ws)
	mem.set(999, nil)
	if k := m.check(time.Now()); k != nil {
		t.Fatalf("killed %v with no candidate", k)
	}
	// A worker already dying is not counted.
	c := memoryCandidate{w: &worker{id: ids.New()}, leaseID: ids.New(), retriable: true, granted: time.Now()}
	ws.cands, ws.refuse = []memoryCandidate{c}, true
	if k := m.check(time.Now()); k != nil || m.killCount() != 0 || m.killOf(c.leaseID) != nil || m.stats().GetLastKill() != nil {
		t.Fatalf("a refused kill was recorded: %v, %d kills", k, m.killCount())
	}
}

func TestMemoryMonitorReadError(t *testing.T) {
	mem := &fakeMemory{}
	c := memoryCandidate{w: &worker{id: ids.New()}, leaseID: ids.New(), retriable: true, granted: time.Now()}
	ws := &fakeWorkers{cands: []memoryCandidate{c}, exits: map[*worker]chan struct{}{}}
	m := newTestMonitor(t, mem, ws)
	mem.set(0, errors.New("no /proc/meminfo"))
	if k := m.check(time.Now()); k != nil {
		t.Fatalf("killed %v without a reading", k)
	}
	if s := m.stats(); !strings.Contains(s.GetError(), "no /proc/meminfo") {
		t.Fatalf("stats do not report the read error: %v", s)
	}
	mem.set(10, nil)
	m.check(time.Now())
	if s := m.stats(); s.GetError() != "" {
		t.Fatalf("the read error stays after a good reading: %v", s)
	}
}

func TestMemoryMonitorRemembersBoundedKills(t *testing.T) {
	m := newTestMonitor(t, &fakeMemory{}, &fakeWorkers{})
	first := ids.New()
	for i := range maxRememberedKills + 10 {
		lease := ids.New()
		if i == 0 {
			lease = first
		}
		m.record(&gorayv1.MemoryKill{LeaseId: lease.Bytes()})
	}
	if len(m.byLease) != maxRememberedKills || len(m.order) != maxRememberedKills {
		t.Fatalf("kept %d kills (%d in order), want at most %d", len(m.byLease), len(m.order), maxRememberedKills)
	}
	if m.killOf(first) != nil {
		t.Fatal("the oldest kill was not dropped")
	}
	if m.killCount() != maxRememberedKills+10 {
		t.Fatalf("killCount = %d, want every kill counted", m.killCount())
	}
}

func TestMemoryMonitorOff(t *testing.T) {
	m := newMemoryMonitor(Config{NodeID: ids.New()}, hclog.NewNullLogger(), &fakeWorkers{})
	if m.enabled() || m.stats() != nil {
		t.Fatalf("a zero MemoryMonitor config runs the monitor")
	}
	done := make(chan struct{})
	go func() { m.run(t.Context(), nil); close(done) }()
	<-done // returns at once
}

// TestMemoryMonitorKillsRealWorkers: with real worker processes, the
// monitor kills the task's worker before a newer actor's, the owner
// returning the lease learns why, and the actor killed next is reported
// to the GCS as a failure it may restart from, not a kill for good.
func TestMemoryMonitorKillsRealWorkers(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.MemoryMonitor = config.MemoryMonitor{UsageThreshold: 0.5, RefreshInterval: time.Hour} // checks driven by the test
	})
	mem := &fakeMemory{}
	mem.set(900, nil)
	h.r.memory.reader = mem
	d := h.driver()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	task, err := h.cl.RequestWorkerLease(ctx, &gorayv1.LeaseRequest{JobId: d.job.Bytes(), Resources: resourcesProto(cpus(1)),
		HolderId: d.id.Bytes(), Retriable: true, Function: "main.hog"})
	if err != nil {
		t.Fatal(err)
	}
	actorID := ids.New()
	actor, err := h.cl.RequestWorkerLease(ctx, &gorayv1.LeaseRequest{JobId: d.job.Bytes(), Resources: resourcesProto(cpus(1)),
		ActorId: actorID.Bytes(), HolderId: d.id.Bytes(), Retriable: true, Function: "main.NewA"})
	if err != nil {
		t.Fatal(err)
	}

	k := h.r.memory.check(time.Now())
	if k == nil || k.GetPid() != task.GetWorkerPid() || k.GetFunction() != "main.hog" {
		t.Fatalf("first kill: %v, want the task's worker (pid %d)", k, task.GetWorkerPid())
	}
	waitFor(t, "the task's worker to exit", func() bool { return processGone(task.GetWorkerPid()) })
	rep, err := h.cl.ReturnWorkerLease(ctx, &gorayv1.ReturnLeaseRequest{LeaseId: task.GetLeaseId(), DisconnectWorker: true})
	if err != nil {
		t.Fatal(err)
	}
	if mk := rep.GetMemoryKill(); mk.GetPid() != task.GetWorkerPid() || mk.GetUsedBytes() != 900 || !bytes.Equal(mk.GetLeaseId(), task.GetLeaseId()) {
		t.Fatalf("ReturnWorkerLease of the killed lease: %v", rep)
	}
	if rep, err := h.cl.ReturnWorkerLease(ctx, &gorayv1.ReturnLeaseRequest{LeaseId: ids.New().Bytes()}); err != nil || rep.GetMemoryKill() != nil {
		t.Fatalf("ReturnWorkerLease of another lease: %v, %v", rep, err)
	}

	var k2 *gorayv1.MemoryKill
	waitFor(t, "the actor's worker to be killed next", func() bool {
		k2 = h.r.memory.check(time.Now())
		return k2 != nil
	})
	if k2.GetPid() != actor.GetWorkerPid() || !bytes.Equal(k2.GetActorId(), actorID.Bytes()) {
		t.Fatalf("second kill: %v, want the actor's worker (pid %d)", k2, actor.GetWorkerPid())
	}
	waitFor(t, "the actor's death reported to the GCS", func() bool {
		n := 0
		h.gcs.locked(func() { n = len(h.gcs.failures) })
		return n == 1
	})
	h.gcs.locked(func() {
		f := h.gcs.failures[0]
		if f.GetPermanent() || !strings.Contains(f.GetReason(), "killed by the memory monitor") || !f.GetOutOfMemory() {
			t.Errorf("the actor's death: permanent %v, reason %q, out of memory %v; want a failure it may restart from, out of memory, saying why",
				f.GetPermanent(), f.GetReason(), f.GetOutOfMemory())
		}
	})
	if s := h.r.memory.stats(); s.GetKills() != 2 || s.GetLastKill().GetPid() != actor.GetWorkerPid() {
		t.Fatalf("stats: %v", s)
	}
}
