package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/internal/testservers/gcstest"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/plugins/onesided/onesided"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/goray-dev/goray/sdk/transport/transporttest"
)

// testPrefix names the segments these tests create or make the plugins
// allocate (the unit tests of package onesided use another prefix).
const testPrefix = shmem.Prefix + "tt-os-plug-"

// pluginBin is the plugin binary, built once by TestMain.
var pluginBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	code := host.RunWithPlugin(m, "goray-transport-onesided", &pluginBin)
	if left, err := shmem.List(testPrefix); err == nil && len(left) > 0 {
		fmt.Fprintf(os.Stderr, "shared-memory segments left behind: %v\n", left)
		_, _ = shmem.CleanupPrefix(testPrefix)
		code = 1
	}
	return code
}

// startGCS serves a real GCS on a loopback TCP port (gcstest.Start) and
// points the plugins started afterwards at it (GORAY_GCS_ADDRESS). It
// returns its address.
func startGCS(t *testing.T) string {
	t.Helper()
	addr := gcstest.Start(t)
	t.Setenv(plugin.EnvGCSAddress, addr)
	t.Setenv(plugin.EnvNodeID, "0a0b0c0d")
	t.Setenv(plugin.EnvNodeIP, "127.0.0.1")
	return addr
}

// launch starts the plugin binary through a real host and returns a
// transport client of it and the plugin's pid.
func launch(t *testing.T, cfg string) (transport.Transport, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, v := host.Launch(ctx, t, pluginBin, "transport", "onesided", cfg)
	if v != transport.APIVersion {
		t.Fatalf("negotiated API version %d, want %d", v, transport.APIVersion)
	}
	info, err := plugin.NewInfoClient(conn).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return transport.NewClient(conn, v), info.Pid
}

const pluginCfg = `segment_prefix = "` + testPrefix + `"`

// TestConformancePluginTCP runs the suite through two real plugin
// processes that publish their agents in a real GCS and read each other
// over TCP, as agents of two nodes do.
func TestConformancePluginTCP(t *testing.T) {
	startGCS(t)
	src, _ := launch(t, pluginCfg+"\nsame_node_shm = false")
	dst, _ := launch(t, pluginCfg+"\nsame_node_shm = false\nstreams = 2\nchunk_size = \"1MiB\"")
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		return src, dst
	}, transporttest.Options{})
}

// TestConformancePluginSHM: two plugin processes of one node: zero copy
// without targets, one memcpy into them.
func TestConformancePluginSHM(t *testing.T) {
	startGCS(t)
	src, _ := launch(t, pluginCfg)
	dst, _ := launch(t, pluginCfg)
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		return src, dst
	}, transporttest.Options{LargeSize: 16 << 20})
}

// TestMetadataInGCS checks what an agent publishes in the real GCS.
func TestMetadataInGCS(t *testing.T) {
	addr := startGCS(t)
	tr, pid := launch(t, pluginCfg+"\nname = \"agent-x\"")
	kv, closeKV, err := plugin.DialKV(addr, onesided.DefaultKVNamespace)
	if err != nil {
		t.Fatal(err)
	}
	defer closeKV()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := transport.NewTensorIn(testPrefix, transport.Uint8, 1000)
	if err != nil {
		t.Fatal(err)
	}
	id := "00aa11bb22cc"
	if _, err := tr.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Tensors: []transport.Tensor{in}, TransferOwnership: true}); err != nil {
		_ = in.Free()
		t.Fatal(err)
	}
	raw, err := kv.Get(ctx, onesided.AgentKey("agent-x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name":"agent-x"`, `"segment":"` + in.Buffer.Segment + `"`, fmt.Sprintf(`"pid":%d`, pid), `"endpoint":"127.0.0.1:`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("metadata %s lacks %s", raw, want)
		}
	}
	if _, err := tr.GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: id}); err != nil {
		t.Fatal(err)
	}
	if shmem.Exists(in.Buffer.Segment) {
		t.Error("owned segment left after GarbageCollect")
	}
	if raw, err := kv.Get(ctx, onesided.AgentKey("agent-x")); err != nil || strings.Contains(string(raw), in.Buffer.Segment) {
		t.Errorf("metadata after GarbageCollect: %s, %v", raw, err)
	}
}

