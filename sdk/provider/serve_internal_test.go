package provider

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin"
)

// minimal is a Provider that does nothing.
type minimal struct{ Provider }

// named is one that says its name.
type named struct {
	Provider
	name string
}

func (n named) Name() string { return n.name }

// TestKindServer: Serve hands plugin.ServeKind the provider kind, the
// plugin's name and exactly API version APIVersion, which registers the
// Provider service (the optional interfaces are plugin.NewServeConfig's,
// tested in sdk/plugin).
func TestKindServer(t *testing.T) {
	tests := []struct {
		impl Provider
		arg0 string
		want string
	}{
		{named{name: "aws"}, "/opt/goray/plugins/goray-provider-local", "aws"},
		{named{}, "/opt/goray/plugins/goray-provider-local", "local"},
		{minimal{}, "/opt/goray/plugins/goray-provider-gcp", "gcp"},
		{minimal{}, "./mycloud", "mycloud"},
	}
	for _, tc := range tests {
		cfg, err := plugin.NewServeConfig(context.Background(), kindServer(tc.impl, tc.arg0))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		if cfg.Kind != plugin.KindProvider || cfg.Name != tc.want || len(cfg.APIVersions) != 1 || cfg.APIVersions[APIVersion] == nil {
			t.Fatalf("%s: kind %q name %q (want %q) API versions %v", tc.arg0, cfg.Kind, cfg.Name, tc.want, cfg.APIVersions)
		}
		srv := grpc.NewServer()
		cfg.APIVersions[APIVersion](srv)
		if _, ok := srv.GetServiceInfo()["goray.provider.v1.Provider"]; !ok {
			t.Error("Provider service not registered")
		}
		srv.Stop()
	}
}
