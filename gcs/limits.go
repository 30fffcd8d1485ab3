package gcs

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/goray-dev/goray/internal/limits"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"google.golang.org/protobuf/proto"
)

// Defaults for KVLimits. Every value goray itself stores is small (spill
// records and collective group declarations are a few hundred bytes, a
// one-sided transport agent's metadata a few KiB), so the limits only bite
// a broken or hostile client: four 200 MiB puts once took the head from 27
// MiB to 1.9 GiB.
const (
	DefaultKVMaxNamespaceLen = 256
	DefaultKVMaxKeyLen       = 1 << 10
	DefaultKVMaxValueSize    = 8 << 20
	// DefaultKVNamespaceBytes is a namespace's quota of bytes: its name,
	// keys and values plus kvEntryOverhead per key and kvNamespaceOverhead.
	DefaultKVNamespaceBytes = 256 << 20
	DefaultKVNamespaceKeys  = 1 << 20
	// DefaultKVTotalBytes is the quota of all namespaces together.
	DefaultKVTotalBytes = 512 << 20
)

// What keys and namespaces cost beyond their bytes (map entries, slice
// headers, a namespace's map), charged to the quotas so that empty values
// and one-key namespaces are not free.
const (
	kvEntryOverhead     = 64
	kvNamespaceOverhead = 512
)

// KVLimits bounds the GCS key-value store. Zero fields take the defaults.
type KVLimits struct {
	// MaxNamespaceLen is the longest namespace name, in bytes.
	MaxNamespaceLen int
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen int
	// MaxValueSize is the largest value, in bytes.
	MaxValueSize int
	// NamespaceBytes is each namespace's quota: the bytes of its name,
	// keys and values plus a small overhead per key and per namespace.
	NamespaceBytes int64
	// NamespaceKeys is how many keys each namespace may hold.
	NamespaceKeys int
	// TotalBytes is the quota of all namespaces together.
	TotalBytes int64
}

func (l KVLimits) withDefaults() KVLimits {
	if l.MaxNamespaceLen <= 0 {
		l.MaxNamespaceLen = DefaultKVMaxNamespaceLen
	}
	if l.MaxKeyLen <= 0 {
		l.MaxKeyLen = DefaultKVMaxKeyLen
	}
	if l.MaxValueSize <= 0 {
		l.MaxValueSize = DefaultKVMaxValueSize
	}
	if l.NamespaceBytes <= 0 {
		l.NamespaceBytes = DefaultKVNamespaceBytes
	}
	if l.NamespaceKeys <= 0 {
		l.NamespaceKeys = DefaultKVNamespaceKeys
	}
	if l.TotalBytes <= 0 {
		l.TotalBytes = DefaultKVTotalBytes
	}
	return l
}

// kvUsage is what one namespace holds, for the quotas.
type kvUsage struct {
	bytes int64
	keys  int
}

// kvCost is what an entry counts against the quotas.
func kvCost(key string, value []byte) int64 {
	return int64(len(key)) + int64(len(value)) + kvEntryOverhead
}

// kvNamespaceCost is what a namespace itself counts against the quotas
// while it holds keys.
func kvNamespaceCost(ns string) int64 {
	return int64(len(ns)) + kvNamespaceOverhead
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}

// checkNamespace checks a namespace name against the limits.
func (l KVLimits) checkNamespace(ns string) error {
	if len(ns) > l.MaxNamespaceLen {
		return &InvalidArgumentError{Field: "ns", Problem: fmt.Sprintf("namespace %q is %d bytes long; the limit is %d bytes", clip(ns), len(ns), l.MaxNamespaceLen)}
	}
	if strings.IndexByte(ns, 0) >= 0 {
		// The storage keys an entry by namespace, NUL, key.
		return &InvalidArgumentError{Field: "ns", Problem: fmt.Sprintf("namespace %q contains a NUL byte", clip(ns))}
	}
	return nil
}

// checkKey checks a key (or prefix, field names it) of namespace ns.
func (l KVLimits) checkKey(field, ns, key string) error {
	if len(key) > l.MaxKeyLen {
		return &InvalidArgumentError{Field: field, Problem: fmt.Sprintf("%s %q in namespace %q is %d bytes long; the limit is %d bytes", field, clip(key), clip(ns), len(key), l.MaxKeyLen)}
	}
	return nil
}

// Bounds on what a node reports about itself. Resource and label bounds
// are shared with config.Validate (internal/resources, internal/limits).
const (
	// maxNodeString bounds names and host names.
	maxNodeString = 256
	// maxNodePath bounds paths (PATH_MAX).
	maxNodePath = 4096
	// maxPendingDemands bounds the demand shapes in one heartbeat.
	maxPendingDemands = 4096
	// maxSpillText bounds the spill location and error texts.
	maxSpillText = 1 << 16
)

// checkResources checks a resource set a node sent: at most
// resources.MaxResources names, each valid, each amount within
// resources.CheckFixed. field names the set in errors.
func checkResources(field string, r *gorayv1.Resources) error {
	m := r.GetAmounts()
	if len(m) > resources.MaxResources {
		return &InvalidArgumentError{Field: field, Problem: fmt.Sprintf("%d resources; at most %d are allowed", len(m), resources.MaxResources)}
	}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if err := resources.CheckFixed(name, m[name]); err != nil {
			return &InvalidArgumentError{Field: field, Problem: err.Error()}
		}
	}
	return nil
}

