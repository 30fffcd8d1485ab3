// Package provider is the SDK for goray provider plugins: out-of-process
// drivers of the machines (instances) a cluster's nodes run on — cloud VMs,
// containers, or, with plugins/local, processes on this machine. The
// autoscaler on the head asks its provider for instances of a node type
// when demand outgrows the cluster, and to terminate them when they idle;
// `goray down` finds a cluster's instances through the provider alone.
//
// A provider implements Provider and calls Serve from its main function:
//
//	func main() { provider.Serve(mycloud.New()) }
//
// built as goray-provider-<name> and named by a cluster file's
// `provider "<name>" { config { ... } }` block.
//
// What every plugin kind shares lives in package plugin: the optional
// interfaces a plugin may implement (plugin.Configurable for its config
// block, declared as a tagged Go struct with plugin.TypedConfig;
// plugin.HealthChecker; plugin.Versioned; plugin.LoggerSetter), the serve
// path (Serve is a thin wrapper of plugin.ServeKind) and the error table
// that keeps errors' identity across the boundary. A provider has a second
// schema: its per-node-type settings (a node type's `node_config { ... }`
// block), which it returns from NodeConfigSchema, also derived from a
// tagged struct, and reads back from each launch with DecodeNodeConfig.
//
// The runtime (the autoscaler) talks to the plugin over gRPC through
// NewClient.
//
// # Semantics
//
//   - Launch is asynchronous and idempotent by request id. It returns once
//     the request is accepted (recorded durably: a restarted provider must
//     still know it); the instances then show in List as StatePending, later
//     StateRunning. A request id already accepted launches nothing more,
//     even after a restart of the provider, whatever else the request says.
//   - Each instance runs a goray node that joins the cluster: NodeSpec says
//     how (the head's address, resources, labels, the cluster token) and the
//     provider adds LabelInstanceID=<Instance.ID> to the node's labels.
//   - Terminate is asynchronous and idempotent: unknown and already
//     terminated ids are no error. Terminated instances leave List (they
//     may show as StateTerminating for a while).
//   - List returns every non-terminated instance of one cluster, with its
//     node type and launch request id: enough for a restarted autoscaler to
//     rebuild its view from the provider alone.
//   - Failures after a request was accepted (the cloud refused, the node
//     never started) are reported by PollErrors, each exactly once.
//   - Every request names its cluster, and a method sees only that
//     cluster's instances and errors.
//
// Every request and response is a struct, so both can grow without
// breaking plugins. Errors are typed: ErrInvalidRequest, ErrUnavailable,
// ErrQuotaExceeded and ErrNotFound keep their identity across the plugin
// boundary, and *ProviderError names the operation, cluster and request.
// The SDK's server checks each request (LaunchRequest.Validate, ...)
// before the provider sees it; a provider that names files or ids after
// the cluster also calls CheckClusterName. A provider that keeps its state
// on its own machine does it with package statedir.
//
// NodeSpec.AuthToken is the cluster token and is sensitive: a provider
// hands it to the node through its environment (GORAY_AUTH_TOKEN) or an
// equivalent secret channel, never on a command line, in a log, a state
// file or an error. NodeSpec hides it when formatted, and the SDK's client
// and server redact it from error messages and LaunchErrors (RedactToken
// does the same for a provider's own text).
//
// # Writing a provider
//
//	type Config struct {
//		Region string `hcl:"region,required" doc:"Region instances are launched in."`
//	}
//
//	type NodeConfig struct {
//		MachineType string `hcl:"machine_type,required" doc:"Machine type of the instances."`
//		Spot        bool   `hcl:"spot" default:"false" doc:"Use spot instances."`
//	}
//
//	type Cloud struct{ ... }
//
//	func (c *Cloud) Name() string                    { return "mycloud" }
//	func (c *Cloud) ConfigSpec() plugin.ConfigSpec   { return plugin.TypedConfig(c.Configure) }
//	func (c *Cloud) Configure(ctx context.Context, cfg Config) error { ... }
//
//	func (c *Cloud) NodeConfigSchema(ctx context.Context, _ *provider.NodeConfigSchemaRequest) (*provider.NodeConfigSchemaResponse, error) {
//		return provider.NodeConfigSchemaOf[NodeConfig](ctx)
//	}
//
//	func (c *Cloud) Launch(ctx context.Context, req *provider.LaunchRequest) (*provider.LaunchResponse, error) {
//		if err := req.Validate(); err != nil {
//			return nil, err
//		}
//		nc, err := provider.DecodeNodeConfig[NodeConfig](req.NodeConfig)
//		if err != nil {
//			return nil, err
//		}
//		// Record req.RequestID durably (a cloud tag, a state file) and
//		// return if it was already there; then start req.Count instances
//		// in the background, tagged with the cluster, node type and request
//		// id, each running `goray start --address req.Node.HeadAddress ...`
//		// with GORAY_AUTH_TOKEN=req.Node.AuthToken and the label
//		// provider.LabelInstanceID=<its id>. Failures go to PollErrors.
//		return &provider.LaunchResponse{}, nil
//	}
//
// Package providertest holds the conformance suite every provider should
// pass from its own tests: in-process, over gRPC (providertest.OverGRPC)
// and through its plugin binary (providertest.PluginClient). Package
// plugins/local is a complete provider whose instances are goray nodes on
// this machine.
package provider
