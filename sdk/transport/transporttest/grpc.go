package transporttest

import (
	"testing"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/transport"
)

// OverGRPC serves impl on an in-process gRPC server (a unix socket, the
// same bridge transport.Serve uses; see plugintest.Conn) and returns a
// client of it, so a transport can run the suite through the plugin
// boundary without building its binary. Everything is torn down when the
// test ends.
func OverGRPC(t testing.TB, impl transport.Transport) transport.Transport {
	t.Helper()
	conn := plugintest.Conn(t, func(s *grpc.Server) { transport.Register(s, impl) })
	return transport.NewClient(conn, transport.APIVersion)
}
