package plugin

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// The optional interfaces below are what every plugin kind shares: a kind
// SDK's Serve hands its implementation to ServeKind, which looks for them.
// A plugin implements those it needs, whatever its kind.

// Configurable is implemented by plugins that take a `config { ... }`
// block. ConfigSpec is usually TypedConfig of the plugin's Configure
// method: the block's schema is derived from a Go struct, and the host's
// decoded block arrives as a validated value of that struct, after every
// (re)start of the plugin and before it is used.
type Configurable interface {
	ConfigSpec() ConfigSpec
}

// HealthChecker is implemented by plugins that can tell whether they are
// healthy; the host restarts a plugin whose checks keep failing.
type HealthChecker interface {
	Health(ctx context.Context) error
}

// Versioned is implemented by plugins that report a release version;
// otherwise ServeKind uses the binary's module version.
type Versioned interface {
	Version() string
}

// LoggerSetter is implemented by plugins that want the plugin's logger
// (hclog JSON to stderr, forwarded into the host's log).
type LoggerSetter interface {
	SetLogger(hclog.Logger)
}

// KindServer is what a kind SDK (sdk/transport, sdk/storage, ...) tells
// ServeKind about one plugin of its kind.
type KindServer struct {
	// Kind is the plugin's kind, one of Kinds.
	Kind string
	// Impl is the plugin's implementation of the kind's interface. ServeKind
	// looks for the optional interfaces (Configurable, HealthChecker,
	// Versioned, LoggerSetter) on it.
	Impl any
	// Name returns the plugin's name (what the kind's Info call reports).
	Name func(ctx context.Context) (string, error)
	// APIVersions registers the kind's gRPC services per API version (see
	// ServeConfig.APIVersions).
	APIVersions map[int]func(*grpc.Server)
}

// NewServeConfig returns the ServeConfig of k: its name, its API versions,
// and what Impl's optional interfaces add (a config block, health checks, a
// version, a logger). The error names the kind when Name fails.
func NewServeConfig(ctx context.Context, k KindServer) (ServeConfig, error) {
	name, err := k.Name(ctx)
	if err != nil {
		return ServeConfig{}, fmt.Errorf("%s plugin: Info: %w", k.Kind, err)
	}
	cfg := ServeConfig{Kind: k.Kind, Name: name, APIVersions: k.APIVersions}
	if v, ok := k.Impl.(Versioned); ok {
		cfg.Version = v.Version()
	} else if bi, ok := debug.ReadBuildInfo(); ok {
		cfg.Version = bi.Main.Version
	}
	if c, ok := k.Impl.(Configurable); ok {
		spec := c.ConfigSpec()
		if spec.err != nil {
			return ServeConfig{}, fmt.Errorf("%s plugin %q: %w", k.Kind, name, spec.err)
		}
		cfg.Schema = spec.schema
		cfg.Configure = spec.configure
	}
	if h, ok := k.Impl.(HealthChecker); ok {
		cfg.Health = h.Health
	}
	if l, ok := k.Impl.(LoggerSetter); ok {
		logger := defaultLogger()
		l.SetLogger(logger)
		cfg.Logger = logger
	}
	return cfg, nil
}

// ServeKind runs k as a plugin binary and never returns: NewServeConfig,
// then Serve. Every kind SDK's Serve is this call. A failing Name (within
// 10 s) or an invalid config struct prints the error and exits with
// status 1.
func ServeKind(k KindServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cfg, err := NewServeConfig(ctx, k)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	Serve(cfg)
}

// defaultLogger is the plugin's logger: hclog JSON to stderr at the host's
// level (EnvLogLevel, default info), which go-plugin forwards into the
// host's log under the plugin's name.
func defaultLogger() hclog.Logger {
	level := hclog.LevelFromString(os.Getenv(EnvLogLevel))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{Level: level, Output: os.Stderr, JSONFormat: true})
}
