package host

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goray-dev/goray/config"
)

// blockConfig loads a config with plugin_dir = dir on line 1 and a
// `plugin "transport" "<name>"` block on line 3, without validating it
// (the host must hold on its own: not every caller validates).
func blockConfig(t *testing.T, dir, name, body string) *config.Node {
	t.Helper()
	src := fmt.Sprintf("plugin_dir = %q\n\nplugin \"transport\" %q {\n%s}\n", dir, name, body)
	file := filepath.Join(t.TempDir(), "node.hcl")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	n, diags := config.Load(file)
	if diags.HasErrors() {
		t.Fatalf("config: %s", diags.Error())
	}
	return n
}

// TestPluginNameCannotEscapePluginDir: a block whose name reaches outside
// plugin_dir ("../x" would find <plugin_dir>/../x) is refused at the
// block's line, and nothing is started, though a plugin binary sits where
// the name points.
func TestPluginNameCannotEscapePluginDir(t *testing.T) {
	ctx := testCtx(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "plugins")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(testPluginBin, filepath.Join(parent, "outside")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../outside", "..", "sub/../../outside", parent + "/outside"} {
		t.Run(name, func(t *testing.T) {
			m, _ := newManager(t, blockConfig(t, dir, name, greetingBody), Options{})
			d := findDiag(m.Start(ctx), "Plugin name escapes plugin_dir")
			if d == nil {
				t.Fatal("no diagnostic")
			}
			if d.Subject == nil || d.Subject.Start.Line != 3 || !strings.HasSuffix(d.Subject.Filename, "node.hcl") {
				t.Errorf("diagnostic at %v, want node.hcl line 3 (the plugin block)", d.Subject)
			}
			for _, want := range []string{fmt.Sprintf("%q", name), dir} {
				if !strings.Contains(d.Detail, want) {
					t.Errorf("detail %q does not contain %q", d.Detail, want)
				}
			}
			if s := status(t, m); s.Pid != 0 || s.State != StateFailed || s.Path != "" {
				t.Errorf("status = %+v, want failed with nothing started", s)
			}
		})
	}
}

// TestStatusShowsPin: Plugins reports each block's sha256 pin (lowercase),
// empty for an unpinned block.
func TestStatusShowsPin(t *testing.T) {
	ctx := testCtx(t)
	dir := pluginDir(t, "goray-transport-test")
	b, err := os.ReadFile(testPluginBin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	pin := hex.EncodeToString(sum[:])
	for _, tc := range []struct{ body, want string }{
		{greetingBody, ""},
		{"  sha256 = \"" + strings.ToUpper(pin) + "\"\n" + greetingBody, pin},
	} {
		m, _ := newManager(t, nodeConfig(t, dir, tc.body), Options{})
		mustStart(t, ctx, m)
		if s := status(t, m); s.SHA256 != tc.want {
			t.Errorf("Status.SHA256 = %q, want %q", s.SHA256, tc.want)
		}
	}
}
