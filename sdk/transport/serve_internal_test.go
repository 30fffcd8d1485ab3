package transport

import (
	"context"
	"testing"

	"github.com/goray-dev/goray/sdk/plugin"
)

// named is a minimal Transport: Info only.
type named struct{ Transport }

func (named) Info(context.Context, *InfoRequest) (*InfoResponse, error) {
	return &InfoResponse{Name: "demo"}, nil
}

// TestKindServer: Serve hands plugin.ServeKind the transport kind, the name
// Info reports and exactly API version APIVersion (the optional interfaces
// are plugin.NewServeConfig's, tested in sdk/plugin).
func TestKindServer(t *testing.T) {
	cfg, err := plugin.NewServeConfig(context.Background(), kindServer(named{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Kind != plugin.KindTransport || cfg.Name != "demo" || len(cfg.APIVersions) != 1 || cfg.APIVersions[APIVersion] == nil {
		t.Fatalf("kind %q name %q API versions %v", cfg.Kind, cfg.Name, cfg.APIVersions)
	}
}
