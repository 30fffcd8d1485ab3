package config

import (
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/goray-dev/goray/internal/resources"
)

// Defaults of a cluster file's settings.
const (
	// DefaultIdleTimeout is how long a worker node may sit idle before the
	// autoscaler drains and terminates it (idle_timeout).
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultInstallTimeout is how long a launched instance may take to
	// join the cluster before it is terminated as failed (install_timeout).
	DefaultInstallTimeout = 10 * time.Minute
	// DefaultUpscalingSpeed is the cluster's upscaling_speed.
	DefaultUpscalingSpeed = 1.0
)

// ReservedLabelPrefix starts the labels goray sets on the nodes of a
// cluster itself (instance id, node type, cluster name); node types may
// not declare labels with it.
const ReservedLabelPrefix = "goray.io/"

// MaxClusterNameLen is the longest cluster_name and node type name of a
// cluster file, in bytes: both end up in instance names, labels and paths.
const MaxClusterNameLen = 64

// clusterNameRE is what a cluster or node type name may look like: it is
// used in instance ids, label values and the provider's state paths.
var clusterNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Cluster is a cluster file (`goray up cluster.hcl`): the settings of the
// cluster and its autoscaler, the provider that launches its nodes, the
// node types it may launch, and everything a node file accepts, which
// configures the head (Head).
type Cluster struct {
	// Name is cluster_name (required): letters, digits, '.', '_' and '-',
	// at most MaxClusterNameLen bytes. The provider tags every instance
	// with it; goray down finds the cluster's instances by it.
	Name string
	// MaxWorkers caps the worker nodes of all types together
	// (max_workers); left out, it is the sum of the worker types'
	// max_workers.
	MaxWorkers int
	// IdleTimeout is how long a worker node may sit idle (nothing leased)
	// before it is drained and terminated (idle_timeout, default 5m).
	IdleTimeout time.Duration
	// InstallTimeout is how long a launched instance may take to join the
	// cluster (boot, setup commands, goray start) before the autoscaler
	// terminates it and counts a failure (install_timeout, default 10m).
	InstallTimeout time.Duration
	// UpscalingSpeed scales how many nodes may be launching at once
	// (upscaling_speed, default 1.0, > 0), as Ray's does.
	UpscalingSpeed float64
	// HeadNodeType names the node type of the head (head_node_type,
	// required). Its min_workers and max_workers are 0.
	HeadNodeType string
	// Provider is the provider block (exactly one).
	Provider *ProviderBlock
	// SetupCommands run on every instance before goray starts, where the
	// provider has a shell (setup_commands).
	SetupCommands []string
	// NodeTypes are the node_type blocks in file order.
	NodeTypes []NodeType
	// Head is the head's node config: the rest of the file, as a node file
	// would give it. It is always the head (Head.Head is true); its
	// resources and labels the file leaves unset are those of the head's
	// node type; its NodeTypes is nil (they are in NodeTypes).
	Head *Node
	// Filename is the file the cluster came from.
	Filename string
}

// ProviderBlock is the `provider "<name>" { ... }` block of a cluster file:
// the plugin goray-provider-<name> in plugin_dir launches and terminates
// the cluster's nodes.
type ProviderBlock struct {
	// Name is a plain file name, as a plugin's.
	Name string
	// SHA256 optionally pins the plugin binary's checksum (hex).
	SHA256 string
	// Config is the undecoded `config { ... }` block (nil when absent),
	// decoded against the schema the provider plugin reports.
	Config hcl.Body
	// DeclRange is the block's header, for diagnostics.
	DeclRange hcl.Range
}

