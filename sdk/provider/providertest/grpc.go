package providertest

import (
	"testing"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/provider"
)

// OverGRPC serves impl on an in-process gRPC server (a unix socket, the
// same bridge provider.Serve uses; see plugintest.Conn) and returns a
// client of it, so a provider can run the suite through the plugin
// boundary without building its binary. Everything is torn down when the
// test ends.
func OverGRPC(t testing.TB, impl provider.Provider) provider.Provider {
	t.Helper()
	conn := plugintest.Conn(t, func(s *grpc.Server) { provider.Register(s, impl) })
	return provider.NewClient(conn, provider.APIVersion)
}
