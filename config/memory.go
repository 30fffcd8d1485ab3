package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Defaults of the memory_monitor block (Ray's memory_usage_threshold and
// memory_monitor_refresh_ms).
const (
	DefaultMemoryUsageThreshold  = 0.95
	DefaultMemoryRefreshInterval = 250 * time.Millisecond
)

// MemoryMonitor configures the raylet's memory monitor (the memory_monitor
// block):
//
//	memory_monitor {
//	  usage_threshold  = 0.95     # kill a worker above this fraction of the node's memory
//	  refresh_interval = "250ms"  # how often memory is read; "0s" turns the monitor off
//	}
//
// The node's memory is its cgroup's when the node runs in a cgroup with a
// memory limit, else the host's (see docs/memory.md).
type MemoryMonitor struct {
	// UsageThreshold is the fraction of the node's memory above which the
	// monitor kills a worker, in (0, 1].
	UsageThreshold float64
	// RefreshInterval is how often the monitor reads the node's memory;
	// 0 turns it off.
	RefreshInterval time.Duration
}

const (
	keyMemoryThreshold = "memory_monitor.usage_threshold"
	keyMemoryRefresh   = "memory_monitor.refresh_interval"
)

var memoryMonitorSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "usage_threshold"}, {Name: "refresh_interval"}},
}

// memoryMonitor decodes the memory_monitor block (b may be nil).
func (d *decoder) memoryMonitor(b *hcl.Block) {
	if b == nil {
		return
	}
	c := d.content(b.Body, memoryMonitorSchema)
	m := &d.n.MemoryMonitor
	d.float(c.Attributes["usage_threshold"], keyMemoryThreshold, &m.UsageThreshold)
	d.duration(c.Attributes["refresh_interval"], keyMemoryRefresh, &m.RefreshInterval)
}

// memoryMonitor checks the memory_monitor block: the threshold is a
// fraction in (0, 1] and the interval is not negative.
func (v *validator) memoryMonitor() {
	m := v.n.MemoryMonitor
	if !(m.UsageThreshold > 0 && m.UsageThreshold <= 1) {
		v.errorf(keyMemoryThreshold, "Invalid memory usage threshold",
			"memory_monitor.usage_threshold is a fraction of the node's memory and must be greater than 0 and at most 1, got %g.", m.UsageThreshold)
	}
	if m.RefreshInterval < 0 {
		v.errorf(keyMemoryRefresh, "Invalid duration",
			"memory_monitor.refresh_interval must not be negative (0 turns the monitor off), got %s.", m.RefreshInterval)
	}
}
