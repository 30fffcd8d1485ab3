package scale

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// WriteTable prints one column per cluster size.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, f func(Result) string) {
		cells := []string{name}
		for _, res := range r.Results {
			cells = append(cells, f(res))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	num := func(format string, f func(Result) float64) func(Result) string {
		return func(res Result) string { return fmt.Sprintf(format, f(res)) }
	}
	row("simulated nodes", num("%.0f", func(r Result) float64 { return float64(r.Nodes) }))
	row("connections (per node?)", func(r Result) string { return fmt.Sprintf("%d (%v)", r.Connections, r.PerNodeConnections) })
	row("join ms", num("%.0f", func(r Result) float64 { return r.JoinMs }))
	row("join: first views ms", num("%.0f", func(r Result) float64 { return r.Join.ViewMs }))
	row("join: GCS cores", num("%.2f", func(r Result) float64 { return r.Join.GCSCores }))
	row("join: heartbeats done / due", num("%.2f", func(r Result) float64 { return r.Join.Achieved }))
	row("join: refresh MB", num("%.0f", func(r Result) float64 { return r.Join.RefreshMB }))
	row("join: declared dead", num("%.0f", func(r Result) float64 { return float64(r.Join.DeclaredDead) }))
	row("heap per node B", num("%.0f", func(r Result) float64 { return r.HeapPerNode }))
	row("GCS heap per node B", num("%.0f", func(r Result) float64 { return r.GCSHeapPerNode }))
	row("GCS cores (steady)", num("%.2f", func(r Result) float64 { return r.Steady.GCSCores }))
	row("GCS CPU per node µs/s", num("%.0f", func(r Result) float64 { return r.Steady.GCSCPUPerNodeUs }))
	row("GCS CPU per report µs", num("%.0f", func(r Result) float64 { return r.Steady.GCSCPUPerReportUs }))
	row("reports done / due", num("%.2f", func(r Result) float64 { return r.Steady.Achieved }))
	row("report latency ms", num("%.1f", func(r Result) float64 { return r.Steady.ReportLatencyMs }))
	row("refresh bytes", num("%.0f", func(r Result) float64 { return r.Steady.RefreshBytes }))
	row("GCS CPU per refresh µs", num("%.1f", func(r Result) float64 { return r.Steady.GCSCPUPerRefreshUs }))
	row("whole-table refreshes", num("%.0f", func(r Result) float64 { return float64(r.Steady.FullRefreshes) }))
	row("refresh MB/s (all nodes)", num("%.1f", func(r Result) float64 { return r.Steady.RefreshBytesPerS / 1e6 }))
	row("declared dead (late reports)", num("%.0f", func(r Result) float64 { return float64(r.Steady.DeclaredDead) }))
	row("free: messages", num("%.0f", func(r Result) float64 { return float64(r.Free.Messages) }))
	row("free: bytes", num("%.0f", func(r Result) float64 { return float64(r.Free.Bytes) }))
	row("worker death: messages", num("%.0f", func(r Result) float64 { return float64(r.WorkerDeath.Messages) }))
	row("worker death: bytes", num("%.0f", func(r Result) float64 { return float64(r.WorkerDeath.Bytes) }))
	row("death burst: messages (max per node)", func(r Result) string {
		return fmt.Sprintf("%d (%d)", r.DeathBurst.Messages, r.DeathBurst.MaxPerNode)
	})
	row("node death: detect ms", num("%.0f", func(r Result) float64 { return r.NodeDeath.DetectMs }))
	row("node death: all informed ms", num("%.0f", func(r Result) float64 { return r.NodeDeath.InformedMs }))
	row("node death: informed", num("%.0f", func(r Result) float64 { return float64(r.NodeDeath.Informed) }))
	row("task latency ms (median)", num("%.2f", func(r Result) float64 { return r.TaskLocalMs.Median }))
	row("spillback latency ms (median)", num("%.2f", func(r Result) float64 { return r.SpillbackMs.Median }))
	row("placement groups /s", num("%.1f", func(r Result) float64 { return r.PlacementGroupsPerSec }))
	row("PG removal /s", num("%.2f", func(r Result) float64 { return r.PGRemovalsPerSec }))
	row("PG removal messages", num("%.0f", func(r Result) float64 { return r.PGRemovalMessages }))
	row("actors /s", num("%.1f", func(r Result) float64 { return r.ActorsPerSec }))
	row("errors", num("%.0f", func(r Result) float64 { return float64(len(r.Errors)) }))
	return tw.Flush()
}