// LoadCluster reads and parses the cluster file at path and validates it
// (see ParseCluster); before validating, it fills the head's Redis settings
// the file leaves empty from the environment, as LoadWithFlags does. A
// path ending in ".json" is read as HCL's JSON syntax. The returned
// Cluster is never nil and its Head neither, so that Files can render the
// diagnostics; when they contain errors it must not be used.
func LoadCluster(path string) (*Cluster, hcl.Diagnostics) {
	src, err := os.ReadFile(path)
	if err != nil {
		c := newCluster(path)
		c.Head.Filename = path
		return c, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Failed to read cluster file",
			Detail:   fmt.Sprintf("Cannot read the cluster file %q: %s.", path, err),
		}}
	}
	return parseCluster(src, path, os.Getenv)
}

// ParseCluster parses src as a cluster file read from filename and
// validates it: the cluster's rules (Cluster.Validate) and the head's node
// config (Node.Validate). Decoding errors (syntax, unknown names, types,
// missing cluster_name, head_node_type or provider) stop it before
// validation. The environment is not read (LoadCluster reads it).
func ParseCluster(src []byte, filename string) (*Cluster, hcl.Diagnostics) {
	return parseCluster(src, filename, nil)
}

func newCluster(filename string) *Cluster {
	return &Cluster{
		IdleTimeout:    DefaultIdleTimeout,
		InstallTimeout: DefaultInstallTimeout,
		UpscalingSpeed: DefaultUpscalingSpeed,
		Filename:       filename,
		Head:           Default(),
	}
}

func parseCluster(src []byte, filename string, getenv func(string) string) (*Cluster, hcl.Diagnostics) {
	c := newCluster(filename)
	n, diags := parse(src, filename, c)
	c.Head = n
	c.NodeTypes, n.NodeTypes = n.NodeTypes, nil
	diags = append(diags, c.resolveWorkers()...)
	if diags.HasErrors() {
		sortDiagnostics(diags)
		return c, diags
	}
	n.ApplyEnv(getenv)
	rules := c.validateRules()
	if !rules.HasErrors() {
		c.fillHead()
	}
	diags = append(diags, rules...)
	diags = append(diags, n.Validate()...)
	sortDiagnostics(diags)
	return c, diags
}

// Files returns the parsed source files by name, for FormatDiagnostics
// (see Node.Files).
func (c *Cluster) Files() map[string]*hcl.File {
	if c.Head == nil {
		return nil
	}
	return c.Head.Files()
}

// NodeType returns the node type called name.
func (c *Cluster) NodeType(name string) (*NodeType, bool) {
	for i := range c.NodeTypes {
		if c.NodeTypes[i].Name == name {
			return &c.NodeTypes[i], true
		}
	}
	return nil, false
}

// Validate checks the cluster's rules and the head's node config (call it
// again after changing Head, for example with Override): a cluster_name
// and node type names of letters, digits, '.', '_' and '-'; a provider
// whose name is a plain file name and whose sha256 is a hex digest; node
// types unique, with valid resources, at least one CPU, GPU or custom
// resource (above 0 for worker types), no object_store_memory, labels
// within the GCS's bounds and outside ReservedLabelPrefix, and 0 <=
// min_workers <= max_workers; head_node_type naming a node type whose
// resources and labels agree with the head's own; max_workers >= 0 and at
// least the worker types' min_workers together; idle_timeout and
// upscaling_speed positive.
func (c *Cluster) Validate() hcl.Diagnostics {
	diags := c.validateRules()
	if c.Head != nil {
		diags = append(diags, c.Head.Validate()...)
	}
	sortDiagnostics(diags)
	return diags
}

// Keys of Node.ranges for a cluster file's settings.
const (
	keyClMaxWorkers  = "cluster.max_workers"
	keyClIdleTimeout = "cluster.idle_timeout"
	keyClInstall     = "cluster.install_timeout"
	keyClUpscaling   = "cluster.upscaling_speed"
	keyClHeadType    = "cluster.head_node_type"
	keyClSetup       = "cluster.setup_commands"
	keyProvider      = "provider"
)

