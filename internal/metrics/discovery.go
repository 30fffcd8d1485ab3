package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DiscoveryFile is where a head keeps its Prometheus file-based service
// discovery file, relative to its session directory.
var DiscoveryFile = filepath.Join("metrics", "prometheus_sd.json")

// Target labels the head's discovery file gives every node's target.
const (
	TargetNodeID   = "node_id"
	TargetNodeName = "node_name"
	TargetHead     = "head"
)

// TargetGroup is one entry of a file_sd file: Prometheus scrapes each of
// Targets and adds Labels to its series.
type TargetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// NodeTarget is one node's metrics endpoint, for the discovery file.
type NodeTarget struct {
	Address  string
	NodeID   string
	NodeName string
	Head     bool
}

// TargetGroups turns nodes into file_sd groups, one per node, ordered by
// node id; https sets the scheme Prometheus scrapes them with (the
// cluster has TLS).
func TargetGroups(nodes []NodeTarget, https bool) []TargetGroup {
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b NodeTarget) int { return strings.Compare(a.NodeID, b.NodeID) })
	out := make([]TargetGroup, 0, len(nodes))
	for _, n := range nodes {
		l := map[string]string{TargetNodeID: n.NodeID, TargetNodeName: n.NodeName, TargetHead: fmt.Sprint(n.Head)}
		if https {
			l["__scheme__"] = "https"
		}
		out = append(out, TargetGroup{Targets: []string{n.Address}, Labels: l})
	}
	return out
}

// Discovery keeps a file_sd file current. It is used by one goroutine.
type Discovery struct {
	path string
	last []byte
}

// NewDiscovery returns a writer of the file at path.
func NewDiscovery(path string) *Discovery { return &Discovery{path: path} }

// Path is the file's path.
func (d *Discovery) Path() string { return d.path }

// Update writes groups to the file when they differ from what it holds,
// atomically (a new file renamed over the old one, as Prometheus expects
// of file_sd files), creating its directory.
func (d *Discovery) Update(groups []TargetGroup) error {
	if groups == nil {
		groups = []TargetGroup{} // "[]": no targets, not null
	}
	b, err := json.MarshalIndent(groups, "", "  ")
	if err != nil {
		return err
	}
	if d.last != nil && bytes.Equal(b, d.last) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(d.path), 0o700); err != nil {
		return fmt.Errorf("metrics discovery file: %w", err)
	}
	tmp := d.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("metrics discovery file: %w", err)
	}
	if err := os.Rename(tmp, d.path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("metrics discovery file: %w", err)
	}
	d.last = b
	return nil
}

// Remove deletes the file.
func (d *Discovery) Remove() error {
	err := os.Remove(d.path)
	if os.IsNotExist(err) {
		return nil
	}
	return err
}
