package config

import (
	"fmt"
	"maps"
	"strconv"

	"github.com/hashicorp/hcl/v2"
)

// DefaultDashboardPort is the port of the head's dashboard and job API
// (Ray's 8265).
const DefaultDashboardPort = 8265

// Metrics configures the node's Prometheus endpoint (the metrics block):
//
//	metrics {
//	  port = 9100   # default 0: a free port, written to the session's node.json and the head's discovery file
//	  enabled = true
//	}
//
// Every node serves /metrics on node_ip unless enabled is false.
type Metrics struct {
	// Disabled turns the endpoint off (enabled = false).
	Disabled bool
	// Port is the TCP port of the endpoint; 0 picks a free one.
	Port int
}

// Dashboard configures the head's dashboard and job API (the dashboard
// block), on the head only:
//
//	dashboard {
//	  host = "127.0.0.1"   # default: 127.0.0.1, this machine only (as Ray's dashboard_host)
//	  port = 8265
//	  enabled = true
//	  max_binary_size = "2GiB"   # the largest job binary the job API accepts
//	  max_running_jobs = 16      # job drivers running at once; later jobs wait in PENDING
//	}
type Dashboard struct {
	// Disabled turns the dashboard and the job API off (enabled = false).
	Disabled bool
	// Host is the address the dashboard listens on ("" means 127.0.0.1).
	Host string
	// Port is its TCP port (0 means DefaultDashboardPort; -1 a free one).
	Port int
	// MaxBinaryBytes bounds an uploaded job binary (0: 2 GiB).
	MaxBinaryBytes int64
	// MaxRunningJobs bounds the job drivers running at once (0: 16).
	MaxRunningJobs int

	// envErr is why $GORAY_DASHBOARD_PORT could not be used.
	envErr string
}

// EnvDashboardPort sets dashboard.port when neither the file nor
// --dashboard-port does: a port, or -1 for a free one. The tests set it to
// -1 so that heads started beside each other (by test packages running at
// once, or a test beside a person's head) never race for the default
// port, which is an error when taken.
const EnvDashboardPort = "GORAY_DASHBOARD_PORT"

// applyDashboardEnv fills dashboard.port from $GORAY_DASHBOARD_PORT
// (ApplyEnv calls it); a value it cannot use is reported by Validate.
func (n *Node) applyDashboardEnv(getenv func(string) string) {
	v := getenv(EnvDashboardPort)
	if v == "" || n.Dashboard.Port != 0 {
		return // unset, or set by the file or a flag
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < -1 || p > 65535 {
		n.Dashboard.envErr = fmt.Sprintf("$%s=%q: want a port up to 65535, or -1 for a free one", EnvDashboardPort, v)
		return
	}
	n.Dashboard.Port = p
	n.fromEnv = maps.Clone(n.fromEnv)
	if n.fromEnv == nil {
		n.fromEnv = map[string]string{}
	}
	n.fromEnv[keyDashboardPort] = EnvDashboardPort
}

const (
	keyMetricsEnabled   = "metrics.enabled"
	keyMetricsPort      = "metrics.port"
	keyDashboardEnabled = "dashboard.enabled"
	keyDashboardHost    = "dashboard.host"
	keyDashboardPort    = "dashboard.port"
	keyDashboardMaxBin  = "dashboard.max_binary_size"
	keyDashboardMaxJobs = "dashboard.max_running_jobs"
)

var metricsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "enabled"}, {Name: "port"}},
}

var dashboardSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "enabled"}, {Name: "host"}, {Name: "port"}, {Name: "max_binary_size"}, {Name: "max_running_jobs"}},
}

// metrics decodes the metrics block (b may be nil).
func (d *decoder) metrics(b *hcl.Block) {
	if b == nil {
		return
	}
	c := d.content(b.Body, metricsSchema)
	enabled := true
	if d.boolVal(c.Attributes["enabled"], keyMetricsEnabled, &enabled) {
		d.n.Metrics.Disabled = !enabled
	}
	d.intVal(c.Attributes["port"], keyMetricsPort, &d.n.Metrics.Port)
}

// dashboard decodes the dashboard block (b may be nil).
func (d *decoder) dashboard(b *hcl.Block) {
	if b == nil {
		return
	}
	c := d.content(b.Body, dashboardSchema)
	enabled := true
	if d.boolVal(c.Attributes["enabled"], keyDashboardEnabled, &enabled) {
		d.n.Dashboard.Disabled = !enabled
	}
	d.str(c.Attributes["host"], keyDashboardHost, &d.n.Dashboard.Host)
	d.intVal(c.Attributes["port"], keyDashboardPort, &d.n.Dashboard.Port)
	d.size(c.Attributes["max_binary_size"], keyDashboardMaxBin, &d.n.Dashboard.MaxBinaryBytes)
	d.intVal(c.Attributes["max_running_jobs"], keyDashboardMaxJobs, &d.n.Dashboard.MaxRunningJobs)
}

// observability checks the metrics and dashboard blocks: ports in range.
func (v *validator) observability() {
	n := v.n
	if p := n.Metrics.Port; p < 0 || p > 65535 {
		v.errorf(keyMetricsPort, "Invalid port", "metrics.port must be 0 (a free port) to 65535, got %d.", p)
	}
	if e := n.Dashboard.envErr; e != "" {
		v.errorf("", "Invalid environment variable", "%s; it sets the dashboard's port.", e)
	}
	if p := n.Dashboard.Port; p < -1 || p > 65535 {
		v.errorf(keyDashboardPort, "Invalid port", "dashboard.port must be -1 (a free port), 0 (the default, %d) or a port up to 65535, got %d.", DefaultDashboardPort, p)
	}
	if b := n.Dashboard.MaxBinaryBytes; b < 0 || b > 1<<40 {
		v.errorf(keyDashboardMaxBin, "Invalid size", "dashboard.max_binary_size must be from 1 byte to 1 TiB (0: the default, 2 GiB), got %d.", b)
	}
	if j := n.Dashboard.MaxRunningJobs; j < 0 || j > 4096 {
		v.errorf(keyDashboardMaxJobs, "Invalid count", "dashboard.max_running_jobs must be from 1 to 4096 (0: the default, 16), got %d.", j)
	}
}
