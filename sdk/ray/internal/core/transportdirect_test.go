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

	// call collects an object and says which side answered ("" on error).
	call := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
		deadline := time.Now().Add(10 * time.Second)
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

func waitState(t *testing.T, conn *grpc.ClientConn, want connectivity.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := conn.GetState(); s != want; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("the connection stayed %v, want %v", s, want)
		}
	}
}
