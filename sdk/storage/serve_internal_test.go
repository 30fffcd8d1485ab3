package storage

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/sdk/plugin"
)

// configurable is a minimal Storage with every optional interface.
type configurable struct {
	Storage
	configured map[string]any
	logger     hclog.Logger
}

func (c *configurable) Info(context.Context, *InfoRequest) (*InfoResponse, error) {
	return &InfoResponse{Name: "demo"}, nil
}
func (c *configurable) Schema() plugin.Schema {
	return plugin.Schema{Attributes: map[string]plugin.Attribute{"x": {Type: plugin.TypeString, Optional: true}}}
}
func (c *configurable) Configure(_ context.Context, cfg map[string]any) error {
	c.configured = cfg
	return nil
}
func (c *configurable) Health(context.Context) error { return errors.New("sick") }
func (c *configurable) Version() string              { return "v9.9.9" }
func (c *configurable) SetLogger(l hclog.Logger)     { c.logger = l }

func TestServeConfig(t *testing.T) {
	impl := &configurable{}
	cfg := serveConfig(impl)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Kind != plugin.KindStorage || cfg.Name != "demo" || cfg.Version != "v9.9.9" {
		t.Fatalf("kind %q name %q version %q", cfg.Kind, cfg.Name, cfg.Version)
	}
	if len(cfg.APIVersions) != 1 || cfg.APIVersions[APIVersion] == nil {
		t.Fatalf("API versions %v, want exactly %d", cfg.APIVersions, APIVersion)
	}
	if _, ok := cfg.Schema.Attributes["x"]; !ok {
		t.Fatal("schema not taken from the storage")
	}
	if err := cfg.Configure(context.Background(), map[string]any{"x": "y"}); err != nil || impl.configured["x"] != "y" {
		t.Fatalf("Configure not wired: %v %v", err, impl.configured)
	}
	if err := cfg.Health(context.Background()); err == nil || err.Error() != "sick" {
		t.Fatalf("Health not wired: %v", err)
	}
	if impl.logger == nil || cfg.Logger != impl.logger {
		t.Fatal("logger not handed to the storage")
	}
}
