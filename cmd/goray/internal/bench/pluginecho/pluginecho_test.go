package pluginecho

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goray-dev/goray/internal/waitfor"
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

// TestStartFailures: both starters fail, naming the binary, for a binary
// that does not serve, a missing one, and a context already done.
func TestStartFailures(t *testing.T) {
	type closer interface{ Close() }
	starters := []struct {
		name  string
		start func(context.Context, string) (closer, error)
	}{
		{"plugin", func(ctx context.Context, exe string) (closer, error) { return Start(ctx, exe, nil) }},
		{"server", func(ctx context.Context, exe string) (closer, error) { return StartServer(ctx, exe) }},
	}
	tests := []struct {
		name    string
		exe     string
		timeout time.Duration
	}{
		{"binary that does not serve", "/bin/true", 10 * time.Second},
		{"missing binary", filepath.Join(t.TempDir(), "nope"), 10 * time.Second},
		{"context already done", "/bin/cat", 0},
	}
	for _, st := range starters {
		for _, tc := range tests {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
				defer cancel()
				c, err := st.start(ctx, tc.exe)
				if err == nil {
					c.Close()
					t.Fatal("the start succeeded, want an error")
				}
				if !strings.Contains(err.Error(), tc.exe) {
					t.Errorf("error %q does not name the binary %s", err, tc.exe)
				}
			})
		}
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
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	out, err := NewClient(cc).Echo(ctx, []byte("ok"))
	if err != nil || string(out) != "ok" {
		t.Fatalf("Echo = %q, %v; want \"ok\"", out, err)
	}
}

// TestServerEcho: the bare server runs in another process and echoes
// unary calls and stream messages; a round trip with an ended context
// fails; Close stops the process and removes its directory.
func TestServerEcho(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := StartServer(ctx, exe)
	if err != nil {
		t.Fatalf("StartServer: %v", err)
	}
	if s.cmd.Process.Pid == os.Getpid() {
		t.Fatal("the server runs in this process")
	}
	for _, in := range [][]byte{[]byte("ok"), bytes.Repeat([]byte{7}, 1<<16)} {
		out, err := s.Echo(ctx, in)
		if err != nil {
			t.Fatalf("Echo(%d bytes): %v", len(in), err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("Echo(%d bytes) returned %d different bytes", len(in), len(out))
		}
	}
	st, err := s.OpenStream(ctx)
	if err != nil {
		t.Fatalf("OpenStream: %v", err)
	}
	for i := range 100 {
		in := []byte{byte(i), 'x'}
		out, err := st.RoundTrip(ctx, in)
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("RoundTrip %d: %q, %v; want %q", i, out, err, in)
		}
	}
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if _, err := st.RoundTrip(done, []byte("ok")); err == nil {
		t.Fatal("RoundTrip with an ended context succeeded, want an error")
	}
	st.Close()
	s.Close()
	if s.cmd.ProcessState == nil || !s.cmd.ProcessState.Success() {
		t.Fatalf("server process after Close: %v, want exited with 0 (it exits when its stdin closes)", s.cmd.ProcessState)
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("server directory %s still there after Close: %v", s.dir, err)
	}
}
