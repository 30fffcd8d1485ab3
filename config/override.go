package config

import "maps"

// Flags are command-line settings that override the file. Only non-zero
// fields win: a nil pointer, "" or 0 leaves the file's value alone. Pointers
// are used where zero is a meaningful value (--head=false, --num-gpus=0).
type Flags struct {
	// Head makes the node the head (true) or a worker node (false).
	Head *bool
	// Address is the GCS address (where it listens on the head, the head to
	// join elsewhere).
	Address    string
	Port       int
	RayletPort int
	NodeIP     string
	TempDir    string
	LogLevel   string
	NodeName   string
	CPUs       *float64
	GPUs       *float64
	// ObjectStoreMemory is the object store capacity in bytes.
	ObjectStoreMemory int64
	// Memory is the memory resource in bytes (resources.memory; --memory).
	Memory int64
	// Resources are custom resources, merged into the file's per name.
	Resources map[string]float64
	// Labels are merged into the file's labels per key.
	Labels map[string]string
	// AuthTokenFile is where the cluster token is kept (auth.token_file).
	AuthTokenFile string
	// DataDir is where the head keeps state that outlives its session
	// (data_dir; --data-dir).
	DataDir string
	// MetricsPort is metrics.port (--metrics-port; nil: the file's).
	MetricsPort *int
	// NoMetrics turns the metrics endpoint off (--no-metrics).
	NoMetrics bool
	// DashboardHost and DashboardPort are dashboard.host and .port
	// (--dashboard-host, --dashboard-port; ""/nil: the file's);
	// NoDashboard turns the dashboard off (--include-dashboard=false).
	DashboardHost string
	DashboardPort *int
	NoDashboard   bool
}

// Override applies f on top of n. A value set by a flag no longer points at
// the file in Validate's diagnostics. Maps are copied before they are
// changed, so copies of n made earlier are not affected.
func (n *Node) Override(f Flags) {
	n.ranges = maps.Clone(n.ranges)
	drop := func(key string) { delete(n.ranges, key) }

	if f.Head != nil {
		n.Head = *f.Head
	}
	if f.Address != "" {
		n.Address = f.Address
		drop(keyAddress)
	}
	if n.Head && n.Address == "" {
		n.Address = DefaultHeadAddress
	}
	if f.Port != 0 {
		n.Port = f.Port
		drop(keyPort)
	}
	if f.RayletPort != 0 {
		n.RayletPort = f.RayletPort
		drop(keyRayletPort)
	}
	if f.NodeIP != "" {
		n.NodeIP = f.NodeIP
		drop(keyNodeIP)
	}
	if f.AuthTokenFile != "" {
		n.Auth.TokenFile = f.AuthTokenFile
		drop(keyAuthTokenFile)
	}
	if f.TempDir != "" {
		n.TempDir = f.TempDir
		drop(keyTempDir)
	}
	if f.DataDir != "" {
		n.DataDir = f.DataDir
		drop(keyDataDir)
	}
	if f.MetricsPort != nil {
		n.Metrics.Port = *f.MetricsPort
		drop(keyMetricsPort)
	}
	if f.NoMetrics {
		n.Metrics.Disabled = true
		drop(keyMetricsEnabled)
	}
	if f.DashboardHost != "" {
		n.Dashboard.Host = f.DashboardHost
		drop(keyDashboardHost)
	}
	if f.DashboardPort != nil {
		n.Dashboard.Port = *f.DashboardPort
		drop(keyDashboardPort)
	}
	if f.NoDashboard {
		n.Dashboard.Disabled = true
		drop(keyDashboardEnabled)
	}
	if f.LogLevel != "" {
		n.LogLevel = f.LogLevel
		drop(keyLogLevel)
	}
	if f.NodeName != "" {
		n.NodeName = f.NodeName
		drop(keyNodeName)
	}
	if f.CPUs != nil {
		v := *f.CPUs
		n.Resources.CPU = &v
		drop(keyCPU)
	}
	if f.GPUs != nil {
		v := *f.GPUs
		n.Resources.GPU = &v
		drop(keyGPU)
	}
	if f.Memory != 0 {
		v := f.Memory
		n.Resources.Memory = &v
		drop(keyMemory)
	}
	if f.ObjectStoreMemory != 0 {
		n.ObjectStore.Memory = f.ObjectStoreMemory
		drop(keyStoreMemory)
	}
	if len(f.Resources) > 0 {
		n.Resources.Custom = maps.Clone(n.Resources.Custom)
		if n.Resources.Custom == nil {
			n.Resources.Custom = make(map[string]float64, len(f.Resources))
		}
		for k, v := range f.Resources {
			n.Resources.Custom[k] = v
			drop(entryKey(keyCustom, k))
		}
	}
	if len(f.Labels) > 0 {
		n.Labels = maps.Clone(n.Labels)
		if n.Labels == nil {
			n.Labels = make(map[string]string, len(f.Labels))
		}
		for k, v := range f.Labels {
			n.Labels[k] = v
			drop(entryKey(keyLabels, k))
		}
	}
}
