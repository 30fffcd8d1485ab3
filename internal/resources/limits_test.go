package resources

import (
	"math"
	"strings"
	"testing"
)

// An amount whose fixed point does not fit an int64 once converted to the
// most negative int64 on amd64, which "fits" every request and made
// available amounts overflow; FromFloat now refuses amounts above
// MaxAmount.
func TestFromFloatBounds(t *testing.T) {
	tests := []struct {
		v    float64
		want int64
		err  string
	}{
		{0, 0, ""},
		{0.00004, 0, ""},
		{1.5, 15000, ""},
		{MaxAmount, MaxFixed, ""},
		{MaxAmount + 1, 0, "above the maximum 1e+14"},
		{1e18, 0, "amount 1e+18 is above the maximum"},
		{float64(1 << 60), 0, "above the maximum"},
		{math.MaxFloat64, 0, "above the maximum"},
		{-1, 0, ">= 0"},
		{math.NaN(), 0, ">= 0"},
		{math.Inf(1), 0, ">= 0"},
	}
	for _, tt := range tests {
		got, err := FromFloat("accel", tt.v)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), `"accel"`) {
				t.Errorf("FromFloat(%v) = %d, %v; want an error naming accel and saying %q", tt.v, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("FromFloat(%v) = %d, %v; want %d", tt.v, got, err, tt.want)
		}
	}
	// CPU and GPU counts have a lower bound: no node has a million CPUs.
	for _, name := range []string{CPU, GPU} {
		if got, err := FromFloat(name, MaxCount); err != nil || got != MaxCount*Unit {
			t.Errorf("FromFloat(%s, %d) = %d, %v", name, MaxCount, got, err)
		}
		if _, err := FromFloat(name, 1e6); err == nil || !strings.Contains(err.Error(), "1e+06 is above the maximum 65536") {
			t.Errorf("FromFloat(%s, 1e6) = %v, want an error", name, err)
		}
	}
	// The bound leaves room to add up several nodes' amounts.
	if MaxFixed > math.MaxInt64/8 {
		t.Fatalf("MaxFixed %d leaves no room to add 8 amounts", MaxFixed)
	}
}

func TestCheckFixed(t *testing.T) {
	tests := []struct {
		name string
		v    int64
		err  string
	}{
		{"CPU", 0, ""},
		{"CPU", MaxCount * Unit, ""},
		{"CPU", MaxCount*Unit + 1, "outside 0 to 65536"},
		{"GPU", 1e6 * Unit, "amount 1000000 is outside 0 to 65536"},
		{"memory", MaxFixed, ""},
		{"accelerator_type:A100", 10000, ""},
		{"accel", MaxFixed + 1, "outside 0 to 1e+14"},
		{"CPU", -1, "outside 0 to"},
		{"CPU", math.MinInt64, "outside 0 to"},
		{"", 1, "resource name is empty"},
		{strings.Repeat("x", MaxNameLen), 1, ""},
		{strings.Repeat("x", MaxNameLen+1), 1, "257 bytes long, more than 256"},
		{"bad\xff", 1, "not valid UTF-8"},
		{"new\nline", 1, "control character"},
	}
	for _, tt := range tests {
		err := CheckFixed(tt.name, tt.v)
		if tt.err == "" {
			if err != nil {
				t.Errorf("CheckFixed(%.20q, %d) = %v", tt.name, tt.v, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("CheckFixed(%.20q, %d) = %v, want an error saying %q", tt.name, tt.v, err, tt.err)
		}
	}
}
