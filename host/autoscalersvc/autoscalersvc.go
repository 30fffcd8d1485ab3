// Package autoscalersvc runs the cluster's autoscaler on a head started by
// `goray up`, as a node.HeadService the command passes to the node, with
// the provider plugin the head's plugin host runs. A program embedding a
// node does not link it.
package autoscalersvc

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
	"github.com/goray-dev/goray/host/node"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/plugin/hclspec"
	"github.com/goray-dev/goray/sdk/provider"
)

// EnvAutoscalerInterval overrides how often the head's autoscaler
// reconciles (a Go duration; default autoscaler.DefaultInterval), as Ray's
// AUTOSCALER_UPDATE_INTERVAL_S does. Tests make it short.
const EnvAutoscalerInterval = "GORAY_AUTOSCALER_INTERVAL"

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

// Service is the head's autoscaler: it runs when the head was started
// with a cluster file (node.Options.Cluster), as its own goroutine until
// the node stops.
type Service struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	h      *node.Head
}

// New returns the service; it does nothing until the node calls it.
func New() *Service { return &Service{} }

// Listen notes the head; the autoscaler starts once the node is
// registered.
func (s *Service) Listen(_ context.Context, h *node.Head) error {
	if h.Cluster() != nil {
		s.h = h
	}
	return nil
}

// Start decodes the node types' node_config blocks against the provider's
// schema and starts the autoscaler.
func (s *Service) Start(ctx context.Context) error {
	h := s.h
	if h == nil {
		return nil
	}
	c := h.Cluster()
	p := &hostProvider{m: h.Plugins(), name: c.Provider.Name}
	cfgs, diags := DecodeNodeConfigs(ctx, p, c)
	if diags.HasErrors() {
		return config.NewDiagnosticsError(diags, c.Files())
	}
	interval := autoscaler.DefaultInterval
	if v := os.Getenv(EnvAutoscalerInterval); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s=%q: want a positive duration such as 2s", EnvAutoscalerInterval, v)
		}
		interval = d
	}
	log := h.Logger()
	a, err := autoscaler.New(autoscaler.Config{
		Cluster: c, Provider: p, NodeConfigs: cfgs, GCS: pb.NewGcsClient(h.GCS()),
		HeadAddress: h.GCSAddress(), AuthToken: h.Auth().Token(), Interval: interval,
		Logger: log.Named("autoscaler"),
	})
	if err != nil {
		return err
	}
	actx, cancel := context.WithCancel(h.Context())
	s.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = a.Run(actx)
	}()
	log.Info("autoscaler started", "cluster", c.Name, "provider", c.Provider.Name, "interval", interval)
	return nil
}

// Stop stops the autoscaler first thing, so that a stopping head
// launches, drains and terminates nothing.
func (s *Service) Stop(context.Context) {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
		s.cancel = nil
	}
}
