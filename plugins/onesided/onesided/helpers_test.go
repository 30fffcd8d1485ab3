package onesided

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// testPrefix names every segment these tests create or make the transport
// allocate ("goray-t-tt-" is ignored by other packages' leak checks; the
// plugin test in the parent directory uses another prefix).
const testPrefix = shmem.Prefix + "tt-os-unit-"

// testToken is the cluster token of every test in the package: the
// plugin's data connections authenticate with it (sdk/plugin reads it
// once, so it is set before any test runs).
const testToken = "plugin-test-cluster-token"

func TestMain(m *testing.M) {
	os.Setenv("GORAY_AUTH_TOKEN", testToken)
	code := m.Run()
	if left, err := shmem.List(testPrefix); err == nil && len(left) > 0 {
		fmt.Fprintf(os.Stderr, "shared-memory segments left behind: %v\n", left)
		_, _ = shmem.CleanupPrefix(testPrefix)
		code = 1
	}
	os.Exit(code)
}

// testConfig is a loopback configuration allocating under testPrefix;
// shm=false forces TCP between agents of this machine.
func testConfig(shm bool) Config {
	c := DefaultConfig()
	c.Listen = "127.0.0.1:0"
	c.SegmentPrefix = testPrefix
	c.SameNodeSHM = shm
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newAgent starts an agent closed (and checked for leaks) when the test
// ends.
func newAgent(t testing.TB, kv plugin.KV, cfg Config) *Agent {
	t.Helper()
	a, err := NewAgent(ctxT(t), cfg, AgentOptions{KV: kv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		checkClosed(t, a)
	})
	return a
}

// newTransport returns a started transport closed (and checked for leaks)
// when the test ends.
func newTransport(t testing.TB, kv plugin.KV, cfg Config) *Transport {
	t.Helper()
	tr := New(WithConfig(cfg), WithKV(kv))
	a, err := tr.Agent(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		checkClosed(t, a)
	})
	return tr
}

func agentOf(t testing.TB, tr *Transport) *Agent {
	t.Helper()
	a, err := tr.Agent(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// checkClosed checks that a closed agent let go of everything.
func checkClosed(t testing.TB, a *Agent) {
	t.Helper()
	s, ok := waitFor(func() (Stats, bool) {
		s := a.Stats()
		return s, s.OpenConns == 0 && s.IdleConns == 0 && s.Goroutines == 0 && s.Mappings == 0 && s.Registrations == 0 && s.Objects == 0
	})
	if !ok {
		t.Errorf("agent %s still holds something after Close: %+v", a.Name(), s)
	}
}

// waitFor polls f until it reports true or 5 s pass.
func waitFor[T any](f func() (T, bool)) (T, bool) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, ok := f()
		if ok || time.Now().After(deadline) {
			return v, ok
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronisation
	}
}

func oid() string { return randomHex(20) }

// tensor allocates a float32 tensor of n elements under testPrefix, filled
// from seed, freed when the test ends unless the transport owns it.
func tensor(t testing.TB, seed byte, n int64) transport.Tensor {
	t.Helper()
	tn, err := transport.NewTensorIn(testPrefix, transport.Float32, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tn.Free() })
	fill(t, tn, seed)
	return tn
}

func fill(t testing.TB, tn transport.Tensor, seed byte) {
	t.Helper()
	if tn.Buffer.Length == 0 {
		return
	}
	seg, err := shmem.Open(tn.Buffer.Segment)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	b := seg.Bytes()[tn.Buffer.Offset : tn.Buffer.Offset+tn.Buffer.Length]
	for i := range b {
		b[i] = byte(i*31) + seed
	}
}

// bytesOf returns a copy of a tensor's bytes.
func bytesOf(t testing.TB, tn transport.Tensor) []byte {
	t.Helper()
	if tn.Buffer.Length == 0 {
		return nil
	}
	seg, err := shmem.Open(tn.Buffer.Segment)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	return slices.Clone(seg.Bytes()[tn.Buffer.Offset : tn.Buffer.Offset+tn.Buffer.Length])
}

func extract(t testing.TB, tr transport.Transport, id string, own bool, ts ...transport.Tensor) *transport.ExtractMetadataResponse {
	t.Helper()
	m, err := tr.ExtractMetadata(ctxT(t), &transport.ExtractMetadataRequest{ObjectID: id, Tensors: ts, TransferOwnership: own})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = tr.GarbageCollect(context.Background(), &transport.GarbageCollectRequest{ObjectID: id})
	})
	return m
}

// receive receives an object and returns its tensors' bytes, freeing what
// the receive allocated.
func receive(t testing.TB, tr transport.Transport, id string, m *transport.ExtractMetadataResponse) ([][]byte, error) {
	t.Helper()
	r, err := tr.Receive(ctxT(t), &transport.ReceiveRequest{ObjectID: id, Tensors: m.Tensors, TransportData: m.TransportData})
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(r.Tensors))
	for i, tn := range r.Tensors {
		out[i] = bytesOf(t, tn)
	}
	for _, s := range r.Allocated {
		shmem.Default.Forget(s)
		_ = shmem.Unlink(s)
	}
	return out, nil
}
