package host

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/config"
)

// Launch runs the plugin binary at path through a real Manager, as a node
// would: it writes a node config with one `plugin "<kind>" "<name>"` block
// whose config body is cfgHCL (the text between `config {` and `}`), starts
// the Manager, registers t.Cleanup to Stop it, and returns the connection
// and the negotiated API version (the highest the plugin speaks). Any
// failure, with its diagnostics, fails t. Kind SDKs use it to run their
// conformance suites against real plugin binaries.
func Launch(ctx context.Context, t testing.TB, path, kind, name string, cfgHCL string) (*grpc.ClientConn, int) {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatalf("host.Launch: %v", err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("host.Launch: plugin binary: %v", err)
	}
	dir := t.TempDir()
	if err := os.Symlink(abs, filepath.Join(dir, "goray-"+kind+"-"+name)); err != nil {
		t.Fatalf("host.Launch: %v", err)
	}
	src := fmt.Sprintf("plugin_dir = %q\n\nplugin %q %q {\n  config {\n%s\n  }\n}\n", dir, kind, name, cfgHCL)
	file := filepath.Join(dir, "node.hcl")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatalf("host.Launch: %v", err)
	}
	n, diags := config.Load(file)
	if diags.HasErrors() {
		t.Fatalf("host.Launch: config:\n%s", config.FormatDiagnostics(diags, n.Files(), 0, false))
	}
	versions := make([]int, maxCheckAPIVersion)
	for i := range versions {
		versions[i] = i + 1
	}
	w := &testLogWriter{t: t}
	m := New(Options{
		PluginDir: n.PluginDir,
		Blocks:    n.Plugins,
		Files:     n.Files(),
		Logger: hclog.New(&hclog.LoggerOptions{
			Name: "host", Level: hclog.Info, Output: w,
		}),
		Supported:      map[string][]int{kind: versions},
		HealthInterval: time.Second,
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Stop(ctx); err != nil {
			t.Errorf("host.Launch: stopping plugin %s %q: %v", kind, name, err)
		}
		w.close()
	})
	diags = m.Start(ctx)
	if diags.HasErrors() {
		t.Fatalf("host.Launch: starting plugin %s %q:\n%s", kind, name, config.FormatDiagnostics(diags, n.Files(), 0, false))
	}
	conn, v, err := m.Client(kind, name)
	if err != nil {
		t.Fatalf("host.Launch: %v", err)
	}
	return conn, v
}

// testLogWriter sends log lines to t.Log until the test's cleanup.
type testLogWriter struct {
	t      testing.TB
	mu     sync.Mutex
	closed bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(string(p))
	}
	return len(p), nil
}

func (w *testLogWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// BuildPlugin compiles the Go package pkg (a path as `go build` takes it,
// relative to the current directory) into dir/name and returns the binary's
// path. Plugin tests call it from TestMain to get a real plugin binary under
// the name a node looks for (goray-<kind>-<name>).
func BuildPlugin(dir, pkg, name string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command(goBin, "build", "-o", out, pkg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", pkg, err)
	}
	return out, nil
}

// RunWithPlugin is the body of a plugin test's TestMain: it builds the
// plugin package in the current directory (BuildPlugin) as name into a
// fresh temporary directory, sets *bin to the binary's path, runs the tests
// and removes the directory. It returns the exit code for os.Exit: m.Run's,
// or 1 (with the error on stderr) when the plugin does not build.
//
//	func TestMain(m *testing.M) { os.Exit(host.RunWithPlugin(m, "goray-storage-fs", &pluginBin)) }
func RunWithPlugin(m *testing.M, name string, bin *string) int {
	dir, err := os.MkdirTemp("", "goray-plugin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = BuildPlugin(dir, ".", name); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
