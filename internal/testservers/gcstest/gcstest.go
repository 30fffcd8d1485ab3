package gcstest

import (
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/gcs"
)

// Start serves a fresh GCS (gcs.New(gcs.Options{})) on a free loopback TCP
// port for the rest of the test and returns its address (host:port).
// t.Cleanup stops the server and waits until it has stopped serving; a
// failure to listen fails t.
func Start(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("gcstest: %v", err)
	}
	srv := grpc.NewServer()
	gcs.New(gcs.Options{}).Register(srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return lis.Addr().String()
}
