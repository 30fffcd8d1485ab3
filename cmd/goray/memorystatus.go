package main

import (
	"fmt"
	"io"
	"time"

	"github.com/dustin/go-humanize"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// memoryStatus is a node's memory monitor in `goray status`
// (docs/memory.md).
type memoryStatus struct {
	// Threshold is the usage threshold (a fraction of the node's memory).
	Threshold float64 `json:"usage_threshold"`
	RefreshMs int64   `json:"refresh_ms"`
	// UsedBytes of TotalBytes is the last reading, from Source.
	UsedBytes  int64  `json:"used_bytes"`
	TotalBytes int64  `json:"total_bytes"`
	Source     string `json:"source,omitempty"`
	Error      string `json:"error,omitempty"`
	// Kills counts the workers killed for memory since the node started.
	Kills    int64           `json:"kills"`
	LastKill *memoryKillInfo `json:"last_kill,omitempty"`
}

// memoryKillInfo is the last worker a node's memory monitor killed.
type memoryKillInfo struct {
	TimeMs     int64   `json:"time_ms"`
	Function   string  `json:"function,omitempty"`
	WorkerID   string  `json:"worker_id"`
	Pid        int32   `json:"pid"`
	ActorID    string  `json:"actor_id,omitempty"`
	UsedBytes  int64   `json:"used_bytes"`
	TotalBytes int64   `json:"total_bytes"`
	Threshold  float64 `json:"usage_threshold"`
	Reason     string  `json:"reason"`
}

func memoryStatusOf(m *pb.MemoryMonitorStats) *memoryStatus {
	if m == nil {
		return nil
	}
	s := &memoryStatus{
		Threshold: m.GetThreshold(), RefreshMs: m.GetRefreshMs(), UsedBytes: m.GetUsedBytes(), TotalBytes: m.GetTotalBytes(),
		Source: m.GetSource(), Error: m.GetError(), Kills: m.GetKills(),
	}
	if k := m.GetLastKill(); k != nil {
		s.LastKill = &memoryKillInfo{
			TimeMs: k.GetTimeMs(), Function: k.GetFunction(), WorkerID: hexID(k.GetWorkerId()), Pid: k.GetPid(),
			ActorID: hexID(k.GetActorId()), UsedBytes: k.GetUsedBytes(), TotalBytes: k.GetTotalBytes(),
			Threshold: k.GetThreshold(), Reason: k.Describe(),
		}
	}
	return s
}

// writeMemoryLines renders the memory monitors that killed workers or
// cannot read the node's memory; quiet ones say nothing.
func writeMemoryLines(w io.Writer, r statusReport) {
	for _, n := range r.Nodes {
		m := n.Memory
		if m == nil || (m.Kills == 0 && m.Error == "") {
			continue
		}
		if m.Error != "" {
			fmt.Fprintf(w, "Memory monitor on %s: CANNOT READ MEMORY: %s\n", shortHex(n.NodeID), m.Error)
		}
		if m.Kills == 0 {
			continue
		}
		fmt.Fprintf(w, "Memory monitor on %s: %s killed for memory (threshold %.3f; now %s of %s)\n",
			shortHex(n.NodeID), plural(int(m.Kills), "worker", "workers"), m.Threshold,
			humanize.IBytes(uint64(max(m.UsedBytes, 0))), humanize.IBytes(uint64(max(m.TotalBytes, 0))))
		if k := m.LastKill; k != nil {
			what := k.Function
			if what == "" {
				what = "a task"
			}
			fmt.Fprintf(w, "  last at %s: %s (worker %s, pid %d) with %s of %s used\n",
				time.UnixMilli(k.TimeMs).Format(time.DateTime), what, shortHex(k.WorkerID), k.Pid,
				humanize.IBytes(uint64(max(k.UsedBytes, 0))), humanize.IBytes(uint64(max(k.TotalBytes, 0))))
		}
	}
}
