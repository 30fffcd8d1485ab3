package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// LockFileName is the name of the plugin lock file, in the directory of a
// node's config file: `goray plugins install` records there the sha256 of
// every binary it installs, and the node's plugin host refuses a binary
// whose checksum differs (like Terraform's .terraform.lock.hcl).
const LockFileName = "goray.lock.hcl"

// LockPath is the lock file of the config file at configPath.
func LockPath(configPath string) string {
	return filepath.Join(filepath.Dir(configPath), LockFileName)
}

// Lock is a plugin lock file: one block per installed binary,
//
//	plugin "plugins/goray-storage-s3" {
//	  kind    = "storage"
//	  name    = "s3"
//	  version = "v1.2.0"
//	  source  = "github.com/goray-dev/goray/plugins/s3@v1.2.0"
//	  sha256  = "9f86d0..."
//	}
//
// labelled with the binary's path relative to the lock file's directory.
type Lock struct {
	// Filename is the lock file's path.
	Filename string
	// Plugins are its blocks, sorted by Binary.
	Plugins []LockedPlugin
}

// LockedPlugin is one installed binary.
type LockedPlugin struct {
	// Binary is the binary's path relative to the lock file's directory
	// (slash-separated).
	Binary string `hcl:"binary,label"`
	// Kind, Name and Version are what the plugin reported about itself
	// when it was installed.
	Kind    string `hcl:"kind"`
	Name    string `hcl:"name"`
	Version string `hcl:"version,optional"`
	// Source is where it was installed from: a Go module path@version or
	// a local file.
	Source string `hcl:"source,optional"`
	// SHA256 is the binary's checksum (lowercase hex).
	SHA256 string `hcl:"sha256"`
	// DeclRange is the block's header in the lock file.
	DeclRange hcl.Range `hcl:",def_range"`
}

// LoadLock reads the lock file at path. A missing file is an empty lock;
// a malformed one is a *DiagnosticsError naming its file:line.
func LoadLock(path string) (*Lock, error) {
	l := &Lock{Filename: path}
	src, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading plugin lock file: %w", err)
	}
	p := hclparse.NewParser()
	f, diags := p.ParseHCL(src, path)
	if !diags.HasErrors() {
		var body struct {
			Plugins []LockedPlugin `hcl:"plugin,block"`
		}
		diags = append(diags, gohcl.DecodeBody(f.Body, nil, &body)...)
		l.Plugins = body.Plugins
	}
	seen := map[string]hcl.Range{}
	for _, lp := range l.Plugins {
		if first, dup := seen[lp.Binary]; dup {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate locked plugin",
				Detail: fmt.Sprintf("Binary %q is locked more than once; the first is at %s.", lp.Binary, first), Subject: lp.DeclRange.Ptr()})
		}
		seen[lp.Binary] = lp.DeclRange
		if !validSHA256(lp.SHA256) {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid sha256",
				Detail: fmt.Sprintf("The sha256 of locked binary %q must be 64 lowercase hexadecimal digits, got %q.", lp.Binary, lp.SHA256), Subject: lp.DeclRange.Ptr()})
		}
	}
	if err := NewDiagnosticsError(diags, p.Files()); err != nil {
		return nil, err
	}
	slices.SortFunc(l.Plugins, func(a, b LockedPlugin) int { return strings.Compare(a.Binary, b.Binary) })
	return l, nil
}

func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Key is how l names the binary at path: its path relative to the lock
// file's directory, slash-separated.
func (l *Lock) Key(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	dir, err := filepath.Abs(filepath.Dir(l.Filename))
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(rel), nil
}

// Find returns the block of the binary at path, if it is locked.
func (l *Lock) Find(path string) (LockedPlugin, bool) {
	key, err := l.Key(path)
	if err != nil {
		return LockedPlugin{}, false
	}
	i := slices.IndexFunc(l.Plugins, func(p LockedPlugin) bool { return p.Binary == key })
	if i < 0 {
		return LockedPlugin{}, false
	}
	return l.Plugins[i], true
}

// Put adds p, replacing the block of the same binary.
func (l *Lock) Put(p LockedPlugin) {
	l.Plugins = slices.DeleteFunc(l.Plugins, func(q LockedPlugin) bool { return q.Binary == p.Binary })
	l.Plugins = append(l.Plugins, p)
	slices.SortFunc(l.Plugins, func(a, b LockedPlugin) int { return strings.Compare(a.Binary, b.Binary) })
}

// Save writes l to its file (atomically: a reader never sees half a lock).
func (l *Lock) Save() error {
	f := hclwrite.NewEmptyFile()
	root := f.Body()
	root.AppendUnstructuredTokens(hclwrite.Tokens{{Type: 0, Bytes: []byte(
		"# Written by \"goray plugins install\": the sha256 of each installed plugin\n" +
			"# binary, checked by the node before it starts the plugin. Keep it with the\n" +
			"# config file.\n")}})
	for _, p := range l.Plugins {
		root.AppendNewline()
		b := root.AppendNewBlock("plugin", []string{p.Binary}).Body()
		b.SetAttributeValue("kind", cty.StringVal(p.Kind))
		b.SetAttributeValue("name", cty.StringVal(p.Name))
		b.SetAttributeValue("version", cty.StringVal(p.Version))
		b.SetAttributeValue("source", cty.StringVal(p.Source))
		b.SetAttributeValue("sha256", cty.StringVal(p.SHA256))
	}
	tmp, err := os.CreateTemp(filepath.Dir(l.Filename), ".goray.lock.*")
	if err != nil {
		return fmt.Errorf("writing plugin lock file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(f.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("writing plugin lock file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing plugin lock file: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), l.Filename); err != nil {
		return fmt.Errorf("writing plugin lock file: %w", err)
	}
	return nil
}

// PluginNameProblem says why name cannot name a plugin binary directly in
// plugin_dir ("" when it can, or when it is empty).
func PluginNameProblem(name string) string { return pluginNameProblem(name) }
