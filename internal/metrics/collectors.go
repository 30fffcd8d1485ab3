package metrics

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// RayletStats is what a node's raylet reports to RayletCollector at each
// scrape (raylet.(*Raylet).MetricsStats).
type RayletStats struct {
	// ResourceCapacity and ResourceUsed are by resource name, in the
	// resource's own unit (bytes for memory and object_store_memory).
	ResourceCapacity map[string]float64
	ResourceUsed     map[string]float64
	// StoreBytes and StoreObjects are in the shared-memory store;
	// StoreCapacity is its size.
	StoreBytes, StoreObjects, StoreCapacity int64
	// SpilledBytes and SpilledObjects are held only in spill storage now.
	SpilledBytes, SpilledObjects int64
	// SpilledBytesTotal and RestoredBytesTotal count since the node
	// started.
	SpilledBytesTotal, RestoredBytesTotal int64
	// PulledBytes and PushedBytes count object bytes received from and
	// served to other nodes since the node started.
	PulledBytes, PushedBytes int64
	// PendingLeases counts queued lease requests, InfeasibleLeases those of
	// them no node can satisfy, GrantedLeases the leases held.
	PendingLeases, InfeasibleLeases, GrantedLeases int64
	// Workers counts worker processes by state (WorkerStates).
	Workers map[string]int64
	// MemoryKills counts the workers the memory monitor killed since the
	// node started.
	MemoryKills int64
	// WorkerDeathsDropped counts deaths of local drivers and workers some
	// other node was never sent, because the raylet's bounded log of
	// deaths not sent yet overflowed, since the node started.
	WorkerDeathsDropped int64
}

// WorkerStates are the worker states goray_workers always reports (0
// when no worker is in one), as `goray list workers` names them.
var WorkerStates = []string{"STARTING", "IDLE", "LEASED", "ACTOR"}

// ClusterStats is what the GCS reports to ClusterCollector at each scrape
// (gcs.(*Server).MetricsStats): counts by state, states named as `goray
// list` names them.
type ClusterStats struct {
	Tasks, Actors, Nodes, Jobs map[string]int64
	// StorageSetAside counts the records the GCS's storage keeps in its
	// quarantine table (they failed their checks when read back).
	StorageSetAside int64
}

// PluginStats is one plugin of the node's plugin host.
type PluginStats struct {
	Kind, Name string
	Restarts   int
	Up         bool
}

// funcCollector is a collector whose metrics are made by collect at each
// scrape.
type funcCollector struct {
	descs   []*prometheus.Desc
	collect func(ch chan<- prometheus.Metric)
}

func (c funcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c funcCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

// byLabel sends one gauge per key of m, in key order.
func byLabel[V int64 | float64](ch chan<- prometheus.Metric, d *prometheus.Desc, m map[string]V) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		gauge(ch, d, float64(m[k]), k)
	}
}

// RayletCollector exports a node's raylet metrics, calling stats at each
// scrape.
func RayletCollector(stats func() RayletStats) prometheus.Collector {
	return funcCollector{
		descs: []*prometheus.Desc{descResourceCapacity, descResourceUsed, descStoreBytes, descStoreObjects, descStoreCapacity,
			descSpilledBytes, descRestoredBytes, descTransferBytes, descPendingLeases, descInfeasible, descGrantedLeases, descWorkers, descMemoryKills, descDeathsDropped},
		collect: func(ch chan<- prometheus.Metric) {
			s := stats()
			byLabel(ch, descResourceCapacity, s.ResourceCapacity)
			byLabel(ch, descResourceUsed, s.ResourceUsed)
			gauge(ch, descStoreBytes, float64(s.StoreBytes), LocationInMemory)
			gauge(ch, descStoreBytes, float64(s.SpilledBytes), LocationSpilled)
			gauge(ch, descStoreObjects, float64(s.StoreObjects), LocationInMemory)
			gauge(ch, descStoreObjects, float64(s.SpilledObjects), LocationSpilled)
			gauge(ch, descStoreCapacity, float64(s.StoreCapacity))
			counter(ch, descSpilledBytes, float64(s.SpilledBytesTotal))
			counter(ch, descRestoredBytes, float64(s.RestoredBytesTotal))
			counter(ch, descTransferBytes, float64(s.PulledBytes), DirectionPulled)
			counter(ch, descTransferBytes, float64(s.PushedBytes), DirectionPushed)
			gauge(ch, descPendingLeases, float64(s.PendingLeases))
			gauge(ch, descInfeasible, float64(s.InfeasibleLeases))
			gauge(ch, descGrantedLeases, float64(s.GrantedLeases))
			counter(ch, descMemoryKills, float64(s.MemoryKills))
			counter(ch, descDeathsDropped, float64(s.WorkerDeathsDropped))
			workers := maps.Clone(s.Workers)
			if workers == nil {
				workers = map[string]int64{}
			}
			for _, st := range WorkerStates {
				workers[st] += 0
			}
			byLabel(ch, descWorkers, workers)
		},
	}
}

// ClusterCollector exports the cluster's tables, calling stats at each
// scrape; the head's GCS registers it.
func ClusterCollector(stats func() ClusterStats) prometheus.Collector {
	return funcCollector{
		descs: []*prometheus.Desc{descTasks, descActors, descNodes, descJobs, descStorageSetAside},
		collect: func(ch chan<- prometheus.Metric) {
			s := stats()
			byLabel(ch, descTasks, s.Tasks)
			byLabel(ch, descActors, s.Actors)
			byLabel(ch, descNodes, s.Nodes)
			byLabel(ch, descJobs, s.Jobs)
			gauge(ch, descStorageSetAside, float64(s.StorageSetAside))
		},
	}
}

// PluginCollector exports the node's plugins, calling plugins at each
// scrape.
func PluginCollector(plugins func() []PluginStats) prometheus.Collector {
	return funcCollector{
		descs: []*prometheus.Desc{descPluginRestarts, descPluginUp},
		collect: func(ch chan<- prometheus.Metric) {
			for _, p := range plugins() {
				counter(ch, descPluginRestarts, float64(p.Restarts), p.Kind, p.Name)
				up := 0.0
				if p.Up {
					up = 1
				}
				gauge(ch, descPluginUp, up, p.Kind, p.Name)
			}
		},
	}
}
