package provider

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin"
)

// Named is implemented by providers that report their name (what
// `goray plugins list` shows, "local", "aws"). Without it Serve takes the
// name from the binary's: goray-provider-<name>.
type Named interface {
	Name() string
}

// Serve runs impl as a provider plugin binary and never returns: it
// registers the Provider gRPC service (API version 1) and serves it with
// plugin.ServeKind under impl's name (Named, else the binary's name
// without "goray-provider-"). The optional interfaces of package plugin
// add a config block (plugin.Configurable), health checks
// (plugin.HealthChecker), a version (plugin.Versioned) and a logger
// (plugin.LoggerSetter).
func Serve(impl Provider) { plugin.ServeKind(kindServer(impl, os.Args[0])) }

// binaryPrefix is how a provider plugin's binary is named:
// goray-provider-<name>.
const binaryPrefix = "goray-" + plugin.KindProvider + "-"

func kindServer(impl Provider, arg0 string) plugin.KindServer {
	return plugin.KindServer{
		Kind: plugin.KindProvider,
		Impl: impl,
		Name: func(context.Context) (string, error) {
			if n, ok := impl.(Named); ok && n.Name() != "" {
				return n.Name(), nil
			}
			return strings.TrimPrefix(filepath.Base(arg0), binaryPrefix), nil
		},
		APIVersions: map[int]func(*grpc.Server){
			APIVersion: func(s *grpc.Server) { Register(s, impl) },
		},
	}
}
