package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/connlimit"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/metrics"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/raylet"
	"github.com/hashicorp/go-hclog"
)

// discoveryPeriod is how often the head refreshes its Prometheus
// discovery file from the GCS's node table.
const discoveryPeriod = time.Second

// gcsMetricsSocket is the unix socket, in the session's sockets/, on
// which the head's GCS process serves its metrics to the node host, which
// serves them with its own.
const gcsMetricsSocket = "gcs-metrics.sock"

// nodeMetrics is the node's Prometheus endpoint: its registry, the
// listener on node_ip and, on the head, the discovery file.
type nodeMetrics struct {
	reg    *metrics.Registry
	lis    net.Listener
	srv    *metrics.Server
	disc   *metrics.Discovery
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// listenMetrics makes the node's registry and listens on node_ip at
// metrics.port (0: a free port), unless metrics { enabled = false }. It
// runs before the GCS and the raylet are made, whose servers and
// components the registry then times and reads.
func (n *Node) listenMetrics() error {
	if n.cfg.Metrics.Disabled {
		return nil
	}
	addr := net.JoinHostPort(nodeIPOf(n.cfg), strconv.Itoa(n.cfg.Metrics.Port))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("the metrics endpoint cannot listen on %s (metrics.port / --metrics-port): %w", addr, err)
	}
	// The metrics server does not mark its connections: they are bounded
	// by the caps and its own read and idle timeouts (no deadline, which
	// would cut a scraper's kept-alive connection).
	lis = connlimit.Wrap(lis, connlimit.Options{Name: "metrics", Deadline: -1, Logger: n.log})
	n.metrics = &nodeMetrics{reg: metrics.NewRegistry(""), lis: lis}
	n.info.MetricsAddress = lis.Addr().String()
	return nil
}

// registry is the node's registry (nil when metrics are off).
func (n *Node) registry() *metrics.Registry {
	if n.metrics == nil {
		return nil
	}
	return n.metrics.reg
}

// serveMetrics registers the raylet's and the plugin host's collectors
// and serves /metrics; on the head it also keeps the discovery file.
func (n *Node) serveMetrics() error {
	m := n.metrics
	if m == nil {
		return nil
	}
	if err := m.reg.Register(metrics.RayletCollector(n.raylet.MetricsStats), metrics.PluginCollector(n.pluginMetrics)); err != nil {
		return fmt.Errorf("node metrics: %w", err)
	}
	m.srv = metrics.Serve(m.lis, m.reg, n.auth, n.log.Named("metrics"))
	if n.cfg.Head {
		m.disc = metrics.NewDiscovery(filepath.Join(n.info.SessionDir, metrics.DiscoveryFile))
		n.info.MetricsDiscoveryFile = m.disc.Path()
		ctx, cancel := context.WithCancel(context.Background())
		m.cancel = cancel
		n.refreshDiscovery(ctx) // the file exists once Start returns
		m.wg.Add(1)
		go func() { defer m.wg.Done(); n.runDiscovery(ctx) }()
	}
	return nil
}

// pluginMetrics reports the node's plugins to the metrics.
func (n *Node) pluginMetrics() []metrics.PluginStats {
	if n.plugins == nil {
		return nil
	}
	var out []metrics.PluginStats
	for _, s := range n.plugins.Plugins() {
		out = append(out, metrics.PluginStats{Kind: s.Kind, Name: s.Name, Restarts: s.Restarts, Up: s.State == host.StateRunning})
	}
	return out
}

// runDiscovery keeps the head's discovery file listing every alive node's
// metrics endpoint until ctx ends.
func (n *Node) runDiscovery(ctx context.Context) {
	t := time.NewTicker(discoveryPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.refreshDiscovery(ctx)
		}
	}
}

// refreshDiscovery rewrites the discovery file from the GCS's node table
// when it changed; a GCS that does not answer leaves the file as it is.
func (n *Node) refreshDiscovery(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rep, err := pb.NewGcsClient(n.gcsCC).GetAllNodes(cctx, &pb.GetAllNodesRequest{})
	if err != nil {
		n.log.Debug("metrics discovery: listing nodes", "error", err)
		return
	}
	var targets []metrics.NodeTarget
	for _, v := range rep.GetNodes() {
		in := v.GetInfo()
		if in.GetState() != "ALIVE" || in.GetMetricsAddr() == "" {
			continue
		}
		id, err := ids.FromBytes(in.GetNodeId())
		if err != nil {
			continue
		}
		targets = append(targets, metrics.NodeTarget{Address: in.GetMetricsAddr(), NodeID: id.String(), NodeName: in.GetNodeName(), Head: in.GetIsHead()})
	}
	if err := n.metrics.disc.Update(metrics.TargetGroups(targets, n.auth.TLS())); err != nil {
		n.log.Warn("metrics discovery", "error", err)
	}
}

// stopMetrics stops the discovery loop, removes the discovery file and
// closes the endpoint.
func (n *Node) stopMetrics(ctx context.Context) {
	m := n.metrics
	if m == nil {
		return
	}
	if m.cancel != nil {
		m.cancel()
		m.wg.Wait()
	}
	if m.disc != nil {
		_ = m.disc.Remove()
	}
	if m.srv != nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = m.srv.Close(cctx)
		cancel()
	} else {
		_ = m.lis.Close()
	}
}

// gcsMetricsSocketPath is where the head's GCS process serves its
// metrics, "" when the node's metrics are off.
func (n *Node) gcsMetricsSocketPath() string {
	if n.metrics == nil {
		return ""
	}
	return filepath.Join(n.info.SessionDir, "sockets", gcsMetricsSocket)
}

// serveGCSMetrics serves the GCS process's registry on the unix socket
// path (RunGCS), behind the token check like every endpoint; the head's
// node host reads it (metrics.UnixGatherer) and serves it with its own.
// A stale socket of an earlier GCS process is replaced. The returned
// function stops serving.
func serveGCSMetrics(path string, reg *metrics.Registry, creds *auth.Credentials, log hclog.Logger) (func(), error) {
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("the GCS's metrics cannot listen on %s: %w", path, err)
	}
	srv := metrics.Serve(lis, reg, creds, log)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
		_ = os.Remove(path)
	}, nil
}

// spillObserver is what times the node's spills and restores (nil when
// metrics are off).
func (n *Node) spillObserver() raylet.SpillObserver {
	if n.metrics == nil {
		return nil
	}
	return n.metrics.reg
}
