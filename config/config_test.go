package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

func ptr[T any](v T) *T { return &v }

// exported returns a copy of n without the unexported bookkeeping, for
// comparing with reflect.DeepEqual.
func exported(n *Node) Node {
	c := *n
	c.ranges = nil
	c.files = nil
	return c
}

// errorsOnly drops warnings.
func errorsOnly(diags hcl.Diagnostics) hcl.Diagnostics {
	var out hcl.Diagnostics
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			out = append(out, d)
		}
	}
	return out
}

func TestDefault(t *testing.T) {
	want := Node{
		TempDir:       filepath.Join(os.TempDir(), "goray"),
		LogLevel:      "info",
		ObjectStore:   ObjectStore{SpillThreshold: 0.8, InlineLimit: 100 * 1024},
		WorkerPool:    WorkerPool{IdleTimeout: 60 * time.Second, StartTimeout: 30 * time.Second},
		HealthCheck:   HealthCheck{Period: 3 * time.Second, FailureThreshold: 5},
		GCS:           GCS{ReconnectTimeout: 60 * time.Second},
		MemoryMonitor: MemoryMonitor{UsageThreshold: 0.95, RefreshInterval: 250 * time.Millisecond},
		TensorPool:    TensorPool{MaxMemory: DefaultTensorPoolMaxMemory, IdleTimeout: DefaultTensorPoolIdleTimeout},
	}
	got := Default()
	if !reflect.DeepEqual(exported(got), want) {
		t.Fatalf("Default() = %+v, want %+v", exported(got), want)
	}
	if got.Head || got.Address != "" || got.Filename != "" || got.Files() != nil {
		t.Fatalf("Default() has file or head state: %+v", got)
	}
	// Defaults must be fresh values, not a shared instance.
	got.LogLevel = "debug"
	if Default().LogLevel != "info" {
		t.Fatal("Default() returned a shared instance")
	}

	// An empty file is the defaults.
	n, diags := Parse(nil, "empty.hcl")
	if diags.HasErrors() {
		t.Fatalf("empty file: %v", diags)
	}
	want.Filename = "empty.hcl"
	if !reflect.DeepEqual(exported(n), want) {
		t.Fatalf("empty file = %+v, want %+v", exported(n), want)
	}
}

