package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/internal/auth"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/hashicorp/go-hclog"
)

// envRunGCS makes the test binary run RunGCS instead of the tests: it is
// the GCS command of these tests, as `goray gcs-server` is the head's.
const envRunGCS = "GORAY_NODE_TEST_RUN_GCS"

func TestMain(m *testing.M) {
	if os.Getenv(envRunGCS) != "" {
		spec, err := GCSSpecFromEnv()
		if err == nil {
			var creds *auth.Credentials
			if creds, err = auth.FromEnv(); err == nil {
				ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
				err = RunGCS(ctx, spec, creds)
				stop()
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "Error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// gcsProcFixture is a supervised GCS process of a test.
type gcsProcFixture struct {
	t       *testing.T
	dir     string
	spec    GCSSpec
	creds   *auth.Credentials
	mu      sync.Mutex
	readies []GCSReady
	lost    chan error
}

func newGCSProcFixture(t *testing.T, st gcs.Storage) *gcsProcFixture {
	t.Helper()
	dir := t.TempDir()
	creds, err := auth.New(auth.GenerateToken(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Backend == gcs.BackendBolt && st.Path == "" {
		st.Path = filepath.Join(dir, "gcs.db")
	}
	return &gcsProcFixture{t: t, dir: dir, creds: creds, lost: make(chan error, 1), spec: GCSSpec{
		Address: "127.0.0.1:0", Storage: st, HeartbeatPeriod: 100 * time.Millisecond, FailureThreshold: 50,
		LogFile: filepath.Join(dir, "gcs.log"), LogLevel: "debug", ReadyFile: filepath.Join(dir, "gcs.json"),
	}}
}

func (f *gcsProcFixture) start(ctx context.Context) (*gcsProcess, GCSReady, error) {
	exe, err := os.Executable()
	if err != nil {
		f.t.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Output: &testLogWriter{t: f.t}, Level: hclog.Debug})
	return startGCSProcess(ctx, []string{exe}, f.spec, f.creds, []string{envRunGCS + "=1"}, log,
		func(r GCSReady) { f.mu.Lock(); f.readies = append(f.readies, r); f.mu.Unlock() },
		func(err error) { f.lost <- err })
}

// restarted returns the restarts seen so far.
func (f *gcsProcFixture) restarted() []GCSReady {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]GCSReady(nil), f.readies...)
}

// clusterInfo asks the GCS at addr who it is, with the fixture's token.
func (f *gcsProcFixture) clusterInfo(ctx context.Context, addr string) (*pb.GetClusterInfoReply, error) {
	cc, err := rpc.Dial(addr, f.creds)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	return pb.NewGcsClient(cc).GetClusterInfo(ctx, &pb.GetClusterInfoRequest{})
}

type testLogWriter struct{ t *testing.T }

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitUntil polls cond until it holds, for at most d or waitfor.Generous,
// whichever is longer.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	waitfor.Cond(t, max(d, waitfor.Generous), what, cond)
}

// TestGCSProcessRestartsOnSameStorage: the supervised GCS killed with
// SIGKILL comes back on the same address with the same cluster, restored
// from its storage; stop ends it and nothing is left.
func TestGCSProcessRestartsOnSameStorage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newGCSProcFixture(t, gcs.Storage{Backend: gcs.BackendBolt})
	p, first, err := f.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop(context.Background())
	if first.Restored || first.Address == "" || strings.HasSuffix(first.Address, ":0") {
		t.Fatalf("first start: %+v", first)
	}
	for i := 1; i <= 2; i++ {
		old := f.restarted()
		pid := first.Pid
		if len(old) > 0 {
			pid = old[len(old)-1].Pid
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 30*time.Second, "the GCS restarted", func() bool { return len(f.restarted()) == i })
		r := f.restarted()[i-1]
		if !r.Restored || r.ClusterID != first.ClusterID || r.Address != first.Address || r.Pid == pid {
			t.Fatalf("restart %d: %+v, want cluster %s restored on %s", i, r, first.ClusterID, first.Address)
		}
		info, err := f.clusterInfo(ctx, first.Address)
		if err != nil || info.GetPid() != int64(r.Pid) || !info.GetRestored() {
			t.Fatalf("the restarted GCS answers %v, %v", info, err)
		}
	}
	last := f.restarted()[1].Pid
	p.stop(ctx)
	if syscall.Kill(last, 0) == nil {
		t.Fatalf("GCS pid %d runs after stop", last)
	}
}

// TestGCSProcessMemoryIsNotRestarted: a GCS on memory storage that dies
// is not restarted (another cluster would come up); lost says why.
func TestGCSProcessMemoryIsNotRestarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newGCSProcFixture(t, gcs.Storage{Backend: gcs.BackendMemory})
	p, first, err := f.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop(context.Background())
	_ = syscall.Kill(first.Pid, syscall.SIGKILL)
	select {
	case err := <-f.lost:
		if !strings.Contains(err.Error(), "storage is memory") {
			t.Fatalf("lost: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("lost was not called")
	}
	if r := f.restarted(); len(r) != 0 {
		t.Fatalf("a memory GCS was restarted: %+v", r)
	}
}

// TestGCSProcessStartErrors: a GCS that cannot start says why (the address
// taken, a storage it cannot open), and no process is left.
func TestGCSProcessStartErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	f := newGCSProcFixture(t, gcs.Storage{Backend: gcs.BackendMemory})
	f.spec.Address = busy.Addr().String()
	_, _, err = f.start(ctx)
	var pe *PortInUseError
	if !errors.As(err, &pe) || pe.Address != busy.Addr().String() {
		t.Fatalf("start on a busy port: %v, want a *PortInUseError naming %s", err, busy.Addr())
	}

	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f = newGCSProcFixture(t, gcs.Storage{Backend: gcs.BackendBolt, Path: filepath.Join(file, "gcs.db")})
	_, r, err := f.start(ctx)
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("start on a bad path: %v, want an error naming %s", err, file)
	}
	if r.Pid != 0 && syscall.Kill(r.Pid, 0) == nil {
		t.Fatalf("the failed GCS (pid %d) still runs", r.Pid)
	}
}

// TestGCSProcessStopWhileRestarting: stop returns while the
// supervisor is between failed restarts (the storage is gone), and a
// frozen GCS (SIGSTOP) is stopped too.
func TestGCSProcessStopWhileRestarting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newGCSProcFixture(t, gcs.Storage{Backend: gcs.BackendBolt})
	p, first, err := f.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The GCS cannot come back: its storage's directory is now a file.
	if err := os.Remove(f.spec.Storage.Path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.spec.Storage.Path, 0o700); err != nil { // bolt cannot open a directory
		t.Fatal(err)
	}
	_ = syscall.Kill(first.Pid, syscall.SIGKILL)
	waitUntil(t, 30*time.Second, "a failed restart in the GCS log", func() bool {
		b, _ := os.ReadFile(f.spec.LogFile)
		return strings.Count(string(b), "the GCS cannot start") >= 2
	})
	stopped := make(chan struct{})
	go func() { p.stop(ctx); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("stop hung while the GCS was being restarted")
	}

	f = newGCSProcFixture(t, gcs.Storage{Backend: gcs.BackendBolt})
	p, first, err = f.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(first.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	p.stop(ctx)
	if syscall.Kill(first.Pid, 0) == nil {
		t.Fatalf("the frozen GCS (pid %d) runs after stop", first.Pid)
	}
}
