package scale

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
)

// ReadReport decodes a report written by `goray scale --json`.
func ReadReport(r io.Reader) (*Report, error) {
	var rep Report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, fmt.Errorf("scale: reading a report: %w", err)
	}
	return &rep, nil
}

// Merge combines reports of separate runs (for example one size per run,
// several runs per size) into one with a result per cluster size, in
// increasing size: of several results for a size it keeps the median by
// the steady state's GCS CPU per report (the lower middle of an even
// count), so that a plot shows a typical run rather than the best or the
// worst. The machine and options are those of the first report.
func Merge(reps ...*Report) *Report {
	out := &Report{}
	bySize := map[int][]Result{}
	for i, rep := range reps {
		if i == 0 {
			out.Machine, out.Options = rep.Machine, rep.Options
		}
		for _, res := range rep.Results {
			bySize[res.Nodes] = append(bySize[res.Nodes], res)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(bySize)) {
		rs := bySize[n]
		slices.SortStableFunc(rs, func(a, b Result) int {
			return cmp.Compare(a.Steady.GCSCPUPerReportUs, b.Steady.GCSCPUPerReportUs)
		})
		out.Results = append(out.Results, rs[(len(rs)-1)/2])
	}
	return out
}