func TestLoadFullFile(t *testing.T) {
	path := filepath.Join("testdata", "full.hcl")
	n, diags := Load(path)
	if len(diags) != 0 {
		t.Fatalf("Load(%s): %s", path, FormatDiagnostics(diags, n.Files(), 0, false))
	}
	if vd := n.Validate(); len(vd) != 0 {
		t.Fatalf("Validate: %v", vd)
	}

	want := Node{
		ClusterName: "demo",
		NodeName:    "n1",
		Head:        true,
		Address:     "127.0.0.1:6390",
		Port:        6380,
		RayletPort:  7001,
		NodeIP:      "127.0.0.1",
		TempDir:     "/var/tmp/goray",
		DataDir:     mustAbs(t, filepath.Join("testdata", "state")), // relative to the file, made absolute
		LogLevel:    "debug",
		Resources: Resources{
			CPU:    ptr(2.0),
			GPU:    ptr(1.0),
			Memory: ptr(int64(4 << 30)),
			Custom: map[string]float64{"accel": 1, "fpga": 0.5},
		},
		ObjectStore: ObjectStore{Memory: 2 << 30, SpillThreshold: 0.75, InlineLimit: 64 << 10},
		WorkerPool: WorkerPool{
			Prestart:     ptr(2),
			MaxIdle:      ptr(4),
			IdleTimeout:  90 * time.Second,
			StartTimeout: 45 * time.Second,
		},
		HealthCheck: HealthCheck{Period: 500 * time.Millisecond, FailureThreshold: 3},
		Spilling:    Spilling{Storage: "s3", MinFileSize: 64 << 20, MaxObjectsPerFile: 500, KeepFiles: true, Wait: 30 * time.Second},
		GCS: GCS{
			Storage:          "redis",
			ReconnectTimeout: 30 * time.Second,
			Redis: Redis{Address: "127.0.0.1:6379", Username: "goray", Password: "full-hcl-password", DB: 1, Prefix: "demo",
				TLS: RedisTLS{Enabled: true, ServerName: "localhost"}},
		},
		MemoryMonitor: MemoryMonitor{UsageThreshold: 0.95, RefreshInterval: 250 * time.Millisecond},
		TensorPool:    TensorPool{MaxMemory: DefaultTensorPoolMaxMemory, IdleTimeout: DefaultTensorPoolIdleTimeout},
		Labels:        map[string]string{"zone": "a", "rack": "r7"},
		PluginDir:     "./bin/plugins",
		Plugins: []Plugin{
			{Kind: "transport", Name: "shm"},
			{Kind: "storage", Name: "s3", SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
		},
		NodeTypes: []NodeType{
			{Name: "cpu-small", Resources: map[string]float64{"CPU": 2}, MinWorkers: 0, MaxWorkers: 4},
			{Name: "gpu", Resources: map[string]float64{"CPU": 8, "GPU": 1}, MinWorkers: 1, MaxWorkers: 2},
		},
		Filename: path,
	}

	// Plugin bodies and declaration ranges are checked separately below.
	got := exported(n)
	got.Plugins = nil
	for _, p := range n.Plugins {
		p.Config, p.DeclRange = nil, hcl.Range{}
		got.Plugins = append(got.Plugins, p)
	}
	got.NodeTypes = nil
	for _, nt := range n.NodeTypes {
		if nt.NodeConfigRange != nt.DeclRange {
			t.Errorf("node type %q without node_config: NodeConfigRange %s, want its DeclRange %s", nt.Name, nt.NodeConfigRange, nt.DeclRange)
		}
		nt.DeclRange, nt.NodeConfigRange = hcl.Range{}, hcl.Range{}
		got.NodeTypes = append(got.NodeTypes, nt)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Load(%s) =\n%+v\nwant\n%+v", path, got, want)
	}
	if n.Files()[path] == nil {
		t.Fatalf("Files() has no entry for %s: %v", path, n.Files())
	}

	ranges := []struct {
		what       string
		r          hcl.Range
		line, col  int
		wantHeader string
	}{
		{"plugin shm", n.Plugins[0].DeclRange, 43, 1, `plugin "transport" "shm"`},
		{"plugin s3", n.Plugins[1].DeclRange, 45, 1, `plugin "storage" "s3"`},
		{"node_type cpu-small", n.NodeTypes[0].DeclRange, 53, 1, `node_type "cpu-small"`},
		{"node_type gpu", n.NodeTypes[1].DeclRange, 59, 1, `node_type "gpu"`},
	}
	src := n.Files()[path].Bytes
	for _, r := range ranges {
		if r.r.Filename != path || r.r.Start.Line != r.line || r.r.Start.Column != r.col {
			t.Errorf("%s DeclRange = %s, want %s:%d,%d", r.what, r.r, path, r.line, r.col)
		}
		if got := string(r.r.SliceBytes(src)); !strings.HasPrefix(got, r.wantHeader) {
			t.Errorf("%s DeclRange covers %q, want the header %q", r.what, got, r.wantHeader)
		}
	}
}

func TestPluginConfigBody(t *testing.T) {
	src := `
plugin "transport" "shm" {}
plugin "storage" "s3" {
  sha256 = "abc"
  config {
    endpoint = "127.0.0.1:9000"
    bucket   = "goray-spill"
    nested { anything = true }
  }
}
`
	n, diags := Parse([]byte(src), "goray.hcl")
	if diags.HasErrors() {
		t.Fatalf("Parse: %v", diags)
	}
	if len(n.Plugins) != 2 {
		t.Fatalf("got %d plugins, want 2", len(n.Plugins))
	}
	shm, s3 := n.Plugins[0], n.Plugins[1]
	if shm.Config != nil {
		t.Errorf("shm Config = %v, want nil (no config block)", shm.Config)
	}
	if shm.DeclRange.Start.Line != 2 || s3.DeclRange.Start.Line != 3 || s3.DeclRange.Start.Column != 1 {
		t.Errorf("DeclRanges = %s, %s; want lines 2 and 3, column 1", shm.DeclRange, s3.DeclRange)
	}
	if s3.SHA256 != "abc" {
		t.Errorf("SHA256 = %q", s3.SHA256)
	}
	if s3.Config == nil {
		t.Fatal("s3 Config is nil")
	}
	// The body is left undecoded: the plugin host decodes it against the
	// plugin's schema, including things this package knows nothing about.
	c, cd := s3.Config.Content(&hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "endpoint", Required: true}, {Name: "bucket", Required: true}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "nested"}},
	})
	if cd.HasErrors() {
		t.Fatalf("decoding the config body: %v", cd)
	}
	for name, want := range map[string]string{"endpoint": "127.0.0.1:9000", "bucket": "goray-spill"} {
		v, vd := c.Attributes[name].Expr.Value(nil)
		if vd.HasErrors() || !v.RawEquals(cty.StringVal(want)) {
			t.Errorf("config %s = %#v (%v), want %q", name, v, vd, want)
		}
	}
	if len(c.Blocks) != 1 || c.Blocks[0].DefRange.Start.Line != 8 {
		t.Errorf("nested block not kept: %v", c.Blocks)
	}
	// A schema mismatch in the body is reported at its own line.
	_, cd = s3.Config.Content(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "endpoint"}}})
	if !cd.HasErrors() || cd[0].Subject == nil || cd[0].Subject.Start.Line < 5 {
		t.Errorf("strict decode of the config body: %v", cd)
	}
}

// diagCase is a source snippet expected to produce a diagnostic at a position
// whose text contains every string in want.
type diagCase struct {
	name      string
	src       string
	line, col int
	want      []string
	notWant   []string
}

func checkDiag(t *testing.T, diags hcl.Diagnostics, files map[string]*hcl.File, tc diagCase) {
	t.Helper()
	diags = errorsOnly(diags)
	if len(diags) == 0 {
		t.Fatalf("no error diagnostics, want one at %d,%d", tc.line, tc.col)
	}
	var found *hcl.Diagnostic
	for _, d := range diags {
		if tc.line == 0 && d.Subject == nil {
			found = d
			break
		}
		if d.Subject != nil && d.Subject.Start.Line == tc.line && d.Subject.Start.Column == tc.col {
			found = d
			break
		}
	}
	if found == nil {
		t.Fatalf("no diagnostic at %d,%d; got:\n%v", tc.line, tc.col, (&DiagnosticsError{Diags: diags}).Error())
	}
	text := found.Summary + "; " + found.Detail
	for _, w := range tc.want {
		if !strings.Contains(text, w) {
			t.Errorf("diagnostic %q does not contain %q", text, w)
		}
	}
	for _, w := range tc.notWant {
		if strings.Contains(text, w) {
			t.Errorf("diagnostic %q contains %q", text, w)
		}
	}
	// The error string carries file:line,col.
	err := NewDiagnosticsError(hcl.Diagnostics{found}, files)
	if tc.line != 0 {
		pos := fmt.Sprintf("goray.hcl:%d,%d: ", tc.line, tc.col)
		if !strings.HasPrefix(err.Error(), pos) {
			t.Errorf("error %q does not start with %q", err, pos)
		}
		// The rendered form shows the source line.
		if f := FormatDiagnostics(hcl.Diagnostics{found}, files, 0, false); !strings.Contains(f, fmt.Sprintf("on goray.hcl line %d", tc.line)) {
			t.Errorf("FormatDiagnostics output lacks the position:\n%s", f)
		}
	}
}