// checkAddr checks a host:port address a node advertises; empty means
// none.
func checkAddr(field, addr string) error {
	if addr == "" {
		return nil
	}
	bad := func(why string) error {
		return &InvalidArgumentError{Field: field, Problem: fmt.Sprintf("%q is not a host:port address: %s", clip(addr), why)}
	}
	if len(addr) > maxNodeString {
		return bad(fmt.Sprintf("it is %d bytes long, more than %d", len(addr), maxNodeString))
	}
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil:
		return bad(err.Error())
	case host == "":
		return bad("it names no host")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return bad(fmt.Sprintf("the port %q is not a number from 1 to 65535", port))
	}
	return nil
}

// checkNodeInfo validates what a registering node says about itself.
func checkNodeInfo(info *gorayv1.NodeInfo) error {
	for _, s := range []struct {
		field string
		v     string
		max   int
	}{
		{"node.node_name", info.GetNodeName(), maxNodeString},
		{"node.hostname", info.GetHostname(), maxNodeString},
		{"node.raylet_unix", info.GetRayletUnix(), maxNodePath},
		{"node.session_dir", info.GetSessionDir(), maxNodePath},
	} {
		if len(s.v) > s.max {
			return &InvalidArgumentError{Field: s.field, Problem: fmt.Sprintf("%q is %d bytes long; at most %d are allowed", clip(s.v), len(s.v), s.max)}
		}
	}
	if err := checkAddr("node.raylet_tcp", info.GetRayletTcp()); err != nil {
		return err
	}
	if err := checkAddr("node.object_addr", info.GetObjectAddr()); err != nil {
		return err
	}
	if err := checkAddr("node.metrics_addr", info.GetMetricsAddr()); err != nil {
		return err
	}
	if info.GetPid() < 0 {
		return &InvalidArgumentError{Field: "node.pid", Problem: fmt.Sprintf("%d is negative", info.GetPid())}
	}
	if err := checkResources("node.total", info.GetTotal()); err != nil {
		return err
	}
	ls := info.GetLabels()
	if len(ls) > limits.MaxLabels {
		return &InvalidArgumentError{Field: "node.labels", Problem: fmt.Sprintf("%d labels; at most %d are allowed", len(ls), limits.MaxLabels)}
	}
	for _, k := range slices.Sorted(maps.Keys(ls)) {
		switch {
		case k == "":
			return &InvalidArgumentError{Field: "node.labels", Problem: "a label key is empty"}
		case len(k) > limits.MaxLabelKeyLen:
			return &InvalidArgumentError{Field: "node.labels", Problem: fmt.Sprintf("label key %q is %d bytes long; at most %d are allowed", clip(k), len(k), limits.MaxLabelKeyLen)}
		case len(ls[k]) > limits.MaxLabelValueLen:
			return &InvalidArgumentError{Field: "node.labels", Problem: fmt.Sprintf("the value of label %q is %d bytes long; at most %d are allowed", clip(k), len(ls[k]), limits.MaxLabelValueLen)}
		}
	}
	return nil
}

// checkHeartbeat validates a heartbeat of a node whose total resources
// are total: every available amount is valid and at most the total of
// that resource, store figures and pending counts are not negative, and
// the lists and texts are bounded.
func checkHeartbeat(req *gorayv1.HeartbeatRequest, total *gorayv1.Resources) error {
	if err := checkResources("available", req.GetAvailable()); err != nil {
		return err
	}
	tot := total.GetAmounts()
	avail := req.GetAvailable().GetAmounts()
	for _, name := range slices.Sorted(maps.Keys(avail)) {
		if v := avail[name]; v > tot[name] {
			return &InvalidArgumentError{Field: "available", Problem: fmt.Sprintf("%s of resource %q available, more than the node's total of %s",
				resources.FormatAmount(name, v), name, resources.FormatAmount(name, tot[name]))}
		}
	}
	if req.GetStoreUsed() < 0 || req.GetStoreCapacity() < 0 {
		return &InvalidArgumentError{Field: "store_used", Problem: fmt.Sprintf("store usage %d of %d bytes is negative", req.GetStoreUsed(), req.GetStoreCapacity())}
	}
	if n := len(req.GetPending()); n > maxPendingDemands {
		return &InvalidArgumentError{Field: "pending", Problem: fmt.Sprintf("%d demand shapes; at most %d are allowed", n, maxPendingDemands)}
	}
	for i, p := range req.GetPending() {
		field := fmt.Sprintf("pending[%d]", i)
		if p.GetCount() < 0 {
			return &InvalidArgumentError{Field: field, Problem: fmt.Sprintf("count %d is negative", p.GetCount())}
		}
		if err := checkResources(field+".resources", p.GetResources()); err != nil {
			return err
		}
	}
	if sp := req.GetSpill(); len(sp.GetLocation()) > maxSpillText || len(sp.GetFailing()) > maxSpillText {
		return &InvalidArgumentError{Field: "spill", Problem: fmt.Sprintf("location or error text longer than %d bytes", maxSpillText)}
	}
	if m := req.GetMemory(); m != nil && proto.Size(m) > maxSpillText {
		return &InvalidArgumentError{Field: "memory", Problem: fmt.Sprintf("memory monitor stats of %d bytes; at most %d are allowed", proto.Size(m), maxSpillText)}
	}
	return nil
}
