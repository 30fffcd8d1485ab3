package config

import (
	"os"
	"strings"
	"testing"
)

func TestLogs(t *testing.T) {
	const base = "address = \"10.0.0.1:6380\"\n"
	ok := []struct {
		name, src string
		want      Logs
	}{
		{"left out", "", Logs{}},
		{"both", "logs {\n  max_file_size = \"100MiB\"\n  max_files = 3\n}\n", Logs{MaxFileSize: 100 << 20, MaxFiles: 3}},
		{"the smallest", "logs {\n  max_file_size = \"1MiB\"\n  max_files = 1\n}\n", Logs{MaxFileSize: 1 << 20, MaxFiles: 1}},
		{"bytes", "logs {\n  max_file_size = 2097152\n}\n", Logs{MaxFileSize: 2 << 20}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(base+tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatalf("%q: %v", tc.src, diags)
			}
			if vd := n.Validate(); len(vd) != 0 {
				t.Fatalf("%q: Validate() = %v", tc.src, vd)
			}
			if n.Logs != tc.want {
				t.Fatalf("%q: got %+v, want %+v", tc.src, n.Logs, tc.want)
			}
		})
	}

	bad := []diagCase{
		{name: "file too small", src: base + "logs {\n  max_file_size = \"10KiB\"\n}\n",
			line: 3, col: 19, want: []string{"logs.max_file_size", "from 1MiB to 1TiB", "10240 bytes"}},
		{name: "file too large", src: base + "logs {\n  max_file_size = \"2TiB\"\n}\n",
			line: 3, col: 19, want: []string{"logs.max_file_size", "from 1MiB to 1TiB"}},
		{name: "negative count", src: base + "logs {\n  max_files = -1\n}\n",
			line: 3, col: 15, want: []string{"logs.max_files", "from 1 to 1000", "got -1"}},
		{name: "too many", src: base + "logs {\n  max_files = 5000\n}\n",
			line: 3, col: 15, want: []string{"logs.max_files", "got 5000"}},
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
		{name: "size not a size", src: base + "logs {\n  max_file_size = \"lots\"\n}\n",
			line: 3, col: 19, want: []string{"max_file_size", `"lots"`}},
		{name: "count not a number", src: base + "logs {\n  max_files = \"five\"\n}\n",
			line: 3, col: 15, want: []string{"max_files", "whole number"}},
		{name: "unknown attribute", src: base + "logs {\n  max_file_sise = \"1GiB\"\n}\n",
			line: 3, col: 3, want: []string{"max_file_sise", "max_file_size"}},
		{name: "two blocks", src: base + "logs {\n}\nlogs {\n}\n",
			line: 4, col: 1, want: []string{"logs"}},
	}
	for _, tc := range decodeErrs {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			checkDiag(t, diags, n.Files(), tc)
		})
	}
}

// TestLogsDoc: the block docs/logs.md shows is the defaults.
func TestLogsDoc(t *testing.T) {
	doc, err := os.ReadFile("../docs/logs.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```hcl\nlogs {")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/logs.md shows no logs block")
	}
	n, diags := Parse([]byte("address = \"10.0.0.1:6380\"\nlogs {"+block), "logs.md")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if want := (Logs{MaxFileSize: DefaultLogMaxFileSize, MaxFiles: DefaultLogMaxFiles}); n.Logs != want {
		t.Errorf("docs/logs.md's block: %+v, want the defaults %+v", n.Logs, want)
	}
}

// TestLogsEnv: $GORAY_LOG_MAX_FILE_SIZE and $GORAY_LOG_MAX_FILES fill what
// the file leaves out; the file wins; a bad value is reported naming its
// variable.
func TestLogsEnv(t *testing.T) {
	const base = "address = \"10.0.0.1:6380\"\n"
	tests := []struct {
		name, src string
		env       map[string]string
		want      Logs
		diag      []string // every string in one error diagnostic
	}{
		{name: "from the environment", env: map[string]string{EnvLogMaxFileSize: "64MiB", EnvLogMaxFiles: "3"},
			want: Logs{MaxFileSize: 64 << 20, MaxFiles: 3}},
		{name: "the file wins", src: "logs {\n  max_files = 7\n}\n", env: map[string]string{EnvLogMaxFileSize: "2MiB", EnvLogMaxFiles: "3"},
			want: Logs{MaxFileSize: 2 << 20, MaxFiles: 7}},
		{name: "not a size", env: map[string]string{EnvLogMaxFileSize: "lots"},
			diag: []string{"$GORAY_LOG_MAX_FILE_SIZE", `"lots"`}},
		{name: "not a number", env: map[string]string{EnvLogMaxFiles: "five"},
			diag: []string{"$GORAY_LOG_MAX_FILES", `"five"`, "whole number"}},
		{name: "out of range", env: map[string]string{EnvLogMaxFiles: "5000"},
			diag: []string{"$GORAY_LOG_MAX_FILES", "from 1 to 1000", "got 5000"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(base+tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			n.ApplyEnv(func(k string) string { return tc.env[k] })
			vd := n.Validate()
			if tc.diag == nil {
				if vd.HasErrors() {
					t.Fatal(vd)
				}
				if n.Logs.MaxFileSize != tc.want.MaxFileSize || n.Logs.MaxFiles != tc.want.MaxFiles {
					t.Fatalf("got %+v, want %+v", n.Logs, tc.want)
				}
				return
			}
			for _, d := range vd {
				all := true
				for _, w := range tc.diag {
					all = all && strings.Contains(d.Summary+" "+d.Detail, w)
				}
				if all {
					return
				}
			}
			t.Errorf("no diagnostic with %q in %v", tc.diag, vd)
		})
	}
}