// panel is one chart of the plot: a value per cluster size.
type panel struct {
	title string
	value func(Result) float64
}

// WriteSVG draws the growth curves, one small chart per figure, cluster
// size on a logarithmic x axis: plain SVG, no dependency.
func (r *Report) WriteSVG(w io.Writer) error {
	panels := []panel{
		{"GCS CPU (cores) at the report period", func(r Result) float64 { return r.Steady.GCSCores }},
		{"GCS CPU per report (µs)", func(r Result) float64 { return r.Steady.GCSCPUPerReportUs }},
		{"refresh bytes per report (KB)", func(r Result) float64 { return r.Steady.RefreshBytes / 1e3 }},
		{"reports done / due", func(r Result) float64 { return r.Steady.Achieved }},
		{"messages per object free", func(r Result) float64 { return float64(r.Free.Messages) }},
		{"messages per PG removal", func(r Result) float64 { return r.PGRemovalMessages }},
		{"join time (s)", func(r Result) float64 { return r.JoinMs / 1e3 }},
		{"GCS heap per node (KB)", func(r Result) float64 { return r.GCSHeapPerNode / 1e3 }},
		{"messages per worker death", func(r Result) float64 { return float64(r.WorkerDeath.Messages) }},
		{"join: views sent (MB)", func(r Result) float64 { return r.Join.RefreshMB }},
		{"join: heartbeats done / due", func(r Result) float64 { return r.Join.Achieved }},
		{"join: nodes declared dead", func(r Result) float64 { return float64(r.Join.DeclaredDead) }},
	}
	const (
		cols, pw, ph = 4, 240, 170
		ml, mr, mt   = 46, 12, 28
		mb           = 30
	)
	rows := (len(panels) + cols - 1) / cols
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="10">`+"\n", cols*pw, rows*ph)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	xs := make([]float64, len(r.Results))
	for i, res := range r.Results {
		xs[i] = math.Log10(float64(max(res.Nodes, 1)))
	}
	xmin, xmax := minMax(xs)
	if xmax-xmin < 1e-9 {
		xmin, xmax = xmin-0.5, xmax+0.5
	}
	for i, p := range panels {
		ox, oy := (i%cols)*pw, (i/cols)*ph
		x0, y0, x1, y1 := float64(ox+ml), float64(oy+ph-mb), float64(ox+pw-mr), float64(oy+mt)
		ys := make([]float64, len(r.Results))
		for j, res := range r.Results {
			ys[j] = p.value(res)
		}
		_, ymax := minMax(ys)
		if ymax <= 0 {
			ymax = 1
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", ox+8, oy+16, escape(p.title))
		fmt.Fprintf(&b, `<path d="M%.0f %.0f V%.0f H%.0f" stroke="black" fill="none"/>`+"\n", x0, y1, y0, x1)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n", x0-3, y1+4, fmtNum(ymax))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">0</text>`+"\n", x0-3, y0)
		var pts []string
		for j := range ys {
			x := x0 + (xs[j]-xmin)/(xmax-xmin)*(x1-x0)
			y := y0 - ys[j]/ymax*(y0-y1)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#1f77b4"/>`+"\n", x, y)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%d</text>`+"\n", x, y0+12, r.Results[j].Nodes)
		}
		fmt.Fprintf(&b, `<polyline points="%s" stroke="#1f77b4" fill="none"/>`+"\n", strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle" fill="#555">simulated nodes (log)</text>`+"\n", (x0+x1)/2, y0+24)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func minMax(v []float64) (lo, hi float64) {
	if len(v) == 0 {
		return 0, 0
	}
	lo, hi = v[0], v[0]
	for _, x := range v[1:] {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

func fmtNum(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