// clusterSchema is rootSchema plus the settings of a cluster file.
var clusterSchema = func() *hcl.BodySchema {
	s := &hcl.BodySchema{
		Attributes: slices.Clone(rootSchema.Attributes),
		Blocks:     slices.Clone(rootSchema.Blocks),
	}
	s.Attributes = append(s.Attributes,
		hcl.AttributeSchema{Name: "max_workers"},
		hcl.AttributeSchema{Name: "idle_timeout"},
		hcl.AttributeSchema{Name: "install_timeout"},
		hcl.AttributeSchema{Name: "upscaling_speed"},
		hcl.AttributeSchema{Name: "head_node_type"},
		hcl.AttributeSchema{Name: "setup_commands"},
	)
	s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: "provider", LabelNames: []string{"name"}})
	return s
}()

// cluster decodes the cluster's own settings from the root content c of
// body; the node settings are decoded into the head by root.
func (d *decoder) cluster(body hcl.Body, c *hcl.BodyContent) {
	cl := d.cl
	missing := body.MissingItemRange()
	missingErr := func(summary, detail string) {
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  summary,
			Detail:   detail,
			Subject:  missing.Ptr(),
		})
	}

	if c.Attributes["cluster_name"] == nil {
		missingErr("Missing cluster_name",
			"A cluster file needs a name: add cluster_name = \"<name>\" (letters, digits, '.', '_' and '-'). The provider tags every instance with it, and goray down finds the cluster's instances by it.")
	}
	cl.Name = d.n.ClusterName
	d.intVal(c.Attributes["max_workers"], keyClMaxWorkers, &cl.MaxWorkers)
	d.duration(c.Attributes["idle_timeout"], keyClIdleTimeout, &cl.IdleTimeout)
	d.duration(c.Attributes["install_timeout"], keyClInstall, &cl.InstallTimeout)
	d.float(c.Attributes["upscaling_speed"], keyClUpscaling, &cl.UpscalingSpeed)
	if a := c.Attributes["head_node_type"]; a != nil {
		d.str(a, keyClHeadType, &cl.HeadNodeType)
	} else {
		var names []string
		for _, t := range d.n.NodeTypes {
			names = append(names, t.Name)
		}
		detail := "A cluster file names the node type of its head (the node goray up runs on): add head_node_type = \"<name>\""
		if len(names) > 0 {
			detail += fmt.Sprintf(" naming one of its node_type blocks (%s).", strings.Join(names, ", "))
		} else {
			detail += " and a node_type \"<name>\" { resources = { CPU = 1 } } block describing the head."
		}
		missingErr("Missing head_node_type", detail)
	}
	d.stringList(c.Attributes["setup_commands"], keyClSetup, &cl.SetupCommands)

	pb := d.singletons(c.Blocks, "provider")["provider"]
	if pb == nil {
		missingErr("Missing provider block",
			"A cluster file needs exactly one provider block: the plugin goray-provider-<name> in plugin_dir launches and terminates the cluster's nodes. "+
				"For nodes on this machine add provider \"local\" { config { state_dir = \"/tmp/goray-local\" } }.")
		return
	}
	if len(pb.Labels) != 1 { // hcl has reported it
		return
	}
	p := &ProviderBlock{Name: pb.Labels[0], DeclRange: pb.DefRange}
	d.n.ranges[keyProvider+".name"] = pb.LabelRanges[0]
	pc := d.content(pb.Body, providerBlockSchema)
	d.str(pc.Attributes["sha256"], keyProvider+".sha256", &p.SHA256)
	if cfg := d.singletons(pc.Blocks, "config")["config"]; cfg != nil {
		p.Config = cfg.Body
	}
	cl.Provider = p
}

// setIn reports whether the file set the value under key.
func (c *Cluster) setIn(key string) bool {
	if c.Head == nil {
		return false
	}
	_, ok := c.Head.ranges[key]
	return ok
}

