// Package plugin is what every goray plugin shares, whatever its kind: the
// go-plugin handshake, the description of a plugin's config block (Schema),
// and Serve, which runs a plugin binary.
//
// Plugins are separate binaries that the node host (package host) starts
// with HashiCorp go-plugin over gRPC, one process per
// `plugin "<kind>" "<name>" { config { ... } }` block of the node's config.
// Plugin authors do not call Serve themselves: each kind (Kinds) has its
// SDK (sdk/transport, sdk/storage) whose Serve is a thin wrapper of
// ServeKind: it names the kind's gRPC services per API version, and
// ServeKind adds what the implementation's optional interfaces offer
// (Configurable, HealthChecker, Versioned, LoggerSetter, shared by every
// kind). A plugin's config block is a tagged Go struct (TypedConfig): its
// Schema is derived from the struct, and the plugin receives the decoded
// block as a value of it. Errors keep their identity across the boundary
// through each kind's ErrorTable.
//
// Besides the kind's services, every plugin serves the common PluginInfo
// service: the host asks it who the plugin is (GetInfo), what its config
// looks like (GetSchema), hands it the decoded config (Configure) and checks
// its health (Health). InfoClient is the host side of that service.
//
// Only handles travel through gRPC; bulk bytes go through shared memory or
// the plugin's own connections. Message limits are still raised
// deliberately on both sides to MaxMessageSize.
package plugin

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/proto/pluginv1"
)

// Handshake is go-plugin's handshake for every goray plugin. The magic
// cookie only stops a plugin binary from being run by hand by mistake; it is
// not a security measure.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "GORAY_PLUGIN",
	MagicCookieValue: "ddfe7b487b4e0295059e32c5ab80c5b8126477cd81a19f76",
}

// MaxMessageSize is the gRPC message limit, in bytes, that plugins and the
// host set on both sides. Bulk bytes never travel through gRPC; the limit
// is raised only so that large metadata (listings, batches of handles) is
// not cut off by gRPC's 4 MiB default.
const MaxMessageSize = 64 << 20

// StreamWindow and ConnWindow are the gRPC flow-control windows of both
// ends of the plugin protocol, per stream and per connection. Fixed
// windows turn off gRPC's bandwidth-delay estimator, which would add a
// window update, a PING and a PING ack to every message of a call; they
// are as large as the estimator lets windows grow, so large messages
// lose no throughput.
const (
	StreamWindow = 4 << 20
	ConnWindow   = 16 << 20
)

// PluginName is the name under which the goray plugin is registered in
// go-plugin's plugin sets (one per API version).
const PluginName = "goray"

// Environment variables the host sets for its plugins.
const (
	// EnvHostPID holds the pid of the host process. A plugin whose parent is
	// no longer that process exits.
	EnvHostPID = "GORAY_PLUGIN_HOST_PID"
	// EnvLogLevel holds the host's log level; the default plugin logger uses
	// it so that filtered entries do not cross the pipe.
	EnvLogLevel = "GORAY_PLUGIN_LOG_LEVEL"
)

// ServeConfig is what a kind SDK (sdk/transport, sdk/storage, ...) passes to
// Serve.
type ServeConfig struct {
	// Kind is the plugin's kind (KindTransport, ...).
	Kind string
	// Name is the plugin's own name, e.g. "tcp".
	Name string
	// Version is the plugin's release, free-form.
	Version string
	// APIVersions maps each supported API version of the kind's protocol to
	// a function that registers the kind's gRPC services. go-plugin
	// negotiates the highest version both sides support, so an older plugin
	// keeps working when the protocol grows.
	APIVersions map[int]func(*grpc.Server)
	// Schema describes the plugin's `config { ... }` block.
	Schema Schema
	// Configure receives the decoded config block as JSON-like values
	// (string, float64, bool, []any, map[string]any; durations as strings,
	// sizes as int64 bytes; a nested block as map[string]any, a repeated one
	// as []any of map[string]any). Attributes that are absent and have no
	// Default are missing from the map. Returning an error rejects the
	// config: the host reports it at the plugin's block. The host calls
	// Configure after every (re)start, before the plugin is used. Nil
	// accepts any config.
	Configure func(ctx context.Context, cfg map[string]any) error
	// Health reports whether the plugin is healthy (nil: always healthy).
	// The host restarts a plugin whose health checks keep failing.
	Health func(ctx context.Context) error
	// Logger is where the plugin logs. Nil: hclog JSON to stderr, which
	// go-plugin forwards into the host's log under the plugin's name.
	Logger hclog.Logger
}

