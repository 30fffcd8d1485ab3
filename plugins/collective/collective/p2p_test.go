package collective_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/plugins/collective/collective"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/goray-dev/goray/sdk/transport/transporttest"
)

// waitIdle polls until the instance holds no objects, pins, waiting
// destinations or connections.
func waitIdle(tr *collective.Transport) (collective.Stats, bool) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := tr.Stats()
		if s.Objects == 0 && s.PinnedBuffers == 0 && s.WaitingDestinations == 0 && s.OpenConns == 0 {
			return s, true
		}
		if time.Now().After(deadline) {
			return s, false
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronisation
	}
}

// conformanceInstance returns an instance for the suite; at the end (after
// the suite collected its objects) it checks that it let go of everything.
func conformanceInstance(t *testing.T, kv plugin.KV) *collective.Transport {
	t.Helper()
	tr := collective.New(collective.WithConfig(testConfig()), collective.WithKV(kv))
	t.Cleanup(func() {
		if s, ok := waitIdle(tr); !ok {
			t.Errorf("instance still holds %+v after every object was collected", s)
		}
		_ = tr.Close()
	})
	return tr
}

// inspector checks that a collected object left nothing pinned.
func inspector(src **collective.Transport) transporttest.Inspector {
	return func(_ context.Context, id string) error {
		if s := (*src).Stats(); s.Objects != 0 || s.PinnedBuffers != 0 {
			return fmt.Errorf("source still holds %+v after collecting %s", s, id)
		}
		if _, referenced := shmem.Default.Stats(); referenced != 0 {
			return fmt.Errorf("%d shared-memory mappings still referenced after collecting %s", referenced, id)
		}
		return nil
	}
}

func TestConformance(t *testing.T) {
	var src *collective.Transport
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		kv := plugin.NewMemoryKV()
		src = conformanceInstance(t, kv)
		return src, conformanceInstance(t, kv)
	}, transporttest.Options{Inspector: inspector(&src), LargeSize: 16 << 20})
}

func TestConformanceOverGRPC(t *testing.T) {
	var src *collective.Transport
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		kv := plugin.NewMemoryKV()
		src = conformanceInstance(t, kv)
		return transporttest.OverGRPC(t, src), transporttest.OverGRPC(t, conformanceInstance(t, kv))
	}, transporttest.Options{Inspector: inspector(&src), LargeSize: 16 << 20})
}

// TestConformanceOneInstance: source and destination on one instance, as
// between two actors of one node.
func TestConformanceOneInstance(t *testing.T) {
	var tr *collective.Transport
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		tr = conformanceInstance(t, plugin.NewMemoryKV())
		return tr, tr
	}, transporttest.Options{Inspector: inspector(&tr), LargeSize: 16 << 20})
}

// transfer runs Send and Receive of an extracted object at once.
func transfer(ctx context.Context, src, dst transport.Transport, id string, meta *transport.ExtractMetadataResponse, comm []byte) (*transport.ReceiveResponse, error, error) {
	var sendErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, sendErr = src.Send(ctx, &transport.SendRequest{ObjectID: id, Source: "actor-0", Destination: "actor-2",
			Tensors: meta.Tensors, TransportData: meta.TransportData, CommunicatorData: comm})
	}()
	r, err := dst.Receive(ctx, &transport.ReceiveRequest{ObjectID: id, Source: "actor-0", Destination: "actor-2",
		Tensors: meta.Tensors, TransportData: meta.TransportData, CommunicatorData: comm})
	wg.Wait()
	return r, err, sendErr
}

func oid(n byte) string { return strings.Repeat(fmt.Sprintf("%02x", n), 20) }