// nodeTypeKey is the ranges key prefix of t ("" when t is not from a file).
func nodeTypeKey(t NodeType) string {
	if t.DeclRange == (hcl.Range{}) {
		return ""
	}
	return declKey("node_type", t.DeclRange)
}

// resolveWorkers applies the defaults of the worker counts of a decoded
// file: a worker type without max_workers gets the global max_workers, the
// global max_workers left out is the sum of the worker types', and the head
// type's counts are 0 (with a warning when the file sets them).
func (c *Cluster) resolveWorkers() hcl.Diagnostics {
	var diags hcl.Diagnostics
	globalSet := c.setIn(keyClMaxWorkers)
	sum := 0
	for i := range c.NodeTypes {
		t := &c.NodeTypes[i]
		tk := nodeTypeKey(*t)
		if t.Name == c.HeadNodeType {
			for _, f := range []string{"min_workers", "max_workers"} {
				if r, ok := c.Head.ranges[tk+"."+f]; ok && tk != "" {
					diags = append(diags, &hcl.Diagnostic{
						Severity: hcl.DiagWarning,
						Summary:  "Worker count of the head node type ignored",
						Detail: fmt.Sprintf("Node type %q is the head's (head_node_type), and a cluster has exactly one head: its %s is ignored. "+
							"Remove it, or declare another node_type with these resources for workers.", t.Name, f),
						Subject: r.Ptr(),
					})
				}
			}
			t.MinWorkers, t.MaxWorkers = 0, 0
			continue
		}
		if globalSet && tk != "" && !c.setIn(tk+".max_workers") {
			t.MaxWorkers = c.MaxWorkers
		}
		if t.MaxWorkers > 0 {
			sum = satAdd(sum, t.MaxWorkers)
		}
	}
	if !globalSet {
		c.MaxWorkers = sum
	}
	return diags
}

// satAdd adds non-negative a and b, saturating at math.MaxInt.
func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// validateRules checks the cluster's own rules (see Validate).
func (c *Cluster) validateRules() hcl.Diagnostics {
	head := c.Head
	if head == nil {
		head = &Node{}
	}
	v := &validator{n: head}
	v.cluster(c)
	sortDiagnostics(v.diags)
	return v.diags
}

