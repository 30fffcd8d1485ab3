package hclspec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"

	"github.com/goray-dev/goray/sdk/plugin"
)

func TestDecode(t *testing.T) {
	schema := plugin.Schema{
		Attributes: map[string]plugin.Attribute{
			"token":  {Type: plugin.TypeDuration, Sensitive: true},
			"labels": {Type: plugin.TypeMapString},
			"name":   {Type: plugin.TypeString},
		},
		Blocks: map[string]plugin.BlockSchema{
			"limits": {Schema: plugin.Schema{Attributes: map[string]plugin.Attribute{"max": {Type: plugin.TypeNumber}}}},
		},
	}
	tests := []struct {
		name    string
		src     string
		want    map[string]any
		summary string
		line    int
		absent  string // must not appear in the detail
	}{
		{"values", "labels = { a = \"b\" }\nname = null\nlimits {\n  max = 2\n}\n",
			map[string]any{"labels": map[string]any{"a": "b"}, "limits": map[string]any{"max": float64(2)}}, "", 0, ""},
		{"sensitive value hidden", "token = \"hunter2\"\n", nil, "Invalid duration", 1, "hunter2"},
		{"map value type", "labels = { a = 1 }\n", nil, "Incorrect attribute value type", 1, ""},
		{"duplicate block", "limits {\n}\nlimits {\n}\n", nil, "Duplicate block", 3, ""},
		{"expression error", "name = var.x\n", nil, "Variables not allowed", 1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, diags := hclparse.NewParser().ParseHCL([]byte(tc.src), "c.hcl")
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			got, diags := Decode(f.Body, schema, hcl.Range{Filename: "c.hcl"})
			if tc.summary == "" {
				if diags.HasErrors() {
					t.Fatal(diags.Error())
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("got %#v, want %#v", got, tc.want)
				}
				return
			}
			d := findDiag(diags, tc.summary)
			if d == nil {
				t.Fatalf("no %q in %v", tc.summary, diags)
			}
			if d.Subject.Start.Line != tc.line {
				t.Errorf("line %d, want %d", d.Subject.Start.Line, tc.line)
			}
			if tc.absent != "" && strings.Contains(d.Detail, tc.absent) {
				t.Errorf("detail %q shows %q", d.Detail, tc.absent)
			}
		})
	}
}

func findDiag(diags hcl.Diagnostics, summary string) *hcl.Diagnostic {
	for _, d := range diags {
		if d.Severity == hcl.DiagError && d.Summary == summary {
			return d
		}
	}
	return nil
}

// TestNumberText writes numbers in full within float64's range and by
// their magnitude past it (big.Float.Text of 1e-100000 took seconds).
func TestNumberText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0", "0"},
		{"1.5", "1.5"},
		{"-12345678901234567890", "-1.234567890123456789e+19"},
		{"1e300", "1e+300"},
		{"1e-100000", "about 1e-100000"},
		{"-1e-100000", "about -1e-100000"},
		{"1e300000", "about 1e+300000"},
		{"9.999999999e-300000", "about 1e-299999"},
		{"1.2345678e-400", "about 1.23457e-400"},
	}
	for _, tt := range tests {
		v, err := cty.ParseNumberVal(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := NumberText(v.AsBigFloat()); got != tt.want {
			t.Errorf("NumberText(%s) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestDecodeHugeSize checks a plugin's size attribute given a number with
// a huge exponent: refused at its line, with the magnitude.
func TestDecodeHugeSize(t *testing.T) {
	schema := plugin.Schema{Attributes: map[string]plugin.Attribute{"bytes": {Type: plugin.TypeSize}}}
	f, diags := hclparse.NewParser().ParseHCL([]byte("bytes = 1e-300000\n"), "c.hcl")
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	_, diags = Decode(f.Body, schema, hcl.Range{Filename: "c.hcl"})
	d := findDiag(diags, "Invalid size")
	if d == nil || d.Subject.Start.Line != 1 || !strings.Contains(d.Detail, "about 1e-300000 is not a whole") {
		t.Fatalf("got %v, want an Invalid size error at line 1 with the magnitude", diags)
	}
}
