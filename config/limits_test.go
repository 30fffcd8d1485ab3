package config

import (
	"fmt"
	"strings"
	"testing"
)

// Values that would overflow the runtime's fixed-point or duration
// arithmetic, or make no sense, get a diagnostic at the value's file:line
// from Validate instead of a late error or silent acceptance.
func TestValidateLimits(t *testing.T) {
	const base = "address = \"10.0.0.1:6380\"\n"
	many := func(n int, format string) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, format, i)
		}
		return b.String()
	}
	long := strings.Repeat("k", 300)
	tests := []struct {
		diagCase
		ok bool
	}{
		{ok: true, diagCase: diagCase{name: "largest amounts", src: base + "resources {\n  CPU    = 65536\n  GPU    = 65536\n  memory = 100000000000000\n  custom = { accel = 1e14 }\n}\nnode_type \"t\" {\n  resources = { CPU = 65536, x = 1e14 }\n}\n"}},
		{ok: true, diagCase: diagCase{name: "largest inline limit", src: base + "object_store {\n  inline_limit = \"255MiB\"\n}\n"}},
		{ok: true, diagCase: diagCase{name: "largest worker counts", src: base + "worker_pool {\n  prestart = 4096\n  max_idle = 4096\n}\n"}},
		{ok: true, diagCase: diagCase{name: "day-long health check", src: base + "health_check {\n  period = \"1h\"\n  failure_threshold = 24\n}\n"}},
		{ok: true, diagCase: diagCase{name: "many custom resources", src: base + "resources {\n  custom = {" + many(252, "r%d = 1, ") + "}\n}\n"}},
		{diagCase: diagCase{
			name: "CPU 1e18", src: base + "resources {\n  CPU = 1e18\n}\n",
			line: 3, col: 9, want: []string{"Invalid resource amount", `"CPU"`, "1e+18 is above the maximum 65536"},
		}},
		{diagCase: diagCase{
			name: "GPU just above the maximum", src: base + "resources {\n  GPU = 65537\n}\n",
			line: 3, col: 9, want: []string{`"GPU"`, "65537 is above the maximum 65536"},
		}},
		{diagCase: diagCase{
			name: "a million CPUs", src: base + "resources {\n  CPU = 1000000\n}\n",
			line: 3, col: 9, want: []string{`"CPU"`, "above the maximum 65536"},
		}},
		{diagCase: diagCase{
			name: "memory 1 EiB", src: base + "resources {\n  memory = \"1EiB\"\n}\n",
			line: 3, col: 12, want: []string{"Resource amount too large", "1152921504606846976 bytes", "maximum 100000000000000"},
		}},
		{diagCase: diagCase{
			name: "object store 1 EiB", src: base + "object_store {\n  memory = \"1EiB\"\n}\n",
			line: 3, col: 12, want: []string{"Size too large", "object_store.memory is 1152921504606846976 bytes"},
		}},
		{diagCase: diagCase{
			name: "custom resource 1e20", src: base + "resources {\n  custom = { accel = 1e20 }\n}\n",
			line: 3, col: 22, want: []string{`"accel"`, "1e+20 is above the maximum 1e+14"},
		}},
		{diagCase: diagCase{
			name: "node type resource 1e18", src: base + "node_type \"big\" {\n  resources = { CPU = 1e18 }\n}\n",
			line: 3, col: 23, want: []string{"Invalid resource amount", `"CPU"`, "above the maximum"},
		}},
		{diagCase: diagCase{
			name: "node type resource name too long", src: base + "node_type \"big\" {\n  resources = { " + long + " = 1 }\n}\n",
			line: 3, col: 320, want: []string{"Invalid resource name", `"big"`, "300 bytes long"},
		}},
		{diagCase: diagCase{
			name: "custom resource name too long", src: base + "resources {\n  custom = { " + long + " = 1 }\n}\n",
			line: 3, col: 317, want: []string{"Invalid resource name", "300 bytes long, more than 256"},
		}},
		{diagCase: diagCase{
			name: "too many custom resources", src: base + "resources {\n  custom = {" + many(253, "r%d = 1, ") + "}\n}\n",
			line: 3, col: 12, want: []string{"Too many resources", "253 resources", "at most 252"},
		}},
		{diagCase: diagCase{
			name: "inline limit at the message limit", src: base + "object_store {\n  inline_limit = \"256MiB\"\n}\n",
			line: 3, col: 18, want: []string{"Inline limit exceeds the message limit", "268435456 bytes", "at most 267386880"},
		}},
		{diagCase: diagCase{
			name: "prestart a million", src: base + "worker_pool {\n  prestart = 1000000\n}\n",
			line: 3, col: 14, want: []string{"Value too large", "prestart is 1000000", "at most 4096"},
		}},
		{diagCase: diagCase{
			name: "max idle too large", src: base + "worker_pool {\n  max_idle = 5000\n}\n",
			line: 3, col: 14, want: []string{"max_idle is 5000", "at most 4096"},
		}},
		{diagCase: diagCase{
			name: "health check timeout overflows", src: base + "health_check {\n  period = \"3s\"\n  failure_threshold = 9000000000\n}\n",
			line: 4, col: 23, want: []string{"failure_threshold (9000000000)", "period (3s)", "at most 24h0m0s"},
		}},
		{diagCase: diagCase{
			name: "too many labels", src: base + "labels = {" + many(257, "l%d = \"v\", ") + "}\n",
			line: 2, col: 10, want: []string{"Too many labels", "257 entries", "at most 256"},
		}},
		{diagCase: diagCase{
			name: "label key too long", src: base + "labels = { " + long + " = \"v\" }\n",
			line: 2, col: 315, want: []string{"Invalid label", "300 bytes long"},
		}},
		{diagCase: diagCase{
			name: "label value too long", src: base + "labels = { zone = \"" + strings.Repeat("v", 1025) + "\" }\n",
			line: 2, col: 19, want: []string{"Invalid label", `label "zone" is 1025 bytes long`, "at most 1024"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatalf("Parse: %v", diags)
			}
			vd := n.Validate()
			if tc.ok {
				if len(vd) != 0 {
					t.Fatalf("Validate() = %v, want no diagnostics", vd)
				}
				return
			}
			checkDiag(t, vd, n.Files(), tc.diagCase)
		})
	}
}

// Flags get the same checks; their diagnostics name the setting instead of
// a file position.
func TestValidateLimitsFromFlags(t *testing.T) {
	n := Default()
	n.Head = true
	n.Address = DefaultHeadAddress
	huge := 1e18
	n.Override(Flags{CPUs: &huge, ObjectStoreMemory: 1 << 60, Resources: map[string]float64{"accel": 1e19}})
	vd := n.Validate()
	want := []string{`resource "CPU": amount 1e+18`, "object_store.memory is 1152921504606846976 bytes", `resource "accel": amount 1e+19`}
	if len(vd) != len(want) {
		t.Fatalf("Validate() = %v, want %d diagnostics", vd, len(want))
	}
	var all strings.Builder
	for _, d := range vd {
		all.WriteString(d.Detail + "\n")
	}
	for _, w := range want {
		if !strings.Contains(all.String(), w) {
			t.Errorf("diagnostics %q do not say %q", all.String(), w)
		}
	}
	for _, d := range vd {
		if d.Subject != nil {
			t.Errorf("diagnostic %q from a flag has subject %s", d.Summary, d.Subject)
		}
	}
}
