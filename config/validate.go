package config

import (
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goray-dev/goray/internal/limits"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/hashicorp/hcl/v2"
)

// logLevels are the level names hclog understands.
var logLevels = []string{"trace", "debug", "info", "warn", "error", "off"}

// reservedResources may not be used as custom resource names; they have
// their own settings.
var reservedResources = []string{resources.CPU, resources.GPU, resources.Memory, resources.ObjectStoreMemory}

// Validate checks value ranges and cross-field rules: a non-head node needs
// an address to join, addresses are host:port, ports are 0..65535, the log
// level is known, object_store.spill_threshold is in (0, 1],
// inline_limit does not exceed the object store memory when that is set
// nor limits.MaxInlineLimit (the RPC message limit less headroom),
// amounts and counts are not negative, resource amounts are at most
// resources.MaxFor (65536 CPUs or GPUs, 10^14 of anything else) and
// memory sizes at most resources.MaxAmount bytes (their fixed-point form
// must not overflow), resource names and labels are within the bounds the GCS
// enforces, worker_pool counts are at most MaxWorkersPerJob, the health
// check's period × failure_threshold is at most MaxNodeTimeout, durations
// are positive, plugin kinds are known and each kind+name appears once,
// sha256 pins are hex digests, node types are unique and have min_workers
// <= max_workers, and the gcs block names a known storage, a Redis server
// (host:port) when the storage is "redis", a db >= 0, a prefix without
// whitespace, Redis TLS files that exist and fit together (a CA holding
// a certificate, a certificate with its key, the key owner-only) and a
// positive reconnect_timeout. Warnings: a redis block
// while the storage is not "redis", and storage or redis on a node that is
// not the head (only the head's GCS uses them).
//
// Each diagnostic points at the offending value when it came from a file
// (and was not overridden by a flag since); otherwise it has no Subject and
// its Detail names the setting. Call Validate after Override.
func (n *Node) Validate() hcl.Diagnostics {
	v := &validator{n: n}
	v.node()
	sortDiagnostics(v.diags)
	return v.diags
}

type validator struct {
	n     *Node
	diags hcl.Diagnostics
}

// errorf records an error at the range stored under key, if any.
func (v *validator) errorf(key, summary, format string, args ...any) {
	d := &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
	}
	if r, ok := v.n.ranges[key]; ok && key != "" {
		d.Subject = r.Ptr()
	}
	v.diags = append(v.diags, d)
}

// warnf records a warning at the range stored under key, if any.
func (v *validator) warnf(key, summary, format string, args ...any) {
	v.errorf(key, summary, format, args...)
	v.diags[len(v.diags)-1].Severity = hcl.DiagWarning
}

// errorAt records an error at r unless r is the zero range.
func (v *validator) errorAt(r hcl.Range, summary, format string, args ...any) {
	d := &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
	}
	if r != (hcl.Range{}) {
		d.Subject = r.Ptr()
	}
	v.diags = append(v.diags, d)
}

