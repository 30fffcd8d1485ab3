// Package metrics is goray's Prometheus instrumentation: the one place
// that lists every metric a goray process exports (this file), the
// collectors that read the runtime's components when Prometheus scrapes
// (collectors.go), the gRPC server metrics (registry.go), the node's
// /metrics endpoint behind the cluster's token check (server.go) and the
// head's file-based service discovery file (discovery.go).
//
// Collectors read state the components already keep, through small
// snapshot functions, when a scrape asks; nothing on a hot path does more
// than one atomic add. Metrics carry no node label: a node's /metrics is
// one Prometheus target, and the head's discovery file gives every target
// the node_id, node_name and head labels (Prometheus's target labels),
// which is how Prometheus's own documentation says to identify where a
// series comes from. docs/metrics.md lists every metric; a test checks
// that the list, a real node's output and the Grafana dashboard agree.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Namespace starts every goray metric name.
const Namespace = "goray"

// Label names.
const (
	LabelState     = "state"
	LabelResource  = "resource"
	LabelLocation  = "location"
	LabelDirection = "direction"
	LabelKind      = "kind"
	LabelName      = "name"
)

// Values of the location label of the object store metrics.
const (
	LocationInMemory = "in_memory"
	LocationSpilled  = "spilled"
)

// Values of the direction label of goray_object_transfer_bytes_total.
const (
	DirectionPulled = "pulled"
	DirectionPushed = "pushed"
)

// defined lists the full name of every metric desc defines, in order.
var defined []string

// define records name (without the namespace) in defined and returns the
// full name.
func define(name string) string {
	full := Namespace + "_" + name
	defined = append(defined, full)
	return full
}

// desc defines a goray metric: name (without the namespace) and help.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(define(name), help, labels, nil)
}

// The cluster's metrics, exported by the head (read from the GCS).
var (
	descTasks  = desc("tasks", "Tasks of the cluster by state, from the task events workers report to the GCS.", LabelState)
	descActors = desc("actors", "Actors of the cluster by state (the GCS's actor table).", LabelState)
	descNodes  = desc("nodes", "Nodes of the cluster by state (the GCS's node table).", LabelState)
	descJobs   = desc("jobs", "Jobs of the cluster by state (the GCS's job table).", LabelState)
	// descStorageSetAside: records of the GCS's storage that failed their
	// checks when a GCS read the cluster back (gcs/restore.go).
	descStorageSetAside = desc("gcs_storage_records_set_aside", "Records of the GCS's storage set aside in its quarantine table because they failed their checks when the GCS read the cluster back (see docs/security.md).")
)

// Every node's metrics (read from its raylet).
var (
	descResourceCapacity = desc("node_resource_capacity", "What the node offers of each resource (CPU and GPU in units, memory and object_store_memory in bytes).", LabelResource)
	descResourceUsed     = desc("node_resource_used", "What leases and placement group bundles hold of each of the node's resources, in the same units as goray_node_resource_capacity.", LabelResource)
	descStoreBytes       = desc("object_store_bytes", "Bytes of objects of the node by location: in_memory (the shared-memory store, all copies) or spilled (primary copies held only in spill storage).", LabelLocation)
	descStoreObjects     = desc("object_store_objects", "Objects of the node by location (in_memory, spilled).", LabelLocation)
	descStoreCapacity    = desc("object_store_capacity_bytes", "Capacity of the node's shared-memory object store.")
	descSpilledBytes     = desc("object_spilled_bytes_total", "Bytes of objects the node spilled to storage.")
	descRestoredBytes    = desc("object_restored_bytes_total", "Bytes of objects the node restored from storage.")
	descTransferBytes    = desc("object_transfer_bytes_total", "Object bytes moved between this node and others: pulled (received from another node) or pushed (served to another node).", LabelDirection)
	descPendingLeases    = desc("scheduler_pending_leases", "Worker lease requests queued at the node's raylet (including infeasible ones).")
	descInfeasible       = desc("scheduler_infeasible_leases", "Queued lease requests no node of the cluster can ever satisfy as it is.")
	descGrantedLeases    = desc("scheduler_granted_leases", "Worker leases the node's raylet has granted and not taken back.")
	descWorkers          = desc("workers", "Worker processes of the node by state (starting, idle, leased, actor).", LabelState)
	descMemoryKills      = desc("memory_monitor_kills_total", "Workers the node's memory monitor killed because the node's memory use was above memory_monitor.usage_threshold.")
	descDeathsDropped    = desc("worker_deaths_dropped_total", "Deaths of the node's drivers and workers another node was never told of, because the node's log of deaths not sent yet (8,192) overflowed first: that node keeps the dead process's objects and may keep it as a borrower.")
	descPluginRestarts   = desc("plugin_restarts_total", "Times the node's plugin host restarted a plugin since the node started.", LabelKind, LabelName)
	descPluginUp         = desc("plugin_up", "1 when the plugin is running, else 0.", LabelKind, LabelName)
	// goray_gcs_up is made by the head's gatherer of the GCS process's
	// metrics (gatherer.go).
	_ = define(nameGCSUp)
)

// Histogram names and buckets.
const (
	nameSpillDuration   = "object_spill_duration_seconds"
	nameRestoreDuration = "object_restore_duration_seconds"
	nameGRPCHandling    = "grpc_server_handling_seconds"
	nameGCSUp           = "gcs_up"
	helpGCSUp           = "On the head: 1 when the node read the GCS process's metrics in this scrape, else 0."
)

// durationBuckets are the buckets of the spill and restore histograms:
// 1 ms to about 65 s.
var durationBuckets = prometheus.ExponentialBuckets(0.001, 4, 9)

// rpcBuckets are the buckets of gRPC handling times: 100 µs to about 6.5 s
// (most goray calls take well under a millisecond; Prometheus's default
// buckets start at 5 ms).
var rpcBuckets = prometheus.ExponentialBuckets(0.0001, 4, 9)

// Names returns the name of every metric goray itself defines (without
// the Go runtime's go_* and the process_* ones), for tests and docs.
func Names() []string {
	out := []string{
		Namespace + "_" + nameSpillDuration, Namespace + "_" + nameRestoreDuration,
		Namespace + "_" + nameGRPCHandling,
		Namespace + "_grpc_server_started_total", Namespace + "_grpc_server_handled_total",
		Namespace + "_grpc_server_msg_received_total", Namespace + "_grpc_server_msg_sent_total",
	}
	return append(out, defined...)
}
