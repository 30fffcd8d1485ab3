// Package config loads goray node and cluster configuration from HCL v2 files.
//
// A node file describes one node (goray start --config; Load, Parse). A
// cluster file (goray up; LoadCluster, ParseCluster) is a node file for the
// head plus the cluster's settings: its name, provider block, node types
// and autoscaler settings (see Cluster). Every problem is reported as an
// hcl.Diagnostic with the file, line and column, and a "did you mean"
// suggestion where one fits. Command-line flags override values from the
// file (see Node.Override).
//
// The usual sequence is Load (syntax, names, types and formats), Override
// (flags), then Validate (ranges and cross-field rules); LoadWithFlags does
// all three. FormatDiagnostics renders the result with source snippets, and
// NewDiagnosticsError turns it into an error.
package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Node is the configuration of one node. The zero value is not useful; start
// from Default or Load.
type Node struct {
	// ClusterName (cluster_name) is the cluster's name and identity: a
	// head keeps its cluster's state under it in its GCS storage and
	// never resumes another cluster's (default "default"; a cluster
	// file's names its cluster).
	ClusterName string
	// NodeName is a human name for this node (default: the hostname).
	NodeName string

	// Head is set when this node runs the GCS.
	Head bool
	// Address is the GCS address host:port. On the head it is where the GCS
	// listens; on other nodes it is the head to join.
	Address string
	// Port overrides the port of Address on the head (0 keeps Address's).
	Port int
	// RayletPort is the raylet's TCP port for other nodes (0 picks one).
	RayletPort int
	// NodeIP is the address this node's raylet and workers listen on and
	// advertise to other nodes (default 127.0.0.1, which only works when
	// every node runs on one machine). A wildcard (0.0.0.0, ::) is refused:
	// it would expose every port of the node on every interface, and it is
	// no address other nodes can reach the node at.
	NodeIP string

	// TempDir is the root for session directories, sockets and logs: a
	// directory of this user's own (one owned by another user, or writable
	// by others, is refused when the node starts; it is made 0700). The
	// default is DefaultTempDir: goray under $TMPDIR, else /tmp/goray.
	TempDir string
	// LogLevel is an hclog level name: trace, debug, info, warn, error.
	LogLevel string
	// DataDir is where the head keeps state that outlives its session
	// directory (the GCS's bbolt file gcs.db). "" means "data" under
	// TempDir (see GCSDataDir). A relative path in the file is relative to
	// the config file.
	DataDir string

	Resources   Resources
	ObjectStore ObjectStore
	WorkerPool  WorkerPool
	HealthCheck HealthCheck
	Spilling    Spilling
	// GCS configures the cluster's GCS (the gcs block).
	GCS GCS
	// Metrics configures the node's Prometheus endpoint (the metrics
	// block).
	Metrics Metrics
	// Dashboard configures the head's dashboard and job API (the
	// dashboard block).
	Dashboard Dashboard
	// MemoryMonitor configures the raylet's memory monitor (the
	// memory_monitor block).
	MemoryMonitor MemoryMonitor
	// TensorPool configures the node's pool of tensor segments (the
	// tensor_pool block).
	TensorPool TensorPool
	// Logs bounds the node's log files (the logs block).
	Logs Logs

	// Labels are attached to the node and shown in status.
	Labels map[string]string

	// Auth configures the cluster token (the auth block).
	Auth Auth
	// TLS configures mutual TLS on connections between machines (the tls
	// block); nil leaves TLS off.
	TLS *TLS

	// PluginDir is where plugin binaries are found.
	PluginDir string
	// Plugins are the plugin blocks in file order.
	Plugins []Plugin
	// NodeTypes are the node_type blocks of a node file. A cluster file's
	// are in Cluster.NodeTypes (and this is nil in its Cluster.Head).
	NodeTypes []NodeType

	// Filename is the file the config came from ("" for defaults).
	Filename string

	// ranges maps a value's path (see the key* helpers in load.go) to the
	// source range it was decoded from, so Validate can point at it. Entries
	// are dropped when a flag overrides the value.
	ranges map[string]hcl.Range
	// files holds the parsed source, for FormatDiagnostics, with secrets
	// masked (see redactSource).
	files map[string]*hcl.File
	// fromEnv maps the key of a value ApplyEnv filled in to the variable
	// it came from, so that Validate can name it.
	fromEnv map[string]string
}

// Resources is the node's resource capacity. Nil pointers mean "detect".
type Resources struct {
	// CPU defaults to the number of logical CPUs.
	CPU *float64
	// GPU defaults to the number of GPUs NVML reports (0 without NVML).
	GPU *float64
	// Memory in bytes defaults to the machine's memory minus the object store.
	Memory *int64
	// Custom resources by name.
	Custom map[string]float64
}