func (v *validator) node() {
	n := v.n
	v.clusterName()
	v.address()
	v.security()
	v.gcs()
	v.observability()
	v.memoryMonitor()
	v.tensorPool()
	v.logs()
	v.port(keyPort, "port", n.Port)
	v.port(keyRayletPort, "raylet_port", n.RayletPort)
	if n.NodeIP != "" && net.ParseIP(n.NodeIP) == nil {
		v.errorf(keyNodeIP, "Invalid node_ip", "node_ip %q is not an IP address (for example 10.0.0.5 or 127.0.0.2).", n.NodeIP)
	}
	v.exposure()

	if !slices.Contains(logLevels, strings.ToLower(n.LogLevel)) {
		v.errorf(keyLogLevel, "Unknown log level",
			"log_level %q is not a log level; use one of %s.%s",
			n.LogLevel, strings.Join(logLevels, ", "), didYouMean(n.LogLevel, logLevels))
	}
	if n.TempDir == "" {
		v.errorf(keyTempDir, "Missing temp_dir", "temp_dir must name a directory for session files, sockets and logs.")
	}

	v.resources()
	v.objectStore()
	v.spilling()

	wp := n.WorkerPool
	if wp.Prestart != nil && *wp.Prestart < 0 {
		v.errorf(keyPrestart, "Invalid value", "worker_pool.prestart must not be negative, got %d.", *wp.Prestart)
	} else if wp.Prestart != nil && *wp.Prestart > MaxWorkersPerJob {
		v.errorf(keyPrestart, "Value too large",
			"worker_pool.prestart is %d; each worker is a process started for every job, and at most %d may be prestarted.", *wp.Prestart, MaxWorkersPerJob)
	}
	if wp.MaxIdle != nil && *wp.MaxIdle < 0 {
		v.errorf(keyMaxIdle, "Invalid value", "worker_pool.max_idle must not be negative, got %d.", *wp.MaxIdle)
	} else if wp.MaxIdle != nil && *wp.MaxIdle > MaxWorkersPerJob {
		v.errorf(keyMaxIdle, "Value too large",
			"worker_pool.max_idle is %d; each idle worker is a process kept per job, and at most %d may be kept.", *wp.MaxIdle, MaxWorkersPerJob)
	}
	if wp.IdleTimeout <= 0 {
		v.errorf(keyIdleTimeout, "Invalid duration", "worker_pool.idle_timeout must be positive, got %s.", wp.IdleTimeout)
	}
	if wp.StartTimeout <= 0 {
		v.errorf(keyStartTimeout, "Invalid duration", "worker_pool.start_timeout must be positive, got %s.", wp.StartTimeout)
	}

	hc := n.HealthCheck
	if hc.Period <= 0 {
		v.errorf(keyPeriod, "Invalid duration", "health_check.period must be positive, got %s.", hc.Period)
	}
	if hc.FailureThreshold < 1 {
		v.errorf(keyFailThreshold, "Invalid value", "health_check.failure_threshold must be at least 1, got %d.", hc.FailureThreshold)
	} else if hc.Period > 0 && time.Duration(hc.FailureThreshold) > MaxNodeTimeout/hc.Period {
		v.errorf(keyFailThreshold, "Value too large",
			"health_check.failure_threshold (%d) times health_check.period (%s) is how long a silent node stays alive, and must be at most %s.",
			hc.FailureThreshold, hc.Period, MaxNodeTimeout)
	}
	v.labels()

	v.plugins()
	v.nodeTypes()
}

// Bounds on settings that would otherwise be accepted and fail late or
// silently.
const (
	// MaxWorkersPerJob bounds worker_pool.prestart and max_idle: worker
	// processes per job, far above any machine's CPU count.
	MaxWorkersPerJob = 4096
	// MaxNodeTimeout bounds health_check.period × failure_threshold, the
	// time a silent node is still considered alive.
	MaxNodeTimeout = 24 * time.Hour
)

// labels checks the node's labels against the bounds the GCS enforces
// when the node registers.
func (v *validator) labels() { v.labelMap(v.n.Labels, keyLabels, "labels") }

