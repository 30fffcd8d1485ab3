package storage

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin"
)

// named is a minimal Storage: Info only.
type named struct{ Storage }

func (named) Info(context.Context, *InfoRequest) (*InfoResponse, error) {
	return &InfoResponse{Name: "demo"}, nil
}

// TestKindServer: Serve hands plugin.ServeKind the storage kind, the name
// Info reports and exactly API version APIVersion, which registers the
// Storage service (the optional interfaces are plugin.NewServeConfig's,
// tested in sdk/plugin).
func TestKindServer(t *testing.T) {
	cfg, err := plugin.NewServeConfig(context.Background(), kindServer(named{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Kind != plugin.KindStorage || cfg.Name != "demo" || len(cfg.APIVersions) != 1 || cfg.APIVersions[APIVersion] == nil {
		t.Fatalf("kind %q name %q API versions %v", cfg.Kind, cfg.Name, cfg.APIVersions)
	}
	srv := grpc.NewServer()
	defer srv.Stop()
	cfg.APIVersions[APIVersion](srv)
	if _, ok := srv.GetServiceInfo()["goray.storage.v1.Storage"]; !ok {
		t.Fatal("Storage service not registered")
	}
}
