package provider

import (
	"context"
	"time"

	"github.com/goray-dev/goray/sdk/plugin"
)

// Provider starts and stops the instances (machines, containers, local
// processes) a cluster's nodes run on. Methods may be called concurrently.
// Every blocking call honours its context: when ctx ends the call returns
// promptly with an error matching ctx.Err().
//
// Every request names its cluster (ClusterName): one provider serves any
// number of clusters, and each method sees only the instances of the
// cluster it names.
type Provider interface {
	// NodeConfigSchema describes the provider's per-node-type settings (a
	// node type's `node_config { ... }` block), in the schema form of
	// package plugin (plugin.SchemaOf derives it from a tagged struct). The
	// host decodes each node type's block against it and passes the result
	// as JSON in LaunchRequest.NodeConfig. It must be cheap and constant.
	NodeConfigSchema(ctx context.Context, req *NodeConfigSchemaRequest) (*NodeConfigSchemaResponse, error)
	// Launch starts Count instances of NodeType, asynchronously: it returns
	// once the request is accepted and recorded, and from then on List
	// shows its instances (StatePending, later StateRunning; an autoscaler
	// restarted right after Launch returned must see them, or it launches
	// again) and failures show in PollErrors. It is
	// idempotent by RequestID: a repeated request (same id) launches
	// nothing more, even across a restart of the provider. A request that
	// breaks the rules (see LaunchRequest.Validate) or whose NodeConfig does
	// not fit NodeConfigSchema fails with ErrInvalidRequest and launches
	// nothing.
	Launch(ctx context.Context, req *LaunchRequest) (*LaunchResponse, error)
	// Terminate stops the instances, asynchronously: they may show as
	// StateTerminating in List for a while, then disappear. Unknown or
	// already terminated ids are no error; a repeated Terminate is no
	// error either.
	Terminate(ctx context.Context, req *TerminateRequest) (*TerminateResponse, error)
	// List returns every non-terminated instance of the cluster, including
	// those launched before a restart of the provider: enough for a
	// restarted autoscaler to rebuild its view from the provider alone.
	List(ctx context.Context, req *ListRequest) (*ListResponse, error)
	// PollErrors returns the cluster's launch and terminate errors since
	// the last call, each exactly once, oldest first.
	PollErrors(ctx context.Context, req *PollErrorsRequest) (*PollErrorsResponse, error)
}

// Labels a provider's instances carry, and that the runtime reads back.
const (
	// LabelInstanceID is the node label holding the Instance.ID of the
	// instance a node runs on. A provider adds it to NodeSpec.Labels for
	// each instance, so the autoscaler can tie GCS nodes to instances.
	LabelInstanceID = "goray.io/instance-id"
	// LabelNodeType is the node label holding the node type's name (the
	// autoscaler sets it in NodeSpec.Labels).
	LabelNodeType = "goray.io/node-type"
	// LabelClusterName is the node label holding the cluster's name (the
	// autoscaler sets it in NodeSpec.Labels).
	LabelClusterName = "goray.io/cluster"
)

// NodeConfigSchemaRequest asks for NodeConfigSchema (empty; it can grow).
type NodeConfigSchemaRequest struct{}

// NodeConfigSchemaResponse describes a node type's node_config block.
type NodeConfigSchemaResponse struct {
	// Schema is the block's schema; the zero Schema takes no settings.
	Schema plugin.Schema
}

// LaunchRequest asks for Count new instances of a node type.
type LaunchRequest struct {
	// RequestID is unique per launch: the idempotency key. A request with
	// the id of one already accepted launches nothing.
	RequestID string
	// ClusterName is the cluster the instances belong to.
	ClusterName string
	// NodeType is the name of the cluster config's node type.
	NodeType string
	// Count is how many instances to launch (at least 1).
	Count int
	// NodeConfig is a JSON object: the node type's node_config block,
	// decoded against NodeConfigSchema (DecodeNodeConfig reads it into the
	// provider's struct). Empty means no settings ({}).
	NodeConfig []byte
	// Node is what each instance must run.
	Node NodeSpec
}

