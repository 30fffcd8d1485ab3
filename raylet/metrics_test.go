package raylet

import (
	"context"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/resources"
)

// TestMetricsStats: what the node's metrics read of the raylet follows a
// granted lease and an infeasible request, and the node registers its
// metrics address with the GCS.
func TestMetricsStats(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Resources = cpus(2)
		c.HeartbeatPeriod = 10 * time.Millisecond
		c.MetricsAddress = "127.0.0.1:9100"
	})
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- h.r.Run(runCtx) }()
	defer func() { stopRun(); <-runDone }()

	waitFor(t, "the node to register", func() bool {
		n := 0
		h.gcs.locked(func() { n = len(h.gcs.nodes) })
		return n > 0
	})
	h.gcs.locked(func() {
		if got := h.gcs.nodes[0].GetMetricsAddr(); got != "127.0.0.1:9100" {
			t.Errorf("registered metrics_addr %q", got)
		}
	})

	d := h.driver()
	l := h.mustLease(d.job, cpus(1))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.lease(ctx, d.job, cpus(4), ids.Nil)
		errc <- err
	}()
	waitFor(t, "the infeasible request to queue", func() bool { return h.pendingCount() == 1 })

	s := h.r.MetricsStats()
	if s.ResourceCapacity[resources.CPU] != 2 || s.ResourceUsed[resources.CPU] != 1 {
		t.Errorf("CPU capacity %v used %v, want 2 and 1", s.ResourceCapacity[resources.CPU], s.ResourceUsed[resources.CPU])
	}
	if s.GrantedLeases != 1 || s.PendingLeases != 1 || s.InfeasibleLeases != 1 {
		t.Errorf("leases granted %d pending %d infeasible %d, want 1, 1, 1", s.GrantedLeases, s.PendingLeases, s.InfeasibleLeases)
	}
	if s.Workers["LEASED"] != 1 {
		t.Errorf("workers %v, want 1 LEASED", s.Workers)
	}
	if s.StoreCapacity != h.store.Capacity() {
		t.Errorf("store capacity %d, want %d", s.StoreCapacity, h.store.Capacity())
	}
	cancel()
	<-errc
	h.returnLease(l, false)
	waitFor(t, "the lease to end", func() bool {
		s := h.r.MetricsStats()
		return s.GrantedLeases == 0 && s.PendingLeases == 0 && s.ResourceUsed[resources.CPU] == 0
	})
}
