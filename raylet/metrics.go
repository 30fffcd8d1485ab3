package raylet

import (
	"github.com/goray-dev/goray/internal/metrics"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/raylet/internal/spill"
)

// SpillObserver is told how long spills and restores take
// (SpillConfig.Observer; the node's metrics).
type SpillObserver = spill.Observer

// MetricsStats reads what the node's metrics report of the raylet
// (metrics.RayletCollector calls it at each scrape): each component is
// asked in turn, under its own lock only. Placement group resources
// (CPU_group_...) are left out: one series per group would grow without
// bound.
func (r *Raylet) MetricsStats() metrics.RayletStats {
	var s metrics.RayletStats
	total := r.cfg.Resources
	avail := r.sched.availableResources()
	s.ResourceCapacity = make(map[string]float64, len(total))
	s.ResourceUsed = make(map[string]float64, len(total))
	for name, v := range total {
		if resources.IsGroupName(name) {
			continue
		}
		s.ResourceCapacity[name] = float64(v) / resources.Unit
		s.ResourceUsed[name] = float64(v-avail[name]) / resources.Unit
	}
	for _, d := range r.sched.pendingDemand() {
		s.PendingLeases += int64(d.GetCount())
		if d.GetInfeasible() {
			s.InfeasibleLeases += int64(d.GetCount())
		}
	}
	s.GrantedLeases = int64(r.sched.grantedLeases())
	s.Workers = r.pool.countByState()
	u := r.cfg.Store.Usage()
	s.StoreBytes, s.StoreCapacity, s.StoreObjects = u.Used, u.Capacity, int64(u.Objects)
	if st := r.objects.spill.Stats(); st != nil {
		s.SpilledBytes, s.SpilledObjects = st.GetStoredBytes(), st.GetStoredObjects()
		s.SpilledBytesTotal, s.RestoredBytesTotal = st.GetSpilledBytes(), st.GetRestoredBytes()
	}
	s.PulledBytes, s.PushedBytes = r.objects.pulled.Load(), r.objects.data.SentBytes()
	s.MemoryKills = r.memory.killCount()
	s.WorkerDeathsDropped = r.cluster.deaths.dropped.Load()
	return s
}

// countByState counts the pool's live workers by state.
func (p *workerPool) countByState() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int64{}
	for _, w := range p.workers {
		if w.state != stateDead {
			out[w.state.String()]++
		}
	}
	return out
}