func TestParseDiagnostics(t *testing.T) {
	tests := []diagCase{
		{
			name: "unknown block with suggestion",
			src:  "cluster_name = \"x\"\n\nobjekt_store { memory = \"2GiB\" }\n",
			line: 3, col: 1,
			want: []string{"Unsupported block type", `"objekt_store"`, `Did you mean "object_store"?`},
		},
		{
			name: "unknown top-level argument with suggestion",
			src:  "log_levl = \"info\"\n",
			line: 1, col: 1,
			want: []string{"Unsupported argument", `Did you mean "log_level"?`},
		},
		{
			name: "unknown argument in a block with suggestion",
			src:  "worker_pool {\n  prestrat = 1\n}\n",
			line: 2, col: 3,
			want: []string{"Unsupported argument", `Did you mean "prestart"?`},
		},
		{
			name: "case-insensitive suggestion",
			src:  "resources {\n  cpu = 2\n}\n",
			line: 2, col: 3,
			want: []string{`"cpu"`, `Did you mean "CPU"?`},
		},
		{
			name: "unknown argument without a close name",
			src:  "object_store {\n  compression = true\n}\n",
			line: 2, col: 3,
			want:    []string{"Unsupported argument", `"compression"`},
			notWant: []string{"Did you mean"},
		},
		{
			name: "argument where a block belongs",
			src:  "head = true\n",
			line: 1, col: 1,
			want: []string{`Did you mean to define a block of type "head"?`},
		},
		{
			name: "block where an argument belongs",
			src:  "labels {\n  zone = \"a\"\n}\n",
			line: 1, col: 1,
			want: []string{`Did you mean to define argument "labels"?`},
		},
		{
			name: "unknown plugin body argument",
			src:  "plugin \"storage\" \"s3\" {\n  sha265 = \"x\"\n}\n",
			line: 2, col: 3,
			want: []string{`Did you mean "sha256"?`},
		},
		{
			name: "string required",
			src:  "node_name = \"n\"\nlog_level = 3\n",
			line: 2, col: 13,
			want: []string{"Incorrect attribute value type", `"log_level"`, "a string is required, got number"},
		},
		{
			name: "whole number required",
			src:  "port = \"6380\"\n",
			line: 1, col: 8,
			want: []string{`"port"`, "a whole number is required, got string"},
		},
		{
			name: "fraction for a count",
			src:  "health_check {\n  failure_threshold = 1.5\n}\n",
			line: 2, col: 23,
			want: []string{`"failure_threshold"`, "whole number", "1.5"},
		},
		{
			name: "number required",
			src:  "object_store {\n  spill_threshold = \"high\"\n}\n",
			line: 2, col: 21,
			want: []string{`"spill_threshold"`, "a number is required, got string"},
		},
		{
			name: "bad size string",
			src:  "resources {\n  memory = \"lots\"\n}\n",
			line: 2, col: 12,
			want: []string{"Invalid size", `"memory"`, `"lots"`},
		},
		{
			name: "negative size number",
			src:  "object_store {\n  inline_limit = -1\n}\n",
			line: 2, col: 18,
			want: []string{"Invalid size", "-1", "non-negative"},
		},
		{
			name: "size of the wrong type",
			src:  "object_store {\n  memory = true\n}\n",
			line: 2, col: 12,
			want: []string{"a size", "got bool"},
		},
		{
			name: "bad duration",
			src:  "health_check {\n  period = \"1 sec\"\n}\n",
			line: 2, col: 12,
			want: []string{"Invalid duration", `"period"`, `"1 sec"`},
		},
		{
			name: "duration as a number",
			src:  "worker_pool {\n  idle_timeout = 60\n}\n",
			line: 2, col: 18,
			want: []string{"a duration string", "got number"},
		},
		{
			name: "map element of the wrong type",
			src:  "labels = { zone = \"a\", rack = 7 }\n",
			line: 1, col: 31,
			want: []string{`labels["rack"]`, "a string is required, got number"},
		},
		{
			name: "map required",
			src:  "labels = \"zone=a\"\n",
			line: 1, col: 10,
			want: []string{`"labels"`, "a map of strings is required, got string"},
		},
		{
			name: "computed map element of the wrong type",
			src:  "labels = { for k in [\"a\"] : k => 1 }\n",
			line: 1, col: 10,
			want: []string{`labels["a"]`, "a string is required, got number"},
		},
		{
			name: "whole number out of range",
			src:  "port = 1e30\n",
			line: 1, col: 8,
			want: []string{"Number out of range", `"port"`},
		},
		{
			name: "number too large for a float",
			src:  "resources {\n  CPU = 1e400\n}\n",
			line: 2, col: 9,
			want: []string{"Number out of range", `"CPU"`},
		},
		{
			name: "custom resource not a number",
			src:  "resources {\n  custom = { accel = \"one\" }\n}\n",
			line: 2, col: 22,
			want: []string{`custom["accel"]`, "a number is required, got string"},
		},
		{
			name: "duplicate map key",
			src:  "labels = {\n  zone = \"a\"\n  zone = \"b\"\n}\n",
			line: 3, col: 3,
			want: []string{"Duplicate key", `"zone"`, "goray.hcl:2,3"},
		},
		{
			name: "duplicate singleton block",
			src:  "object_store {}\nobject_store {}\n",
			line: 2, col: 1,
			want: []string{"Duplicate object_store block", "goray.hcl:1,1"},
		},
		{
			name: "duplicate plugin config block",
			src:  "plugin \"storage\" \"s3\" {\n  config {}\n  config {}\n}\n",
			line: 3, col: 3,
			want: []string{"Duplicate config block"},
		},
		{
			name: "plugin block missing its name label",
			src:  "plugin \"storage\" {}\n",
			line: 1, col: 18,
			want: []string{"Missing name for plugin"},
		},
		{
			name: "node_type resources of the wrong type",
			src:  "node_type \"x\" {\n  resources = [1]\n}\n",
			line: 2, col: 15,
			want: []string{"a map of numbers is required"},
		},
		{
			name: "join address on the head",
			src:  "head {}\naddress = \"10.0.0.1:6380\"\n",
			line: 2, col: 1,
			want: []string{"Join address on the head node", "head { address"},
		},
		{
			name: "variables are not allowed",
			src:  "log_level = var.level\n",
			line: 1, col: 13,
			want: []string{"Variables not allowed"},
		},
		{
			name: "syntax error",
			src:  "cluster_name = \"x\"\nport = \n",
			line: 2, col: 8,
			want: []string{"Invalid expression"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if n == nil {
				t.Fatal("Parse returned a nil Node")
			}
			checkDiag(t, diags, n.Files(), tc)
		})
	}
}

