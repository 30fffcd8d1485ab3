package config

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/goray-dev/goray/internal/resources"
)

// Pieces of a valid cluster file for the tests below.
const (
	// clPrelude is 3 lines.
	clPrelude = "cluster_name   = \"demo\"\nhead_node_type = \"head\"\nprovider \"local\" {}\n"
	// clHeadType is 3 lines.
	clHeadType = "node_type \"head\" {\n  resources = { CPU = 1 }\n}\n"
	// clBase is 10 lines: what follows it starts on line 11.
	clBase = clPrelude + clHeadType + "node_type \"cpu\" {\n  resources   = { CPU = 2 }\n  max_workers = 2\n}\n"
)

func TestLoadClusterFile(t *testing.T) {
	path := filepath.Join("testdata", "cluster.hcl")
	c, diags := LoadCluster(path)
	if len(diags) != 0 {
		t.Fatalf("LoadCluster(%s):\n%s", path, FormatDiagnostics(diags, c.Files(), 0, false))
	}
	if c.Name != "demo" || c.MaxWorkers != 4 || c.IdleTimeout != time.Minute || c.UpscalingSpeed != 2 || c.HeadNodeType != "head" || c.Filename != path {
		t.Errorf("cluster settings = %+v", c)
	}
	if want := []string{"echo starting", "mkdir -p /tmp/goray-work"}; !reflect.DeepEqual(c.SetupCommands, want) {
		t.Errorf("SetupCommands = %q, want %q", c.SetupCommands, want)
	}

	// The provider block, its config left undecoded.
	p := c.Provider
	if p == nil || p.Name != "local" || p.SHA256 != "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" {
		t.Fatalf("Provider = %+v", p)
	}
	if p.DeclRange.Start.Line != 14 || !strings.HasPrefix(string(p.DeclRange.SliceBytes(c.Files()[path].Bytes)), `provider "local"`) {
		t.Errorf("Provider.DeclRange = %s", p.DeclRange)
	}
	attrs, ad := p.Config.JustAttributes()
	if ad.HasErrors() || attrs["state_dir"] == nil || attrs["ip_range"] == nil || attrs["state_dir"].Range.Start.Line != 17 {
		t.Errorf("provider config attributes = %v, %v", attrs, ad)
	}

	// Node types: the head's counts are 0, accel's max_workers is the
	// global one, memory sizes are bytes.
	type nt struct {
		Name       string
		Resources  map[string]float64
		Labels     map[string]string
		Min, Max   int
		Line       int
		ConfigLine int
		HasConfig  bool
	}
	var got []nt
	for _, x := range c.NodeTypes {
		got = append(got, nt{x.Name, x.Resources, x.Labels, x.MinWorkers, x.MaxWorkers, x.DeclRange.Start.Line, x.NodeConfigRange.Start.Line, x.NodeConfig != nil})
	}
	want := []nt{
		{"head", map[string]float64{"CPU": 1}, map[string]string{"role": "head"}, 0, 0, 28, 28, false},
		{"cpu", map[string]float64{"CPU": 2, "memory": 4 << 30}, map[string]string{"role": "worker"}, 1, 3, 33, 38, true},
		{"accel", map[string]float64{"CPU": 1, "GPU": 1, "memory": 8 << 30, "accel": 2}, nil, 0, 4, 43, 43, false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("node types =\n%+v\nwant\n%+v", got, want)
	}
	cpu, ok := c.NodeType("cpu")
	if !ok || cpu != &c.NodeTypes[1] {
		t.Fatalf("NodeType(cpu) = %v, %v", cpu, ok)
	}
	if _, ok := c.NodeType("gpu"); ok {
		t.Error("NodeType(gpu) found a type the file does not declare")
	}
	ncAttrs, nd := cpu.NodeConfig.JustAttributes()
	if nd.HasErrors() || ncAttrs["extra_args"] == nil || ncAttrs["extra_args"].Range.Start.Line != 39 {
		t.Errorf("node_config attributes = %v, %v", ncAttrs, nd)
	}

	// The head: the rest of the file, with its node type's resources and
	// labels where the file sets none.
	h := c.Head
	if !h.Head || h.Address != "127.0.0.1:6390" || h.ClusterName != "demo" || h.TempDir != "/var/tmp/goray" || h.PluginDir != "./bin/plugins" ||
		h.ObjectStore.Memory != 1<<30 || h.HealthCheck.Period != time.Second || h.GCS.Storage != GCSStorageBolt || h.Filename != path {
		t.Errorf("Head = %+v", h)
	}
	if h.Resources.CPU == nil || *h.Resources.CPU != 1 || h.Resources.GPU != nil || h.Resources.Memory != nil {
		t.Errorf("Head.Resources = %+v, want CPU 1 from the head node type", h.Resources)
	}
	if want := map[string]string{"zone": "a", "role": "head"}; !reflect.DeepEqual(h.Labels, want) {
		t.Errorf("Head.Labels = %v, want %v", h.Labels, want)
	}
	if h.Auth.TokenFile != mustAbs(t, filepath.Join("testdata", "token")) {
		t.Errorf("Head.Auth.TokenFile = %q", h.Auth.TokenFile)
	}
	if len(h.Plugins) != 1 || h.Plugins[0].Kind != "transport" || h.NodeTypes != nil {
		t.Errorf("Head.Plugins = %+v, Head.NodeTypes = %+v", h.Plugins, h.NodeTypes)
	}
	// Validating again (as after Override) finds nothing new.
	if vd := c.Validate(); len(vd) != 0 {
		t.Errorf("Validate() = %v", vd)
	}
}

func TestParseClusterDefaults(t *testing.T) {
	c, diags := ParseCluster([]byte(clBase), "goray.hcl")
	if len(diags) != 0 {
		t.Fatalf("ParseCluster: %v", diags)
	}
	if c.IdleTimeout != DefaultIdleTimeout || c.UpscalingSpeed != DefaultUpscalingSpeed || c.MaxWorkers != 2 || c.SetupCommands != nil {
		t.Errorf("defaults = %+v", c)
	}
	if c.Provider == nil || c.Provider.Config != nil || c.Provider.SHA256 != "" {
		t.Errorf("Provider = %+v", c.Provider)
	}
	if !c.Head.Head || c.Head.Address != DefaultHeadAddress || c.Head.ClusterName != "demo" {
		t.Errorf("Head = %+v", c.Head)
	}
	cpu, _ := c.NodeType("cpu")
	if cpu.NodeConfig != nil || cpu.NodeConfigRange != cpu.DeclRange || cpu.NodeConfigRange.Start.Line != 7 {
		t.Errorf("without node_config: NodeConfig = %v, NodeConfigRange = %s", cpu.NodeConfig, cpu.NodeConfigRange)
	}
}

func TestParseClusterHeadWorkersIgnored(t *testing.T) {
	src := clPrelude + "node_type \"head\" {\n  resources   = { CPU = 1 }\n  min_workers = 1\n  max_workers = 3\n}\n"
	c, diags := ParseCluster([]byte(src), "goray.hcl")
	if diags.HasErrors() || len(diags) != 2 {
		t.Fatalf("diags = %v, want two warnings", diags)
	}
	for i, d := range diags {
		if d.Severity != hcl.DiagWarning || d.Summary != "Worker count of the head node type ignored" || d.Subject == nil || d.Subject.Start.Line != 6+i {
			t.Errorf("diagnostic %d = %+v", i, d)
		}
	}
	if h := c.NodeTypes[0]; h.MinWorkers != 0 || h.MaxWorkers != 0 || c.MaxWorkers != 0 {
		t.Errorf("head type counts %d..%d, max_workers %d; want all 0", h.MinWorkers, h.MaxWorkers, c.MaxWorkers)
	}
}

func TestParseClusterHeadResources(t *testing.T) {
	// The head's resources block and labels win where they are set and
	// agree; the node type fills the rest.
	src := clPrelude + "node_type \"head\" {\n  resources = { CPU = 2, GPU = 1, memory = \"1GiB\", accel = 1 }\n  labels    = { role = \"head\", zone = \"a\" }\n}\n" +
		"resources {\n  CPU    = 2\n  custom = { fpga = 1 }\n}\nlabels = { zone = \"a\", rack = \"r1\" }\n"
	c, diags := ParseCluster([]byte(src), "goray.hcl")
	if len(diags) != 0 {
		t.Fatalf("ParseCluster: %v", diags)
	}
	r := c.Head.Resources
	if *r.CPU != 2 || *r.GPU != 1 || *r.Memory != 1<<30 || !reflect.DeepEqual(r.Custom, map[string]float64{"accel": 1, "fpga": 1}) {
		t.Errorf("Head.Resources = CPU %v GPU %v memory %v custom %v", *r.CPU, *r.GPU, *r.Memory, r.Custom)
	}
	if want := map[string]string{"role": "head", "zone": "a", "rack": "r1"}; !reflect.DeepEqual(c.Head.Labels, want) {
		t.Errorf("Head.Labels = %v, want %v", c.Head.Labels, want)
	}
}

func TestParseClusterDiagnostics(t *testing.T) {
	head := func(s string) string { return strings.Replace(clBase, `head_node_type = "head"`, s, 1) }
	tests := []diagCase{
		// Missing settings: at the start of the file, with the fix.
		{name: "missing cluster_name", src: "head_node_type = \"head\"\nprovider \"local\" {}\n" + clHeadType,
			line: 1, col: 1, want: []string{"Missing cluster_name", `cluster_name = "<name>"`}},
		{name: "missing head_node_type", src: "cluster_name = \"demo\"\nprovider \"local\" {}\n" + clHeadType,
			line: 1, col: 1, want: []string{"Missing head_node_type", `head_node_type = "<name>"`, "(head)"}},
		{name: "missing head_node_type and node types", src: "cluster_name = \"demo\"\nprovider \"local\" {}\n",
			line: 1, col: 1, want: []string{"Missing head_node_type", `node_type "<name>"`}},
		{name: "missing provider", src: "cluster_name = \"demo\"\nhead_node_type = \"head\"\n" + clHeadType,
			line: 1, col: 1, want: []string{"Missing provider block", `provider "local" { config`}},

		// Decoding.
		{name: "two providers", src: clBase + "provider \"aws\" {}\n",
			line: 11, col: 1, want: []string{"Duplicate provider block", "goray.hcl:3,1"}},
		{name: "provider as a plugin block", src: clBase + "plugin \"provider\" \"local\" {}\n",
			line: 11, col: 1, want: []string{"Provider plugin block in a cluster file", `provider "local" { ... }`}},
		{name: "provider block without a name", src: strings.Replace(clBase, `provider "local" {}`, `provider {}`, 1),
			line: 3, col: 10, want: []string{"Missing name for provider"}},
		{name: "join address", src: clBase + "address = \"10.0.0.1:6380\"\n",
			line: 11, col: 1, want: []string{"Join address in a cluster file", "head { address"}},
		{name: "misspelt cluster setting", src: clBase + "upscaling_sped = 2\n",
			line: 11, col: 1, want: []string{"Unsupported argument", `Did you mean "upscaling_speed"?`}},
		{name: "misspelt head_node_type", src: "cluster_name = \"demo\"\nhead_node_typ = \"head\"\nprovider \"local\" {}\n" + clHeadType,
			line: 2, col: 1, want: []string{"Unsupported argument", `Did you mean "head_node_type"?`}},
		{name: "misspelt provider setting", src: strings.Replace(clBase, `provider "local" {}`, "provider \"local\" {\n  sha265 = \"x\"\n}", 1),
			line: 4, col: 3, want: []string{"Unsupported argument", `Did you mean "sha256"?`}},
		{name: "misspelt node type setting", src: clBase + "node_type \"gpu\" {\n  resources = { GPU = 1 }\n  max_worker = 1\n}\n",
			line: 13, col: 3, want: []string{"Unsupported argument", `Did you mean "max_workers"?`}},
		{name: "misspelt node_config block", src: clBase + "node_type \"gpu\" {\n  resources = { GPU = 1 }\n  node_confg {}\n}\n",
			line: 13, col: 3, want: []string{"Unsupported block type", `Did you mean "node_config"?`}},
		{name: "two node_config blocks", src: clBase + "node_type \"gpu\" {\n  resources = { GPU = 1 }\n  node_config {}\n  node_config {}\n}\n",
			line: 14, col: 3, want: []string{"Duplicate node_config block", "goray.hcl:13,3"}},
		{name: "setup_commands not a list", src: clBase + "setup_commands = \"echo hi\"\n",
			line: 11, col: 18, want: []string{`"setup_commands"`, "a list of strings is required, got string"}},
		{name: "setup command not a string", src: clBase + "setup_commands = [\"echo hi\", 1]\n",
			line: 11, col: 30, want: []string{"setup_commands[1]", "a string is required, got number"}},
		{name: "idle_timeout not a duration", src: clBase + "idle_timeout = \"5 minutes\"\n",
			line: 11, col: 16, want: []string{"Invalid duration", `"5 minutes"`}},
		{name: "max_workers not whole", src: clBase + "max_workers = 1.5\n",
			line: 11, col: 15, want: []string{"whole number", "1.5"}},
		{name: "node type resources not a map", src: clBase + "node_type \"x\" {\n  resources = [1]\n}\n",
			line: 12, col: 15, want: []string{"a map of numbers is required"}},
		{name: "node type memory not a size", src: clBase + "node_type \"m\" {\n  resources = { CPU = 1, memory = \"lots\" }\n}\n",
			line: 12, col: 35, want: []string{"Invalid size", `resources["memory"]`, `"lots"`}},
		{name: "node type memory of the wrong type", src: clBase + "node_type \"m\" {\n  resources = { CPU = 1, memory = true }\n}\n",
			line: 12, col: 35, want: []string{"a size", "got bool"}},
		{name: "node type label not a string", src: clBase + "node_type \"m\" {\n  resources = { CPU = 1 }\n  labels    = { role = 1 }\n}\n",
			line: 13, col: 24, want: []string{`labels["role"]`, "a string is required, got number"}},

		// Validation.
		{name: "idle_timeout zero", src: clBase + "idle_timeout = \"0s\"\n",
			line: 11, col: 16, want: []string{"Invalid duration", "idle_timeout must be positive", `"5m"`}},
		{name: "install_timeout zero", src: clBase + "install_timeout = \"0s\"\n",
			line: 11, col: 19, want: []string{"Invalid duration", "install_timeout must be positive", `"10m"`}},
		{name: "upscaling_speed zero", src: clBase + "upscaling_speed = 0\n",
			line: 11, col: 19, want: []string{"Invalid upscaling_speed", "greater than 0, got 0", "1.0"}},
		{name: "upscaling_speed negative", src: clBase + "upscaling_speed = -0.5\n",
			line: 11, col: 19, want: []string{"Invalid upscaling_speed", "got -0.5"}},
		{name: "max_workers negative", src: clBase + "max_workers = -1\n",
			line: 11, col: 15, want: []string{"Invalid value", "max_workers must not be negative"}},
		{name: "invalid cluster_name", src: strings.Replace(clBase, `"demo"`, `"my cluster"`, 1),
			line: 1, col: 18, want: []string{"Invalid cluster_name", `"my cluster"`, "letters, digits"}},
		{name: "cluster_name with a path", src: strings.Replace(clBase, `"demo"`, `"../x"`, 1),
			line: 1, col: 18, want: []string{"Invalid cluster_name"}},
		{name: "empty cluster_name", src: strings.Replace(clBase, `"demo"`, `""`, 1),
			line: 1, col: 18, want: []string{"Missing cluster_name"}},
		{name: "invalid provider name", src: strings.Replace(clBase, `provider "local"`, `provider "../x"`, 1),
			line: 3, col: 10, want: []string{"Invalid provider name", "path separator", "goray-provider-<name>"}},
		{name: "empty provider name", src: strings.Replace(clBase, `provider "local"`, `provider ""`, 1),
			line: 3, col: 10, want: []string{"Missing provider name"}},
		{name: "bad provider sha256", src: strings.Replace(clBase, `provider "local" {}`, `provider "local" { sha256 = "xyz" }`, 1),
			line: 3, col: 29, want: []string{"Invalid sha256", `"xyz"`, "64 hexadecimal digits"}},
		{name: "unknown head_node_type", src: head(`head_node_type = "hed"`),
			line: 2, col: 18, want: []string{"Unknown head_node_type", `"hed"`, "head, cpu", `Did you mean "head"?`}},
		{name: "unknown head_node_type without suggestion", src: head(`head_node_type = "leader"`),
			line: 2, col: 18, want: []string{"Unknown head_node_type"}, notWant: []string{"Did you mean"}},
		{name: "head_node_type without node types", src: clPrelude,
			line: 2, col: 18, want: []string{"Unknown head_node_type", "no node_type blocks", `node_type "head"`}},
		{name: "empty head_node_type", src: head(`head_node_type = ""`),
			line: 2, col: 18, want: []string{"Missing head_node_type"}},
		{name: "duplicate node type", src: clBase + "node_type \"cpu\" {\n  resources = { CPU = 4 }\n}\n",
			line: 11, col: 1, want: []string{"Duplicate node type", `"cpu"`, "goray.hcl:7,1"}},
		{name: "invalid node type name", src: clBase + "node_type \"a/b\" {\n  resources   = { CPU = 1 }\n  max_workers = 1\n}\n",
			line: 11, col: 11, want: []string{"Invalid node type name", `"a/b"`}},
		{name: "min_workers above max_workers", src: clBase + "node_type \"gpu\" {\n  resources   = { GPU = 1 }\n  min_workers = 3\n  max_workers = 2\n}\n",
			line: 13, col: 17, want: []string{"Invalid worker range", "min_workers (3)", "max_workers (2)", `"gpu"`}},
		{name: "negative min_workers", src: clBase + "node_type \"gpu\" {\n  resources   = { GPU = 1 }\n  min_workers = -1\n  max_workers = 2\n}\n",
			line: 13, col: 17, want: []string{"min_workers", "must not be negative"}},
		{name: "negative node type max_workers", src: clBase + "node_type \"gpu\" {\n  resources   = { GPU = 1 }\n  max_workers = -2\n}\n",
			line: 13, col: 17, want: []string{"max_workers", "must not be negative"}},
		{name: "min_workers above the global max_workers",
			src:  clPrelude + clHeadType + "max_workers = 3\nnode_type \"a\" {\n  resources   = { CPU = 1 }\n  min_workers = 2\n}\nnode_type \"b\" {\n  resources   = { CPU = 1 }\n  min_workers = 2\n}\n",
			line: 7, col: 15, want: []string{"Minimum workers exceed max_workers", "add up to 4", "a: 2, b: 2", "at least 4"}},
		{name: "no max_workers anywhere", src: clPrelude + clHeadType + "node_type \"cpu\" {\n  resources = { CPU = 2 }\n}\n",
			line: 7, col: 1, want: []string{"Missing max_workers", `"cpu"`, "Set max_workers"}},
		{name: "negative resource", src: clBase + "node_type \"gpu\" {\n  resources   = { CPU = 1, GPU = -1 }\n  max_workers = 1\n}\n",
			line: 12, col: 34, want: []string{"Invalid resource amount", `"GPU"`, ">= 0"}},
		{name: "too many CPUs", src: clBase + "node_type \"gpu\" {\n  resources   = { CPU = 1e6 }\n  max_workers = 1\n}\n",
			line: 12, col: 25, want: []string{"Invalid resource amount", "above the maximum"}},
		{name: "node type without resources", src: clBase + "node_type \"empty\" {\n  max_workers = 1\n}\n",
			line: 11, col: 1, want: []string{"Node type without resources", `"empty"`, "resources = { CPU = 2"}},
		{name: "node type with only memory", src: clBase + "node_type \"m\" {\n  resources   = { memory = \"4GiB\" }\n  max_workers = 1\n}\n",
			line: 12, col: 17, want: []string{"Node type without resources", "no CPU, GPU or custom resource above 0"}},
		{name: "worker type with zero resources", src: clBase + "node_type \"z\" {\n  resources   = { CPU = 0, accel = 0 }\n  max_workers = 1\n}\n",
			line: 12, col: 17, want: []string{"Node type without resources", "above 0"}},
		{name: "head type without resources", src: clPrelude + "node_type \"head\" {}\n",
			line: 4, col: 1, want: []string{"Node type without resources", `"head"`}},
		{name: "misspelt CPU", src: clBase + "node_type \"g\" {\n  resources   = { cpu = 2 }\n  max_workers = 1\n}\n",
			line: 12, col: 25, want: []string{"Misspelt resource name", `"cpu"`, `Did you mean "CPU"?`}},
		{name: "object_store_memory in a node type", src: clBase + "node_type \"g\" {\n  resources   = { CPU = 1, object_store_memory = 1 }\n  max_workers = 1\n}\n",
			line: 12, col: 50, want: []string{"Reserved resource name", "object_store { memory"}},
		{name: "reserved label", src: clBase + "node_type \"g\" {\n  resources   = { CPU = 1 }\n  labels      = { \"goray.io/node-type\" = \"x\" }\n  max_workers = 1\n}\n",
			line: 13, col: 42, want: []string{"Reserved label", `"goray.io/node-type"`, "use another key"}},
		{name: "label value too long", src: clBase + "node_type \"g\" {\n  resources   = { CPU = 1 }\n  labels      = { k = \"" + strings.Repeat("x", 1025) + "\" }\n  max_workers = 1\n}\n",
			line: 13, col: 23, want: []string{"Invalid label", "1025 bytes"}},
		{name: "head resources contradict the head type", src: clBase + "resources {\n  CPU = 4\n}\n",
			line: 12, col: 9, want: []string{"Head resources declared twice", "resources.CPU is 4", `"head"`, "goray.hcl:4,1", "CPU = 1"}},
		{name: "head label contradicts the head type",
			src:  clPrelude + "node_type \"head\" {\n  resources = { CPU = 1 }\n  labels    = { role = \"head\" }\n}\n" + "labels = { role = \"x\" }\n",
			line: 8, col: 19, want: []string{"Head label declared twice", `"role"`, `"head"`}},
		{name: "the head's node settings are validated", src: clBase + "log_level = \"debg\"\n",
			line: 11, col: 13, want: []string{"Unknown log level", `Did you mean "debug"?`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, diags := ParseCluster([]byte(tc.src), "goray.hcl")
			if c == nil || c.Head == nil {
				t.Fatal("ParseCluster returned a nil Cluster or Head")
			}
			checkDiag(t, diags, c.Files(), tc)
		})
	}
}

// A node file keeps refusing the settings only a cluster file has, as
// before cluster files existed; node_type blocks are accepted in both.
func TestNodeFileRefusesClusterSettings(t *testing.T) {
	for _, tc := range []diagCase{
		{name: "max_workers", src: "max_workers = 2\n", line: 1, col: 1, want: []string{"Unsupported argument", `"max_workers"`}},
		{name: "idle_timeout", src: "idle_timeout = \"1m\"\n", line: 1, col: 1, want: []string{"Unsupported argument"}},
		{name: "upscaling_speed", src: "upscaling_speed = 1\n", line: 1, col: 1, want: []string{"Unsupported argument"}},
		{name: "head_node_type", src: "head_node_type = \"h\"\n", line: 1, col: 1, want: []string{"Unsupported argument"}},
		{name: "setup_commands", src: "setup_commands = []\n", line: 1, col: 1, want: []string{"Unsupported argument"}},
		{name: "provider", src: "provider \"local\" {}\n", line: 1, col: 1, want: []string{"Unsupported block type", `"provider"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			checkDiag(t, diags, n.Files(), tc)
		})
	}

	src := "address = \"10.0.0.1:6380\"\nnode_type \"cpu\" {\n  resources   = { CPU = 2, memory = \"1GiB\" }\n  labels      = { a = \"b\" }\n  max_workers = 1\n  node_config { anything = 1 }\n}\n"
	n, diags := Parse([]byte(src), "goray.hcl")
	if len(diags) != 0 || len(append(diags, n.Validate()...)) != 0 {
		t.Fatalf("node file with a full node_type: %v %v", diags, n.Validate())
	}
	nt := n.NodeTypes[0]
	if nt.Resources["memory"] != 1<<30 || nt.Labels["a"] != "b" || nt.NodeConfig == nil || nt.NodeConfigRange.Start.Line != 6 {
		t.Errorf("node type = %+v", nt)
	}
}

func TestParseClusterJSON(t *testing.T) {
	src := `{
  "cluster_name": "demo",
  "head_node_type": "head",
  "max_workers": 2,
  "setup_commands": ["echo hi"],
  "provider": {"local": {"config": {"state_dir": "/tmp/x"}}},
  "node_type": {
    "head": {"resources": {"CPU": 1}},
    "cpu": {"resources": {"CPU": 2, "memory": "2GiB"}, "node_config": {"extra_args": ["-v"]}}
  }
}`
	c, diags := ParseCluster([]byte(src), "cluster.json")
	if len(diags) != 0 {
		t.Fatalf("ParseCluster: %v", diags)
	}
	cpu, ok := c.NodeType("cpu")
	if !ok || cpu.MaxWorkers != 2 || cpu.Resources["memory"] != 2<<30 || cpu.NodeConfig == nil || c.Provider.Config == nil || c.SetupCommands[0] != "echo hi" {
		t.Errorf("cluster = %+v, cpu = %+v", c, cpu)
	}

	// A JSON file missing its provider gets the error too.
	_, diags = ParseCluster([]byte(`{"cluster_name": "demo", "head_node_type": "h", "node_type": {"h": {"resources": {"CPU": 1}}}}`), "cluster.json")
	if !diags.HasErrors() || diags[0].Summary != "Missing provider block" || diags[0].Subject == nil || diags[0].Subject.Filename != "cluster.json" {
		t.Errorf("diags = %v, want Missing provider block in cluster.json", diags)
	}
}

func TestLoadClusterErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.hcl")
	c, diags := LoadCluster(missing)
	if c == nil || c.Head == nil || c.Filename != missing || !diags.HasErrors() || diags[0].Summary != "Failed to read cluster file" || !strings.Contains(diags[0].Detail, missing) {
		t.Fatalf("LoadCluster(missing) = %+v, %v", c, diags)
	}

	// A syntax error stops before decoding; the source is there to render.
	path := filepath.Join(t.TempDir(), "cluster.hcl")
	writeFile(t, path, "cluster_name = \n")
	c, diags = LoadCluster(path)
	if !diags.HasErrors() || c.Files()[path] == nil {
		t.Fatalf("diags = %v, files = %v", diags, c.Files())
	}
	err := NewDiagnosticsError(diags, c.Files())
	if !strings.HasPrefix(err.Error(), path+":1,") {
		t.Errorf("error %q does not point into the file", err)
	}

	// Decoding errors stop before validation (no follow-on errors).
	_, diags = ParseCluster([]byte(clBase+"max_workers = \"two\"\nidle_timeout = \"0s\"\n"), "goray.hcl")
	if len(diags) != 1 || diags[0].Subject.Start.Line != 11 {
		t.Errorf("diags = %v, want only the type error", diags)
	}

	// LoadCluster fills the head's Redis settings from the environment.
	writeFile(t, path, clBase+"gcs {\n  storage = \"redis\"\n}\n")
	t.Setenv(EnvGCSRedisAddress, "127.0.0.1:6379")
	c, diags = LoadCluster(path)
	if diags.HasErrors() || c.Head.GCS.Redis.Address != "127.0.0.1:6379" {
		t.Errorf("LoadCluster with $%s: %v, redis %q", EnvGCSRedisAddress, diags, c.Head.GCS.Redis.Address)
	}
}

// A Cluster built in Go (no file) validates without source ranges.
func TestClusterValidateWithoutFile(t *testing.T) {
	var c Cluster
	diags := c.Validate()
	var summaries []string
	for _, d := range diags {
		if d.Subject != nil {
			t.Errorf("%q has a subject %s", d.Summary, d.Subject)
		}
		summaries = append(summaries, d.Summary)
	}
	for _, want := range []string{"Missing cluster_name", "Missing provider block", "Invalid duration", "Invalid upscaling_speed", "Missing head_node_type"} {
		if !strings.Contains(strings.Join(summaries, "|"), want) {
			t.Errorf("Validate() = %q, want %q", summaries, want)
		}
	}

	head := Default()
	head.Head, head.Address = true, DefaultHeadAddress
	c = Cluster{
		Name: "demo", MaxWorkers: 1, IdleTimeout: time.Minute, InstallTimeout: time.Minute, UpscalingSpeed: 1, HeadNodeType: "h",
		Provider: &ProviderBlock{Name: "local"}, Head: head,
		NodeTypes: []NodeType{
			{Name: "h", Resources: map[string]float64{"CPU": 0}},
			{Name: "w", Resources: map[string]float64{"CPU": 1}, MinWorkers: 2, MaxWorkers: 3},
		},
	}
	diags = c.Validate()
	if len(diags) != 1 || diags[0].Summary != "Minimum workers exceed max_workers" {
		t.Errorf("Validate() = %v, want only Minimum workers exceed max_workers", diags)
	}
}

// FuzzParseCluster loads arbitrary bytes as an HCL (and JSON) cluster
// file. Beyond not crashing: ParseCluster always returns a Cluster with a
// Head; every diagnostic that points into the file names it and a line
// that exists; and a file it accepts keeps the rules the autoscaler relies
// on (a provider, a head node type that exists with no workers of its own,
// counts in range, minimums within max_workers, resource amounts that
// convert to fixed point, a positive idle timeout and upscaling speed).
func FuzzParseCluster(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "cluster.hcl"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, false)
	f.Add([]byte(clBase), false)
	f.Add([]byte(clBase+"max_workers = 1\nnode_type \"a\" {\n  resources   = { CPU = 1e18, memory = \"1EiB\" }\n  min_workers = 2\n}\n"), false)
	f.Add([]byte(clPrelude+"node_type \"head\" {\n  resources   = { cpu = 1 }\n  min_workers = 3\n}\nsetup_commands = [1, \"x\"]\nupscaling_speed = 1e400\n"), false)
	f.Add([]byte(`{"cluster_name": "d", "head_node_type": "h", "provider": {"local": {}}, "node_type": {"h": {"resources": {"CPU": 1}}, "w": {"resources": {"GPU": 1}, "max_workers": 2}}}`), true)
	f.Fuzz(func(t *testing.T, src []byte, json bool) {
		name := "fuzz.hcl"
		if json {
			name = "fuzz.json"
		}
		c, diags := ParseCluster(src, name)
		if c == nil || c.Head == nil {
			t.Fatal("ParseCluster returned a nil Cluster or Head")
		}
		lines := 1 + strings.Count(string(src), "\n")
		for _, d := range diags {
			if d.Subject == nil {
				continue
			}
			if d.Subject.Filename != name || d.Subject.Start.Line < 1 || d.Subject.Start.Line > lines {
				t.Fatalf("diagnostic %q points at %s; the file %s has %d lines", d.Summary, d.Subject, name, lines)
			}
		}
		_ = FormatDiagnostics(diags, c.Files(), 80, false)
		if diags.HasErrors() {
			return
		}
		if c.Provider == nil || c.Provider.Name == "" || pluginNameProblem(c.Provider.Name) != "" {
			t.Fatalf("accepted provider %+v", c.Provider)
		}
		if clusterNameProblem(c.Name) != "" || c.Name == "" || !c.Head.Head {
			t.Fatalf("accepted cluster %q, head %v", c.Name, c.Head.Head)
		}
		if c.IdleTimeout <= 0 || !(c.UpscalingSpeed > 0) || math.IsInf(c.UpscalingSpeed, 0) || c.MaxWorkers < 0 {
			t.Fatalf("accepted settings %s, %g, %d", c.IdleTimeout, c.UpscalingSpeed, c.MaxWorkers)
		}
		ht, ok := c.NodeType(c.HeadNodeType)
		if !ok || ht.MinWorkers != 0 || ht.MaxWorkers != 0 {
			t.Fatalf("accepted head node type %q: %+v", c.HeadNodeType, ht)
		}
		mins := 0
		for _, nt := range c.NodeTypes {
			if _, err := resources.FromFloats(nt.Resources); err != nil {
				t.Fatalf("accepted node type %q: %v", nt.Name, err)
			}
			if nt.MinWorkers < 0 || nt.MinWorkers > nt.MaxWorkers {
				t.Fatalf("accepted node type %q with workers %d..%d", nt.Name, nt.MinWorkers, nt.MaxWorkers)
			}
			mins += nt.MinWorkers
		}
		if mins > c.MaxWorkers {
			t.Fatalf("accepted min_workers adding up to %d above max_workers %d", mins, c.MaxWorkers)
		}
	})
}
