package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// DefaultHeadAddress is the head's address when neither the head block nor
// a flag names one: the GCS then listens on the node's node_ip (127.0.0.1
// when none is set) with this port, or --port (host/node's gcsAddress).
const DefaultHeadAddress = "127.0.0.1:6380"

// DefaultTempDir is the temp_dir of a node whose file and flags name none:
// "goray" under $TMPDIR, else under /tmp (as Ray's /tmp/ray follows
// $TMPDIR).
func DefaultTempDir() string { return filepath.Join(os.TempDir(), "goray") }

// Default returns the built-in defaults, as if an empty file were loaded.
func Default() *Node {
	return &Node{
		TempDir:  DefaultTempDir(),
		LogLevel: "info",
		ObjectStore: ObjectStore{
			SpillThreshold: 0.8,
			InlineLimit:    100 * 1024,
		},
		WorkerPool: WorkerPool{
			IdleTimeout:  60 * time.Second,
			StartTimeout: 30 * time.Second,
		},
		HealthCheck: HealthCheck{
			Period:           3 * time.Second,
			FailureThreshold: 5,
		},
		GCS: GCS{ReconnectTimeout: DefaultGCSReconnectTimeout},
		MemoryMonitor: MemoryMonitor{
			UsageThreshold:  DefaultMemoryUsageThreshold,
			RefreshInterval: DefaultMemoryRefreshInterval,
		},
		TensorPool: TensorPool{MaxMemory: DefaultTensorPoolMaxMemory, IdleTimeout: DefaultTensorPoolIdleTimeout},
	}
}

// Load reads and parses the file at path: defaults first, the file's values
// on top. A path ending in ".json" is read as HCL's JSON syntax.
//
// Load checks syntax, the names of arguments and blocks, value types and value
// formats (sizes, durations). It does not check value ranges or cross-field
// rules, because flags may still change the result: call Override and then
// Validate (or use LoadWithFlags, which does all three).
//
// The returned Node is never nil, so that Files can be used to render the
// diagnostics; when the diagnostics contain errors it holds only what could
// be decoded and must not be used.
func Load(path string) (*Node, hcl.Diagnostics) {
	src, err := os.ReadFile(path)
	if err != nil {
		n := Default()
		n.Filename = path
		return n, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Failed to read config file",
			Detail:   fmt.Sprintf("Cannot read the node config file %q: %s.", path, err),
		}}
	}
	return Parse(src, path)
}

// Parse parses src as if read from filename; see Load.
func Parse(src []byte, filename string) (*Node, hcl.Diagnostics) { return parse(src, filename, nil) }

// parse parses a node file, or a cluster file into cl and its head (the
// returned Node) when cl is not nil.
func parse(src []byte, filename string, cl *Cluster) (*Node, hcl.Diagnostics) {
	n := Default()
	n.Filename = filename
	n.ranges = map[string]hcl.Range{}

	p := hclparse.NewParser()
	var f *hcl.File
	var diags hcl.Diagnostics
	if strings.HasSuffix(strings.ToLower(filename), ".json") {
		f, diags = p.ParseJSON(src, filename)
	} else {
		f, diags = p.ParseHCL(src, filename)
	}
	// The source is kept with secrets masked: FormatDiagnostics prints
	// the lines diagnostics point at.
	n.files = make(map[string]*hcl.File, len(p.Files()))
	for name, pf := range p.Files() {
		n.files[name] = redactSource(pf)
	}
	if diags.HasErrors() || f == nil || f.Body == nil {
		// Decoding a body with syntax errors only adds confusing follow-on
		// diagnostics.
		sortDiagnostics(diags)
		return n, diags
	}

	d := &decoder{n: n, cl: cl}
	d.root(f.Body)
	diags = append(diags, d.diags...)
	sortDiagnostics(diags)
	return n, diags
}

// LoadWithFlags is the usual way to configure a node: it loads path (or
// starts from Default when path is ""), applies the flags with Override and
// runs Validate. Between the two it fills what the file leaves empty from
// the environment (ApplyEnv with os.Getenv: the GCS's Redis address and
// credentials). Decoding errors stop it before Override.
func LoadWithFlags(path string, f Flags) (*Node, hcl.Diagnostics) {
	n := Default()
	var diags hcl.Diagnostics
	if path != "" {
		n, diags = Load(path)
		if diags.HasErrors() {
			return n, diags
		}
	}
	n.Override(f)
	n.ApplyEnv(os.Getenv)
	return n, append(diags, n.Validate()...)
}

// Files returns the parsed source files by name, for FormatDiagnostics. It is
// nil for a Node that did not come from Load or Parse. Their Bytes have
// secrets (the GCS's Redis password) masked with '*'.
func (n *Node) Files() map[string]*hcl.File { return n.files }

var rootSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "cluster_name"},
		{Name: "node_name"},
		{Name: "address"},
		{Name: "port"},
		{Name: "raylet_port"},
		{Name: "node_ip"},
		{Name: "temp_dir"},
		{Name: "data_dir"},
		{Name: "log_level"},
		{Name: "labels"},
		{Name: "plugin_dir"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "head"},
		{Type: "resources"},
		{Type: "object_store"},
		{Type: "worker_pool"},
		{Type: "health_check"},
		{Type: "spilling"},
		{Type: "auth"},
		{Type: "tls"},
		{Type: "gcs"},
		{Type: "metrics"},
		{Type: "dashboard"},
		{Type: "memory_monitor"},
		{Type: "tensor_pool"},
		{Type: "logs"},
		{Type: "plugin", LabelNames: []string{"kind", "name"}},
		{Type: "node_type", LabelNames: []string{"name"}},
	},
}

var headSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "address"}},
}

var resourcesSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "CPU"},
		{Name: "GPU"},
		{Name: "memory"},
		{Name: "custom"},
	},
}

var objectStoreSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "memory"},
		{Name: "spill_threshold"},
		{Name: "inline_limit"},
	},
}

var workerPoolSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "prestart"},
		{Name: "max_idle"},
		{Name: "idle_timeout"},
		{Name: "start_timeout"},
	},
}

var spillingSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "storage"},
		{Name: "directory"},
		{Name: "min_file_size"},
		{Name: "max_objects_per_file"},
		{Name: "keep_files"},
		{Name: "wait"},
		{Name: "enabled"},
	},
}

var healthCheckSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "period"},
		{Name: "failure_threshold"},
	},
}

// providerBlockSchema is a cluster file's provider block: a plugin block
// without command, args or log_level (the provider is the cluster's own).
var providerBlockSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "sha256"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "config"}},
}

var pluginSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "sha256"}, {Name: "command"}, {Name: "args"}, {Name: "log_level"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "config"}},
}

var nodeTypeSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "resources"},
		{Name: "labels"},
		{Name: "min_workers"},
		{Name: "max_workers"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "node_config"}},
}

// Keys of Node.ranges. Top-level and singleton-block values use their dotted
// path ("object_store.memory"); map entries append ".<key>"; plugin and
// node_type values are prefixed by declKey so that reordering the slices
// does not break the lookup.
const (
	keyClusterName    = "cluster_name"
	keyNodeName       = "node_name"
	keyAddress        = "address"
	keyPort           = "port"
	keyRayletPort     = "raylet_port"
	keyNodeIP         = "node_ip"
	keyTempDir        = "temp_dir"
	keyDataDir        = "data_dir"
	keyLogLevel       = "log_level"
	keyLabels         = "labels"
	keyPluginDir      = "plugin_dir"
	keyCPU            = "resources.CPU"
	keyGPU            = "resources.GPU"
	keyMemory         = "resources.memory"
	keyCustom         = "resources.custom"
	keyStoreMemory    = "object_store.memory"
	keySpillThreshold = "object_store.spill_threshold"
	keyInlineLimit    = "object_store.inline_limit"
	keyPrestart       = "worker_pool.prestart"
	keyMaxIdle        = "worker_pool.max_idle"
	keyIdleTimeout    = "worker_pool.idle_timeout"
	keyStartTimeout   = "worker_pool.start_timeout"
	keyPeriod         = "health_check.period"
	keyFailThreshold  = "health_check.failure_threshold"
	keySpillStorage   = "spilling.storage"
	keySpillDir       = "spilling.directory"
	keySpillMinFile   = "spilling.min_file_size"
	keySpillMaxObjs   = "spilling.max_objects_per_file"
	keySpillKeep      = "spilling.keep_files"
	keySpillWait      = "spilling.wait"
	keySpillEnabled   = "spilling.enabled"
)

// declKey identifies a labelled block (plugin, node_type) by where it was
// declared.
func declKey(kind string, r hcl.Range) string {
	return fmt.Sprintf("%s@%s:%d", kind, r.Filename, r.Start.Byte)
}

// entryKey is the key of one entry of a map-valued attribute.
func entryKey(mapKey, entry string) string { return mapKey + "." + entry }

// decoder accumulates a Node and the diagnostics found while filling it.
type decoder struct {
	n *Node
	// cl is the cluster being decoded when the file is a cluster file
	// (ParseCluster), nil for a node file: the root then accepts the
	// cluster's settings too, and n is its head.
	cl    *Cluster
	diags hcl.Diagnostics
}

func (d *decoder) add(diags hcl.Diagnostics) { d.diags = append(d.diags, diags...) }