// labelMap checks labels ls, whose ranges are under key, against the
// bounds the GCS enforces; what names them in messages.
func (v *validator) labelMap(ls map[string]string, key, what string) {
	if len(ls) > limits.MaxLabels {
		v.errorf(key, "Too many labels", "%s has %d entries; a node may have at most %d.", what, len(ls), limits.MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(ls)) {
		ek := entryKey(key, k)
		switch {
		case k == "":
			v.errorf(ek, "Invalid label", "Label keys must not be empty.")
		case len(k) > limits.MaxLabelKeyLen:
			v.errorf(ek, "Invalid label", "The label key %q... is %d bytes long; at most %d are allowed.", k[:32], len(k), limits.MaxLabelKeyLen)
		case len(ls[k]) > limits.MaxLabelValueLen:
			v.errorf(ek, "Invalid label", "The value of label %q is %d bytes long; at most %d are allowed.", k, len(ls[k]), limits.MaxLabelValueLen)
		}
	}
}

func (v *validator) address() {
	n := v.n
	if n.Address == "" {
		if !n.Head {
			v.errorf("", "Missing GCS address",
				"A node that is not the head must name the head to join: set address = \"host:port\" in the config file or pass the address flag, or declare this node the head with a head block.")
		}
		return
	}
	host, port, err := net.SplitHostPort(n.Address)
	if err != nil {
		v.errorf(keyAddress, "Invalid address", "The GCS address %q must have the form host:port: %s.", n.Address, err)
		return
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		v.errorf(keyAddress, "Invalid address", "The port %q of GCS address %q is not a number from 0 to 65535.", port, n.Address)
		return
	}
	if !n.Head && (host == "" || p == 0) {
		v.errorf(keyAddress, "Invalid address", "The GCS address %q to join must name the head's host and a non-zero port.", n.Address)
	}
}

func (v *validator) port(key, name string, p int) {
	if p < 0 || p > 65535 {
		v.errorf(key, "Invalid port", "%s must be from 0 to 65535, got %d.", name, p)
	}
}

// amount checks a resource amount with the rules of internal/resources.
func (v *validator) amount(key, name string, f float64) {
	if _, err := resources.FromFloat(name, f); err != nil {
		v.errorf(key, "Invalid resource amount", "%s.", err)
	}
}

func (v *validator) resources() {
	r := v.n.Resources
	if r.CPU != nil {
		v.amount(keyCPU, resources.CPU, *r.CPU)
	}
	if r.GPU != nil {
		v.amount(keyGPU, resources.GPU, *r.GPU)
	}
	if r.Memory != nil && *r.Memory < 0 {
		v.errorf(keyMemory, "Invalid resource amount", "resources.memory must not be negative, got %d.", *r.Memory)
	} else if r.Memory != nil && *r.Memory > resources.MaxAmount {
		v.errorf(keyMemory, "Resource amount too large",
			"resources.memory is %d bytes, more than the maximum %d (about 91 TiB); resource amounts are fixed point in 1/%d units and must not overflow.",
			*r.Memory, int64(resources.MaxAmount), resources.Unit)
	}
	if most := resources.MaxResources - len(reservedResources); len(r.Custom) > most {
		v.errorf(keyCustom, "Too many resources", "resources.custom names %d resources; a node may have at most %d custom resources.", len(r.Custom), most)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Custom)) {
		key := entryKey(keyCustom, name)
		if name == "" {
			v.errorf(key, "Invalid resource name", "Custom resource names must not be empty.")
			continue
		}
		if err := resources.CheckName(name); err != nil {
			v.errorf(key, "Invalid resource name", "%s.", err)
			continue
		}
		if slices.Contains(reservedResources, name) {
			v.errorf(key, "Reserved resource name",
				"Custom resource %q is reserved; set it with its own setting (resources { %s = ... } or the matching flag) instead.", name, name)
			continue
		}
		v.amount(key, name, r.Custom[name])
	}
}

func (v *validator) objectStore() {
	st := v.n.ObjectStore
	if st.Memory < 0 {
		v.errorf(keyStoreMemory, "Invalid size", "object_store.memory must not be negative, got %d.", st.Memory)
	} else if st.Memory > resources.MaxAmount {
		v.errorf(keyStoreMemory, "Size too large",
			"object_store.memory is %d bytes, more than the maximum %d (about 91 TiB); it becomes the object_store_memory resource, whose fixed-point amount must not overflow.",
			st.Memory, int64(resources.MaxAmount))
	}
	if !(st.SpillThreshold > 0 && st.SpillThreshold <= 1) {
		v.errorf(keySpillThreshold, "Invalid spill threshold",
			"object_store.spill_threshold is a fraction of the store's memory and must be greater than 0 and at most 1, got %g.", st.SpillThreshold)
	}
	if st.InlineLimit < 0 {
		v.errorf(keyInlineLimit, "Invalid size", "object_store.inline_limit must not be negative, got %d.", st.InlineLimit)
	} else if st.InlineLimit > limits.MaxInlineLimit {
		v.errorf(keyInlineLimit, "Inline limit exceeds the message limit",
			"object_store.inline_limit (%d bytes) must be at most %d bytes: inline values travel inside RPC messages, which are limited to %d bytes (256 MiB), and %d bytes (1 MiB) are kept for the rest of the message.",
			st.InlineLimit, limits.MaxInlineLimit, limits.MaxMessageSize, limits.InlineHeadroom)
	} else if st.Memory > 0 && st.InlineLimit > st.Memory {
		v.errorf(keyInlineLimit, "Inline limit exceeds object store",
			"object_store.inline_limit (%d bytes) must not exceed object_store.memory (%d bytes).", st.InlineLimit, st.Memory)
	}
}

