package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/goray-dev/goray/cmd/goray/internal/scale"
	"github.com/spf13/cobra"
)

// scaleCmd runs the scale harness: a real GCS, N simulated nodes, two real
// nodes and a driver in this process (docs/scale.md).
func (a *app) scaleCmd() *cobra.Command {
	var (
		nodes                []int
		period, dur, hperiod time.Duration
		threshold, events    int
		conns                int
		jsonPath, svgPath    string
		from                 []string
	)
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Measure the control plane with N simulated nodes against a real GCS",
		Long: `Runs a real GCS in this process and N simulated nodes that speak the real
protocol to it (register, report and refresh their view of the cluster at the
raylets' period, answer frees, worker deaths, lease requests and placement
group bundles) but run no workers, beside two real nodes and a real driver.
For each --nodes value it measures the join, the GCS's CPU and memory per
node and per report, what an object free, a worker's death and a node's death
send to the nodes, task and spillback latency, and placement group and actor
creation throughput. Exits 1 only if a size cannot be measured.`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			for _, n := range nodes {
				if n < 1 {
					return usagef("--nodes %d: want at least 1", n)
				}
			}
			if period <= 0 || dur <= 0 || hperiod <= 0 || threshold < 1 || events < 1 {
				return usagef("--report-period, --duration and --health-period must be positive, --failure-threshold and --events at least 1")
			}
			if conns < 0 {
				return usagef("--connections %d: want 0 (as many as the descriptor limit allows) or more", conns)
			}
			var (
				rep *scale.Report
				err error
			)
			if len(from) > 0 {
				rep, err = mergeReports(from)
				if err != nil {
					return err
				}
			} else {
				ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				rep, err = scale.Run(ctx, scale.Options{
					Nodes: nodes, ReportPeriod: period, Duration: dur, HealthPeriod: hperiod, FailureThreshold: threshold,
					Events: events, Connections: conns, Log: a.stderr, Logger: a.log,
				})
			}
			if rep != nil {
				rep.Command = "goray " + strings.Join(a.args, " ")
				if werr := rep.WriteTable(a.stdout); werr != nil && err == nil {
					err = werr
				}
				if jsonPath != "" {
					if werr := writeFileWith(jsonPath, func(w io.Writer) error {
						enc := json.NewEncoder(w)
						enc.SetIndent("", "  ")
						return enc.Encode(rep)
					}); werr != nil && err == nil {
						err = werr
					}
				}
				if svgPath != "" {
					if werr := writeFileWith(svgPath, rep.WriteSVG); werr != nil && err == nil {
						err = werr
					}
				}
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&nodes, "nodes", []int{100}, "simulated nodes; several values (--nodes 100,1000) measure each size in turn")
	f.DurationVar(&period, "report-period", scale.DefaultReportPeriod, "how often each simulated node reports and refreshes its view (a raylet's period)")
	f.DurationVar(&dur, "duration", scale.DefaultDuration, "the steady-state window the GCS's CPU is measured over")
	f.DurationVar(&hperiod, "health-period", scale.DefaultHealthPeriod, "the GCS's health check period")
	f.IntVar(&threshold, "failure-threshold", scale.DefaultFailureThreshold, "missed health check periods before the GCS declares a node dead")
	f.IntVar(&events, "events", 10, "tasks, actors and placement groups per scheduling measurement")
	f.IntVar(&conns, "connections", 0, "at most this many GCS connections and listeners, shared by the simulated nodes (0: one per node when the descriptor limit allows)")
	f.StringSliceVar(&from, "from", nil, "measure nothing: merge these reports of earlier runs (--json files, comma-separated; the median run per size) and print, write and plot that")
	f.StringVar(&jsonPath, "json", "", "also write the report as JSON to this file")
	f.StringVar(&svgPath, "svg", "", "also write the growth curves as an SVG plot to this file")
	return cmd
}

// mergeReports reads the reports of earlier runs (goray scale --json) and
// merges them (scale.Merge).
func mergeReports(paths []string) (*scale.Report, error) {
	var reps []*scale.Report
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, usagef("--from: %v", err)
		}
		rep, err := scale.ReadReport(f)
		f.Close()
		if err != nil {
			return nil, usagef("--from %s: %v", p, err)
		}
		reps = append(reps, rep)
	}
	return scale.Merge(reps...), nil
}
