package plugin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// fullPlugin implements every optional interface.
type fullPlugin struct {
	configured typedConfig
	logger     hclog.Logger
}

func (p *fullPlugin) ConfigSpec() ConfigSpec { return TypedConfig(p.configure) }
func (p *fullPlugin) configure(_ context.Context, c typedConfig) error {
	p.configured = c
	return nil
}
func (p *fullPlugin) Health(context.Context) error { return errors.New("sick") }
func (p *fullPlugin) Version() string              { return "v9.9.9" }
func (p *fullPlugin) SetLogger(l hclog.Logger)     { p.logger = l }

// badConfig has a config struct whose tags are wrong.
type badConfig struct{}

func (badConfig) ConfigSpec() ConfigSpec {
	return TypedConfig(func(context.Context, struct {
		C chan int `hcl:"c"`
	}) error {
		return nil
	})
}

func kindServer(impl any, name string, nameErr error) KindServer {
	return KindServer{
		Kind: KindStorage,
		Impl: impl,
		Name: func(context.Context) (string, error) { return name, nameErr },
		APIVersions: map[int]func(*grpc.Server){
			1: func(*grpc.Server) {},
		},
	}
}

func TestNewServeConfig(t *testing.T) {
	ctx := context.Background()
	impl := &fullPlugin{}
	cfg, err := NewServeConfig(ctx, kindServer(impl, "demo", nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Kind != KindStorage || cfg.Name != "demo" || cfg.Version != "v9.9.9" {
		t.Fatalf("kind %q name %q version %q", cfg.Kind, cfg.Name, cfg.Version)
	}
	if _, ok := cfg.Schema.Attributes["bucket"]; !ok {
		t.Fatal("schema not derived from the config struct")
	}
	if err := cfg.Configure(ctx, map[string]any{"bucket": "b"}); err != nil || impl.configured.Bucket != "b" {
		t.Fatalf("Configure not wired: %v %+v", err, impl.configured)
	}
	if err := cfg.Health(ctx); err == nil || err.Error() != "sick" {
		t.Fatalf("Health not wired: %v", err)
	}
	if impl.logger == nil || cfg.Logger != impl.logger {
		t.Fatal("logger not handed to the plugin")
	}

	// Without optional interfaces: no schema, always healthy.
	cfg, err = NewServeConfig(ctx, kindServer(struct{}{}, "plain", nil))
	if err != nil || cfg.Configure != nil || cfg.Health != nil || cfg.Logger != nil {
		t.Fatalf("plain plugin: %+v %v", cfg, err)
	}

	for _, tc := range []struct {
		name string
		k    KindServer
		want string
	}{
		{"name fails", kindServer(struct{}{}, "", errors.New("no info")), "storage plugin: Info: no info"},
		{"bad config struct", kindServer(badConfig{}, "bad", nil), `storage plugin "bad": invalid config schema`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewServeConfig(ctx, tc.k); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestKinds(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds {
		if k == "" || seen[k] {
			t.Fatalf("kind %q empty or listed twice in %v", k, Kinds)
		}
		seen[k] = true
	}
	for _, k := range []string{KindTransport, KindStorage, KindProvider} {
		if !seen[k] {
			t.Errorf("Kinds lacks %q", k)
		}
	}
}
