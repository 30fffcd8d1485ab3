package main

// These tests build the plugin binary and run it the way a node does: under
// a real plugin host (package host), over go-plugin's gRPC, configured from
// an HCL block.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/goray-dev/goray/sdk/transport/transporttest"
)

// testPrefix names the segments the plugin allocates in these tests.
const testPrefix = shmem.Prefix + "tt-tcp-plugin-"

// pluginBin is the plugin binary, built once by TestMain under the name a
// node looks for.
var pluginBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gx")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if pluginBin, err = host.BuildPlugin(dir, ".", "goray-transport-tcp-template"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if left, err := shmem.List(testPrefix); err == nil && len(left) > 0 {
		fmt.Fprintf(os.Stderr, "shared-memory segments left behind: %v\n", left)
		_, _ = shmem.CleanupPrefix(testPrefix)
		code = 1
	}
	return code
}

// launch starts the plugin binary under a real host with the given config
// body and returns a transport client of it.
func launch(t *testing.T, cfg string) transport.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, v := host.Launch(ctx, t, pluginBin, plugin.KindTransport, "tcp-template", cfg)
	if v != transport.APIVersion {
		t.Fatalf("negotiated API version %d, want %d", v, transport.APIVersion)
	}
	return transport.NewClient(conn, v)
}

// TestConformancePlugin runs the conformance suite through two plugin
// processes: the source and the destination are different processes that
// move the bytes over their own TCP connection.
func TestConformancePlugin(t *testing.T) {
	cfg := fmt.Sprintf("segment_prefix = %q\ndial_timeout = \"2s\"", testPrefix)
	src := launch(t, cfg)
	dst := launch(t, cfg)
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		return src, dst
	}, transporttest.Options{LargeSize: 16 << 20})
}

// TestConformancePluginOneProcess runs the suite with both ends in one
// plugin process, as between two actors of one node.
func TestConformancePluginOneProcess(t *testing.T) {
	tr := launch(t, fmt.Sprintf("segment_prefix = %q", testPrefix))
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		return tr, tr
	}, transporttest.Options{LargeSize: 16 << 20})
}

// TestPluginIdentityAndErrors checks what the plugin reports about itself
// and that typed errors survive the process boundary.
func TestPluginIdentityAndErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// What `goray plugins check PATH` shows.
	rep, err := host.Check(ctx, pluginBin, plugin.KindTransport)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Name != "tcp-template" || rep.Version != "0.1.0" || !rep.Healthy || len(rep.APIVersions) != 1 || rep.APIVersions[0] != transport.APIVersion {
		t.Errorf("check report %+v", rep)
	}
	for _, a := range []string{"listen_address", "segment_prefix", "dial_timeout"} {
		if _, ok := rep.Schema.Attributes[a]; !ok {
			t.Errorf("schema lacks attribute %q: %+v", a, rep.Schema)
		}
	}

	tr := launch(t, fmt.Sprintf("segment_prefix = %q", testPrefix))
	info, err := tr.Info(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (transport.InfoResponse{Name: "tcp-template", CanAbort: true, SameNode: true}); *info != want {
		t.Errorf("Info = %+v, want %+v", *info, want)
	}
	_, err = tr.Send(ctx, &transport.SendRequest{ObjectID: "ab", TransportData: []byte("garbage")})
	var te *transport.TransferError
	if !errors.Is(err, transport.ErrBadMetadata) || !errors.As(err, &te) || te.ObjectID != "ab" || te.Op != transport.OpSend {
		t.Errorf("Send with garbage transport data: %v, want ErrBadMetadata naming object ab and op send", err)
	}
	_, err = tr.Abort(ctx, &transport.AbortRequest{ObjectID: "cd", Reason: "test"})
	if err != nil {
		t.Errorf("Abort: %v", err)
	}
	_, err = tr.Receive(ctx, &transport.ReceiveRequest{ObjectID: "cd"})
	if !errors.Is(err, transport.ErrBadMetadata) {
		t.Errorf("Receive without transport data: %v, want ErrBadMetadata", err)
	}
}

// TestConfigErrorsPointAtTheFile starts the plugin from node configs with
// mistakes and checks where the host reports them: a value the host cannot
// decode at its attribute, a value the plugin's Configure rejects at the
// plugin block.
func TestConfigErrorsPointAtTheFile(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		wantLine int
		want     string
	}{
		{"bad duration", `dial_timeout = "soon"`, 5, "Invalid duration"},
		{"unknown attribute", `dial_timeout_ms = 5`, 5, "dial_timeout"},
		{"rejected by Configure", `segment_prefix = "mine-"`, 3, `must start with "goray-t-"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "gx")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			if err := os.Symlink(pluginBin, filepath.Join(dir, "goray-transport-tcp-template")); err != nil {
				t.Fatal(err)
			}
			src := fmt.Sprintf("plugin_dir = %q\n\nplugin \"transport\" \"tcp-template\" {\n  config {\n    %s\n  }\n}\n", dir, tc.body)
			file := filepath.Join(dir, "node.hcl")
			if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			n, diags := config.Load(file)
			if diags.HasErrors() {
				t.Fatalf("config: %s", diags.Error())
			}
			m := host.New(host.Options{PluginDir: n.PluginDir, Blocks: n.Plugins, Files: n.Files(), Logger: hclog.NewNullLogger(), SocketDir: dir})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			diags = m.Start(ctx)
			defer m.Stop(context.Background())
			if !diags.HasErrors() {
				t.Fatal("the host started a plugin whose config is wrong")
			}
			text := config.FormatDiagnostics(diags, n.Files(), 0, false)
			found := false
			for _, d := range diags {
				if d.Subject != nil && d.Subject.Filename == file && d.Subject.Start.Line == tc.wantLine {
					found = true
				}
			}
			if !found || !strings.Contains(text, tc.want) {
				t.Fatalf("diagnostics do not point at %s:%d with %q:\n%s", file, tc.wantLine, tc.want, text)
			}
		})
	}
}
