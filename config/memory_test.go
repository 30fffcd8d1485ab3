package config

import (
	"testing"
	"time"
)

func TestMemoryMonitor(t *testing.T) {
	const base = "address = \"10.0.0.1:6380\"\n"
	n, diags := Parse([]byte(base), "goray.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if m := n.MemoryMonitor; m.UsageThreshold != 0.95 || m.RefreshInterval != 250*time.Millisecond {
		t.Fatalf("defaults: %+v, want threshold 0.95 every 250ms (Ray's)", m)
	}

	ok := []struct {
		src       string
		threshold float64
		every     time.Duration
	}{
		{"memory_monitor {\n  usage_threshold = 0.5\n  refresh_interval = \"50ms\"\n}\n", 0.5, 50 * time.Millisecond},
		{"memory_monitor {\n  usage_threshold = 1\n}\n", 1, 250 * time.Millisecond},
		{"memory_monitor {\n  refresh_interval = \"0s\"\n}\n", 0.95, 0},
	}
	for _, tc := range ok {
		n, diags := Parse([]byte(base+tc.src), "goray.hcl")
		if diags.HasErrors() {
			t.Fatalf("%q: %v", tc.src, diags)
		}
		if vd := n.Validate(); len(vd) != 0 {
			t.Fatalf("%q: Validate() = %v", tc.src, vd)
		}
		if m := n.MemoryMonitor; m.UsageThreshold != tc.threshold || m.RefreshInterval != tc.every {
			t.Fatalf("%q: got %+v", tc.src, m)
		}
	}

	bad := []diagCase{
		{name: "threshold 0", src: base + "memory_monitor {\n  usage_threshold = 0\n}\n",
			line: 3, col: 21, want: []string{"memory_monitor.usage_threshold", "greater than 0 and at most 1", "got 0"}},
		{name: "threshold above 1", src: base + "memory_monitor {\n  usage_threshold = 1.5\n}\n",
			line: 3, col: 21, want: []string{"memory_monitor.usage_threshold", "got 1.5"}},
		{name: "negative interval", src: base + "memory_monitor {\n  refresh_interval = \"-1s\"\n}\n",
			line: 3, col: 22, want: []string{"memory_monitor.refresh_interval", "must not be negative"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatalf("Parse: %v", diags)
			}
			checkDiag(t, n.Validate(), n.Files(), tc)
		})
	}

	decodeErrs := []diagCase{
		{name: "threshold not a number", src: base + "memory_monitor {\n  usage_threshold = \"high\"\n}\n",
			line: 3, col: 21, want: []string{"usage_threshold", "a number is required"}},
		{name: "interval not a duration", src: base + "memory_monitor {\n  refresh_interval = \"often\"\n}\n",
			line: 3, col: 22, want: []string{"Invalid duration", `"often"`}},
		{name: "unknown attribute", src: base + "memory_monitor {\n  usage_treshold = 0.9\n}\n",
			line: 3, col: 3, want: []string{"usage_treshold", "usage_threshold"}},
	}
	for _, tc := range decodeErrs {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			checkDiag(t, diags, n.Files(), tc)
		})
	}
}