func (v *validator) cluster(c *Cluster) {
	// An invalid name is the head's node config's error (clusterName).
	if c.Name == "" {
		v.errorf(keyClusterName, "Missing cluster_name", "cluster_name must name the cluster: the provider tags every instance with it. Set cluster_name = \"<name>\".")
	}

	v.provider(c.Provider)

	if c.MaxWorkers < 0 {
		v.errorf(keyClMaxWorkers, "Invalid value", "max_workers must not be negative, got %d. It caps the worker nodes of all types together; use 0 for a cluster of the head alone.", c.MaxWorkers)
	}
	if c.IdleTimeout <= 0 {
		v.errorf(keyClIdleTimeout, "Invalid duration",
			"idle_timeout must be positive, got %s: it is how long a worker node may sit idle before it is drained and terminated. Use for example idle_timeout = \"5m\" (the default).", c.IdleTimeout)
	}
	if c.InstallTimeout <= 0 {
		v.errorf(keyClInstall, "Invalid duration",
			"install_timeout must be positive, got %s: it is how long a launched instance may take to join the cluster before it is terminated as failed. Use for example install_timeout = \"10m\" (the default).", c.InstallTimeout)
	}
	if !(c.UpscalingSpeed > 0) || math.IsInf(c.UpscalingSpeed, 0) {
		v.errorf(keyClUpscaling, "Invalid upscaling_speed",
			"upscaling_speed must be a number greater than 0, got %g: it scales how many nodes may be launching at once, and at 0 the cluster would never grow. Use 1.0 (the default), or more to grow faster.", c.UpscalingSpeed)
	}

	v.nodeTypeList(c.NodeTypes)
	var names []string
	for _, t := range c.NodeTypes {
		names = append(names, t.Name)
		v.clusterNodeType(c, t)
	}

	var headType *NodeType
	switch {
	case c.HeadNodeType == "":
		v.errorf(keyClHeadType, "Missing head_node_type",
			"head_node_type must name the node_type block that describes the head (the node goray up runs on).")
	default:
		if t, ok := c.NodeType(c.HeadNodeType); ok {
			headType = t
		} else if len(names) == 0 {
			v.errorf(keyClHeadType, "Unknown head_node_type",
				"head_node_type is %q, but the file declares no node_type blocks: add node_type %q { resources = { CPU = 1 } } describing the head.",
				c.HeadNodeType, c.HeadNodeType)
		} else {
			v.errorf(keyClHeadType, "Unknown head_node_type",
				"head_node_type is %q, but no node_type block has that name; the node types are %s.%s",
				c.HeadNodeType, strings.Join(names, ", "), didYouMean(c.HeadNodeType, names))
		}
	}

	// The worker types' minimums must fit under the global cap.
	minSum := 0
	var mins []string
	for _, t := range c.NodeTypes {
		if t.Name == c.HeadNodeType || t.MinWorkers <= 0 {
			continue
		}
		minSum = satAdd(minSum, t.MinWorkers)
		mins = append(mins, fmt.Sprintf("%s: %d", t.Name, t.MinWorkers))
	}
	if c.MaxWorkers >= 0 && minSum > c.MaxWorkers {
		v.errorf(keyClMaxWorkers, "Minimum workers exceed max_workers",
			"The node types' min_workers add up to %d (%s), more than max_workers (%d), which caps the workers of all types together. Raise max_workers to at least %d, or lower a min_workers.",
			minSum, strings.Join(mins, ", "), c.MaxWorkers, minSum)
	}

	if headType != nil {
		v.headAgrees(*headType)
	}
}

// clusterName checks a node file's cluster_name, a cluster file's too (in
// its head's config): the name is the cluster's identity, under which a
// head's GCS storage keeps the cluster (a head never resumes another
// cluster's state), and a cluster file's provider tags its instances.
func (v *validator) clusterName() {
	if name := v.n.ClusterName; name != "" {
		if why := clusterNameProblem(name); why != "" {
			v.errorf(keyClusterName, "Invalid cluster_name",
				"cluster_name %q %s. It names the cluster: a head's GCS storage keeps the cluster under it, and a cluster file's provider tags the cluster's instances, labels and state with it; so use letters, digits, '.', '_' and '-' (starting with a letter or digit), at most %d bytes; for example \"demo\".",
				name, why, MaxClusterNameLen)
		}
	}
}

// clusterNameProblem says why name cannot name a cluster or a node type of
// a cluster file ("" when it can).
func clusterNameProblem(name string) string {
	switch {
	case len(name) > MaxClusterNameLen:
		return fmt.Sprintf("is %d bytes long, more than %d", len(name), MaxClusterNameLen)
	case !clusterNameRE.MatchString(name):
		return "contains characters other than letters, digits, '.', '_' and '-', or does not start with a letter or digit"
	}
	return ""
}

func (v *validator) provider(p *ProviderBlock) {
	if p == nil {
		v.errorf("", "Missing provider block",
			"A cluster needs a provider block: the plugin goray-provider-<name> in plugin_dir launches and terminates its nodes (for nodes on this machine: provider \"local\" { config { state_dir = \"/tmp/goray-local\" } }).")
		return
	}
	if p.Name == "" {
		v.errorf(keyProvider+".name", "Missing provider name", "The provider block needs the plugin's name: provider \"<name>\" runs goray-provider-<name> from plugin_dir.")
	} else if why := pluginNameProblem(p.Name); why != "" {
		v.errorf(keyProvider+".name", "Invalid provider name",
			"Provider name %q %s: its binary must be a file directly in plugin_dir (goray-provider-<name> or <name>), so a name cannot reach outside it.", p.Name, why)
	}
	if p.SHA256 != "" {
		if b, err := hex.DecodeString(p.SHA256); err != nil || len(b) != 32 {
			v.errorf(keyProvider+".sha256", "Invalid sha256",
				"The sha256 of provider %q must be 64 hexadecimal digits (sha256sum of the plugin binary), got %q.", p.Name, p.SHA256)
		}
	}
}

