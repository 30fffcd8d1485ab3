package gcs

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// TestHeartbeatMemoryMonitor: a node's memory monitor stats travel in its
// heartbeats to its view (goray status), a heartbeat without them clears
// them, and stats too large to be a node's are refused.
func TestHeartbeatMemoryMonitor(t *testing.T) {
	_, c := startServer(t, Options{Now: newFakeClock().Now})
	ctx := ctxT(t)
	id := newID()
	registerNode(t, c, id, "n1")
	mem := &gorayv1.MemoryMonitorStats{Threshold: 0.9, RefreshMs: 250, Kills: 2, UsedBytes: 10, TotalBytes: 100, Source: "/proc/meminfo",
		LastKill: &gorayv1.MemoryKill{Function: "main.hog", Pid: 7, UsedBytes: 95, TotalBytes: 100, Threshold: 0.9}}
	_, err := c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: id.Bytes(), Memory: mem})
	mustOK(t, err)
	if got := nodeView(t, c, id).GetMemory(); !proto.Equal(got, mem) {
		t.Fatalf("view's memory monitor = %v, want %v", got, mem)
	}
	_, err = c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: id.Bytes()})
	mustOK(t, err)
	if got := nodeView(t, c, id).GetMemory(); got != nil {
		t.Fatalf("a heartbeat without memory stats left %v", got)
	}
	huge := &gorayv1.MemoryMonitorStats{Error: strings.Repeat("x", maxSpillText+1)}
	_, err = c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: id.Bytes(), Memory: huge})
	wantCode(t, err, codes.InvalidArgument, "invalid memory")
}
