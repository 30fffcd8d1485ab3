package core

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/plugindial/plugindialtest"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/transport"
)

// TestDirectTransportCalls: a worker's calls to its node's plugin go
// through the raylet until its own connection to the plugin is ready, then
// straight to the plugin (mutual TLS on the plugin's unix socket); when the
// plugin dies they go through the raylet again, and to the restarted
// plugin once the raylet tells its new endpoint; an idle connection is
// closed and made again.
func TestDirectTransportCalls(t *testing.T) {
	leaktest.Goroutines(t) // endpoint requests, connections
	defer func(d time.Duration) { directIdle = d }(directIdle)
	directIdle = 300 * time.Millisecond
	log := &callLog{}
	info := transport.InfoResponse{Name: "shm", OneSided: true, SameNode: true}
	plugin := func() *plugindialtest.Server {
		return plugindialtest.Serve(t, func(s *grpc.Server) {
			transport.Register(s, &recorder{node: "direct", info: info, log: log})
		})
	}
	var (
		mu      sync.Mutex
		current = plugin()
		asked   int
	)
	r := &fakeRaylet{plugins: map[string]*grpc.ClientConn{}, endpoint: func(name string) (*pb.TransportEndpointReply, error) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		if name != "shm" || current == nil {
			return nil, status.Errorf(codes.Unavailable, "plugin transport %q is restarting", name)
		}
		ep := current.Endpoint
		return &pb.TransportEndpointReply{Network: ep.Network, Address: ep.Address, ClientCert: ep.ClientCert,
			ClientKey: ep.ClientKey, ServerCert: ep.ServerCert, Pid: int32(ep.Pid)}, nil
	}}
	// The raylet's own connection to the plugin, for the relayed calls.
	relay, err := rpc.Dial(serve(t, func(s *grpc.Server) {
		transport.Register(s, &recorder{node: "relay", info: info, log: log})
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	r.plugins["shm"] = relay
	cw := directTestWorker(t, r)

	// call collects an object and says which side answered ("" on error).
	call := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		log.mu.Lock()
		before := len(log.calls)
		log.mu.Unlock()
		if _, err := cw.transport("shm").GarbageCollect(ctx, &transport.GarbageCollectRequest{ObjectID: ids.ObjectIDFor(ids.New(), 1).String()}); err != nil {
			return ""
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.calls) != before+1 {
			t.Fatalf("one call made %d plugin calls: %v", len(log.calls)-before, log.calls[before:])
		}
		side, _, _ := strings.Cut(log.calls[before], ":")
		return side
	}
	// until calls until one is answered by side.
	until := func(side, what string) {
		t.Helper()
		deadline := time.Now().Add(waitfor.Generous)
		for call() != side {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond) // polling interval
		}
	}

	if got := call(); got != "relay" {
		t.Fatalf("the first call was answered by %q, want the relay (no connection yet)", got)
	}
	until("direct", "a call straight to the plugin")
	for range 20 {
		if got := call(); got != "direct" {
			t.Fatalf("a call with the connection ready went to %q", got)
		}
	}

	// The plugin dies; the raylet says it restarts.
	mu.Lock()
	current.Stop()
	current = nil
	mu.Unlock()
	until("relay", "calls through the raylet after the plugin died")
	mu.Lock()
	current = plugin()
	askedBefore := asked
	mu.Unlock()
	until("direct", "a call straight to the restarted plugin")
	mu.Lock()
	if asked <= askedBefore {
		t.Errorf("the raylet was not asked for the restarted plugin's endpoint")
	}
	mu.Unlock()

	// Idle: the connection closes, the next call goes through the raylet,
	// and the one after straight to the plugin again.
	cw.transports.direct.mu.Lock()
	conn := cw.transports.direct.m["shm"].conn
	cw.transports.direct.mu.Unlock()
	waitState(t, conn, connectivity.Idle)
	if got := call(); got != "relay" {
		t.Errorf("the first call after the connection went idle went to %q, want the relay", got)
	}
	until("direct", "a call straight to the plugin after idling")
}

