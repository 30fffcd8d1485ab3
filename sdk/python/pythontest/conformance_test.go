package pythontest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/internal/testservers/pythontest"
	"github.com/goray-dev/goray/internal/testservers/testbin"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/goray-dev/goray/sdk/transport/transporttest"
)

// launch starts the Python plugin through a real host (go-plugin's
// handshake with AutoMTLS, health checks, PluginInfo, Configure) and
// returns a transport client of it.
func launch(t *testing.T, cfg string) transport.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, v := host.Launch(ctx, t, pythontest.Plugin(t), "transport", "pyshm", cfg)
	if v != transport.APIVersion {
		t.Fatalf("negotiated API version %d, want %d", v, transport.APIVersion)
	}
	return transport.NewClient(conn, v)
}

// manifestName is the Python transport's manifest segment of an object
// (goray_pyshm.manifest_name).
func manifestName(objectID string) string { return shmem.Prefix + "pym-" + objectID }

func manifestGone(_ context.Context, objectID string) error {
	if shmem.Exists(manifestName(objectID)) {
		return fmt.Errorf("manifest %s still exists", manifestName(objectID))
	}
	return nil
}

// TestConformancePythonPlugin runs the Go conformance suite against the
// Python shared-memory transport in two real Python plugin processes (the
// source and the destination), as the actors of a node use them: round
// trips of every dtype, zero-length and large tensors, targets, garbage
// collection, abort, cancellation, concurrency and bad metadata.
func TestConformancePythonPlugin(t *testing.T) {
	src := launch(t, `max_poll = "5ms"`)
	dst := launch(t, ``)
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		return src, dst
	}, transporttest.Options{Inspector: manifestGone})
}

// TestPythonPluginIdentityAndErrors checks what crosses the boundary
// besides transfers: the plugin's identity and schema, a rejected config,
// and typed errors (errors.Is and *transport.TransferError) raised in
// Python.
func TestPythonPluginIdentityAndErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, _ := host.Launch(ctx, t, pythontest.Plugin(t), "transport", "pyshm", `max_poll = "7ms"`)
	info := plugin.NewInfoClient(conn)
	id, err := info.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id.Kind != "transport" || id.Name != "pyshm" || id.Version != "0.1.0" || id.APIVersion != 1 || id.Pid == 0 {
		t.Errorf("Info = %+v", id)
	}
	schema, err := info.Schema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := schema.Attributes["max_poll"]; !ok || a.Type != plugin.TypeDuration || a.Default != "20ms" {
		t.Errorf("schema = %+v, want max_poll, a duration defaulting to 20ms", schema)
	}
	if err := info.Health(ctx); err != nil {
		t.Errorf("Health: %v", err)
	}
	if err := info.Configure(ctx, map[string]any{"max_poll": "-1s"}); !errors.Is(err, plugin.ErrConfigRejected) || !strings.Contains(err.Error(), "max_poll") {
		t.Errorf("Configure with a negative max_poll: %v, want a rejection naming max_poll", err)
	}
	if err := info.Configure(ctx, map[string]any{"nope": "1"}); !errors.Is(err, plugin.ErrConfigRejected) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Configure with an unknown attribute: %v, want a rejection naming it", err)
	}

	tr := transport.NewClient(conn, transport.APIVersion)
	_, err = tr.Send(ctx, &transport.SendRequest{ObjectID: "ab"})
	if !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("Send: %v, want ErrNotSupported", err)
	}
	var te *transport.TransferError
	if !errors.As(err, &te) || te.ObjectID != "ab" || te.Op != transport.OpSend {
		t.Fatalf("Send error %v is not a TransferError naming object ab and op send", err)
	}
	got, err := tr.Info(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (transport.InfoResponse{Name: "pyshm", OneSided: true, CanAbort: true, SameNode: true}); *got != want {
		t.Fatalf("Info = %+v, want %+v", *got, want)
	}
}

// TestPythonPluginRunByHand checks that the binary run without a host
// explains itself and exits 1.
func TestPythonPluginRunByHand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, pythontest.Plugin(t)).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("run by hand: %v, want exit status 1\n%s", err, out)
	}
	for _, want := range []string{"transport plugin 'pyshm'", "version 0.1.0", "goray-transport-pyshm"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("run by hand, the output does not say %q:\n%s", want, out)
		}
	}
}

// TestPythonUnitTests runs the SDK's and the example's Python unit tests
// (sdk/python/tests), including the check that the committed protocol
// stubs match sdk/proto.
func TestPythonUnitTests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, pythontest.Python(t), "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
	cmd.Dir = filepath.Join(root, "sdk", "python")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python unit tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
