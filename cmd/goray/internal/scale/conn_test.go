package scale

import (
	"testing"
	"time"
)

// TestConnPlan checks the connection plan against descriptor limits: one
// connection and listener per node while fdPerNode descriptors per node
// fit beside fdReserve, else a shared pool as large as fits, never empty;
// a cap shares them sooner.
func TestConnPlan(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		limit    uint64
		maxConns int
		pool     int
		perNode  bool
	}{
		{"smoke run, this machine's limit", 200, 20000, 0, 200, true},
		{"1,000 nodes, this machine's limit", 1000, 20000, 0, 1000, true},
		{"2,000 nodes, this machine's limit", 2000, 20000, 0, 2000, true},
		{"3,000 nodes: exactly what fits in 20,000", 3000, 20000, 0, 3000, true},
		{"10,000 nodes, this machine's limit: 3,000 shared", 10000, 20000, 0, 3000, false},
		{"10,000 nodes with a limit of 1,048,576: one each", 10000, 1 << 20, 0, 10000, true},
		{"a limit of 1,024 leaves nothing beyond the reserve: one shared", 100, 1024, 0, 1, false},
		{"a limit of 0 (unknown): one shared", 10, 0, 0, 1, false},
		{"capped below the nodes: shared", 1000, 20000, 100, 100, false},
		{"capped above the nodes: one each", 100, 20000, 500, 100, true},
		{"capped above what fits: what fits", 10000, 20000, 5000, 3000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool, perNode := connPlan(tt.n, tt.limit, tt.maxConns)
			if pool != tt.pool || perNode != tt.perNode {
				t.Errorf("connPlan(%d, %d, %d) = %d, %v; want %d, %v", tt.n, tt.limit, tt.maxConns, pool, perNode, tt.pool, tt.perNode)
			}
			if perNode && int(tt.limit) < fdReserve+fdPerNode*pool {
				t.Errorf("one connection per node for %d nodes does not fit in %d descriptors", tt.n, tt.limit)
			}
		})
	}
}

// TestTimeoutsGrowWithNodes checks that the simulated nodes' call time-out
// and the wait for their first views leave room for a whole table at
// 10,000 nodes, and stay at their floor for a small cluster.
func TestTimeoutsGrowWithNodes(t *testing.T) {
	period := DefaultReportPeriod
	tests := []struct {
		n          int
		call, warm time.Duration
	}{
		{20, 10*time.Second + 40*time.Millisecond, 10*time.Second + 200*time.Millisecond},
		{1000, 12 * time.Second, 20 * time.Second},
		{10000, 30 * time.Second, 110 * time.Second},
	}
	for _, tt := range tests {
		if got := callTimeout(tt.n, period); got != tt.call {
			t.Errorf("callTimeout(%d) = %v, want %v", tt.n, got, tt.call)
		}
		if got := warmTimeout(tt.n, period); got != tt.warm {
			t.Errorf("warmTimeout(%d) = %v, want %v", tt.n, got, tt.warm)
		}
	}
	if got := callTimeout(10, time.Minute); got != time.Minute+20*time.Millisecond {
		t.Errorf("callTimeout with a 1 min period = %v, want the period plus 2 ms per node", got)
	}
}