func (v *validator) plugins() {
	seen := map[string]Plugin{}
	for _, p := range v.n.Plugins {
		pk := ""
		if p.DeclRange != (hcl.Range{}) {
			pk = declKey("plugin", p.DeclRange)
		}
		key := func(suffix string) string {
			if pk == "" {
				return ""
			}
			return pk + suffix
		}
		if !slices.Contains(plugin.Kinds, p.Kind) {
			v.errorf(key(".kind"), "Unknown plugin kind",
				"Plugin %q has kind %q; the kinds are %s.%s",
				p.Name, p.Kind, strings.Join(plugin.Kinds, ", "), didYouMean(p.Kind, plugin.Kinds))
		}
		if p.Name == "" {
			v.errorf(key(".name"), "Missing plugin name", "The %s plugin needs a non-empty name.", p.Kind)
		} else if why := pluginNameProblem(p.Name); why != "" {
			v.errorf(key(".name"), "Invalid plugin name",
				"Plugin %s name %q %s: its binary must be a file directly in plugin_dir (goray-%s-<name> or <name>), so a name cannot reach outside it.", p.Kind, p.Name, why, p.Kind)
		}
		if p.SHA256 != "" {
			if b, err := hex.DecodeString(p.SHA256); err != nil || len(b) != 32 {
				v.errorf(key(".sha256"), "Invalid sha256",
					"The sha256 of plugin %s %q must be 64 hexadecimal digits, got %q.", p.Kind, p.Name, p.SHA256)
			}
		}
		if p.LogLevel != "" && !slices.Contains(logLevels, strings.ToLower(p.LogLevel)) {
			v.errorf(key(".log_level"), "Unknown log level",
				"The log_level of plugin %s %q is %q; the levels are %s.%s",
				p.Kind, p.Name, p.LogLevel, strings.Join(logLevels, ", "), didYouMean(p.LogLevel, logLevels))
		}
		if why := commandProblem(p.Command); why != "" {
			v.errorf(key(".command"), "Invalid plugin command", "The command of plugin %s %q %s.", p.Kind, p.Name, why)
		}
		id := p.Kind + "\x00" + p.Name
		if first, dup := seen[id]; dup {
			where := ""
			if first.DeclRange != (hcl.Range{}) {
				where = fmt.Sprintf("; the first is at %s", first.DeclRange)
			}
			v.errorAt(p.DeclRange, "Duplicate plugin", "Plugin %s %q is declared more than once%s.", p.Kind, p.Name, where)
			continue
		}
		seen[id] = p
	}
}

func (v *validator) nodeTypes() { v.nodeTypeList(v.n.NodeTypes) }

