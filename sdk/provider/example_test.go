package provider_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/provider"
)

// Config is the example provider's config block (`provider "mycloud" {
// config { ... } }`).
type Config struct {
	Region string `hcl:"region,required" doc:"Region instances are launched in."`
}

// NodeConfig is a node type's node_config block.
type NodeConfig struct {
	MachineType string `hcl:"machine_type,required" doc:"Machine type of the instances."`
	Spot        bool   `hcl:"spot" default:"false" doc:"Use spot instances."`
}

// Cloud is the skeleton of a provider. A real one records request ids
// durably (cloud tags, a state file) and launches in the background.
type Cloud struct {
	mu       sync.Mutex
	region   string
	requests map[string]bool
}

// Name implements provider.Named.
func (c *Cloud) Name() string { return "mycloud" }

// ConfigSpec implements plugin.Configurable.
func (c *Cloud) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(c.Configure) }

// Configure receives the decoded config block.
func (c *Cloud) Configure(_ context.Context, cfg Config) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.region = cfg.Region
	return nil
}

// NodeConfigSchema returns the schema of NodeConfig.
func (c *Cloud) NodeConfigSchema(ctx context.Context, _ *provider.NodeConfigSchemaRequest) (*provider.NodeConfigSchemaResponse, error) {
	return provider.NodeConfigSchemaOf[NodeConfig](ctx)
}

// Launch records the request and starts the machines.
func (c *Cloud) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	nc, err := provider.DecodeNodeConfig[NodeConfig](req.NodeConfig)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.requests[req.RequestID] {
		return &provider.LaunchResponse{}, nil // already accepted: launch nothing more
	}
	if c.requests == nil {
		c.requests = map[string]bool{}
	}
	c.requests[req.RequestID] = true
	// Start req.Count machines of type nc.MachineType in the background,
	// each running `goray start --address req.Node.HeadAddress ...` with
	// GORAY_AUTH_TOKEN in its environment. Never log req.Node.AuthToken
	// (fmt and slog show a NodeSpec with it redacted).
	fmt.Printf("launching %d %s in %s for %v\n", req.Count, nc.MachineType, c.region, req.Node)
	return &provider.LaunchResponse{}, nil
}

// Terminate stops machines (a stub here).
func (c *Cloud) Terminate(ctx context.Context, req *provider.TerminateRequest) (*provider.TerminateResponse, error) {
	return &provider.TerminateResponse{}, req.Validate()
}

// List lists the cluster's machines (a stub here).
func (c *Cloud) List(ctx context.Context, req *provider.ListRequest) (*provider.ListResponse, error) {
	return &provider.ListResponse{}, req.Validate()
}

// PollErrors returns the failures since the last call (a stub here).
func (c *Cloud) PollErrors(ctx context.Context, req *provider.PollErrorsRequest) (*provider.PollErrorsResponse, error) {
	return &provider.PollErrorsResponse{}, req.Validate()
}

// A provider plugin's main function is provider.Serve(impl); here the
// provider is called directly.
func Example() {
	c := &Cloud{}
	ctx := context.Background()
	_ = c.ConfigSpec().Configure(ctx, map[string]any{"region": "eu-west-1"})
	req := &provider.LaunchRequest{
		RequestID: "r1", ClusterName: "demo", NodeType: "cpu", Count: 2,
		NodeConfig: []byte(`{"machine_type": "m5.large"}`),
		Node:       provider.NodeSpec{HeadAddress: "10.0.0.1:6379", AuthToken: "0123456789abcdef"},
	}
	_, _ = c.Launch(ctx, req)
	_, _ = c.Launch(ctx, req) // the same request id: nothing more
	// In main: provider.Serve(&Cloud{})

	// Output:
	// launching 2 m5.large in eu-west-1 for {HeadAddress:10.0.0.1:6379 Resources:map[] Labels:map[] AuthToken:<redacted> SetupCommands:[] GorayBinary:}
}
