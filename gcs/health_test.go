package gcs

import (
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// TestHealthLagIsNotDeath: the health check declares a node dead on the
// evidence of its silence compared with the others' (health.go). Ten
// nodes, the defaults (1 s × 5: limit 5 s); each second every node that
// reports (and that the GCS reads) sends a heartbeat, then the health
// check runs. A GCS that read no heartbeat for a while (busy) declares no
// node dead for it, and a node that stopped is declared dead after the
// limit while at least half the others report, within 2 × limit + one
// period in any case.
func TestHealthLagIsNotDeath(t *testing.T) {
	const nodes, seconds = 10, 40
	never := 0
	for _, tc := range []struct {
		name string
		// reports says whether node i's heartbeat of second sec reaches the
		// GCS's table.
		reports func(i, sec int) bool
		// dies is the second each node is declared dead at (never: 0).
		dies func(i int) int
	}{
		{
			name:    "every node reports",
			reports: func(int, int) bool { return true },
			dies:    func(int) int { return never },
		},
		{
			name:    "one node stops: dead after the limit",
			reports: func(i, _ int) bool { return i != 0 },
			dies:    func(i int) int { return map[bool]int{true: 6, false: never}[i == 0] },
		},
		{
			name:    "the GCS reads no heartbeat for 8 s: no death",
			reports: func(_, sec int) bool { return sec > 8 },
			dies:    func(int) int { return never },
		},
		{
			name:    "a node stops while the GCS reads nothing for 8 s: dead once the others are heard",
			reports: func(i, sec int) bool { return i != 0 && sec > 8 },
			dies:    func(i int) int { return map[bool]int{true: 9, false: never}[i == 0] },
		},
		{
			name:    "half the nodes stop: dead after the limit",
			reports: func(i, _ int) bool { return i >= 5 },
			dies:    func(i int) int { return map[bool]int{true: 6, false: never}[i < 5] },
		},
		{
			name:    "the GCS reads half the nodes' heartbeats only every 4 s: no death",
			reports: func(i, sec int) bool { return i%2 == 0 || sec%4 == 0 },
			dies:    func(int) int { return never },
		},
		{
			name:    "the GCS reads the heartbeats of 7 nodes in 10 only every 9 s: no death",
			reports: func(i, sec int) bool { return i >= 7 || sec%9 == 0 },
			dies:    func(int) int { return never },
		},
		{
			name:    "more than half the nodes stop: dead within 2 × limit + one period",
			reports: func(i, _ int) bool { return i >= 6 },
			dies:    func(i int) int { return map[bool]int{true: 11, false: never}[i < 6] },
		},
		{
			name:    "every node stops: dead within 2 × limit + one period",
			reports: func(int, int) bool { return false },
			dies:    func(int) int { return 11 },
		},
		{
			name:    "the GCS reads nothing for longer than 2 × limit: its lag is no longer credited",
			reports: func(_, sec int) bool { return sec > 30 },
			dies:    func(int) int { return 11 },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			s, c := startServer(t, Options{Now: clock.Now})
			ctx := ctxT(t)
			id := make([]ids.ID, nodes)
			for i := range id {
				id[i] = newID()
				registerNode(t, c, id[i], "n")
			}
			died := make([]int, nodes)
			for sec := 1; sec <= seconds; sec++ {
				clock.Advance(time.Second)
				for i := range id {
					if died[i] == never && tc.reports(i, sec) {
						_, err := c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: id[i].Bytes()})
						mustOK(t, err)
					}
				}
				s.checkHealth()
				for i, v := range s.Nodes() {
					if died[i] == never && v.GetInfo().GetState() == StateDead {
						died[i] = sec
					}
				}
			}
			for i := range id {
				if want := tc.dies(i); died[i] != want {
					t.Errorf("node %d declared dead at second %d, want %d (0: never)", i, died[i], want)
				}
			}
		})
	}
}

func TestHealthGrace(t *testing.T) {
	const period, limit = time.Second, 5 * time.Second
	s := func(secs ...float64) []time.Duration {
		out := make([]time.Duration, len(secs))
		for i, x := range secs {
			out[i] = time.Duration(x * float64(time.Second))
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		silences []time.Duration
		want     time.Duration
	}{
		{"no node", nil, 0},
		{"all within a period", s(0.1, 0.9, 1, 0.5), 0},
		{"one node silent", s(0.2, 0.3, 9, 0.4), 0},
		{"half the nodes silent", s(0.2, 9, 9, 0.4), 0},
		{"lower median of two", s(0.5, 7), 0},
		{"within two periods", s(2, 1.5, 2, 1.9), 0},
		{"more than half unheard for two periods", s(3.5, 4, 0.2, 2.1), limit},
		{"a one-node cluster's node", s(2.5), limit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := healthGrace(tc.silences, period, limit); got != tc.want {
				t.Fatalf("healthGrace = %v, want %v", got, tc.want)
			}
		})
	}
}