// clusterNodeType checks the rules a node type of a cluster file follows
// beyond nodeTypeList's.
func (v *validator) clusterNodeType(c *Cluster, t NodeType) {
	tk := nodeTypeKey(t)
	key := func(suffix string) string {
		if tk == "" {
			return ""
		}
		return tk + suffix
	}
	if t.Name != "" {
		if why := clusterNameProblem(t.Name); why != "" {
			v.errorf(key(".name"), "Invalid node type name",
				"Node type name %q %s. It becomes a label value and part of instance names, so use letters, digits, '.', '_' and '-' (starting with a letter or digit), at most %d bytes.",
				t.Name, why, MaxClusterNameLen)
		}
	}
	isHead := t.Name == c.HeadNodeType

	// Resources: no misspelt well-known names, no object store, and
	// something a task can use.
	wellKnown := []string{resources.CPU, resources.GPU, resources.Memory}
	usable, misspelt := false, false
	for _, name := range slices.Sorted(maps.Keys(t.Resources)) {
		k := key(".resources")
		if k != "" {
			k = entryKey(k, name)
		}
		switch {
		case name == resources.ObjectStoreMemory:
			v.errorf(k, "Reserved resource name",
				"Node type %q sets %q: a node's object store memory is sized by its own object_store { memory = ... } (default 30%% of its memory), not by its node type. Remove it.", t.Name, name)
			continue
		case !slices.Contains(wellKnown, name) && suggestionFold(name, wellKnown) != "":
			s := suggestionFold(name, wellKnown)
			misspelt = true
			v.errorf(k, "Misspelt resource name",
				"Node type %q names resource %q, which would be a custom resource of that name; resource names are case-sensitive. Did you mean %q?", t.Name, name, s)
			continue
		case name == resources.Memory:
			continue
		}
		if t.Resources[name] > 0 || (isHead && t.Resources[name] == 0) {
			usable = true
		}
	}
	if !usable && !misspelt {
		k := key(".resources")
		if !v.hasRange(k) {
			k = ""
		}
		what := "no CPU, GPU or custom resource"
		if !isHead && len(t.Resources) > 0 {
			what = "no CPU, GPU or custom resource above 0"
		}
		d := &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Node type without resources",
			Detail: fmt.Sprintf("Node type %q declares %s, so the autoscaler could place nothing on it. Give it what one node offers, for example resources = { CPU = 2, memory = \"4GiB\" } (and GPU or custom resources as it has).",
				t.Name, what),
		}
		if k != "" {
			d.Subject = v.n.ranges[k].Ptr()
		} else if t.DeclRange != (hcl.Range{}) {
			d.Subject = t.DeclRange.Ptr()
		}
		v.diags = append(v.diags, d)
	}

	// Labels (their bounds are nodeTypeList's).
	lk := key(".labels")
	for _, l := range slices.Sorted(maps.Keys(t.Labels)) {
		if strings.HasPrefix(l, ReservedLabelPrefix) {
			ek := ""
			if lk != "" {
				ek = entryKey(lk, l)
			}
			v.errorf(ek, "Reserved label",
				"Label %q of node type %q is in the %s namespace, which goray sets itself on the cluster's nodes (instance id, node type, cluster name); use another key.",
				l, t.Name, ReservedLabelPrefix)
		}
	}

	// Workers: a worker type needs a max_workers from somewhere.
	if !isHead && tk != "" && !c.setIn(tk+".max_workers") && !c.setIn(keyClMaxWorkers) {
		v.errorAt(t.DeclRange, "Missing max_workers",
			"Node type %q has no max_workers and the file sets no global max_workers, so no node of this type could be launched. Set max_workers in the node_type block (or max_workers at the top of the file, which caps the workers of all types together and is the default of each type's).",
			t.Name)
	}
}

