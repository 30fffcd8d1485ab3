package scale

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestMerge checks that reports of separate runs merge into one result
// per size, in increasing size, keeping the median run by GCS CPU per
// report, and that a report survives its JSON form.
func TestMerge(t *testing.T) {
	res := func(n int, cpu float64) Result {
		return Result{Nodes: n, Steady: Steady{GCSCPUPerReportUs: cpu}}
	}
	tests := []struct {
		name  string
		reps  []*Report
		nodes []int
		cpu   []float64
	}{
		{"one run per size, out of order", []*Report{{Results: []Result{res(1000, 5)}}, {Results: []Result{res(100, 1)}}}, []int{100, 1000}, []float64{1, 5}},
		{"three runs: the median", []*Report{{Results: []Result{res(100, 9)}}, {Results: []Result{res(100, 1)}}, {Results: []Result{res(100, 4)}}}, []int{100}, []float64{4}},
		{"two runs: the lower", []*Report{{Results: []Result{res(100, 9), res(200, 2)}}, {Results: []Result{res(100, 1)}}}, []int{100, 200}, []float64{1, 2}},
		{"nothing", nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Merge(tt.reps...)
			if len(m.Results) != len(tt.nodes) {
				t.Fatalf("%d results, want %d", len(m.Results), len(tt.nodes))
			}
			for i, r := range m.Results {
				if r.Nodes != tt.nodes[i] || r.Steady.GCSCPUPerReportUs != tt.cpu[i] {
					t.Errorf("result %d: %d nodes, %g µs; want %d, %g", i, r.Nodes, r.Steady.GCSCPUPerReportUs, tt.nodes[i], tt.cpu[i])
				}
			}
		})
	}

	rep := &Report{Machine: "m", Results: []Result{res(100, 3)}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(bytes.NewReader(b))
	if err != nil || got.Machine != "m" || len(got.Results) != 1 || got.Results[0].Steady.GCSCPUPerReportUs != 3 {
		t.Errorf("ReadReport = %+v, %v", got, err)
	}
	if _, err := ReadReport(strings.NewReader("{")); err == nil {
		t.Error("ReadReport of a truncated report: no error")
	}
}
