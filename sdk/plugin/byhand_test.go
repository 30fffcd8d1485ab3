package plugin_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin"
)

// TestPluginRunByHand: a real plugin binary (plugins/fs) run without the
// host's handshake cookie prints its kind, name, version and how to install
// and declare it, on stderr, and exits with status 1.
func TestPluginRunByHand(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "goray-storage-fs")
	build := exec.Command("go", "build", "-o", bin, "../../plugins/fs")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GORAY_") {
			env = append(env, kv)
		}
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("run by hand: %v, want exit status 1; stderr:\n%s", err, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout is not empty: %q", stdout.String())
	}
	for _, want := range []string{
		`goray-storage-fs is a goray plugin: kind storage, name "fs", version `,
		"API versions [1]",
		"goray plugins install --config goray.hcl " + bin,
		`plugin "storage" "fs" {`,
		"directory = <string>",
		"1 optional attribute(s)",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), "This binary is a plugin") { // go-plugin's generic message
		t.Errorf("go-plugin's generic message is printed:\n%s", stderr.String())
	}
}

// TestByHandMessage: the config example lists the required attributes only.
func TestByHandMessage(t *testing.T) {
	reg := func(*grpc.Server) {}
	tests := []struct {
		name      string
		cfg       plugin.ServeConfig
		want, not []string
	}{
		{"no config", plugin.ServeConfig{Kind: "transport", Name: "tcp", APIVersions: map[int]func(*grpc.Server){2: reg, 1: reg}},
			[]string{"version (none), API versions [1 2]", "plugin \"transport\" \"tcp\" {\n    }\n", "copied as goray-transport-tcp"}, []string{"config {"}},
		{"required and optional", plugin.ServeConfig{Kind: "storage", Name: "s3", Version: "v1.2.3", APIVersions: map[int]func(*grpc.Server){1: reg},
			Schema: plugin.Schema{Attributes: map[string]plugin.Attribute{
				"bucket": {Type: plugin.TypeString, Required: true}, "tls": {Type: plugin.TypeBool}, "prefix": {Type: plugin.TypeString}}}},
			[]string{"version v1.2.3", "config {\n        bucket = <string>\n        # and 2 optional attribute(s)"}, []string{"tls ="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plugin.ByHandMessage(tt.cfg, "/x/bin")
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("message lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("message has %q:\n%s", n, got)
				}
			}
		})
	}
}