// TestGroupTransfer: between members of a common group, the communicator
// data names the group and ranks; Send and Receive check that their
// instance hosts those ranks, and fail promptly when the peer rank fails.
func TestGroupTransfer(t *testing.T) {
	noLeaks(t)
	cfg := testConfig()
	cfg.Timeout = time.Minute
	w := newWorld(t, 3, withMembers(), withConfig(cfg))
	src, other, dst := w.insts[0], w.insts[1], w.insts[2]
	ctx := ctxT(t)

	tn := newTensor(t, transport.Int64, 3, 1000)
	fill(t, tn, func(i int64) float64 { return float64(i) })
	meta, err := src.ExtractMetadata(ctx, &transport.ExtractMetadataRequest{ObjectID: oid(1), Source: "actor-0", Tensors: []transport.Tensor{tn}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = src.GarbageCollect(context.Background(), &transport.GarbageCollectRequest{ObjectID: oid(1)})
	}()
	// The owner's instance (here rank 1's) finds the group through the KV.
	cm, err := other.CommunicatorMetadata(ctx, &transport.CommunicatorMetadataRequest{ObjectID: oid(1), Source: "actor-0", Destination: "actor-2"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cm.Data), w.name) {
		t.Fatalf("communicator data %s does not name group %q", cm.Data, w.name)
	}

	// Another instance cannot receive as rank 2.
	_, err = other.Receive(ctx, &transport.ReceiveRequest{ObjectID: oid(1), TransportData: meta.TransportData, CommunicatorData: cm.Data})
	if !errors.Is(err, transport.ErrGroupNotFound) {
		t.Errorf("Receive on an instance not hosting the destination rank: %v, want ErrGroupNotFound", err)
	}

	r, rerr, serr := transfer(ctx, src, dst, oid(1), meta, cm.Data)
	if rerr != nil || serr != nil {
		t.Fatalf("transfer: receive %v, send %v", rerr, serr)
	}
	check(t, "received", r.Tensors[0], func(i int64) float64 { return float64(i) })
	for _, s := range r.Allocated {
		_ = shmem.Unlink(s)
		shmem.Default.Forget(s)
	}

	// Two actors without a common group transfer without one.
	cm2, err := other.CommunicatorMetadata(ctx, &transport.CommunicatorMetadataRequest{ObjectID: oid(1), Source: "actor-0", Destination: "stranger"})
	if err != nil || strings.Contains(string(cm2.Data), w.name) {
		t.Fatalf("communicator data for a non-member: %s, %v", cm2.Data, err)
	}

	// A Send waiting for its destination fails once the destination rank's
	// instance goes away.
	sent := make(chan error, 1)
	go func() {
		_, err := src.Send(ctx, &transport.SendRequest{ObjectID: oid(1), TransportData: meta.TransportData, CommunicatorData: cm.Data})
		sent <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it wait (closing first is the same test)
	_ = dst.Close()
	select {
	case err := <-sent:
		if !errors.Is(err, transport.ErrRankFailed) || !strings.Contains(err.Error(), "rank 2") {
			t.Errorf("Send to a failed rank: %v, want ErrRankFailed naming rank 2", err)
		}
	case <-time.After(promptly):
		t.Fatal("Send to a failed rank did not return")
	}
}

// TestConfigure covers the config block's validation.
func TestConfigure(t *testing.T) {
	ok := map[string]any{"timeout": "5s", "chunk_size": int64(256 << 10), "listen": "127.0.0.1:0", "kv_namespace": "x", "segment_prefix": testPrefix,
		"algorithm": "recursive_doubling", "recursive_doubling_max": int64(0), "in_process": false}
	tr := collective.New()
	defer tr.Close()
	if err := tr.ConfigSpec().Configure(context.Background(), ok); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if tr.Addr() == "" || !strings.HasPrefix(tr.Addr(), "127.0.0.1:") {
		t.Errorf("listener address %q", tr.Addr())
	}
	if err := tr.Health(context.Background()); err != nil {
		t.Errorf("Health: %v", err)
	}
	if err := tr.ConfigSpec().Err(); err != nil {
		t.Errorf("schema: %v", err)
	}
	if defaults, err := plugin.DecodeConfig[collective.Config](nil); err != nil || defaults != collective.DefaultConfig() {
		t.Errorf("the config block's defaults %+v (%v), want DefaultConfig() %+v", defaults, err, collective.DefaultConfig())
	}
	for name, bad := range map[string]map[string]any{
		"timeout":        {"timeout": "-1s"},
		"bad duration":   {"timeout": "soon"},
		"chunk too big":  {"chunk_size": int64(1 << 30)},
		"chunk too tiny": {"chunk_size": int64(10)},
		"listen":         {"listen": "nonsense"},
		"namespace":      {"kv_namespace": ""},
		"prefix":         {"segment_prefix": "mine-"},
		"algorithm":      {"algorithm": "tree"},
		"rd max":         {"recursive_doubling_max": int64(1 << 30)},
		"rd negative":    {"recursive_doubling_max": int64(-1)},
	} {
		if err := collective.New().ConfigSpec().Configure(context.Background(), bad); err == nil {
			t.Errorf("Configure accepted a bad %s: %v", name, bad)
		}
	}
	wild := collective.New()
	defer wild.Close()
	if err := wild.ConfigSpec().Configure(context.Background(), map[string]any{"listen": "0.0.0.0:0"}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(wild.Addr(), plugin.NodeIP()+":") {
		t.Errorf("a listener on every interface advertises %q, want the node IP %s", wild.Addr(), plugin.NodeIP())
	}
	busy := collective.New()
	defer busy.Close()
	if err := busy.ConfigSpec().Configure(context.Background(), map[string]any{"listen": tr.Addr()}); err == nil {
		t.Error("Configure accepted a busy listen address")
	}
	_ = tr.Close()
	if err := tr.Health(context.Background()); !errors.Is(err, collective.ErrClosed) {
		t.Errorf("Health after Close: %v", err)
	}
}
