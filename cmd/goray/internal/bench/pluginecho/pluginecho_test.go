package pluginecho

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestMain(m *testing.M) {
	MaybeServe() // the test binary is its own plugin
	os.Exit(m.Run())
}

func TestPluginEcho(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Start(ctx, exe, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	for _, in := range [][]byte{[]byte("ok"), bytes.Repeat([]byte{7}, 1<<16), {}} {
		out, err := p.Echo(ctx, in)
		if err != nil {
			t.Fatalf("Echo(%d bytes): %v", len(in), err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("Echo(%d bytes) returned %d different bytes", len(in), len(out))
		}
	}
	p.Close()
	if !p.Exited() {
		t.Fatal("plugin process still running after Close")
	}
}

func TestStartFailures(t *testing.T) {
	tests := []struct {
		name    string
		exe     string
		timeout time.Duration
	}{
		{"binary that does not serve the plugin", "/bin/true", 10 * time.Second},
		{"missing binary", filepath.Join(t.TempDir(), "nope"), 10 * time.Second},
		{"context already done", "/bin/true", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			p, err := Start(ctx, tc.exe, nil)
			if err == nil {
				p.Close()
				t.Fatal("Start succeeded, want an error")
			}
		})
	}
}

func TestBareGRPCEcho(t *testing.T) {
	dir, err := os.MkdirTemp("", "pe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	Register(srv)
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := NewClient(cc).Echo(ctx, []byte("ok"))
	if err != nil || string(out) != "ok" {
		t.Fatalf("Echo = %q, %v; want \"ok\"", out, err)
	}
}
