package onesided

import (
	"context"
	"fmt"
	"testing"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/goray-dev/goray/sdk/transport/transporttest"
)

// collectedInspector checks that a collected object left nothing on the
// source: no extraction, no registration, no rendezvous file.
func collectedInspector(src **Transport) transporttest.Inspector {
	return func(_ context.Context, id string) error {
		a, err := (*src).Agent(context.Background())
		if err != nil {
			return err
		}
		a.mu.Lock()
		_, held := a.objects[id]
		regs := len(a.regs)
		a.mu.Unlock()
		if held {
			return fmt.Errorf("agent still holds object %s", id)
		}
		if regs != 0 {
			return fmt.Errorf("agent still holds %d registrations after its only object was collected", regs)
		}
		if shmem.Exists(RendezvousName(id)) {
			return fmt.Errorf("rendezvous file of %s left", id)
		}
		return nil
	}
}

// pairFactory returns two transports (two agents) sharing a memory KV.
func pairFactory(shm bool, src **Transport) transporttest.Factory {
	return func(t *testing.T) (transport.Transport, transport.Transport) {
		kv := plugin.NewMemoryKV()
		s := newTransport(t, kv, testConfig(shm))
		d := newTransport(t, kv, testConfig(shm))
		*src = s
		return s, d
	}
}

// TestConformanceTCP: two agents reading each other over TCP loopback, as
// across nodes.
func TestConformanceTCP(t *testing.T) {
	var src *Transport
	transporttest.Run(t, pairFactory(false, &src), transporttest.Options{Inspector: collectedInspector(&src)})
}

// TestConformanceSHM: two agents of one shared-memory domain: zero copy
// without targets, one memcpy into targets.
func TestConformanceSHM(t *testing.T) {
	var src *Transport
	transporttest.Run(t, pairFactory(true, &src), transporttest.Options{Inspector: collectedInspector(&src)})
}

// TestConformanceOneAgent: one instance is both ends, as on a node where
// one plugin process serves every actor.
func TestConformanceOneAgent(t *testing.T) {
	var src *Transport
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		src = newTransport(t, plugin.NewMemoryKV(), testConfig(true))
		return src, src
	}, transporttest.Options{Inspector: collectedInspector(&src), LargeSize: 16 << 20})
}

// TestConformanceOverGRPC runs the TCP pair through the gRPC bridge the
// plugin binary uses.
func TestConformanceOverGRPC(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		kv := plugin.NewMemoryKV()
		s := newTransport(t, kv, testConfig(false))
		d := newTransport(t, kv, testConfig(false))
		return transporttest.OverGRPC(t, s), transporttest.OverGRPC(t, d)
	}, transporttest.Options{LargeSize: 16 << 20})
}
