package resources

import (
	"math"
	"testing"
)

func TestFractionsDoNotDrift(t *testing.T) {
	avail, _ := FromFloats(map[string]float64{CPU: 1})
	tenth, _ := FromFloats(map[string]float64{CPU: 0.1})
	for i := 0; i < 10; i++ {
		if !avail.Fits(tenth) {
			t.Fatalf("0.1 CPU #%d does not fit in %v", i+1, avail)
		}
		avail.Sub(tenth)
	}
	if avail.Fits(tenth) {
		t.Fatalf("an 11th 0.1 CPU fits in 1 CPU: %v", avail)
	}
	for i := 0; i < 10; i++ {
		avail.Add(tenth)
	}
	if avail[CPU] != Unit {
		t.Fatalf("after returning everything: %d, want %d", avail[CPU], Unit)
	}
}

func TestFromFloatRejectsBadAmounts(t *testing.T) {
	for _, v := range []float64{-1, math.NaN(), math.Inf(1)} {
		if _, err := FromFloat("CPU", v); err == nil {
			t.Errorf("FromFloat(%v) accepted", v)
		}
	}
}

func TestFitsMissingAndKey(t *testing.T) {
	node, _ := FromFloats(map[string]float64{CPU: 2, "accel": 1})
	tests := []struct {
		req     map[string]float64
		fits    bool
		missing []string
	}{
		{map[string]float64{CPU: 2}, true, nil},
		{map[string]float64{CPU: 2.5}, false, []string{CPU}},
		{map[string]float64{GPU: 1, CPU: 1}, false, []string{GPU}},
		{map[string]float64{"accel": 0.5}, true, nil},
		{map[string]float64{}, true, nil},
	}
	for _, tt := range tests {
		req, _ := FromFloats(tt.req)
		if got := node.Fits(req); got != tt.fits {
			t.Errorf("Fits(%v) = %v", tt.req, got)
		}
		if got := node.Missing(req); len(got) != len(tt.missing) || (len(got) > 0 && got[0] != tt.missing[0]) {
			t.Errorf("Missing(%v) = %v, want %v", tt.req, got, tt.missing)
		}
	}
	a, _ := FromFloats(map[string]float64{CPU: 1, GPU: 0.5})
	b, _ := FromFloats(map[string]float64{GPU: 0.5, CPU: 1})
	if a.Key() != b.Key() {
		t.Fatalf("Key depends on map order: %q vs %q", a.Key(), b.Key())
	}
	if s := a.String(); s != "{CPU: 1, GPU: 0.5}" {
		t.Fatalf("String() = %q", s)
	}
}
