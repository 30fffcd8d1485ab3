package config

import (
	"net"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// exposure checks settings that would open the node to more than its
// cluster: a wildcard node_ip is refused, a wildcard GCS address warned
// about.
func (v *validator) exposure() {
	n := v.n
	if ip := net.ParseIP(n.NodeIP); ip != nil && ip.IsUnspecified() {
		v.errorf(keyNodeIP, "Wildcard node_ip",
			"node_ip %q is a wildcard: every port of this node (the GCS on the head, the raylet, every worker, the object data plane and the plugins' listeners) would listen on every interface of the machine, reachable from every network it is on, and node_ip is also the address other nodes reach this node at, which a wildcard is not. Set node_ip to this machine's address on the cluster's network (for example 10.0.0.5), or leave it out for 127.0.0.1 (this machine only).",
			n.NodeIP)
	}
	if !n.Head || n.Address == "" {
		return
	}
	if host, _, err := net.SplitHostPort(n.Address); err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			d := &hcl.Diagnostic{
				Severity: hcl.DiagWarning,
				Summary:  "GCS listens on every interface",
				Detail: "The head's address " + n.Address + " is a wildcard: the GCS (which registers nodes and jobs) is reachable from every network this machine is on. " +
					"Give the head's address on the cluster's network (for example 10.0.0.5:6380) instead.",
			}
			if r, ok := n.ranges[keyAddress]; ok {
				d.Subject = r.Ptr()
			}
			v.diags = append(v.diags, d)
		}
	}
}

// pluginNameProblem says why name cannot name a plugin binary inside
// plugin_dir ("" when it can): the binary is <plugin_dir>/goray-<kind>-<name>
// or <plugin_dir>/<name>, so a name must be one plain file name.
func pluginNameProblem(name string) string {
	switch {
	case name == "":
		return ""
	case name == "." || name == "..":
		return "is a directory reference"
	case strings.ContainsAny(name, `/\`):
		return "contains a path separator"
	case strings.ContainsRune(name, 0):
		return "contains a NUL byte"
	case filepath.Base(name) != name:
		return "is not a plain file name"
	}
	return ""
}
