package node

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/logrotate"
)

// HeadService is a service a head runs beside its GCS and raylet when a
// command starts it (`goray start --head`, `goray up`): the dashboard with
// its job API, the autoscaler. They live in their own packages
// (host/dashsvc, host/autoscalersvc) and the command passes them in
// Options.HeadServices, so that a program embedding a node (sdk/ray's
// default cluster) links none of them. A service decides from the head
// whether it runs at all (Listen returns nil and the other calls do
// nothing when it does not).
type HeadService interface {
	// Listen sets the service up before the node registers: it opens what
	// it serves (a listener whose address the node's info shows). It runs
	// on every node started with the service; a service that does not
	// apply to this node (not a head, turned off) does nothing.
	Listen(ctx context.Context, h *Head) error
	// Start starts it once the node is registered; a failure stops the
	// node's start.
	Start(ctx context.Context) error
	// Stop stops it, first thing when the node stops (while the raylet
	// and the GCS still serve).
	Stop(ctx context.Context)
}

// Head is what a HeadService sees of its node.
type Head struct{ n *Node }

// Config is the node's configuration.
func (h *Head) Config() *config.Node { return h.n.cfg }

// IsHead reports whether the node is a head started by a command (not an
// embedded node, nor a node that joins).
func (h *Head) IsHead() bool { return h.n.cfg.Head && !h.n.opts.Embedded }

// Cluster is the cluster file of a head started by `goray up` (nil
// otherwise).
func (h *Head) Cluster() *config.Cluster { return h.n.opts.Cluster }

// Context ends when the node stops.
func (h *Head) Context() context.Context { return h.n.ctx }

// Auth is the cluster's credentials.
func (h *Head) Auth() *auth.Credentials { return h.n.auth }

// GCS is the node's connection to the GCS, and GCSAddress its address.
func (h *Head) GCS() *grpc.ClientConn { return h.n.gcsCC }

// GCSAddress is the GCS's address as clients dial it.
func (h *Head) GCSAddress() string { return h.n.info.GCSAddress }

// NodeID is the node's id.
func (h *Head) NodeID() ids.ID { return h.n.id }

// NodeIP is the address other machines reach the node at.
func (h *Head) NodeIP() string { return nodeIPOf(h.n.cfg) }

// SessionDir is the node's session directory.
func (h *Head) SessionDir() string { return h.n.info.SessionDir }

// DataDir is where the head keeps data that outlives its session (the
// GCS's data directory).
func (h *Head) DataDir() string { return h.n.cfg.GCSDataDir() }

// LogLimits bound the log files the service writes.
func (h *Head) LogLimits() logrotate.Limits { return logLimits(h.n.cfg) }

// Plugins is the node's plugin host.
func (h *Head) Plugins() *host.Manager { return h.n.plugins }

// Logger is the node's logger.
func (h *Head) Logger() hclog.Logger { return h.n.log }

// SetDashboardAddress records the address the dashboard serves at in the
// node's info (node.json).
func (h *Head) SetDashboardAddress(addr string) { h.n.info.DashboardAddress = addr }

// listenHeadServices sets every head service up (HeadService.Listen).
func (n *Node) listenHeadServices(ctx context.Context) error {
	h := &Head{n: n}
	for _, s := range n.opts.HeadServices {
		if err := s.Listen(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

// startHeadServices starts every head service (HeadService.Start).
func (n *Node) startHeadServices(ctx context.Context) error {
	for _, s := range n.opts.HeadServices {
		if err := s.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// stopHeadServices stops every head service, in order.
func (n *Node) stopHeadServices(ctx context.Context) {
	for _, s := range n.opts.HeadServices {
		s.Stop(ctx)
	}
}