func (d *decoder) root(body hcl.Body) {
	n := d.n
	schema := rootSchema
	if d.cl != nil {
		schema = clusterSchema
	}
	c := d.content(body, schema)

	d.str(c.Attributes["cluster_name"], keyClusterName, &n.ClusterName)
	d.str(c.Attributes["node_name"], keyNodeName, &n.NodeName)
	d.intVal(c.Attributes["port"], keyPort, &n.Port)
	d.intVal(c.Attributes["raylet_port"], keyRayletPort, &n.RayletPort)
	d.str(c.Attributes["node_ip"], keyNodeIP, &n.NodeIP)
	d.str(c.Attributes["temp_dir"], keyTempDir, &n.TempDir)
	if d.str(c.Attributes["data_dir"], keyDataDir, &n.DataDir) {
		n.DataDir = d.relPath(n.DataDir)
	}
	d.str(c.Attributes["log_level"], keyLogLevel, &n.LogLevel)
	d.str(c.Attributes["plugin_dir"], keyPluginDir, &n.PluginDir)
	if a := c.Attributes["labels"]; a != nil {
		if m, ok := d.stringMap(a, keyLabels); ok {
			n.Labels = m
		}
	}

	single := d.singletons(c.Blocks, "head", "resources", "object_store", "worker_pool", "health_check", "spilling", "auth", "tls", "gcs", "metrics", "dashboard", "memory_monitor", "tensor_pool", "logs")
	d.security(single["auth"], single["tls"])
	d.gcs(single["gcs"])
	d.metrics(single["metrics"])
	d.dashboard(single["dashboard"])
	d.memoryMonitor(single["memory_monitor"])
	d.tensorPool(single["tensor_pool"])
	d.logs(single["logs"])

	topAddr := c.Attributes["address"]
	if hb := single["head"]; hb != nil {
		n.Head = true
		n.Address = DefaultHeadAddress
		hc := d.content(hb.Body, headSchema)
		d.str(hc.Attributes["address"], keyAddress, &n.Address)
		if topAddr != nil {
			d.diags = append(d.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Join address on the head node",
				Detail: fmt.Sprintf("The top-level address names the head to join, but this file declares the node as the head (head block at %s). "+
					"Set where the GCS listens with head { address = \"host:port\" }, or remove the head block.", hb.DefRange),
				Subject: topAddr.NameRange.Ptr(),
				Context: topAddr.Range.Ptr(),
			})
		}
	} else if d.cl != nil {
		// The node running a cluster file is the head.
		n.Head = true
		n.Address = DefaultHeadAddress
		if topAddr != nil {
			d.diags = append(d.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Join address in a cluster file",
				Detail: "In a node file the top-level address names the head to join, but a cluster file configures the head itself. " +
					"Set where the head's GCS listens with head { address = \"host:port\" } instead.",
				Subject: topAddr.NameRange.Ptr(),
				Context: topAddr.Range.Ptr(),
			})
		}
	} else {
		d.str(topAddr, keyAddress, &n.Address)
	}

	if b := single["resources"]; b != nil {
		rc := d.content(b.Body, resourcesSchema)
		var f float64
		if d.float(rc.Attributes["CPU"], keyCPU, &f) {
			n.Resources.CPU = &f
		}
		var g float64
		if d.float(rc.Attributes["GPU"], keyGPU, &g) {
			n.Resources.GPU = &g
		}
		var m int64
		if d.size(rc.Attributes["memory"], keyMemory, &m) {
			n.Resources.Memory = &m
		}
		if a := rc.Attributes["custom"]; a != nil {
			if cm, ok := d.numberMap(a, keyCustom); ok {
				n.Resources.Custom = cm
			}
		}
	}

	if b := single["object_store"]; b != nil {
		oc := d.content(b.Body, objectStoreSchema)
		d.size(oc.Attributes["memory"], keyStoreMemory, &n.ObjectStore.Memory)
		d.float(oc.Attributes["spill_threshold"], keySpillThreshold, &n.ObjectStore.SpillThreshold)
		d.size(oc.Attributes["inline_limit"], keyInlineLimit, &n.ObjectStore.InlineLimit)
	}

	if b := single["worker_pool"]; b != nil {
		wc := d.content(b.Body, workerPoolSchema)
		var pre, idle int
		if d.intVal(wc.Attributes["prestart"], keyPrestart, &pre) {
			n.WorkerPool.Prestart = &pre
		}
		if d.intVal(wc.Attributes["max_idle"], keyMaxIdle, &idle) {
			n.WorkerPool.MaxIdle = &idle
		}
		d.duration(wc.Attributes["idle_timeout"], keyIdleTimeout, &n.WorkerPool.IdleTimeout)
		d.duration(wc.Attributes["start_timeout"], keyStartTimeout, &n.WorkerPool.StartTimeout)
	}

	if b := single["spilling"]; b != nil {
		sc := d.content(b.Body, spillingSchema)
		d.str(sc.Attributes["storage"], keySpillStorage, &n.Spilling.Storage)
		d.str(sc.Attributes["directory"], keySpillDir, &n.Spilling.Directory)
		d.size(sc.Attributes["min_file_size"], keySpillMinFile, &n.Spilling.MinFileSize)
		d.intVal(sc.Attributes["max_objects_per_file"], keySpillMaxObjs, &n.Spilling.MaxObjectsPerFile)
		d.boolVal(sc.Attributes["keep_files"], keySpillKeep, &n.Spilling.KeepFiles)
		d.duration(sc.Attributes["wait"], keySpillWait, &n.Spilling.Wait)
		enabled := true
		if d.boolVal(sc.Attributes["enabled"], keySpillEnabled, &enabled) {
			n.Spilling.Disabled = !enabled
		}
	}

	if b := single["health_check"]; b != nil {
		hc := d.content(b.Body, healthCheckSchema)
		d.duration(hc.Attributes["period"], keyPeriod, &n.HealthCheck.Period)
		d.intVal(hc.Attributes["failure_threshold"], keyFailThreshold, &n.HealthCheck.FailureThreshold)
	}

	for _, b := range c.Blocks {
		switch b.Type {
		case "plugin":
			d.plugin(b)
		case "node_type":
			d.nodeType(b)
		}
	}
	if d.cl != nil {
		d.cluster(body, c)
	}
}

