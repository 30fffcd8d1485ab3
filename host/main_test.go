package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/internal/waitfor"
)

// Binaries built once by TestMain.
var (
	testPluginBin string
	testHostBin   string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for bin, pkg := range map[*string]string{&testPluginBin: "./internal/testplugin", &testHostBin: "./internal/testhost"} {
		if *bin, err = BuildPlugin(dir, pkg, filepath.Base(pkg)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// syncBuffer is a log destination tests can read while plugins write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// pluginDir returns a fresh plugin_dir holding the test plugin under the
// given file name.
func pluginDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.Symlink(testPluginBin, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// nodeConfig writes a node config with plugin_dir = dir on line 1 and a
// `plugin "transport" "test"` block header on line 3 followed by body, and
// loads it from the file so that diagnostics carry its name and lines.
func nodeConfig(t *testing.T, dir, body string) *config.Node {
	t.Helper()
	src := fmt.Sprintf("plugin_dir = %q\n\nplugin \"transport\" \"test\" {\n%s}\n", dir, body)
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

const greetingBody = "  config {\n    greeting = \"hello\"\n  }\n"

// newManager returns a manager for n's plugins, stopped at cleanup. Its
// log goes to the returned buffer.
func newManager(t *testing.T, n *config.Node, opts Options) (*Manager, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	opts.PluginDir = n.PluginDir
	opts.Blocks = n.Plugins
	opts.Files = n.Files()
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "node", Output: logs, Level: hclog.Debug})
	}
	if opts.Supported == nil {
		opts.Supported = map[string][]int{"transport": {1, 2}}
	}
	m := New(opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		if err := m.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if t.Failed() {
			t.Logf("host log:\n%s", logs.String())
		}
	})
	return m, logs
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	t.Cleanup(cancel)
	return ctx
}

func mustStart(t *testing.T, ctx context.Context, m *Manager) {
	t.Helper()
	if diags := m.Start(ctx); diags.HasErrors() {
		t.Fatalf("Start: %s", diags.Error())
	}
}

// echo calls the test plugin's Echo service.
func echo(ctx context.Context, conn *grpc.ClientConn, in string) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := conn.Invoke(ctx, "/goraytest.Echo/Echo", wrapperspb.String(in), out); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}

// waitFor polls cond until it holds, for at most d or waitfor.Generous,
// whichever is longer.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	waitfor.Cond(t, max(d, waitfor.Generous), what, cond) // d names the usual wait; load can stretch it
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func status(t *testing.T, m *Manager) Status {
	t.Helper()
	ps := m.Plugins()
	if len(ps) != 1 {
		t.Fatalf("Plugins() = %d entries, want 1", len(ps))
	}
	return ps[0]
}

// findDiag returns the first error diagnostic with summary.
func findDiag(diags hcl.Diagnostics, summary string) *hcl.Diagnostic {
	for _, d := range diags {
		if d.Severity == hcl.DiagError && d.Summary == summary {
			return d
		}
	}
	return nil
}

func isUnavailable(err error) bool { return errors.Is(err, ErrPluginUnavailable) }

// readPid reads a "pid N" line.
func readPid(r io.Reader) (int, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return 0, err
	}
	var pid int
	if _, err := fmt.Sscanf(strings.TrimSpace(line), "pid %d", &pid); err != nil {
		return 0, fmt.Errorf("unexpected line %q: %w", line, err)
	}
	return pid, nil
}
