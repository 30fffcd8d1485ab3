package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes a human-readable table: limits, then metrics, each with
// mean ± sd, unit, and (for metrics) the limit and ratio.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\n\n", r.machineLine())
	if len(r.Limits) > 0 {
		fmt.Fprintln(tw, "LIMIT\tMEAN ± SD\tUNIT\t")
		for _, l := range r.Limits {
			fmt.Fprintf(tw, "%s\t%s\t%s\t\n", l.Name, figure(l), l.Unit)
		}
		fmt.Fprintln(tw, "\t\t\t")
	}
	if len(r.Metrics) > 0 {
		fmt.Fprintln(tw, "METRIC\tMEAN ± SD\tUNIT\tLIMIT\tRATIO\t")
		for _, m := range r.Metrics {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", m.Name, figure(m), m.Unit, limitCell(m), ratioCell(m))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var errs []string
	for _, x := range append(append([]Result{}, r.Limits...), r.Metrics...) {
		if x.Status == StatusError {
			errs = append(errs, fmt.Sprintf("  %s: %s\n", x.Name, x.Error))
		}
	}
	if len(errs) > 0 {
		_, err := fmt.Fprintf(w, "\nErrors:\n%s", strings.Join(errs, ""))
		return err
	}
	return nil
}

// WriteMarkdown writes the results section for docs/benchmarks.md: the
// machine and method, the limits table and the metrics table.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### Results %s\n\n", r.Date.Format("2006-01-02"))
	fmt.Fprintf(&b, "%s.\n\n", r.machineLine())
	fmt.Fprintf(&b, "Command: `%s`. Method: %s.\n\n", r.Command, r.Method)
	if len(r.Limits) > 0 {
		b.WriteString("#### Limits (same run)\n\n| limit | mean ± sd | unit | how |\n|---|---:|---|---|\n")
		for _, l := range r.Limits {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdEscape(l.Name), figure(l), l.Unit, mdEscape(noteCell(l)))
		}
		b.WriteString("\n")
	}
	if len(r.Metrics) > 0 {
		b.WriteString("#### Metrics\n\n| metric | mean ± sd | unit | limit | ratio | note |\n|---|---:|---|---|---:|---|\n")
		for _, m := range r.Metrics {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", mdEscape(m.Name), figure(m), m.Unit,
				mdEscape(limitCell(m)), ratioCell(m), mdEscape(noteCell(m)))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) machineLine() string {
	m := r.Machine
	commit := r.Commit
	if len(commit) > 12 && !strings.HasSuffix(commit, "-dirty") {
		commit = commit[:12]
	}
	return fmt.Sprintf("Machine: %d cores (%s), %s RAM, %s/%s, %s; commit %s; %s",
		m.Cores, m.CPUModel, humanize.IBytes(uint64(max(m.MemoryBytes, 0))), m.OS, m.Arch, m.GoVersion, commit,
		r.Date.Format("2006-01-02 15:04 MST"))
}

// resultSummary is the one-line form used for progress lines.
func resultSummary(r Result) string {
	s := figure(r)
	switch r.Status {
	case StatusOK:
		s += " " + r.Unit
	case StatusError:
		s += ": " + r.Error
	case StatusNotAvailable:
		s += ": " + r.Note
	}
	if r.LimitName != "" {
		s += fmt.Sprintf("  (%s %s %s, ratio %s)", r.LimitName, formatNum(r.LimitValue, decimals(r.LimitValue)), limitUnit(r), ratioCell(r))
	}
	return s
}

// figure renders mean ± sd, or the status when there is no figure.
func figure(r Result) string {
	switch r.Status {
	case StatusNotAvailable:
		return "not available"
	case StatusError:
		return "ERROR"
	}
	d := decimals(r.Mean)
	return formatNum(r.Mean, d) + " ± " + formatNum(r.SD, d)
}

func limitCell(r Result) string {
	if r.LimitName == "" {
		return ""
	}
	return fmt.Sprintf("%s = %s %s", r.LimitName, formatNum(r.LimitValue, decimals(r.LimitValue)), limitUnit(r))
}

// limitUnit is the unit of a metric's limit.
func limitUnit(r Result) string {
	switch r.LimitName {
	case LimitGRPC, LimitGRPCStream, LimitPlugin:
		return UnitMicros
	}
	return UnitGBps
}

func ratioCell(r Result) string {
	if r.LimitName == "" {
		return ""
	}
	return strconv.FormatFloat(r.Ratio, 'f', 2, 64) + "×"
}

func noteCell(r Result) string {
	if r.Status == StatusError {
		return joinNotes("error: "+r.Error, r.Note)
	}
	return r.Note
}

// decimals picks the decimals for a figure of magnitude v.
func decimals(v float64) int {
	a := math.Abs(v)
	switch {
	case a >= 100:
		return 0
	case a >= 10:
		return 1
	case a >= 1:
		return 2
	}
	return 3
}

// formatNum formats v with d decimals and thousands separators.
func formatNum(v float64, d int) string {
	s := strconv.FormatFloat(v, 'f', d, 64)
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	intPart, frac, hasFrac := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if hasFrac {
		return sign + b.String() + "." + frac
	}
	return sign + b.String()
}

func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