// NodeSpec is how an instance joins the cluster: a provider runs
//
//	goray start --address HeadAddress --node-ip <the instance's IP> \
//	  --num-cpus ... --resources ... --labels ... --block
//
// (or its equivalent) after SetupCommands, with AuthToken in the
// environment as GORAY_AUTH_TOKEN, and adds the label
// LabelInstanceID=<Instance.ID> to Labels.
//
// AuthToken is sensitive: formatting a NodeSpec (fmt with any verb, slog)
// shows "<redacted>" in its place, JSON leaves it out, and the SDK's
// client and server replace it in error messages. Providers must never
// log it, put it in an error or on a command line, and store it only as
// goray stores its own (a file only its owner can read).
type NodeSpec struct {
	// HeadAddress is the GCS address, host:port.
	HeadAddress string
	// Resources are the node's resources: ResourceCPU, ResourceGPU,
	// ResourceMemory (bytes), ResourceObjectStoreMemory (bytes) and custom
	// resources by name.
	Resources map[string]float64
	// Labels are the node's labels; they include LabelClusterName and
	// LabelNodeType.
	Labels map[string]string
	// AuthToken is the cluster token (sensitive: never logged).
	AuthToken string `json:"-"`
	// SetupCommands run before goray starts, where the provider has a
	// shell.
	SetupCommands []string
	// GorayBinary is the path of goray on the instance ("" means the
	// provider's default: "goray" on PATH unless the provider is configured
	// otherwise).
	GorayBinary string
}

// Resource names a NodeSpec's Resources use besides custom ones.
const (
	// ResourceCPU is the number of CPUs (`goray start --num-cpus`).
	ResourceCPU = "CPU"
	// ResourceGPU is the number of GPUs (`goray start --num-gpus`).
	ResourceGPU = "GPU"
	// ResourceMemory is the memory tasks and actors may reserve, in bytes
	// (a node config's resources { memory = ... }).
	ResourceMemory = "memory"
	// ResourceObjectStoreMemory is the object store's capacity, in bytes
	// (`goray start --object-store-memory`).
	ResourceObjectStoreMemory = "object_store_memory"
)

// LaunchResponse answers Launch (empty; it can grow).
type LaunchResponse struct{}

// TerminateRequest asks to stop instances.
type TerminateRequest struct {
	// RequestID identifies the request, for errors and logs (optional).
	RequestID string
	// ClusterName is the cluster the instances belong to.
	ClusterName string
	// InstanceIDs are the instances to stop (Instance.ID).
	InstanceIDs []string
}

// TerminateResponse answers Terminate (empty; it can grow).
type TerminateResponse struct{}

// ListRequest asks for a cluster's instances.
type ListRequest struct {
	// ClusterName is the cluster whose instances are listed.
	ClusterName string
}

// ListResponse holds a cluster's non-terminated instances.
type ListResponse struct {
	// Instances are in no particular order.
	Instances []Instance
}

// InstanceState is the lifecycle state of an instance as the provider
// sees it.
type InstanceState string

// Instance states.
const (
	// StatePending: launched, the node has not started yet (the machine is
	// booting, setup commands run, goray starts).
	StatePending InstanceState = "pending"
	// StateRunning: the instance is up and its node started.
	StateRunning InstanceState = "running"
	// StateTerminating: Terminate was called; the instance is stopping.
	StateTerminating InstanceState = "terminating"
)

// Valid reports whether s is one of the instance states.
func (s InstanceState) Valid() bool {
	return s == StatePending || s == StateRunning || s == StateTerminating
}

// Instance is one non-terminated instance of a cluster.
type Instance struct {
	// ID is stable and unique within the provider.
	ID string
	// NodeType is the node type it was launched as.
	NodeType string
	// RequestID is the launch request that created it.
	RequestID string
	// State is where it is in its lifecycle.
	State InstanceState
	// Address is the instance's IP or host name ("" until known).
	Address string
	// LaunchedAt is when it was launched (zero when unknown).
	LaunchedAt time.Time
}

// PollErrorsRequest asks for a cluster's new launch and terminate errors.
type PollErrorsRequest struct {
	// ClusterName is the cluster whose errors are returned.
	ClusterName string
}

// PollErrorsResponse holds the errors since the last PollErrors.
type PollErrorsResponse struct {
	// Errors are oldest first.
	Errors []LaunchError
}

// Operations a LaunchError reports.
const (
	// ErrorOpLaunch is a LaunchError of a launch.
	ErrorOpLaunch = "launch"
	// ErrorOpTerminate is a LaunchError of a terminate.
	ErrorOpTerminate = "terminate"
)

// LaunchError is a launch or terminate that failed after its request was
// accepted: the autoscaler marks the instances failed and backs off. Its
// JSON form (the field tags) is what a provider keeps in its state file
// until PollErrors reports it.
type LaunchError struct {
	// Op is ErrorOpLaunch or ErrorOpTerminate.
	Op string `json:"op"`
	// RequestID is the failed request's id.
	RequestID string `json:"request_id"`
	// NodeType is the node type of the failed launch.
	NodeType string `json:"node_type"`
	// Count is how many instances failed (for a launch).
	Count int `json:"count"`
	// InstanceID names the instance when one instance failed.
	InstanceID string `json:"instance_id,omitempty"`
	// Message says what went wrong (never the cluster token).
	Message string `json:"message"`
	// At is when it happened.
	At time.Time `json:"at"`
}
