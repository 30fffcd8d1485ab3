package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// TestHugeExponentReported checks that a number with a huge exponent is
// reported at once, by its magnitude, at its file:line: the diagnostic once
// wrote every decimal digit of it (big.Float.Text), which took seconds for
// `port = 1e-100000` and minutes for 1e-300000. The message must be short.
func TestHugeExponentReported(t *testing.T) {
	tests := []struct {
		name string
		src  string
		line int
		want string // in the diagnostic's detail
	}{
		{"port, tiny", "head {}\nport = 1e-100000\n", 2, "got about 1e-100000."},
		{"port, huge", "head {}\nport = 1e300000\n", 2, "out of range: about 1e+300000."},
		{"max_workers, tiny", "head {}\nnode_type \"gpu\" {\n  max_workers = 1e-300000\n}\n", 3, "got about 1e-300000."},
		{"max_workers, negative", "head {}\nnode_type \"gpu\" {\n  max_workers = -2.5e-300000\n}\n", 3, "got about -2.5e-300000."},
		{"size", "head {}\nobject_store {\n  memory = 1e-100000\n}\n", 3, "about 1e-100000 is not a whole"},
		{"json", `{"head": {}, "port": 1e-100000}`, 1, "got about 1e-100000."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "huge.hcl"
			if strings.HasPrefix(tt.src, "{") {
				name = "huge.json"
			}
			n, diags := Parse([]byte(tt.src), name)
			if !diags.HasErrors() {
				diags = append(diags, n.Validate()...)
			}
			var d *hcl.Diagnostic
			for _, x := range diags {
				if x.Severity == hcl.DiagError && strings.Contains(x.Detail, tt.want) {
					d = x
				}
			}
			if d == nil {
				t.Fatalf("no error saying %q in:\n%s", tt.want, FormatDiagnostics(diags, n.Files(), 80, false))
			}
			if d.Subject == nil || d.Subject.Filename != name || d.Subject.Start.Line != tt.line {
				t.Errorf("the error points at %v, want %s line %d", d.Subject, name, tt.line)
			}
			out := FormatDiagnostics(diags, n.Files(), 80, false)
			if !strings.Contains(out, fmt.Sprintf("on %s line %d", name, tt.line)) {
				t.Errorf("the rendered error does not name %s line %d:\n%s", name, tt.line, out)
			}
			if len(d.Detail) > 200 || len(out) > 1000 {
				t.Errorf("the message is %d bytes (rendered %d), want it short:\n%s", len(d.Detail), len(out), out)
			}
		})
	}
}
