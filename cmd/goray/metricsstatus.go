package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/goray-dev/goray/internal/metrics"
)

// writeMetricsLine says in `goray status` how many nodes serve Prometheus
// metrics and where the head's discovery file is (docs/metrics.md).
func writeMetricsLine(w io.Writer, r statusReport) {
	serving, sd := 0, ""
	for _, n := range r.Nodes {
		if n.State != stateAlive {
			continue
		}
		if n.MetricsAddress != "" {
			serving++
		}
		if n.IsHead && n.MetricsAddress != "" && n.SessionDir != "" {
			sd = filepath.Join(n.SessionDir, metrics.DiscoveryFile)
		}
	}
	fmt.Fprintf(w, "Metrics: %d of %d alive nodes serve Prometheus metrics", serving, r.AliveNodes)
	if sd != "" {
		fmt.Fprintf(w, "; Prometheus file_sd targets: %s (on the head's machine)", sd)
	}
	fmt.Fprintln(w)
}
