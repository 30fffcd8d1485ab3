package config

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestPluginCommandArgs: command (a name in plugin_dir, or a path relative
// to the config file), args and log_level are decoded; two blocks may name
// one binary.
func TestPluginCommandArgs(t *testing.T) {
	src := `head {}
plugin "storage" "a" {
  command   = "goray-storage-s3"
  args      = ["--verbose", "x"]
  log_level = "debug"
}
plugin "storage" "b" {
  command = "./bin/goray-storage-s3"
}
plugin "transport" "shm" {}
`
	n, diags := Parse([]byte(src), "/etc/goray/goray.hcl")
	if diags.HasErrors() {
		t.Fatalf("Parse: %v", diags)
	}
	if diags := n.Validate(); diags.HasErrors() {
		t.Fatalf("Validate: %v", diags)
	}
	a, b, shm := n.Plugins[0], n.Plugins[1], n.Plugins[2]
	if a.Command != "goray-storage-s3" || !slices.Equal(a.Args, []string{"--verbose", "x"}) || a.LogLevel != "debug" {
		t.Errorf("a = command %q, args %q, log_level %q", a.Command, a.Args, a.LogLevel)
	}
	if a.CommandRange.Start.Line != 3 || a.CommandRange.Start.Column != 15 {
		t.Errorf("a's CommandRange = %s, want line 3, column 15", a.CommandRange)
	}
	if want := filepath.Join("/etc/goray", "bin/goray-storage-s3"); b.Command != want {
		t.Errorf("b's command = %q, want %q (relative to the config file)", b.Command, want)
	}
	if shm.Command != "" || shm.Args != nil || shm.LogLevel != "" {
		t.Errorf("shm = %+v, want no command, args or log_level", shm)
	}
}

// TestPluginBlockErrors: mistakes in a plugin block's command, args and
// log_level are reported at their file:line,col.
func TestPluginBlockErrors(t *testing.T) {
	const base = "address = \"10.0.0.1:6380\"\n"
	tests := []diagCase{
		{name: "args not a list", src: base + "plugin \"storage\" \"a\" {\n  args = \"--x\"\n}\n",
			line: 3, col: 10, want: []string{"Incorrect attribute value type", "list of strings"}},
		{name: "args element not a string", src: base + "plugin \"storage\" \"a\" {\n  args = [\"ok\", 3]\n}\n",
			line: 3, col: 17, want: []string{"args[1]", "a string is required, got number"}},
		{name: "command not a string", src: base + "plugin \"storage\" \"a\" {\n  command = [\"x\"]\n}\n",
			line: 3, col: 13, want: []string{"a string is required"}},
		{name: "blank command", src: base + "plugin \"storage\" \"a\" {\n  command = \" \"\n}\n",
			line: 3, col: 13, want: []string{"Invalid plugin command", "is blank"}},
		{name: "command is a directory reference", src: base + "plugin \"storage\" \"a\" {\n  command = \"..\"\n}\n",
			line: 3, col: 13, want: []string{"Invalid plugin command", "directory reference"}},
		{name: "unknown log level", src: base + "plugin \"storage\" \"a\" {\n  log_level = \"verbose\"\n}\n",
			line: 3, col: 15, want: []string{"Unknown log level", `plugin storage "a"`, `"verbose"`}},
		{name: "unknown attribute", src: base + "plugin \"storage\" \"a\" {\n  argv = []\n}\n",
			line: 3, col: 3, want: []string{"Unsupported argument", `Did you mean "args"?`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if !diags.HasErrors() {
				diags = n.Validate()
			}
			checkDiag(t, diags, n.Files(), tc)
		})
	}
}

// TestProviderBlockTakesNoCommand: a cluster file's provider block is not a
// plugin block: command is refused there.
func TestProviderBlockTakesNoCommand(t *testing.T) {
	_, diags := ParseCluster([]byte("cluster_name = \"c\"\nprovider \"local\" {\n  command = \"x\"\n}\n"), "cluster.hcl")
	found := false
	for _, d := range diags {
		if d.Summary == "Unsupported argument" && d.Subject != nil && d.Subject.Start.Line == 3 {
			found = true
		}
	}
	if !found {
		t.Errorf("no Unsupported argument at line 3: %v", diags)
	}
}