// singletons returns the first block of each of the given types and reports
// any repeats.
func (d *decoder) singletons(blocks hcl.Blocks, types ...string) map[string]*hcl.Block {
	out := make(map[string]*hcl.Block, len(types))
	for _, b := range blocks {
		if !slices.Contains(types, b.Type) {
			continue
		}
		if first, dup := out[b.Type]; dup {
			d.diags = append(d.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Duplicate %s block", b.Type),
				Detail:   fmt.Sprintf("Only one %s block is allowed; the first one is at %s.", b.Type, first.DefRange),
				Subject:  b.DefRange.Ptr(),
			})
			continue
		}
		out[b.Type] = b
	}
	return out
}

func (d *decoder) plugin(b *hcl.Block) {
	if len(b.Labels) != 2 { // hcl has reported it
		return
	}
	if d.cl != nil && b.Labels[0] == "provider" {
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Provider plugin block in a cluster file",
			Detail: fmt.Sprintf("A cluster file declares its provider with a provider block: replace plugin \"provider\" %q with provider %q { ... } (it takes the same sha256 and config).",
				b.Labels[1], b.Labels[1]),
			Subject: b.DefRange.Ptr(),
		})
		return
	}
	p := Plugin{Kind: b.Labels[0], Name: b.Labels[1], DeclRange: b.DefRange}
	pk := declKey("plugin", b.DefRange)
	d.n.ranges[pk+".kind"] = b.LabelRanges[0]
	d.n.ranges[pk+".name"] = b.LabelRanges[1]

	c := d.content(b.Body, pluginSchema)
	d.str(c.Attributes["sha256"], pk+".sha256", &p.SHA256)
	if d.str(c.Attributes["command"], pk+".command", &p.Command) {
		p.CommandRange = c.Attributes["command"].Expr.Range()
		if strings.ContainsRune(p.Command, '/') {
			p.Command = d.relPath(p.Command)
		}
	}
	d.stringList(c.Attributes["args"], pk+".args", &p.Args)
	d.str(c.Attributes["log_level"], pk+".log_level", &p.LogLevel)
	if cfg := d.singletons(c.Blocks, "config")["config"]; cfg != nil {
		p.Config = cfg.Body
	}
	d.n.Plugins = append(d.n.Plugins, p)
}

func (d *decoder) nodeType(b *hcl.Block) {
	if len(b.Labels) != 1 {
		return
	}
	t := NodeType{Name: b.Labels[0], DeclRange: b.DefRange}
	tk := declKey("node_type", b.DefRange)
	d.n.ranges[tk+".name"] = b.LabelRanges[0]

	c := d.content(b.Body, nodeTypeSchema)
	if a := c.Attributes["resources"]; a != nil {
		if m, ok := d.resourceMap(a, tk+".resources"); ok {
			t.Resources = m
		}
	}
	if a := c.Attributes["labels"]; a != nil {
		if m, ok := d.stringMap(a, tk+".labels"); ok {
			t.Labels = m
		}
	}
	d.intVal(c.Attributes["min_workers"], tk+".min_workers", &t.MinWorkers)
	d.intVal(c.Attributes["max_workers"], tk+".max_workers", &t.MaxWorkers)
	t.NodeConfigRange = b.DefRange
	if nc := d.singletons(c.Blocks, "node_config")["node_config"]; nc != nil {
		t.NodeConfig = nc.Body
		t.NodeConfigRange = nc.DefRange
	}
	d.n.NodeTypes = append(d.n.NodeTypes, t)
}