// TestSourceKilledMidRead: the source plugin process is killed while a
// destination plugin reads from it over TCP; the receive fails promptly
// with a typed error, not at its deadline, and frees what it allocated.
func TestSourceKilledMidRead(t *testing.T) {
	gcsAddr := startGCS(t)
	t.Setenv("GORAY_ONESIDED_TEST_SERVE_DELAY", "20ms")
	src, srcPid := launch(t, pluginCfg+"\nsame_node_shm = false")
	t.Setenv("GORAY_ONESIDED_TEST_SERVE_DELAY", "")
	dst, _ := launch(t, pluginCfg+"\nsame_node_shm = false\nstreams = 1\nchunk_size = \"256KiB\"")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	in, err := transport.NewTensorIn(testPrefix+"src-", transport.Uint8, 8<<20) // 32 chunks, ~0.7 s
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Free() })
	seg, err := shmem.Open(in.Buffer.Segment)
	if err != nil {
		t.Fatal(err)
	}
	for i := range seg.Bytes() {
		seg.Bytes()[i] = 0xEE
	}
	_ = seg.Close()
	id := randomID()
	meta, err := src.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: id, Tensors: []transport.Tensor{in}, TransferOwnership: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		r, err := dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, TransportData: meta.TransportData})
		if r != nil {
			for _, s := range r.Allocated {
				_ = shmem.Unlink(s)
			}
		}
		done <- err
	}()
	// Wait until the destination's buffer got its first bytes.
	deadline := time.Now().Add(10 * time.Second)
	for !started(in.Buffer.Segment) {
		if time.Now().After(deadline) {
			t.Fatal("the read did not start")
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronisation
	}
	if err := syscall.Kill(srcPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	select {
	case err = <-done:
	case <-time.After(waitfor.Generous):
		t.Fatal("receive from a killed source hangs")
	}
	t.Logf("receive from a killed source failed after %v: %v", time.Since(begin), err)
	if err == nil || errors.Is(err, transport.ErrTimeout) {
		t.Fatalf("receive from a killed source: %v, want a prompt error", err)
	}
	if !strings.Contains(err.Error(), "unreachable") && !errors.Is(err, transport.ErrBadMetadata) {
		t.Fatalf("receive from a killed source: %v, want 'source agent unreachable' or ErrBadMetadata", err)
	}
	var te *transport.TransferError
	if !errors.As(err, &te) || te.Op != transport.OpReceive || te.ObjectID != id {
		t.Fatalf("error %v does not name the receive of %s", err, id)
	}
	if left := allocated(in.Buffer.Segment); len(left) != 0 {
		t.Fatalf("the failed receive left segments: %v", left)
	}

	// The next agent of the node cleans up after the dead one: its owned
	// segment, its rendezvous file, its metadata. It comes after the old
	// one is gone: until its host reaps it, a killed process still exists
	// and its resources are rightly left alone.
	for deadline := time.Now().Add(10 * time.Second); !errors.Is(syscall.Kill(srcPid, 0), syscall.ESRCH); {
		if time.Now().After(deadline) {
			t.Fatalf("the killed source agent (pid %d) was not reaped within 10s", srcPid)
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronisation
	}
	kv, closeKV, err := plugin.DialKV(gcsAddr, onesided.DefaultKVNamespace)
	if err != nil {
		t.Fatal(err)
	}
	defer closeKV()
	var dead struct {
		Agent string `json:"agent"`
	}
	if err := json.Unmarshal(meta.TransportData, &dead); err != nil {
		t.Fatal(err)
	}
	cfg := onesided.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	a, err := onesided.NewAgent(ctx, cfg, onesided.AgentOptions{KV: kv})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if shmem.Exists(in.Buffer.Segment) {
		t.Error("owned segment of the killed agent not removed by the next agent")
	}
	if shmem.Exists(onesided.RendezvousName(id)) {
		t.Error("rendezvous file of the killed agent not removed by the next agent")
	}
	if _, err := kv.Get(ctx, onesided.AgentKey(dead.Agent)); !errors.Is(err, plugin.ErrKeyNotFound) {
		t.Errorf("metadata of the killed agent: %v", err)
	}
}

func randomID() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// allocated lists the test's segments other than src.
func allocated(src string) []string {
	names, _ := shmem.List(testPrefix)
	return slices.DeleteFunc(names, func(n string) bool { return n == src })
}

// started reports whether a segment other than src holds the source's
// first bytes (0xEE).
func started(src string) bool {
	for _, n := range allocated(src) {
		seg, err := shmem.Open(n)
		if err != nil {
			continue
		}
		ok := len(seg.Bytes()) > 0 && seg.Bytes()[0] == 0xEE
		_ = seg.Close()
		if ok {
			return true
		}
	}
	return false
}