// hasRange reports whether key has a source range.
func (v *validator) hasRange(key string) bool {
	if key == "" {
		return false
	}
	_, ok := v.n.ranges[key]
	return ok
}

// suggestionFold returns the option equal to given ignoring case, or "".
func suggestionFold(given string, options []string) string {
	for _, o := range options {
		if strings.EqualFold(given, o) {
			return o
		}
	}
	return ""
}

// headAgrees checks that the head's own resources and labels (the file's
// resources block and labels) do not contradict the head's node type,
// whose values fill in what they leave out.
func (v *validator) headAgrees(t NodeType) {
	n := v.n
	r := n.Resources
	where := ""
	if t.DeclRange != (hcl.Range{}) {
		where = fmt.Sprintf(" (at %s)", t.DeclRange)
	}
	conflict := func(key, setting, name string, head, typ any) {
		v.errorf(key, "Head resources declared twice",
			"The head's %s is %v, but its node type %q%s gives %s = %v. The head's node type describes the head: set the value in one place (leaving it out of the other), or make them equal.",
			setting, head, t.Name, where, name, typ)
	}
	if f, ok := t.Resources[resources.CPU]; ok && r.CPU != nil && *r.CPU != f {
		conflict(keyCPU, "resources.CPU", resources.CPU, *r.CPU, f)
	}
	if f, ok := t.Resources[resources.GPU]; ok && r.GPU != nil && *r.GPU != f {
		conflict(keyGPU, "resources.GPU", resources.GPU, *r.GPU, f)
	}
	if f, ok := t.Resources[resources.Memory]; ok && r.Memory != nil && float64(*r.Memory) != f {
		conflict(keyMemory, "resources.memory", resources.Memory, *r.Memory, int64(f))
	}
	for _, name := range slices.Sorted(maps.Keys(r.Custom)) {
		if f, ok := t.Resources[name]; ok && r.Custom[name] != f {
			conflict(entryKey(keyCustom, name), fmt.Sprintf("resources.custom[%q]", name), name, r.Custom[name], f)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(n.Labels)) {
		if tv, ok := t.Labels[k]; ok && tv != n.Labels[k] {
			v.errorf(entryKey(keyLabels, k), "Head label declared twice",
				"The head's label %q is %q, but its node type %q%s gives it %q. Set it in one place, or make them equal.",
				k, n.Labels[k], t.Name, where, tv)
		}
	}
}

// fillHead gives the head the resources and labels of its node type that
// the file's resources block and labels leave out. Call it only after
// validateRules found no error.
func (c *Cluster) fillHead() {
	t, ok := c.NodeType(c.HeadNodeType)
	if !ok || c.Head == nil {
		return
	}
	r := &c.Head.Resources
	for name, f := range t.Resources {
		switch name {
		case resources.CPU:
			if r.CPU == nil {
				r.CPU = &f
			}
		case resources.GPU:
			if r.GPU == nil {
				r.GPU = &f
			}
		case resources.Memory:
			if r.Memory == nil {
				m := int64(f)
				r.Memory = &m
			}
		default:
			if _, set := r.Custom[name]; !set {
				r.Custom = maps.Clone(r.Custom)
				if r.Custom == nil {
					r.Custom = map[string]float64{}
				}
				r.Custom[name] = f
			}
		}
	}
	for k, val := range t.Labels {
		if _, set := c.Head.Labels[k]; !set {
			c.Head.Labels = maps.Clone(c.Head.Labels)
			if c.Head.Labels == nil {
				c.Head.Labels = map[string]string{}
			}
			c.Head.Labels[k] = val
		}
	}
}
