package transport

import (
	"context"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin"
)

// Serve runs impl as a transport plugin binary and never returns: it
// registers the Transport gRPC service (API version 1), and the Collective
// service next to it when impl is a Collective, and serves them with
// plugin.ServeKind under the name impl.Info reports. The optional
// interfaces of package plugin add a config block (plugin.Configurable),
// health checks (plugin.HealthChecker), a version (plugin.Versioned) and a
// logger (plugin.LoggerSetter).
func Serve(impl Transport) { plugin.ServeKind(kindServer(impl)) }

func kindServer(impl Transport) plugin.KindServer {
	return plugin.KindServer{
		Kind: plugin.KindTransport,
		Impl: impl,
		Name: func(ctx context.Context) (string, error) {
			info, err := impl.Info(ctx, &InfoRequest{})
			if err != nil {
				return "", err
			}
			return info.Name, nil
		},
		APIVersions: map[int]func(*grpc.Server){
			APIVersion: func(s *grpc.Server) {
				Register(s, impl)
				if c, ok := impl.(Collective); ok {
					RegisterCollective(s, c)
				}
			},
		},
	}
}