// directTestWorker is a core worker whose raylet is r, closed as Close
// closes it at the end of the test.
func directTestWorker(t *testing.T, r *fakeRaylet) *CoreWorker {
	t.Helper()
	cc, err := rpc.Dial(serve(t, func(s *grpc.Server) { pb.RegisterRayletServer(s, r) }), nil)
	if err != nil {
		t.Fatal(err)
	}
	cw := &CoreWorker{ctx: t.Context(), log: hclog.NewNullLogger(), id: ids.New(), nodeID: ids.New(), raylet: pb.NewRayletClient(cc)}
	t.Cleanup(func() {
		cw.stopDirectTransports()
		cw.wg.Wait()
		cw.closeDirectTransports()
		cc.Close()
	})
	return cw
}

// TestDirectTransportBacksOff: a plugin that refuses a worker's connection
// (here: credentials it does not accept, as a plugin that serves no more
// connections refuses them) is asked for less and less often, each failure
// in a row doubling the wait up to directRetryMax, and the worker goes
// straight to the plugin once the connection is accepted.
func TestDirectTransportBacksOff(t *testing.T) {
	leaktest.Goroutines(t)
	defer func(a, b time.Duration) { directRetry, directRetryMax = a, b }(directRetry, directRetryMax)
	directRetry, directRetryMax = 20*time.Millisecond, 160*time.Millisecond
	plugin := plugindialtest.Serve(t, func(s *grpc.Server) {
		transport.Register(s, &recorder{node: "direct", info: transport.InfoResponse{Name: "shm"}, log: &callLog{}})
	})
	otherCert, otherKey := plugindialtest.Certificate(t)
	var (
		mu     sync.Mutex
		asks   []time.Time
		accept bool
	)
	cw := directTestWorker(t, &fakeRaylet{endpoint: func(string) (*pb.TransportEndpointReply, error) {
		mu.Lock()
		defer mu.Unlock()
		asks = append(asks, time.Now())
		ep := plugin.Endpoint
		cert, key := otherCert, otherKey
		if accept {
			cert, key = ep.ClientCert, ep.ClientKey
		}
		return &pb.TransportEndpointReply{Network: ep.Network, Address: ep.Address, ClientCert: cert,
			ClientKey: key, ServerCert: ep.ServerCert, Pid: int32(ep.Pid)}, nil
	}})

	// A worker making calls all the time for 1.2 s (as calls through the
	// raylet go on meanwhile): with a fixed 20 ms wait it would ask about
	// 60 times.
	for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); {
		if cw.directTransport("shm") != nil {
			t.Fatal("a connection the plugin refuses was used")
		}
		time.Sleep(2 * time.Millisecond) // the pace of calls
	}
	mu.Lock()
	got := append([]time.Time(nil), asks...)
	accept = true
	mu.Unlock()
	if len(got) < 3 || len(got) > 20 {
		t.Errorf("the raylet was asked %d times in 1.2 s, want 3 to 20 (each failure doubling a 20 ms wait up to 160 ms)", len(got))
	}
	for k := 1; k < len(got); k++ {
		// The randomized wait is at least half the interval.
		want := min(directRetry<<(k-1), directRetryMax) / 2
		if gap := got[k].Sub(got[k-1]); gap < want {
			t.Errorf("ask %d came %v after the one before, want at least %v", k+1, gap, want)
		}
	}

	deadline := time.Now().Add(waitfor.Generous)
	for cw.directTransport("shm") == nil {
		if time.Now().After(deadline) {
			t.Fatal("no direct connection once the plugin accepts it")
		}
		time.Sleep(2 * time.Millisecond) // polling interval
	}
}

func waitState(t *testing.T, conn *grpc.ClientConn, want connectivity.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	for s := conn.GetState(); s != want; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("the connection stayed %v, want %v", s, want)
		}
	}
}
