package storage

import (
	"context"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin"
)

// Serve runs impl as a storage plugin binary and never returns: it registers
// the Storage gRPC service (API version 1) and serves it with
// plugin.ServeKind under the name impl.Info reports. The optional
// interfaces of package plugin add a config block (plugin.Configurable),
// health checks (plugin.HealthChecker), a version (plugin.Versioned) and a
// logger (plugin.LoggerSetter).
func Serve(impl Storage) { plugin.ServeKind(kindServer(impl)) }

func kindServer(impl Storage) plugin.KindServer {
	return plugin.KindServer{
		Kind: plugin.KindStorage,
		Impl: impl,
		Name: func(ctx context.Context) (string, error) {
			info, err := impl.Info(ctx, &InfoRequest{})
			if err != nil {
				return "", err
			}
			return info.Name, nil
		},
		APIVersions: map[int]func(*grpc.Server){
			APIVersion: func(s *grpc.Server) { Register(s, impl) },
		},
	}
}