// Validate checks cfg for mistakes a plugin author can make: no kind or
// name, no API versions, a nil registration function, an invalid schema.
func (cfg *ServeConfig) Validate() error {
	var errs []string
	if cfg.Kind == "" {
		errs = append(errs, "Kind is empty")
	}
	if cfg.Name == "" {
		errs = append(errs, "Name is empty")
	}
	if len(cfg.APIVersions) == 0 {
		errs = append(errs, "APIVersions is empty")
	}
	for v, reg := range cfg.APIVersions {
		if v < 1 {
			errs = append(errs, fmt.Sprintf("API version %d is not positive", v))
		}
		if reg == nil {
			errs = append(errs, fmt.Sprintf("API version %d has no registration function", v))
		}
	}
	if err := cfg.Schema.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) == 0 {
		return nil
	}
	slices.Sort(errs)
	return fmt.Errorf("plugin %s %q: invalid ServeConfig: %s", cfg.Kind, cfg.Name, strings.Join(errs, "; "))
}

// Serve runs the plugin; it never returns. Besides the kind's services it
// serves the common PluginInfo service. It exits the process when the host
// goes away (the parent process dies, even by kill -9), so a plugin never
// outlives its host. A binary run by hand (without the host's handshake)
// prints what it is and how to install and declare it (ByHandMessage) and
// exits with status 1, as does an invalid cfg.
func Serve(cfg ServeConfig) {
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	schema, err := cfg.Schema.normalized()
	if err != nil { // Validate has checked it
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg.Schema = schema
	if RunByHand() {
		fmt.Fprint(os.Stderr, ByHandMessage(cfg, os.Args[0]))
		os.Exit(1)
	}

	logger := cfg.Logger
	if logger == nil {
		// Created before go-plugin replaces os.Stderr, so entries go to the
		// real stderr, which the host reads.
		logger = defaultLogger()
	}
	servedLogger.Store(&logger)
	watchParent(logger)

	info := newInfoServer(cfg, logger)
	sets := make(map[int]goplugin.PluginSet, len(cfg.APIVersions))
	for v, reg := range cfg.APIVersions {
		sets[v] = goplugin.PluginSet{PluginName: &GRPCPlugin{Register: func(s *grpc.Server) {
			info.negotiated.Store(int32(v))
			pluginv1.RegisterPluginInfoServer(s, info)
			reg(s)
		}}}
	}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: sets,
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts,
				grpc.MaxRecvMsgSize(MaxMessageSize),
				grpc.MaxSendMsgSize(MaxMessageSize))
			opts = append(opts,
				grpc.InitialWindowSize(StreamWindow),
				grpc.InitialConnWindowSize(ConnWindow))
			return grpc.NewServer(opts...)
		},
		Logger: logger,
	})
	os.Exit(0)
}

// GRPCPlugin adapts goray's gRPC services to go-plugin's plugin interface.
// On the plugin side GRPCServer calls Register; on the host side GRPCClient
// returns the *grpc.ClientConn itself, which the kind SDKs wrap. It speaks
// gRPC only: net/rpc is refused.
type GRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	// Register registers the services of one API version (plugin side).
	Register func(*grpc.Server)
}

// GRPCServer registers the plugin's services on s.
func (p *GRPCPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	if p.Register == nil {
		return fmt.Errorf("goray plugin: no services to register")
	}
	p.Register(s)
	return nil
}

// GRPCClient returns c: goray's kind SDKs build their clients on the
// connection.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return c, nil
}

var _ goplugin.GRPCPlugin = (*GRPCPlugin)(nil)
