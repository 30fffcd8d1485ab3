// Package plugintest is what the conformance suites of every plugin kind
// (sdk/transport/transporttest, sdk/storage/storagetest,
// sdk/provider/providertest) share: serving a kind's gRPC services
// in-process, through the same bridge its Serve uses, so a plugin can run
// its kind's suite across the plugin boundary without building its binary
// (which the real-binary tests, with host.Launch, do); Within, the check
// that a call returns in time; and Eventually, polling a condition until
// it holds.
package plugintest

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goray-dev/goray/sdk/plugin"
)

// Conn serves the services register registers (a kind's Register) on an
// in-process gRPC server listening on a unix socket, with the message
// limits of a plugin (plugin.MaxMessageSize), and returns a client
// connection to it. The server, the connection and the socket's temporary
// directory are torn down when t ends.
func Conn(t testing.TB, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	dir, err := os.MkdirTemp("", "gp")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "p.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(plugin.MaxMessageSize), grpc.MaxSendMsgSize(plugin.MaxMessageSize))
	register(srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(plugin.MaxMessageSize), grpc.MaxCallSendMsgSize(plugin.MaxMessageSize)))
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
	return conn
}
