package transport

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/sdk/plugin"
)

// Configurable is implemented by transports that take a `config { ... }`
// block. Serve publishes Schema and calls Configure with the decoded block
// (see plugin.ServeConfig.Configure) after every start, before the
// transport is used.
type Configurable interface {
	Schema() plugin.Schema
	Configure(ctx context.Context, cfg map[string]any) error
}

// HealthChecker is implemented by transports that can tell whether they are
// healthy; the host restarts a plugin whose checks keep failing.
type HealthChecker interface {
	Health(ctx context.Context) error
}

// Versioned is implemented by transports that report a release version;
// otherwise Serve uses the binary's module version.
type Versioned interface {
	Version() string
}

// LoggerSetter is implemented by transports that want the plugin's logger
// (hclog JSON to stderr, forwarded into the host's log).
type LoggerSetter interface {
	SetLogger(hclog.Logger)
}

// Serve runs impl as a transport plugin binary and never returns: it
// registers the Transport gRPC service (API version 1) and serves it with
// plugin.Serve under the name impl.Info reports. Optional interfaces add a
// config block (Configurable), health checks (HealthChecker), a version
// (Versioned), a logger (LoggerSetter) and the Collective gRPC service
// (Collective, served next to Transport under the same API version).
func Serve(impl Transport) {
	plugin.Serve(serveConfig(impl))
}

func serveConfig(impl Transport) plugin.ServeConfig {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := impl.Info(ctx, &InfoRequest{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "transport plugin: Info: %v\n", err)
		os.Exit(1)
	}
	cfg := plugin.ServeConfig{
		Kind: plugin.KindTransport,
		Name: info.Name,
		APIVersions: map[int]func(*grpc.Server){
			1: func(s *grpc.Server) {
				Register(s, impl)
				if c, ok := impl.(Collective); ok {
					RegisterCollective(s, c)
				}
			},
		},
	}
	if v, ok := impl.(Versioned); ok {
		cfg.Version = v.Version()
	} else if bi, ok := debug.ReadBuildInfo(); ok {
		cfg.Version = bi.Main.Version
	}
	if c, ok := impl.(Configurable); ok {
		cfg.Schema = c.Schema()
		cfg.Configure = c.Configure
	}
	if h, ok := impl.(HealthChecker); ok {
		cfg.Health = h.Health
	}
	if l, ok := impl.(LoggerSetter); ok {
		lvl := hclog.LevelFromString(os.Getenv(plugin.EnvLogLevel))
		if lvl == hclog.NoLevel {
			lvl = hclog.Info
		}
		logger := hclog.New(&hclog.LoggerOptions{Level: lvl, Output: os.Stderr, JSONFormat: true})
		l.SetLogger(logger)
		cfg.Logger = logger
	}
	return cfg
}