// nodeTypeList checks the rules node types follow in node and cluster
// files: unique non-empty names, valid resource names and amounts, labels
// within the GCS's bounds, worker counts >= 0 and min_workers <=
// max_workers.
func (v *validator) nodeTypeList(types []NodeType) {
	seen := map[string]NodeType{}
	for _, t := range types {
		tk := ""
		if t.DeclRange != (hcl.Range{}) {
			tk = declKey("node_type", t.DeclRange)
		}
		key := func(suffix string) string {
			if tk == "" {
				return ""
			}
			return tk + suffix
		}
		if t.Name == "" {
			v.errorf(key(".name"), "Missing node type name", "Node types need a non-empty name.")
		}
		if first, dup := seen[t.Name]; dup {
			where := ""
			if first.DeclRange != (hcl.Range{}) {
				where = fmt.Sprintf("; the first is at %s", first.DeclRange)
			}
			v.errorAt(t.DeclRange, "Duplicate node type", "Node type %q is declared more than once%s.", t.Name, where)
		} else {
			seen[t.Name] = t
		}
		if len(t.Resources) > resources.MaxResources {
			v.errorf(key(".resources"), "Too many resources", "Node type %q names %d resources; at most %d are allowed.", t.Name, len(t.Resources), resources.MaxResources)
		}
		for _, name := range slices.Sorted(maps.Keys(t.Resources)) {
			k := key(".resources")
			if k != "" {
				k = entryKey(k, name)
			}
			if name == "" {
				v.errorf(k, "Invalid resource name", "Node type %q has a resource with an empty name.", t.Name)
				continue
			}
			if err := resources.CheckName(name); err != nil {
				v.errorf(k, "Invalid resource name", "Node type %q: %s.", t.Name, err)
				continue
			}
			v.amount(k, name, t.Resources[name])
		}
		v.labelMap(t.Labels, key(".labels"), fmt.Sprintf("The labels of node type %q", t.Name))
		if t.MinWorkers < 0 {
			v.errorf(key(".min_workers"), "Invalid value", "min_workers of node type %q must not be negative, got %d.", t.Name, t.MinWorkers)
		}
		if t.MaxWorkers < 0 {
			v.errorf(key(".max_workers"), "Invalid value", "max_workers of node type %q must not be negative, got %d.", t.Name, t.MaxWorkers)
		}
		if t.MinWorkers >= 0 && t.MaxWorkers >= 0 && t.MinWorkers > t.MaxWorkers {
			v.errorf(key(".min_workers"), "Invalid worker range",
				"min_workers (%d) of node type %q must not exceed max_workers (%d).", t.MinWorkers, t.Name, t.MaxWorkers)
		}
	}
}

func (v *validator) spilling() {
	sp := v.n.Spilling
	if sp.MinFileSize < 0 {
		v.errorf(keySpillMinFile, "Invalid size", "spilling.min_file_size must not be negative, got %d.", sp.MinFileSize)
	}
	if sp.MaxObjectsPerFile < 0 {
		v.errorf(keySpillMaxObjs, "Invalid value", "spilling.max_objects_per_file must not be negative, got %d.", sp.MaxObjectsPerFile)
	}
	if sp.Wait < 0 {
		v.errorf(keySpillWait, "Invalid duration", "spilling.wait must not be negative, got %s.", sp.Wait)
	}
	if sp.Storage == "" {
		return
	}
	var names []string
	for _, p := range v.n.Plugins {
		if p.Kind == "storage" {
			if p.Name == sp.Storage {
				return
			}
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		v.errorf(keySpillStorage, "Unknown storage plugin",
			"spilling.storage is %q, but no plugin \"storage\" %q block is configured; add one (for example plugin \"storage\" \"s3\" { config { bucket = \"...\" } }) or remove storage to spill to local disk.", sp.Storage, sp.Storage)
		return
	}
	v.errorf(keySpillStorage, "Unknown storage plugin",
		"spilling.storage is %q, but the configured storage plugins are %s.%s", sp.Storage, strings.Join(names, ", "), didYouMean(sp.Storage, names))
}

// commandProblem says what is wrong with a plugin block's command ("" when
// nothing is): set but empty, a NUL byte, or a directory reference.
func commandProblem(cmd string) string {
	switch {
	case cmd == "":
		return ""
	case strings.TrimSpace(cmd) == "":
		return "is blank: name a binary in plugin_dir or give its path, or leave command out for goray-<kind>-<name>"
	case strings.ContainsRune(cmd, 0):
		return "contains a NUL byte"
	case cmd == "." || cmd == "..":
		return "is a directory reference, not a binary"
	}
	return ""
}
