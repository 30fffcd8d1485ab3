package rpc

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestRetryWaitsForServer: a call made while nothing listens waits, and
// succeeds once a server comes up on the address; a call whose context
// ends first fails with a *ServerWaitError; a refusal is not retried.
func TestRetryWaitsForServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // down for now
	cc, err := Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := grpc_health_v1.NewHealthClient(cc)
	check := func(ctx context.Context, opts ...grpc.CallOption) error {
		_, err := hc.Check(ctx, &grpc_health_v1.HealthCheckRequest{}, opts...)
		return err
	}

	t.Run("context ends while down", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := Retry(ctx, addr, "Check", check)
		var we *ServerWaitError
		if !errors.As(err, &we) || !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("err = %v, want a *ServerWaitError of the deadline", err)
		}
	})

	t.Run("server comes up", func(t *testing.T) {
		done := make(chan error, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		go func() { done <- Retry(ctx, addr, "Check", check) }()
		select {
		case err := <-done:
			t.Fatalf("returned %v with no server", err)
		case <-time.After(200 * time.Millisecond):
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the port was taken meanwhile: %v", err)
		}
		s := grpc.NewServer()
		grpc_health_v1.RegisterHealthServer(s, health.NewServer())
		go s.Serve(l)
		defer s.Stop()
		if err := <-done; err != nil {
			t.Fatalf("after the server came up: %v", err)
		}
	})

	t.Run("refusal not retried", func(t *testing.T) {
		calls := 0
		err := Retry(context.Background(), addr, "X", func(ctx context.Context, _ ...grpc.CallOption) error {
			calls++
			return status.Error(codes.PermissionDenied, "no")
		})
		if status.Code(err) != codes.PermissionDenied || calls != 1 {
			t.Fatalf("err = %v after %d calls, want PermissionDenied after 1", err, calls)
		}
	})
}
