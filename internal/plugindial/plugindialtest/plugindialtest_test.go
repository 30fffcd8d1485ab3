package plugindialtest_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/goray-dev/goray/internal/plugindial"
	"github.com/goray-dev/goray/internal/plugindial/plugindialtest"
	"github.com/goray-dev/goray/internal/waitfor"
)

// TestServeRefusesOtherClients: the server answers only the client
// certificate of its Endpoint, as a launched plugin does: a client without
// TLS or with another certificate is refused.
func TestServeRefusesOtherClients(t *testing.T) {
	s := plugindialtest.Serve(t, func(srv *grpc.Server) { healthpb.RegisterHealthServer(srv, health.NewServer()) })
	check := func(conn *grpc.ClientConn) error {
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	own, err := plugindial.Dial(s.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if err := check(own); err != nil {
		t.Fatalf("the endpoint's own client was refused: %v", err)
	}
	other := s.Endpoint
	other.ClientCert, other.ClientKey = plugindialtest.Certificate(t)
	for name, dial := range map[string]func() (*grpc.ClientConn, error){
		"another certificate": func() (*grpc.ClientConn, error) { return plugindial.Dial(other) },
		"no TLS": func() (*grpc.ClientConn, error) {
			return grpc.NewClient("unix://"+s.Endpoint.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
		},
	} {
		conn, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		if err := check(conn); err == nil {
			t.Errorf("a client with %s was answered", name)
		}
		conn.Close()
	}
}
