package host

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goray-dev/goray/internal/plugindial"
	"github.com/goray-dev/goray/internal/plugindial/plugindialtest"
)

// TestEndpoint calls a real plugin directly with the endpoint the host
// read at its launch, checks that no other client is let in, and that a
// restarted plugin has a new endpoint that the old one does not reach.
func TestEndpoint(t *testing.T) {
	ctx := testCtx(t)
	m, _ := newManager(t, nodeConfig(t, pluginDir(t, "goray-transport-test"), greetingBody), Options{})
	m.backoffMin = 300 * time.Millisecond
	mustStart(t, ctx, m)
	if _, err := m.Endpoint("transport", "nothere"); !errors.Is(err, ErrPluginNotFound) {
		t.Errorf("Endpoint of a plugin not configured: %v, want ErrPluginNotFound", err)
	}
	ep, err := m.Endpoint("transport", "test")
	if err != nil {
		t.Fatal(err)
	}
	if ep.Network != "unix" || ep.Pid != status(t, m).Pid {
		t.Fatalf("endpoint %s %q pid %d, want a unix socket and pid %d", ep.Network, ep.Address, ep.Pid, status(t, m).Pid)
	}
	direct := dialEndpoint(t, ep)
	if got, err := echo(ctx, direct, "direct"); err != nil || got != "v2 hello: direct" {
		t.Fatalf("a direct call: %q, %v", got, err)
	}

	// Only the launch's client certificate is let in, and only over TLS.
	other := ep
	other.ClientCert, other.ClientKey = plugindialtest.Certificate(t)
	if _, err := echo(ctx, dialEndpoint(t, other), "other"); err == nil {
		t.Error("a client with another certificate was let in")
	}
	plain, err := grpc.NewClient("unix://"+ep.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := echo(ctx, plain, "plain"); err == nil {
		t.Error("a client without TLS was let in")
	}

	// A restart: the endpoint is unavailable, then new; the old one
	// reaches nothing.
	if _, err := echo(ctx, direct, "crash"); err == nil {
		t.Fatal("the crashing call succeeded")
	}
	waitFor(t, 10*time.Second, "the plugin to be restarted", func() bool {
		s := status(t, m)
		return s.State == StateRunning && s.Restarts >= 1
	})
	ep2, err := m.Endpoint("transport", "test")
	if err != nil {
		t.Fatal(err)
	}
	if ep2.Pid == ep.Pid || ep2.Address == ep.Address || string(ep2.ServerCert) == string(ep.ServerCert) {
		t.Errorf("the restarted plugin's endpoint is the old one's: pid %d, %q", ep2.Pid, ep2.Address)
	}
	if _, err := echo(ctx, direct, "stale"); err == nil {
		t.Error("the old endpoint still reaches a plugin")
	}
	if got, err := echo(ctx, dialEndpoint(t, ep2), "again"); err != nil || got != "v2 hello: again" {
		t.Errorf("a direct call after the restart: %q, %v", got, err)
	}
}

func dialEndpoint(t *testing.T, ep Endpoint) *grpc.ClientConn {
	t.Helper()
	conn, err := plugindial.Dial(ep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
