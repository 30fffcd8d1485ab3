package raylet

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/limits"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/raylet/internal/memory"
)

// Memory monitor tuning.
const (
	// memoryKillWait bounds how long the monitor waits for a worker it
	// killed to exit before it may kill another (Ray waits for the
	// process to die; a SIGKILLed process stuck in the kernel must not
	// stop the monitor for good).
	memoryKillWait = 10 * time.Second
	// maxRememberedKills bounds the kills kept for owners asking why
	// their lease's worker died (ReturnWorkerLease), oldest dropped first.
	maxRememberedKills = 1024
	// memoryLogEvery spaces the monitor's repeated warnings (reading
	// fails, nothing to kill).
	memoryLogEvery = 5 * time.Second
	// maxKillFunction clips the function name kept with a kill.
	maxKillFunction = 256
)

// memoryCandidate is a worker the memory monitor may kill: one running
// under a lease.
type memoryCandidate struct {
	w         *worker
	leaseID   ids.ID
	holder    ids.ID
	actorID   ids.ID
	pid       int
	retriable bool
	function  string
	granted   time.Time
}

// memoryWorkers is what the memory monitor needs from the worker pool.
type memoryWorkers interface {
	// memoryCandidates lists the live workers running under a lease.
	memoryCandidates() []memoryCandidate
	// killForMemory kills w at once (SIGKILL) with reason as its death
	// reason; its actor, if any, may restart. It returns the channel
	// closed when w has exited, or false when w is already dying.
	killForMemory(w *worker, reason string) (exited <-chan struct{}, ok bool)
}

// memoryMonitor is Ray's memory monitor: every refresh interval it reads
// the node's memory (its cgroup's when limited, else the host's) and,
// above the threshold, kills the worker memory.Pick chooses, then waits
// for that worker to exit (at most memoryKillWait) before it kills
// another. It remembers each kill by lease, so that the owner returning
// the lease learns why its worker died (ReturnWorkerLease), and counts
// them for heartbeats (goray status) and metrics.
//
// mu guards every field below it. The monitor calls the worker pool
// without holding mu.
type memoryMonitor struct {
	reader    memory.Reader
	threshold float64
	every     time.Duration
	node      ids.ID
	nodeName  string
	nodeIP    string
	workers   memoryWorkers
	log       hclog.Logger
	// release gives back memory the node keeps only as a cache (the
	// tensor segment pool) and returns the bytes freed; the monitor calls
	// it above the threshold before it kills anything (nil: nothing).
	release func() int64

	mu       sync.Mutex
	kills    int64
	last     *gorayv1.MemoryKill
	byLease  map[ids.ID]*gorayv1.MemoryKill
	order    []ids.ID        // byLease's keys, oldest first
	waiting  <-chan struct{} // the last killed worker's exit
	waitEnd  time.Time
	usage    memory.Usage
	readErr  error
	lastWarn time.Time
}

func newMemoryMonitor(cfg Config, log hclog.Logger, workers memoryWorkers) *memoryMonitor {
	return &memoryMonitor{
		reader:    memory.SystemReader{},
		threshold: cfg.MemoryMonitor.UsageThreshold,
		every:     cfg.MemoryMonitor.RefreshInterval,
		node:      cfg.NodeID,
		nodeName:  cfg.NodeName,
		nodeIP:    nodeIP(cfg),
		workers:   workers,
		log:       log.Named("memory-monitor"),
		byLease:   map[ids.ID]*gorayv1.MemoryKill{},
	}
}

// enabled reports whether the monitor runs.
func (m *memoryMonitor) enabled() bool { return m.every > 0 && m.threshold > 0 }

// run checks the node's memory every refresh interval until ctx ends or
// closing is closed.
func (m *memoryMonitor) run(ctx context.Context, closing <-chan struct{}) {
	if !m.enabled() {
		m.log.Debug("memory monitor off (memory_monitor.refresh_interval is 0)")
		return
	}
	if u, err := m.reader.Read(); err == nil {
		m.log.Info("memory monitor started", "threshold", m.threshold,
			"threshold_bytes", int64(m.threshold*float64(u.Total)), "total_bytes", u.Total, "source", u.Source, "every", m.every)
	}
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-closing:
			return
		case now := <-t.C:
			m.check(now)
		}
	}
}

