package config

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// validateSrc parses src as goray.hcl and validates it.
func validateSrc(t *testing.T, src string) (*Node, hcl.Diagnostics) {
	t.Helper()
	n, diags := Parse([]byte(src), "goray.hcl")
	if diags.HasErrors() {
		t.Fatalf("parse: %v", diags)
	}
	return n, n.Validate()
}

// TestWildcardNodeIPRefused: node_ip names the address a node listens on
// and is reached at; a wildcard would expose every port of the node on
// every interface, so it is refused at its line, saying what it would
// expose, whether it comes from the file or a flag.
func TestWildcardNodeIPRefused(t *testing.T) {
	const base = "address = \"10.0.0.1:6380\"\n"
	want := []string{"Wildcard node_ip", "every interface", "GCS", "raylet", "worker", "data plane", "address other nodes reach"}
	for _, ip := range []string{"0.0.0.0", "::", "0:0:0:0:0:0:0:0"} {
		t.Run(ip, func(t *testing.T) {
			n, diags := validateSrc(t, base+"node_ip = \""+ip+"\"\n")
			checkDiag(t, diags, n.Files(), diagCase{line: 2, col: 11, want: append(want, `"`+ip+`"`)})
		})
	}
	t.Run("flag", func(t *testing.T) {
		n, diags := Parse([]byte(base), "goray.hcl")
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		n.Override(Flags{NodeIP: "0.0.0.0"})
		checkDiag(t, n.Validate(), n.Files(), diagCase{want: want})
	})
	for _, ip := range []string{"127.0.0.2", "10.0.0.5", "::1"} {
		if _, diags := validateSrc(t, base+"node_ip = \""+ip+"\"\n"); len(diags) != 0 {
			t.Errorf("node_ip %s: %v", ip, diags)
		}
	}
}

// TestWildcardHeadAddressWarned: a head whose GCS address is a wildcard
// still starts (a GCS must be reachable by the other machines), with a
// warning saying what it exposes.
func TestWildcardHeadAddressWarned(t *testing.T) {
	_, diags := validateSrc(t, "head {\n  address = \"0.0.0.0:6380\"\n}\n")
	if diags.HasErrors() || len(diags) != 1 || diags[0].Severity != hcl.DiagWarning {
		t.Fatalf("diags = %v, want one warning", diags)
	}
	if d := diags[0]; d.Subject == nil || d.Subject.Start.Line != 2 || !strings.Contains(d.Detail, "every network") {
		t.Errorf("warning %v at %v", d, d.Subject)
	}
	if _, diags := validateSrc(t, "head {\n  address = \"10.0.0.5:6380\"\n}\n"); len(diags) != 0 {
		t.Errorf("a concrete head address: %v", diags)
	}
}

// TestPluginNameCannotEscapePluginDir: the binary of a plugin block is a
// file directly in plugin_dir, so a name with a path separator or a
// directory reference is refused at the block's name.
func TestPluginNameCannotEscapePluginDir(t *testing.T) {
	const base = "address = \"10.0.0.1:6380\"\nplugin_dir = \"plugins\"\n"
	for _, tc := range []struct{ name, why string }{
		{"../../bin/sh", "path separator"},
		{"..", "directory reference"},
		{".", "directory reference"},
		{"a/b", "path separator"},
		{`..\\x`, "path separator"},
		{"/usr/bin/env", "path separator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := validateSrc(t, base+"plugin \"transport\" \""+tc.name+"\" {}\n")
			checkDiag(t, diags, n.Files(), diagCase{line: 3, col: 20, want: []string{"Invalid plugin name", tc.why, "plugin_dir"}})
		})
	}
	for _, name := range []string{"shm", "my.plugin", "..hidden", "a..b"} {
		if _, diags := validateSrc(t, base+"plugin \"transport\" \""+name+"\" {}\n"); len(diags) != 0 {
			t.Errorf("plugin name %q: %v", name, diags)
		}
	}
}
