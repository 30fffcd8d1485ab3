package storagetest

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goray-dev/goray/sdk/storage"
)

// OverGRPC serves impl on an in-process gRPC server (a unix socket, the
// same bridge storage.Serve uses) and returns a client of it, so a storage
// can run the suite through the plugin boundary without building its
// binary. Everything is torn down when the test ends.
func OverGRPC(t testing.TB, impl storage.Storage) storage.Storage {
	t.Helper()
	dir, err := os.MkdirTemp("", "gs")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	storage.Register(srv, impl)
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
	return storage.NewClient(conn, storage.APIVersion)
}