func TestValidate(t *testing.T) {
	const base = "address = \"10.0.0.1:6380\"\n"
	tests := []struct {
		diagCase
		ok bool // no diagnostics expected
	}{
		{ok: true, diagCase: diagCase{name: "worker node with address", src: base}},
		{ok: true, diagCase: diagCase{name: "head without address", src: "head {}\n"}},
		{ok: true, diagCase: diagCase{name: "spill threshold 1", src: base + "object_store {\n  spill_threshold = 1\n}\n"}},
		{ok: true, diagCase: diagCase{name: "inline limit above unset memory", src: base + "object_store {\n  inline_limit = \"200MiB\"\n}\n"}},
		{ok: true, diagCase: diagCase{name: "same plugin name, different kinds", src: base + "plugin \"storage\" \"x\" {}\nplugin \"transport\" \"x\" {}\n"}},
		{ok: true, diagCase: diagCase{name: "log level in capitals", src: base + "log_level = \"WARN\"\n"}},
		{diagCase: diagCase{
			name: "worker node without address", src: "log_level = \"info\"\n",
			want: []string{"Missing GCS address"},
		}},
		{diagCase: diagCase{
			name: "address without port", src: "address = \"10.0.0.1\"\n",
			line: 1, col: 11, want: []string{"Invalid address", `"10.0.0.1"`},
		}},
		{diagCase: diagCase{
			name: "join address with port 0", src: "address = \"10.0.0.1:0\"\n",
			line: 1, col: 11, want: []string{"non-zero port"},
		}},
		{diagCase: diagCase{
			name: "head address port out of range", src: "head {\n  address = \"0.0.0.0:99999\"\n}\n",
			line: 2, col: 13, want: []string{`"99999"`, "0 to 65535"},
		}},
		{diagCase: diagCase{
			name: "unknown log level", src: base + "log_level = \"debg\"\n",
			line: 2, col: 13, want: []string{"Unknown log level", `"debg"`, `Did you mean "debug"?`},
		}},
		{diagCase: diagCase{
			name: "log level prefix suggestion", src: base + "log_level = \"warning\"\n",
			line: 2, col: 13, want: []string{`Did you mean "warn"?`},
		}},
		{diagCase: diagCase{
			name: "unknown log level without suggestion", src: base + "log_level = \"verbose\"\n",
			line: 2, col: 13, want: []string{"trace, debug, info"}, notWant: []string{"Did you mean"},
		}},
		{diagCase: diagCase{
			name: "spill threshold 0", src: base + "object_store {\n  spill_threshold = 0\n}\n",
			line: 3, col: 21, want: []string{"spill_threshold", "got 0"},
		}},
		{diagCase: diagCase{
			name: "spill threshold above 1", src: base + "object_store {\n  spill_threshold = 1.5\n}\n",
			line: 3, col: 21, want: []string{"at most 1", "got 1.5"},
		}},
		{diagCase: diagCase{
			name: "inline limit above store memory",
			src:  base + "object_store {\n  memory       = \"1MiB\"\n  inline_limit = \"2MiB\"\n}\n",
			line: 4, col: 18, want: []string{"inline_limit (2097152 bytes)", "memory (1048576 bytes)"},
		}},
		{diagCase: diagCase{
			name: "port out of range", src: base + "port = 70000\n",
			line: 2, col: 8, want: []string{"Invalid port", "70000"},
		}},
		{diagCase: diagCase{
			name: "negative raylet port", src: base + "raylet_port = -1\n",
			line: 2, col: 15, want: []string{"raylet_port", "-1"},
		}},
		{diagCase: diagCase{
			name: "spilling to an unknown storage plugin", src: base + "spilling {\n  storage = \"s4\"\n}\n",
			line: 3, col: 13, want: []string{"Unknown storage plugin", `no plugin "storage" "s4" block`},
		}},
		{diagCase: diagCase{
			name: "bad node ip", src: base + "node_ip = \"10.0.0\"\n",
			line: 2, col: 11, want: []string{"node_ip", "10.0.0", "not an IP address"},
		}},
		{diagCase: diagCase{
			name: "cluster name with a space", src: base + "cluster_name = \"my cluster\"\n",
			line: 2, col: 16, want: []string{"Invalid cluster_name", `"my cluster"`, "GCS storage keeps the cluster under it"},
		}},
		{ok: true, diagCase: diagCase{name: "cluster name", src: base + "cluster_name = \"lab-2\"\n"}},
		{diagCase: diagCase{
			name: "negative CPU", src: base + "resources {\n  CPU = -1\n}\n",
			line: 3, col: 9, want: []string{"Invalid resource amount", `"CPU"`},
		}},
		{diagCase: diagCase{
			name: "reserved custom resource", src: base + "resources {\n  custom = { GPU = 1 }\n}\n",
			line: 3, col: 20, want: []string{"Reserved resource name", `"GPU"`},
		}},
		{diagCase: diagCase{
			name: "negative custom resource", src: base + "resources {\n  custom = { accel = -2 }\n}\n",
			line: 3, col: 22, want: []string{`"accel"`, ">= 0"},
		}},
		{diagCase: diagCase{
			name: "negative prestart", src: base + "worker_pool {\n  prestart = -1\n}\n",
			line: 3, col: 14, want: []string{"prestart", "-1"},
		}},
		{diagCase: diagCase{
			name: "zero idle timeout", src: base + "worker_pool {\n  idle_timeout = \"0s\"\n}\n",
			line: 3, col: 18, want: []string{"idle_timeout must be positive"},
		}},
		{diagCase: diagCase{
			name: "negative period", src: base + "health_check {\n  period = \"-1s\"\n}\n",
			line: 3, col: 12, want: []string{"period must be positive"},
		}},
		{diagCase: diagCase{
			name: "zero failure threshold", src: base + "health_check {\n  failure_threshold = 0\n}\n",
			line: 3, col: 23, want: []string{"at least 1"},
		}},
		{diagCase: diagCase{
			name: "unknown plugin kind", src: base + "plugin \"storag\" \"s3\" {}\n",
			line: 2, col: 8, want: []string{"Unknown plugin kind", `"storag"`, `Did you mean "storage"?`},
		}},
		{diagCase: diagCase{
			name: "unknown plugin kind without suggestion", src: base + "plugin \"scheduler\" \"x\" {}\n",
			line: 2, col: 8, want: []string{"transport, storage, provider"}, notWant: []string{"Did you mean"},
		}},
		{diagCase: diagCase{
			name: "duplicate plugin", src: base + "plugin \"storage\" \"s3\" {}\nplugin \"storage\" \"s3\" {}\n",
			line: 3, col: 1, want: []string{"Duplicate plugin", `storage "s3"`, "goray.hcl:2,1"},
		}},
		{diagCase: diagCase{
			name: "empty plugin name", src: base + "plugin \"storage\" \"\" {}\n",
			line: 2, col: 18, want: []string{"Missing plugin name"},
		}},
		{diagCase: diagCase{
			name: "bad sha256", src: base + "plugin \"storage\" \"s3\" {\n  sha256 = \"xyz\"\n}\n",
			line: 3, col: 12, want: []string{"Invalid sha256", `"xyz"`},
		}},
		{diagCase: diagCase{
			name: "node type min above max",
			src:  base + "node_type \"cpu\" {\n  min_workers = 5\n  max_workers = 4\n}\n",
			line: 3, col: 17, want: []string{"min_workers (5)", "max_workers (4)", `"cpu"`},
		}},
		{diagCase: diagCase{
			name: "duplicate node type", src: base + "node_type \"cpu\" {}\nnode_type \"cpu\" {}\n",
			line: 3, col: 1, want: []string{"Duplicate node type", "goray.hcl:2,1"},
		}},
		{diagCase: diagCase{
			name: "negative node type resource", src: base + "node_type \"cpu\" {\n  resources = { CPU = -1 }\n}\n",
			line: 3, col: 23, want: []string{"Invalid resource amount"},
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

func TestOverride(t *testing.T) {
	const file = `
node_name = "from-file"
address   = "10.0.0.1:6380"
port      = 6380
temp_dir  = "/file/tmp"
log_level = "debug"
labels    = { zone = "a", rack = "r1" }
resources {
  CPU    = 2
  GPU    = 1
  custom = { accel = 1, fpga = 0.5 }
}
object_store {
  memory = "1GiB"
}
`
	tests := []struct {
		name  string
		src   string
		flags Flags
		check func(t *testing.T, n *Node)
	}{
		{
			name:  "zero flags change nothing",
			src:   file,
			flags: Flags{},
			check: func(t *testing.T, n *Node) {
				if n.NodeName != "from-file" || n.Address != "10.0.0.1:6380" || n.Port != 6380 || n.TempDir != "/file/tmp" ||
					n.LogLevel != "debug" || *n.Resources.CPU != 2 || *n.Resources.GPU != 1 || n.ObjectStore.Memory != 1<<30 || n.Head {
					t.Errorf("values changed: %+v", n)
				}
			},
		},
		{
			name: "non-zero flags win",
			src:  file,
			flags: Flags{
				Address: "10.0.0.9:7000", Port: 7000, RayletPort: 7100, TempDir: "/flag/tmp", LogLevel: "warn",
				NodeName: "from-flag", CPUs: ptr(8.0), GPUs: ptr(0.0), ObjectStoreMemory: 2 << 30,
			},
			check: func(t *testing.T, n *Node) {
				got := []any{n.Address, n.Port, n.RayletPort, n.TempDir, n.LogLevel, n.NodeName, *n.Resources.CPU, *n.Resources.GPU, n.ObjectStore.Memory}
				want := []any{"10.0.0.9:7000", 7000, 7100, "/flag/tmp", "warn", "from-flag", 8.0, 0.0, int64(2 << 30)}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("got %v, want %v", got, want)
				}
			},
		},
		{
			name:  "metrics flags",
			src:   "metrics {\n  port = 9100\n}\n",
			flags: Flags{MetricsPort: ptr(0), NoMetrics: true},
			check: func(t *testing.T, n *Node) {
				if n.Metrics.Port != 0 || !n.Metrics.Disabled {
					t.Errorf("Metrics = %+v, want port 0 (--metrics-port 0) and disabled (--no-metrics)", n.Metrics)
				}
			},
		},
		{
			name:  "metrics port flag",
			src:   "metrics {\n  enabled = true\n}\n",
			flags: Flags{MetricsPort: ptr(9200)},
			check: func(t *testing.T, n *Node) {
				if n.Metrics.Port != 9200 || n.Metrics.Disabled {
					t.Errorf("Metrics = %+v, want port 9200, enabled", n.Metrics)
				}
			},
		},
		{
			name:  "memory flag",
			src:   file,
			flags: Flags{Memory: 3 << 30},
			check: func(t *testing.T, n *Node) {
				if n.Resources.Memory == nil || *n.Resources.Memory != 3<<30 {
					t.Errorf("Memory = %v, want 3 GiB", n.Resources.Memory)
				}
			},
		},
		{
			name:  "maps merge per key",
			src:   file,
			flags: Flags{Resources: map[string]float64{"accel": 4, "tpu": 1}, Labels: map[string]string{"zone": "b", "team": "ml"}},
			check: func(t *testing.T, n *Node) {
				if want := map[string]float64{"accel": 4, "fpga": 0.5, "tpu": 1}; !reflect.DeepEqual(n.Resources.Custom, want) {
					t.Errorf("Custom = %v, want %v", n.Resources.Custom, want)
				}
				if want := map[string]string{"zone": "b", "rack": "r1", "team": "ml"}; !reflect.DeepEqual(n.Labels, want) {
					t.Errorf("Labels = %v, want %v", n.Labels, want)
				}
			},
		},
		{
			name:  "maps created when the file has none",
			src:   "",
			flags: Flags{Resources: map[string]float64{"accel": 1}, Labels: map[string]string{"zone": "b"}},
			check: func(t *testing.T, n *Node) {
				if n.Resources.Custom["accel"] != 1 || n.Labels["zone"] != "b" {
					t.Errorf("Custom = %v, Labels = %v", n.Resources.Custom, n.Labels)
				}
			},
		},
		{
			name:  "head flag with no address listens on the default",
			src:   "",
			flags: Flags{Head: ptr(true)},
			check: func(t *testing.T, n *Node) {
				if !n.Head || n.Address != DefaultHeadAddress {
					t.Errorf("Head = %v, Address = %q", n.Head, n.Address)
				}
			},
		},
		{
			name:  "head flag keeps an explicit address",
			src:   "",
			flags: Flags{Head: ptr(true), Address: "0.0.0.0:7777"},
			check: func(t *testing.T, n *Node) {
				if !n.Head || n.Address != "0.0.0.0:7777" {
					t.Errorf("Head = %v, Address = %q", n.Head, n.Address)
				}
			},
		},
		{
			name:  "head=false overrides the head block",
			src:   "head {}\n",
			flags: Flags{Head: ptr(false), Address: "10.0.0.1:6380"},
			check: func(t *testing.T, n *Node) {
				if n.Head || n.Address != "10.0.0.1:6380" {
					t.Errorf("Head = %v, Address = %q", n.Head, n.Address)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatalf("Parse: %v", diags)
			}
			n.Override(tc.flags)
			tc.check(t, n)
		})
	}
}

func TestOverrideDoesNotMutateCopies(t *testing.T) {
	n, diags := Parse([]byte("labels = { zone = \"a\" }\nresources {\n  custom = { accel = 1 }\n}\n"), "goray.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	before := *n
	n.Override(Flags{Labels: map[string]string{"zone": "b"}, Resources: map[string]float64{"accel": 2}})
	if before.Labels["zone"] != "a" || before.Resources.Custom["accel"] != 1 {
		t.Errorf("Override changed an earlier copy: labels %v, custom %v", before.Labels, before.Resources.Custom)
	}
	if n.Labels["zone"] != "b" || n.Resources.Custom["accel"] != 2 {
		t.Errorf("Override did not apply: labels %v, custom %v", n.Labels, n.Resources.Custom)
	}
}

// A value replaced by a flag is validated, but no longer blamed on the file.
func TestValidateAfterOverride(t *testing.T) {
	const src = "address = \"10.0.0.1:6380\"\nlog_level = \"bogus\"\nport = 70000\nresources {\n  custom = { CPU = 1 }\n}\n"
	n, diags := Parse([]byte(src), "goray.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if got := len(n.Validate()); got != 3 {
		t.Fatalf("before Override: %d diagnostics, want 3: %v", got, n.Validate())
	}
	// Flags fix two file values and break another.
	n.Override(Flags{LogLevel: "info", Port: 6380, Address: "nonsense"})
	vd := n.Validate()
	if len(vd) != 2 {
		t.Fatalf("after Override: %v, want the custom CPU and the address", vd)
	}
	for _, d := range vd {
		switch d.Summary {
		case "Invalid address":
			if d.Subject != nil {
				t.Errorf("address from a flag blamed on %s", d.Subject)
			}
			if !strings.Contains(d.Detail, `"nonsense"`) {
				t.Errorf("detail %q does not name the value", d.Detail)
			}
		case "Reserved resource name":
			if d.Subject == nil || d.Subject.Start.Line != 5 {
				t.Errorf("custom CPU subject = %v, want line 5", d.Subject)
			}
		default:
			t.Errorf("unexpected diagnostic %v", d)
		}
	}
}

func TestValidateWithoutFile(t *testing.T) {
	n := Default()
	n.Head = true
	n.Address = DefaultHeadAddress
	n.LogLevel = "loud"
	n.ObjectStore.SpillThreshold = math.NaN()
	n.Plugins = []Plugin{{Kind: "transport", Name: "a"}, {Kind: "transport", Name: "a"}}
	n.NodeTypes = []NodeType{{Name: "t", MinWorkers: 2, MaxWorkers: 1}}
	vd := n.Validate()
	want := []string{"Unknown log level", "Invalid spill threshold", "Duplicate plugin", "Invalid worker range"}
	if len(vd) != len(want) {
		t.Fatalf("Validate() = %v, want %v", vd, want)
	}
	for i, d := range vd {
		if d.Summary != want[i] {
			t.Errorf("diagnostic %d = %q, want %q", i, d.Summary, want[i])
		}
		if d.Subject != nil {
			t.Errorf("diagnostic %q has subject %s without a file", d.Summary, d.Subject)
		}
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "0", want: 0},
		{in: "1048576", want: 1 << 20},
		{in: "100KiB", want: 100 << 10},
		{in: "2GiB", want: 2 << 30},
		{in: "512MB", want: 512_000_000},
		{in: "1.5GiB", want: 3 << 29},
		{in: " 4 GiB ", want: 4 << 30},
		{in: "1k", want: 1000},
		{in: "", wantErr: true},
		{in: "lots", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "-1GiB", wantErr: true},
		{in: "12XB", wantErr: true},
		{in: "9EiB", wantErr: true}, // does not fit in int64
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSize(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseSize(%q) = %d, want an error", tc.in, got)
				}
				if !errors.Is(err, ErrInvalidSize) {
					t.Errorf("error %v does not wrap ErrInvalidSize", err)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.in)) {
					t.Errorf("error %q does not name the value %q", err, tc.in)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestComputedMap(t *testing.T) {
	n, diags := Parse([]byte("labels = { for k in [\"a\", \"b\"] : k => upper(k) }\n"), "goray.hcl")
	// Functions are not available, so the call is an error...
	if !diags.HasErrors() {
		t.Fatalf("upper() accepted: %v", n.Labels)
	}
	n, diags = Parse([]byte("labels = { for k in [\"a\", \"b\"] : k => \"x-${k}\" }\n"), "goray.hcl")
	// ...but plain for expressions and templates work.
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if want := map[string]string{"a": "x-a", "b": "x-b"}; !reflect.DeepEqual(n.Labels, want) {
		t.Fatalf("Labels = %v, want %v", n.Labels, want)
	}
}

func TestSizeAsNumber(t *testing.T) {
	n, diags := Parse([]byte("object_store {\n  memory = 1073741824\n  inline_limit = 1024\n}\n"), "goray.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if n.ObjectStore.Memory != 1<<30 || n.ObjectStore.InlineLimit != 1024 {
		t.Fatalf("ObjectStore = %+v", n.ObjectStore)
	}
}

func TestNullMeansUnset(t *testing.T) {
	n, diags := Parse([]byte("log_level = null\nresources {\n  CPU = null\n}\n"), "goray.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if n.LogLevel != "info" || n.Resources.CPU != nil {
		t.Fatalf("LogLevel = %q, CPU = %v; want the defaults", n.LogLevel, n.Resources.CPU)
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.hcl")
	n, diags := Load(path)
	if n == nil || !diags.HasErrors() {
		t.Fatalf("Load(missing) = %v, %v", n, diags)
	}
	if !strings.Contains(diags[0].Detail, path) {
		t.Errorf("detail %q does not name the file", diags[0].Detail)
	}
}

// testdata/errors.hcl holds one of each kind of mistake; the whole report is
// pinned so that the order is stable and nothing is lost.
func TestErrorsExampleFile(t *testing.T) {
	path := filepath.Join("testdata", "errors.hcl")
	n, diags := Load(path)
	diags = append(diags, n.Validate()...)
	err := NewDiagnosticsError(diags, n.Files())
	if err == nil {
		t.Fatal("no errors")
	}
	want := []string{
		path + `:2,16: Incorrect attribute value type; Inappropriate value for attribute "log_level": a string is required, got number.`,
		path + `:3,1: Unsupported block type; Blocks of type "objekt_store" are not expected here. Did you mean "object_store"?`,
		path + `:5,3: Unsupported argument; An argument named "cpu" is not expected here. Did you mean "CPU"?`,
		path + `:6,12: Invalid size; Invalid value for attribute "memory": invalid size "lots": not a number of bytes or a size such as "512MiB" or "2GiB".`,
		path + `:9,18: Invalid duration; Invalid value for attribute "idle_timeout": cannot parse "1 minute" as a duration. Use a Go duration string such as "500ms", "30s" or "2m".`,
		path + `:13,3: Unsupported argument; An argument named "failure_treshold" is not expected here. Did you mean "failure_threshold"?`,
		path + `:15,19: Incorrect attribute value type; Inappropriate value for labels["zone"]: a string is required, got number.`,
		// Validate: the missing address has no position, the plugin kind does.
		`Missing GCS address; A node that is not the head must name the head to join: set address = "host:port" in the config file or pass the address flag, or declare this node the head with a head block.`,
		path + `:16,8: Unknown plugin kind; Plugin "s3" has kind "storag"; the kinds are transport, storage, provider. Did you mean "storage"?`,
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	var de *DiagnosticsError
	if !errors.As(fmt.Errorf("starting node: %w", err), &de) || len(de.Diags) != len(want) {
		t.Fatalf("errors.As did not recover the diagnostics: %v", de)
	}
	if !errors.Is(err, &DiagnosticsError{}) {
		t.Error("errors.Is(err, &DiagnosticsError{}) = false")
	}

	out := de.Format(0, false)
	for _, w := range []string{
		"Error: Unsupported block type",
		"on " + path + " line 3, in objekt_store:",
		`   3: objekt_store { memory = "2GiB" }`,
		`Did you mean "object_store"?`,
		"on " + path + " line 16",
		`Did you mean "storage"?`,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("formatted output lacks %q:\n%s", w, out)
		}
	}
	if colored := de.Format(80, true); !strings.Contains(colored, "\x1b[31mError") {
		t.Error("color output has no colour codes")
	}
}

func TestNewDiagnosticsError(t *testing.T) {
	if err := NewDiagnosticsError(nil, nil); err != nil {
		t.Errorf("no diagnostics: %v", err)
	}
	warn := hcl.Diagnostics{{Severity: hcl.DiagWarning, Summary: "w"}}
	if err := NewDiagnosticsError(warn, nil); err != nil {
		t.Errorf("warnings only: %v", err)
	}
	mixed := append(warn, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "bad", Detail: "really"})
	if err := NewDiagnosticsError(mixed, nil); err == nil || err.Error() != "bad; really" {
		t.Errorf("mixed = %v, want only the error rendered", err)
	}
}

func TestParseJSON(t *testing.T) {
	src := `{
  "head": {"address": "0.0.0.0:6380"},
  "log_level": "warn",
  "labels": {"zone": "a"},
  "object_store": {"memory": "1GiB"},
  "plugin": {"storage": {"s3": {"config": {"bucket": "b"}}}},
  "node_type": {"cpu": {"resources": {"CPU": 2}, "max_workers": 3}},
  "objekt_store": {}
}`
	n, diags := Parse([]byte(src), "goray.json")
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, `Did you mean "object_store"?`) || diags[0].Subject.Start.Line != 8 {
		t.Fatalf("diags = %v, want one for objekt_store at line 8", diags)
	}
	if !n.Head || n.Address != "0.0.0.0:6380" || n.LogLevel != "warn" || n.Labels["zone"] != "a" || n.ObjectStore.Memory != 1<<30 {
		t.Errorf("decoded %+v", n)
	}
	if len(n.Plugins) != 1 || n.Plugins[0].Kind != "storage" || n.Plugins[0].Name != "s3" || n.Plugins[0].Config == nil {
		t.Errorf("plugins = %+v", n.Plugins)
	}
	if len(n.NodeTypes) != 1 || n.NodeTypes[0].MaxWorkers != 3 || n.NodeTypes[0].Resources["CPU"] != 2 {
		t.Errorf("node types = %+v", n.NodeTypes)
	}
}

func TestLoadWithFlags(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.hcl")
	writeFile(t, path, "log_level = \"debug\"\n")

	// The file lacks an address; the flag supplies it.
	n, diags := LoadWithFlags(path, Flags{Address: "10.0.0.1:6380"})
	if diags.HasErrors() || n.Address != "10.0.0.1:6380" || n.LogLevel != "debug" {
		t.Fatalf("LoadWithFlags = %+v, %v", n, diags)
	}
	// Without it, Validate complains.
	if _, diags := LoadWithFlags(path, Flags{}); !diags.HasErrors() || diags[0].Summary != "Missing GCS address" {
		t.Fatalf("diags = %v, want Missing GCS address", diags)
	}
	// No file: defaults and flags.
	n, diags = LoadWithFlags("", Flags{Head: ptr(true)})
	if diags.HasErrors() || !n.Head || n.Address != DefaultHeadAddress {
		t.Fatalf("LoadWithFlags(\"\") = %+v, %v", n, diags)
	}
	// Decoding errors stop before validation.
	writeFile(t, path, "log_level = 3\n")
	if _, diags := LoadWithFlags(path, Flags{}); len(diags) != 1 || diags[0].Subject == nil {
		t.Fatalf("diags = %v, want only the type error", diags)
	}
}

func TestDiagnosticsAreOrdered(t *testing.T) {
	// Unknown arguments come out of a map inside hcl; the order must still
	// follow the file.
	src := "zz = 1\nyy = 2\nxx = 3\nww = 4\nvv = 5\n"
	for range 5 {
		_, diags := Parse([]byte(src), "goray.hcl")
		if len(diags) != 5 {
			t.Fatalf("got %d diagnostics, want 5", len(diags))
		}
		for i, d := range diags {
			if d.Subject.Start.Line != i+1 {
				t.Fatalf("diagnostic %d is at line %d", i, d.Subject.Start.Line)
			}
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
