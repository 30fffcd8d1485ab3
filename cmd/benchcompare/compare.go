package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// report is what benchcompare reads of a `goray microbenchmark --json`
// report.
type report struct {
	Limits  []result `json:"limits"`
	Metrics []result `json:"metrics"`
}

// result is one figure of a report.
type result struct {
	Name   string  `json:"name"`
	Mean   float64 `json:"mean"`
	Unit   string  `json:"unit"`
	Status string  `json:"status"`
}

// side is one metric's figures on one side: the means of its runs.
type side []float64

func (s side) median() float64 {
	c := slices.Clone(s)
	slices.Sort(c)
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

func (s side) lo() float64 { return slices.Min(s) }
func (s side) hi() float64 { return slices.Max(s) }

// row is one metric compared.
type row struct {
	name, unit string
	base, head side
	// change is head's median over base's, minus 1, signed so that
	// positive is better (for µs, lower is better).
	change float64
	// verdict is "better" or "worse" when the runs' ranges are apart,
	// "~" when they overlap, or says why there is no comparison.
	verdict string
}

// compare pairs the metrics (then the limits) of base and head runs by
// name, in the order of the first report that has them.
func compare(base, head []report) []row {
	collect := func(rs []report, limits bool) (map[string]side, map[string]string, []string) {
		vals, units := map[string]side{}, map[string]string{}
		var order []string
		for _, r := range rs {
			list := r.Metrics
			if limits {
				list = r.Limits
			}
			for _, m := range list {
				if _, seen := units[m.Name]; !seen {
					order = append(order, m.Name)
					units[m.Name] = m.Unit
				}
				if m.Status == "ok" {
					vals[m.Name] = append(vals[m.Name], m.Mean)
				}
			}
		}
		return vals, units, order
	}
	var rows []row
	for _, limits := range []bool{false, true} {
		bv, bu, border := collect(base, limits)
		hv, hu, horder := collect(head, limits)
		order := border
		for _, n := range horder {
			if _, ok := bu[n]; !ok {
				order = append(order, n)
			}
		}
		for _, n := range order {
			r := row{name: n, unit: bu[n], base: bv[n], head: hv[n]}
			if r.unit == "" {
				r.unit = hu[n]
			}
			if limits {
				r.name = "limit: " + n
			}
			switch {
			case len(r.base) == 0 && len(r.head) == 0:
				r.verdict = "no figures"
			case len(r.base) == 0:
				r.verdict = "only in head"
			case len(r.head) == 0:
				r.verdict = "only in base"
			default:
				r.change, r.verdict = judge(r.unit, r.base, r.head)
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// judge returns head's change against base (positive: better) and the
// verdict: better or worse when every head run is beyond every base run,
// else "~" (and none from a single run on a side).
func judge(unit string, base, head side) (float64, string) {
	lowerBetter := unit == "µs"
	bm, hm := base.median(), head.median()
	if bm == 0 {
		return 0, "~"
	}
	change := hm/bm - 1
	if lowerBetter {
		change = bm/hm - 1
	}
	verdict := "~"
	switch {
	case len(base) < 2 || len(head) < 2:
		verdict = "one run: no verdict"
	case head.lo() > base.hi():
		verdict = "better"
		if lowerBetter {
			verdict = "worse"
		}
	case head.hi() < base.lo():
		verdict = "worse"
		if lowerBetter {
			verdict = "better"
		}
	}
	return change, verdict
}

// writeTable prints rows as a table: the medians with their ranges, the
// change and the verdict.
func writeTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tunit\tbase median [min–max]\thead median [min–max]\tchange\tverdict")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.name, r.unit, spread(r.base), spread(r.head), pct(r), r.verdict)
	}
	_ = tw.Flush()
}

func spread(s side) string {
	if len(s) == 0 {
		return "–"
	}
	return fmt.Sprintf("%s [%s–%s]", num(s.median()), num(s.lo()), num(s.hi()))
}

func pct(r row) string {
	if len(r.base) == 0 || len(r.head) == 0 {
		return "–"
	}
	return fmt.Sprintf("%+.1f%%", 100*r.change)
}

// num prints a figure with three significant digits or more.
func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
