package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockRoundTrip: a saved lock loads back; Put replaces a binary's
// block; Find looks binaries up by their path.
func TestLockRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l, err := LoadLock(LockPath(filepath.Join(dir, "goray.hcl")))
	if err != nil || len(l.Plugins) != 0 {
		t.Fatalf("missing lock: %v, %v", l, err)
	}
	sum := strings.Repeat("ab", 32)
	l.Put(LockedPlugin{Binary: "plugins/goray-storage-s3", Kind: "storage", Name: "s3", Version: "v1", Source: "m/s3@v1", SHA256: strings.Repeat("0", 64)})
	l.Put(LockedPlugin{Binary: "plugins/goray-storage-fs", Kind: "storage", Name: "fs", SHA256: sum})
	l.Put(LockedPlugin{Binary: "plugins/goray-storage-s3", Kind: "storage", Name: "s3", Version: "v2", Source: "m/s3@v2", SHA256: sum})
	if err := l.Save(); err != nil {
		t.Fatal(err)
	}
	got, err := LoadLock(filepath.Join(dir, LockFileName))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Plugins) != 2 || got.Plugins[0].Name != "fs" || got.Plugins[1].Version != "v2" || got.Plugins[1].SHA256 != sum {
		t.Fatalf("loaded %+v", got.Plugins)
	}
	p, ok := got.Find(filepath.Join(dir, "plugins", "goray-storage-s3"))
	if !ok || p.Source != "m/s3@v2" || p.DeclRange.Start.Line == 0 {
		t.Errorf("Find = %+v, %v", p, ok)
	}
	if _, ok := got.Find(filepath.Join(dir, "goray-storage-s3")); ok {
		t.Error("Find matched another path")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("dir holds %d entries, want the lock file only", len(ents))
	}
}

// TestLockErrors: a malformed lock file is an error naming its file:line.
func TestLockErrors(t *testing.T) {
	good := strings.Repeat("a", 64)
	tests := []struct{ name, src, want string }{
		{"bad sha256", "plugin \"x\" {\n  kind = \"storage\"\n  name = \"x\"\n  sha256 = \"abc\"\n}\n", `goray.lock.hcl:1,1: Invalid sha256; The sha256 of locked binary "x"`},
		{"missing sha256", "plugin \"x\" {\n  kind = \"storage\"\n  name = \"x\"\n}\n", `goray.lock.hcl:1,12: Missing required argument`},
		{"duplicate", "plugin \"x\" {\n  kind = \"s\"\n  name = \"x\"\n  sha256 = \"" + good + "\"\n}\nplugin \"x\" {\n  kind = \"s\"\n  name = \"x\"\n  sha256 = \"" + good + "\"\n}\n", "goray.lock.hcl:6,1: Duplicate locked plugin"},
		{"syntax", "plugin \"x\" {\n", "goray.lock.hcl:1,"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), LockFileName)
			if err := os.WriteFile(path, []byte(tt.src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadLock(path)
			var de *DiagnosticsError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LoadLock = %v, want a *DiagnosticsError containing %q", err, tt.want)
			}
		})
	}
}
