package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/hcl/v2"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/autoscaler"
	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/plugin/hclspec"
	"github.com/goray-dev/goray/sdk/provider"
)

// EnvAutoscalerInterval overrides how often the head's autoscaler
// reconciles (a Go duration; default autoscaler.DefaultInterval), as Ray's
// AUTOSCALER_UPDATE_INTERVAL_S does. Tests make it short.
const EnvAutoscalerInterval = "GORAY_AUTOSCALER_INTERVAL"

// ProviderBlock is the cluster file's provider block as a plugin block of
// the head: the head's plugin host runs (and restarts) the provider plugin
// like any other.
func ProviderBlock(c *config.Cluster) config.Plugin {
	return config.Plugin{Kind: plugin.KindProvider, Name: c.Provider.Name, SHA256: c.Provider.SHA256,
		Config: c.Provider.Config, DeclRange: c.Provider.DeclRange}
}

// hostProvider is the provider plugin as the autoscaler uses it: every call
// takes the plugin's live connection from the plugin host, so a provider
// that crashed and was restarted serves the next call. While it is down a
// call fails with an error matching host.ErrPluginUnavailable.
type hostProvider struct {
	m    *host.Manager
	name string

	mu     sync.Mutex
	conn   *grpc.ClientConn // of the plugin process client talks to
	cached provider.Provider
}

// client returns the provider client of the plugin's live connection: one
// per plugin process, so the client remembers the tokens it sent (and
// redacts them from what that process answers).
func (p *hostProvider) client() (provider.Provider, error) {
	conn, v, err := p.m.Client(plugin.KindProvider, p.name)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != conn {
		p.conn, p.cached = conn, provider.NewClient(conn, v)
	}
	return p.cached, nil
}

// NodeConfigSchema asks the plugin.
func (p *hostProvider) NodeConfigSchema(ctx context.Context, req *provider.NodeConfigSchemaRequest) (*provider.NodeConfigSchemaResponse, error) {
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	return c.NodeConfigSchema(ctx, req)
}

// Launch asks the plugin.
func (p *hostProvider) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	return c.Launch(ctx, req)
}

// Terminate asks the plugin.
func (p *hostProvider) Terminate(ctx context.Context, req *provider.TerminateRequest) (*provider.TerminateResponse, error) {
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	return c.Terminate(ctx, req)
}

// List asks the plugin.
func (p *hostProvider) List(ctx context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	return c.List(ctx, req)
}

// PollErrors asks the plugin.
func (p *hostProvider) PollErrors(ctx context.Context, req *provider.PollErrorsRequest) (*provider.PollErrorsResponse, error) {
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	return c.PollErrors(ctx, req)
}

// ProviderOf returns the provider plugin a plugin host runs under the
// name, for callers without a node (goray down).
func ProviderOf(m *host.Manager, name string) provider.Provider {
	return &hostProvider{m: m, name: name}
}

// DecodeNodeConfigs decodes every node type's node_config block against
// the schema the provider reports and returns each as the JSON object
// provider.LaunchRequest.NodeConfig carries, by node type. Problems are
// diagnostics at the block's source range.
func DecodeNodeConfigs(ctx context.Context, p provider.Provider, c *config.Cluster) (map[string][]byte, hcl.Diagnostics) {
	rep, err := p.NodeConfigSchema(ctx, &provider.NodeConfigSchemaRequest{})
	if err != nil {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Provider failed",
			Detail:  fmt.Sprintf("The provider %q did not report its node_config schema: %v.", c.Provider.Name, err),
			Subject: c.Provider.DeclRange.Ptr()}}
	}
	out := map[string][]byte{}
	var diags hcl.Diagnostics
	for _, nt := range c.NodeTypes {
		if nt.Name == c.HeadNodeType {
			continue
		}
		v, d := hclspec.Decode(nt.NodeConfig, rep.Schema, nt.NodeConfigRange)
		diags = append(diags, d...)
		if d.HasErrors() {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid node_config",
				Detail: fmt.Sprintf("node_config of node type %q: %v.", nt.Name, err), Subject: nt.NodeConfigRange.Ptr()})
			continue
		}
		out[nt.Name] = b
	}
	return out, diags
}

// startAutoscaler runs the cluster's autoscaler on this head, as its own
// goroutine until the node stops.
func (n *Node) startAutoscaler(ctx context.Context) error {
	c := n.opts.Cluster
	p := &hostProvider{m: n.plugins, name: c.Provider.Name}
	cfgs, diags := DecodeNodeConfigs(ctx, p, c)
	if diags.HasErrors() {
		return config.NewDiagnosticsError(diags, c.Files())
	}
	interval := autoscaler.DefaultInterval
	if s := os.Getenv(EnvAutoscalerInterval); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s=%q: want a positive duration such as 2s", EnvAutoscalerInterval, s)
		}
		interval = d
	}
	a, err := autoscaler.New(autoscaler.Config{
		Cluster: c, Provider: p, NodeConfigs: cfgs, GCS: pb.NewGcsClient(n.gcsCC),
		HeadAddress: n.info.GCSAddress, AuthToken: n.auth.Token(), Interval: interval,
		Logger: n.log.Named("autoscaler"),
	})
	if err != nil {
		return err
	}
	n.autoscaler = a
	actx, cancel := context.WithCancel(n.ctx)
	n.asCancel = cancel
	n.asWG.Add(1)
	go func() {
		defer n.asWG.Done()
		_ = a.Run(actx)
	}()
	n.log.Info("autoscaler started", "cluster", c.Name, "provider", c.Provider.Name, "interval", interval)
	return nil
}