// check reads the node's memory once and, above the threshold, kills a
// worker unless the last one killed is still exiting. It returns the
// kill it made (nil: none).
func (m *memoryMonitor) check(now time.Time) *gorayv1.MemoryKill {
	u, err := m.reader.Read()
	m.mu.Lock()
	if err != nil {
		warn := m.readErr == nil || now.Sub(m.lastWarn) >= memoryLogEvery
		m.readErr = err
		if warn {
			m.lastWarn = now
		}
		m.mu.Unlock()
		if warn {
			m.log.Warn("reading the node's memory failed", "error", err)
		}
		return nil
	}
	m.usage, m.readErr = u, nil
	if u.Fraction() <= m.threshold {
		m.mu.Unlock()
		return nil
	}
	if m.waiting != nil {
		select {
		case <-m.waiting:
			m.waiting = nil
		default:
			if now.Before(m.waitEnd) {
				m.mu.Unlock()
				return nil // the last kill has not taken effect yet
			}
			m.waiting = nil
		}
	}
	m.mu.Unlock()

	if m.release != nil {
		if freed := m.release(); freed > 0 {
			// Read again at the next check before killing anything.
			m.log.Info("memory use is above the threshold: emptied the tensor segment pool",
				"freed", freed, "used", u.Used, "total", u.Total, "threshold", m.threshold)
			return nil
		}
	}
	cands := m.workers.memoryCandidates()
	pick := make([]memory.Candidate, len(cands))
	for i, c := range cands {
		pick[i] = memory.Candidate{Key: i, Owner: c.holder.String(), Retriable: c.retriable, Actor: !c.actorID.IsNil(), Granted: c.granted}
	}
	i, why, ok := memory.Pick(pick)
	if !ok {
		m.mu.Lock()
		warn := now.Sub(m.lastWarn) >= memoryLogEvery
		if warn {
			m.lastWarn = now
		}
		m.mu.Unlock()
		if warn {
			m.log.Warn("memory use is above the threshold but no worker runs work to kill",
				"used", u.Used, "total", u.Total, "threshold", m.threshold, "source", u.Source)
		}
		return nil
	}
	c := cands[i]
	fn := limits.Truncate(c.function, maxKillFunction) // valid UTF-8 for protobuf
	k := &gorayv1.MemoryKill{
		NodeId: m.node.Bytes(), NodeName: m.nodeName, NodeIp: m.nodeIP,
		WorkerId: c.w.id.Bytes(), Pid: int32(c.pid), LeaseId: c.leaseID.Bytes(), Function: fn,
		UsedBytes: u.Used, TotalBytes: u.Total, Threshold: m.threshold, Source: u.Source,
		TimeMs: now.UnixMilli(), Why: why,
	}
	if !c.actorID.IsNil() {
		k.ActorId = c.actorID.Bytes()
	}
	// Recorded before the kill: the owner asks as soon as its stream
	// breaks.
	m.record(k)
	exited, ok := m.workers.killForMemory(c.w, k.Describe())
	if !ok {
		m.forget(c.leaseID)
		return nil
	}
	m.mu.Lock()
	m.waiting, m.waitEnd = exited, now.Add(memoryKillWait)
	m.mu.Unlock()
	m.log.Warn("killed a worker: the node is low on memory", "worker_id", c.w.id, "pid", c.pid,
		"function", fn, "used", u.Used, "total", u.Total, "threshold", m.threshold, "why", why)
	return k
}

// record counts k and keeps it by lease.
func (m *memoryMonitor) record(k *gorayv1.MemoryKill) {
	lease := ids.MustFromBytes(k.LeaseId)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kills++
	m.last = k
	if _, ok := m.byLease[lease]; !ok {
		m.order = append(m.order, lease)
	}
	m.byLease[lease] = k
	for len(m.order) > maxRememberedKills {
		delete(m.byLease, m.order[0])
		m.order = m.order[1:]
	}
}

// forget undoes record for a kill that did not happen.
func (m *memoryMonitor) forget(lease ids.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byLease[lease]; !ok {
		return
	}
	delete(m.byLease, lease)
	m.kills--
	m.last = nil
	for i, id := range m.order {
		if id == lease {
			m.order = append(m.order[:i], m.order[i+1:]...)
			break
		}
	}
	if n := len(m.order); n > 0 {
		m.last = m.byLease[m.order[n-1]]
	}
}

// killOf returns the kill of lease's worker (a copy), or nil.
func (m *memoryMonitor) killOf(lease ids.ID) *gorayv1.MemoryKill {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k := m.byLease[lease]; k != nil {
		return proto.Clone(k).(*gorayv1.MemoryKill)
	}
	return nil
}

// stats reports the monitor for heartbeats (nil when it is off).
func (m *memoryMonitor) stats() *gorayv1.MemoryMonitorStats {
	if !m.enabled() {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &gorayv1.MemoryMonitorStats{
		Threshold: m.threshold, RefreshMs: m.every.Milliseconds(), Kills: m.kills,
		UsedBytes: m.usage.Used, TotalBytes: m.usage.Total, Source: m.usage.Source,
	}
	if m.last != nil {
		s.LastKill = proto.Clone(m.last).(*gorayv1.MemoryKill)
	}
	if m.readErr != nil {
		s.Error = m.readErr.Error()
	}
	return s
}

// killCount is the number of workers killed so far (metrics).
func (m *memoryMonitor) killCount() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kills
}

// returnLeaseNoting ends lease id (ReturnWorkerLease) and returns the
// memory monitor's kill of its worker, if it killed it.
func (r *Raylet) returnLeaseNoting(id ids.ID, disconnect bool) (known bool, kill *gorayv1.MemoryKill) {
	known = r.sched.returnLease(id, disconnect)
	return known, r.memory.killOf(id)
}

// The worker pool's side of the memory monitor (memoryWorkers).

// memoryCandidates implements memoryWorkers.
func (p *workerPool) memoryCandidates() []memoryCandidate {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []memoryCandidate
	for _, w := range p.workers {
		l := w.lease
		if l == nil || w.killing || w.reaped || w.pid <= 0 || (w.state != stateLeased && w.state != stateActor) {
			continue
		}
		out = append(out, memoryCandidate{
			w: w, leaseID: l.id, holder: l.holder, actorID: w.actorID, pid: w.pid,
			retriable: l.retriable, function: l.function, granted: l.created,
		})
	}
	return out
}

// killForMemory implements memoryWorkers.
func (p *workerPool) killForMemory(w *worker, reason string) (<-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.state == stateDead || w.killing || w.reaped || w.pid <= 0 {
		return nil, false
	}
	p.killWorkerLocked(w, reason, false)
	w.memoryKilled = true
	_ = syscall.Kill(-w.pid, syscall.SIGKILL) // memory is short: no grace
	return w.exited, true
}
