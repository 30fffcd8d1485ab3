package providertest

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/provider"
)

// PluginClient checks a connection to a provider plugin process (conn, v
// as host.Launch returns them for a plugin binary under a real plugin
// host): that it negotiated provider.APIVersion and that the plugin
// reports itself as the provider plugin name. It returns a provider
// client of it and the plugin process' pid. ctx bounds the Info call.
func PluginClient(ctx context.Context, t testing.TB, conn grpc.ClientConnInterface, v int, name string) (provider.Provider, int) {
	t.Helper()
	if v != provider.APIVersion {
		t.Fatalf("negotiated API version %d, want %d", v, provider.APIVersion)
	}
	info, err := plugin.NewInfoClient(conn).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != plugin.KindProvider || info.Name != name {
		t.Fatalf("plugin says it is %s %q, want %s %q", info.Kind, info.Name, plugin.KindProvider, name)
	}
	return provider.NewClient(conn, v), info.Pid
}
