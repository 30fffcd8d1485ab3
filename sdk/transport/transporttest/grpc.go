package transporttest

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goray-dev/goray/sdk/transport"
)

// OverGRPC serves impl on an in-process gRPC server (a unix socket, the
// same bridge transport.Serve uses) and returns a client of it, so a
// transport can run the suite through the plugin boundary without building
// its binary. Everything is torn down when the test ends.
func OverGRPC(t *testing.T, impl transport.Transport) transport.Transport {
	t.Helper()
	dir, err := os.MkdirTemp("", "gt")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "t.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	transport.Register(srv, impl)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		<-served
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-served
		_ = os.RemoveAll(dir)
	})
	return transport.NewClient(conn, transport.APIVersion)
}