// ObjectStore configures the node's shared-memory object store.
type ObjectStore struct {
	// Memory is the capacity in bytes; 0 means 30% of the machine's memory.
	Memory int64
	// SpillThreshold is the fraction of Memory above which objects spill
	// (used once spilling exists). Default 0.8.
	SpillThreshold float64
	// InlineLimit is the largest object, in bytes, that travels inline with
	// RPCs instead of entering the store. Default 100 KiB.
	InlineLimit int64
}

// WorkerPool configures the raylet's worker processes.
type WorkerPool struct {
	// Prestart is how many workers to start when a job registers
	// (default: min(2, CPUs)).
	Prestart *int
	// MaxIdle is how many idle workers per job to keep (default: CPUs).
	MaxIdle *int
	// IdleTimeout is how long a surplus idle worker lives (default 60s).
	IdleTimeout time.Duration
	// StartTimeout is how long a worker may take to register (default 30s).
	StartTimeout time.Duration
}

// HealthCheck configures node liveness. Nodes report to the GCS at least
// every 500ms (more often when Period is shorter); the GCS checks every
// Period and declares a node dead once it has been silent for
// FailureThreshold periods (default 3s × 5, as in Ray).
type HealthCheck struct {
	// Period between health checks (default 3s).
	Period time.Duration
	// FailureThreshold is how many missed periods mark a node dead
	// (default 5).
	FailureThreshold int
}

// Spilling configures how the object store spills primary copies to
// storage when it passes object_store.spill_threshold or a put does not
// fit, and restores them when they are read.
type Spilling struct {
	// Storage names a `plugin "storage" "<name>"` block to spill to; empty
	// means local disk (the fs backend in-process, under Directory).
	Storage string
	// Directory is where the default local-disk backend writes (default:
	// the session's spill directory).
	Directory string
	// MinFileSize: small objects are fused into files of at least this
	// size when there are enough (default 100 MiB).
	MinFileSize int64
	// MaxObjectsPerFile caps the objects fused into one file (default
	// 1000).
	MaxObjectsPerFile int
	// KeepFiles keeps the stored files when the node stops.
	KeepFiles bool
	// Wait is how long a put that does not fit waits for spilling before
	// it fails (default 60s).
	Wait time.Duration
	// Disabled turns spilling off: a put that does not fit fails at once.
	Disabled bool
}

// Plugin is one `plugin "<kind>" "<name>" { ... }` block.
type Plugin struct {
	Kind string
	// Name is a plain file name: the binary is <PluginDir>/goray-<kind>-<name>
	// or <PluginDir>/<name>, and a name cannot reach outside PluginDir.
	Name string
	// SHA256 optionally pins the binary's checksum (hex): the way to trust
	// a plugin binary, checked before every start. The lock file next to
	// the config (LockFileName) pins installed binaries the same way.
	SHA256 string
	// Command names the plugin's binary when it is not the default
	// (<PluginDir>/goray-<kind>-<name>, else <PluginDir>/<name>): a path
	// when it contains a slash (a relative one is relative to the config
	// file), else a file name in PluginDir. One binary may back several
	// blocks.
	Command string
	// Args are the binary's command-line arguments.
	Args []string
	// LogLevel is the level the plugin logs at (trace, debug, info, warn,
	// error, off); empty is the node's.
	LogLevel string
	// CommandRange is where command is set (zero when it is not), for
	// diagnostics about the binary.
	CommandRange hcl.Range
	// Config is the undecoded `config { ... }` block (nil when absent); the
	// plugin host decodes it against the schema the plugin reports.
	Config hcl.Body
	// DeclRange is the block's header, for diagnostics.
	DeclRange hcl.Range
}

// NodeType is one `node_type "<name>" { ... }` block: a kind of node the
// autoscaler can launch through the cluster's provider (see Cluster).
type NodeType struct {
	// Name is the block's label, unique in the file.
	Name string
	// Resources are what one node of this type offers: CPU, GPU, memory
	// (bytes; the file may give a size such as "4GiB") and custom
	// resources by name.
	Resources map[string]float64
	// Labels are attached to every node of this type.
	Labels map[string]string
	// MinWorkers is how many nodes of this type the autoscaler keeps
	// running, MaxWorkers how many it may run. In a cluster file a
	// max_workers left out is the file's global max_workers, and both are
	// 0 for the head's node type (the head is not a worker).
	MinWorkers int
	MaxWorkers int
	// NodeConfig is the undecoded `node_config { ... }` block (nil when
	// absent): the provider's own settings for this type, decoded later
	// against the schema the provider plugin reports (hclspec.Decode).
	NodeConfig hcl.Body
	// NodeConfigRange is the node_config block's header, or the node_type
	// block's when there is no node_config block: where a missing
	// required setting is reported.
	NodeConfigRange hcl.Range
	// DeclRange is the block's header, for diagnostics.
	DeclRange hcl.Range
}
