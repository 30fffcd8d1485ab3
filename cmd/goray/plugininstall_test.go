package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goray-dev/goray/config"
)

// TestPluginsInstall runs the real goray binary: a Go package is built
// into the config's plugin_dir under the name the plugin reports and
// locked; installing again replaces its block; mistakes are explained.
func TestPluginsInstall(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "goray.hcl")
	if err := os.WriteFile(cfg, []byte("head {}\nplugin_dir = \"plugins\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notPlugin := filepath.Join(dir, "script")
	if err := os.WriteFile(notPlugin, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(goray, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"package", []string{"plugins", "install", "--config", cfg, "../../plugins/fs"}, exitOK,
			[]string{`Installed storage plugin "fs"`, filepath.Join(dir, "plugins", "goray-storage-fs"), "Locked sha256", `plugin "storage" "fs" {`}, nil},
		{"again, another name", []string{"plugins", "install", "--config", cfg, "--name", "spill", "../../plugins/fs"}, exitOK,
			[]string{`Installed storage plugin "spill"`, "goray-storage-spill"}, nil},
		{"wrong kind", []string{"plugins", "install", "--config", cfg, "--kind", "transport", "../../plugins/fs"}, exitError,
			nil, []string{`is a "storage" plugin, not a "transport" plugin`}},
		{"unknown kind", []string{"plugins", "install", "--config", cfg, "--kind", "bogus", "x"}, exitUsage, nil, []string{`unknown --kind "bogus"`}},
		{"not a plugin", []string{"plugins", "install", "--config", cfg, notPlugin}, exitError, nil, []string{"is not a goray plugin"}},
		{"missing file", []string{"plugins", "install", "--config", cfg, "./nosuch"}, exitError, nil, []string{"plugin source ./nosuch"}},
		{"no config", []string{"plugins", "install", "--config", filepath.Join(dir, "none.hcl"), "x"}, exitUsage, nil, []string{"none.hcl does not exist"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			for _, w := range tt.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range tt.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
	lock, err := config.LoadLock(config.LockPath(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if len(lock.Plugins) != 2 || lock.Plugins[0].Binary != "plugins/goray-storage-fs" || lock.Plugins[1].Name != "spill" {
		t.Errorf("lock: %+v", lock.Plugins)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "plugins"))
	if len(ents) != 2 {
		t.Errorf("plugin_dir holds %d files, want the two binaries (no temporary file left)", len(ents))
	}
}
