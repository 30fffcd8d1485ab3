package storagetest

import (
	"testing"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/storage"
)

// OverGRPC serves impl on an in-process gRPC server (a unix socket, the
// same bridge storage.Serve uses; see plugintest.Conn) and returns a client
// of it, so a storage can run the suite through the plugin boundary without
// building its binary. Everything is torn down when the test ends.
func OverGRPC(t testing.TB, impl storage.Storage) storage.Storage {
	t.Helper()
	conn := plugintest.Conn(t, func(s *grpc.Server) { storage.Register(s, impl) })
	return storage.NewClient(conn, storage.APIVersion)
}
