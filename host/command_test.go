package host

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/config"
)

// loadConfig writes src as dir/node.hcl and loads it.
func loadConfig(t *testing.T, dir, src string) *config.Node {
	t.Helper()
	file := filepath.Join(dir, "node.hcl")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	n, diags := config.Load(file)
	if diags.HasErrors() {
		t.Fatalf("config: %s", diags.Error())
	}
	return n
}

// copyPlugin copies the test plugin to path (a real file, not a link, so
// that its checksum is its own) and returns its sha256.
func copyPlugin(t *testing.T, path string, extra []byte) string {
	t.Helper()
	b, err := os.ReadFile(testPluginBin)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, extra...)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // never ETXTBSY on a running binary
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestOneBinaryBacksTwoBlocks: two blocks name one binary (a file name in
// plugin_dir, and a path relative to the config file) with their own args,
// configs and log levels; each runs its own process.
func TestOneBinaryBacksTwoBlocks(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	copyPlugin(t, filepath.Join(plugins, "shared"), nil)
	n := loadConfig(t, dir, fmt.Sprintf(`plugin_dir = %q
plugin "transport" "a" {
  command   = "shared"
  args      = ["--bucket", "one"]
  log_level = "warn"
  config {
    greeting = "a"
  }
}
plugin "transport" "b" {
  command = "./plugins/shared"
  config {
    greeting = "b"
  }
}
`, plugins))
	m, _ := newManager(t, n, Options{})
	mustStart(t, ctx, m)
	want := map[string][3]string{ // name → args, log level, echo
		"a": {`["--bucket","one"]`, "warn", "v2 a: x"},
		"b": {`[]`, "debug", "v2 b: x"},
	}
	pids := map[int]bool{}
	for name, w := range want {
		conn, _, err := m.Client("transport", name)
		if err != nil {
			t.Fatal(err)
		}
		for i, req := range []string{"args", "loglevel", "x"} {
			if got, err := echo(ctx, conn, req); err != nil || got != w[i] {
				t.Errorf("%s: Echo(%q) = %q, %v; want %q", name, req, got, err, w[i])
			}
		}
	}
	for _, s := range m.Plugins() {
		if s.Path != filepath.Join(plugins, "shared") || s.State != StateRunning {
			t.Errorf("status %+v", s)
		}
		pids[s.Pid] = true
	}
	if len(pids) != 2 {
		t.Errorf("pids %v, want two processes", pids)
	}
}

// TestCommandNotFound: a command that names no binary is reported at the
// command's file:line.
func TestCommandNotFound(t *testing.T) {
	tests := []struct{ name, command, want string }{
		{"name in plugin_dir", "nosuch", `tried "nosuch"`},
		{"path", "./bin/nosuch", "bin/nosuch is not a file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			dir := t.TempDir()
			n := loadConfig(t, dir, fmt.Sprintf("plugin_dir = %q\nplugin \"transport\" \"a\" {\n  command = %q\n}\n", dir, tt.command))
			m, _ := newManager(t, n, Options{})
			diags := m.Start(ctx)
			d := findDiag(diags, "Plugin binary not found")
			if d == nil {
				t.Fatalf("no diagnostic in %v", diags)
			}
			if d.Subject.Start.Line != 3 || d.Subject.Start.Column != 13 {
				t.Errorf("diagnostic at %s, want line 3, column 13 (the command)", d.Subject)
			}
			if !strings.Contains(d.Detail, tt.want) {
				t.Errorf("detail %q lacks %q", d.Detail, tt.want)
			}
			if err := config.NewDiagnosticsError(diags, n.Files()); !strings.Contains(err.Error(), "node.hcl:3,13: Plugin binary not found") {
				t.Errorf("error %q does not name file:line", err)
			}
		})
	}
}

// TestLockFileChecked: a binary the lock file lists starts only with the
// sha256 it records, at the first start and at every restart; the error
// names both hashes, the binary and the lock file.
func TestLockFileChecked(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "goray-transport-test")
	sum := copyPlugin(t, bin, nil)
	n := loadConfig(t, dir, fmt.Sprintf("plugin_dir = %q\nplugin \"transport\" \"test\" {\n%s}\n", dir, greetingBody))
	lockPath := config.LockPath(n.Filename)
	lock := &config.Lock{Filename: lockPath}
	lock.Put(config.LockedPlugin{Binary: "goray-transport-test", Kind: "transport", Name: "test", SHA256: sum})
	if err := lock.Save(); err != nil {
		t.Fatal(err)
	}

	m, _ := newManager(t, n, Options{LockFile: lockPath})
	mustStart(t, ctx, m)
	if s := status(t, m); s.SHA256 != sum {
		t.Errorf("status SHA256 = %q, want the lock's %q", s.SHA256, sum)
	}

	// The binary changes under the running plugin, which then crashes: the
	// restart refuses the changed binary.
	changed := copyPlugin(t, bin, []byte("changed"))
	conn, _, err := m.Client("transport", "test")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = echo(ctx, conn, "crash")
	waitFor(t, 10*time.Second, "the restart to be refused", func() bool {
		return strings.Contains(status(t, m).LastError, "lock file")
	})
	s := status(t, m)
	for _, want := range []string{bin, sum, changed, lockPath} {
		if !strings.Contains(s.LastError, want) {
			t.Errorf("restart error %q lacks %q", s.LastError, want)
		}
	}
	if s.State != StateRestarting || s.Pid != 0 {
		t.Errorf("status %+v, want restarting without a process", s)
	}

	// A new host refuses the changed binary at the first start.
	m2, _ := newManager(t, n, Options{LockFile: lockPath})
	diags := m2.Start(ctx)
	d := findDiag(diags, "Plugin checksum mismatch")
	if d == nil {
		t.Fatalf("no checksum diagnostic in %v", diags)
	}
	for _, want := range []string{bin, sum, changed, lockPath} {
		if !strings.Contains(d.Detail, want) {
			t.Errorf("detail %q lacks %q", d.Detail, want)
		}
	}
}

// TestLockFileErrors: a malformed lock file fails every plugin with its
// file:line; a missing one locks nothing.
func TestLockFileErrors(t *testing.T) {
	ctx := testCtx(t)
	dir := pluginDir(t, "goray-transport-test")
	n := nodeConfig(t, dir, greetingBody)
	m, _ := newManager(t, n, Options{LockFile: filepath.Join(t.TempDir(), "absent.lock.hcl")})
	mustStart(t, ctx, m)

	bad := filepath.Join(t.TempDir(), config.LockFileName)
	if err := os.WriteFile(bad, []byte("plugin \"x\" {\n  kind = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m2, _ := newManager(t, n, Options{LockFile: bad})
	d := findDiag(m2.Start(ctx), "Plugin lock file unreadable")
	if d == nil || !strings.Contains(d.Detail, bad+":") {
		t.Fatalf("diagnostic %v does not name the lock file", d)
	}
}
