package node

import (
	"context"
	"path/filepath"
	"time"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/dashboard/jobs"
	"github.com/goray-dev/goray/dashboard/ui"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/state"
)

// nodeDashboard is the head's HTTP server (package dashboard) and what it
// serves: the job API's supervisor and binary store.
type nodeDashboard struct {
	srv  *dashboard.Server
	jobs *jobs.Supervisor
}

// JobBinaryDir is where a head keeps uploaded job binaries: in its data
// directory, so they outlive the session.
func JobBinaryDir(dataDir string) string { return filepath.Join(dataDir, "job_binaries") }

// listenDashboard opens the head's dashboard listener and sets up the job
// API (records loaded from the GCS KV); Serve comes once the node is
// registered (serveDashboard). Only a started head serves it: not an
// embedded node, nor a node that joins, nor with dashboard.enabled false.
func (n *Node) listenDashboard(ctx context.Context) error {
	c := n.cfg.Dashboard
	if !n.cfg.Head || n.opts.Embedded || c.Disabled {
		return nil
	}
	srv, err := dashboard.Listen(dashboard.Options{
		Host: c.Host, Port: c.Port, Auth: n.auth, Logger: n.log.Named("dashboard"),
	})
	if err != nil {
		return err
	}
	bins, err := jobs.NewBinaries(JobBinaryDir(n.cfg.GCSDataDir()), c.MaxBinaryBytes, n.log.Named("jobs"))
	if err != nil {
		_ = srv.Shutdown(ctx)
		return err
	}
	sup := jobs.NewSupervisor(jobs.Options{
		Binaries: bins, Store: jobs.NewGCSStore(pb.NewGcsClient(n.gcsCC), n.info.GCSAddress, n.id.Bytes()),
		SessionDir: n.info.SessionDir, GCSAddress: n.info.GCSAddress, NodeIP: nodeIPOf(n.cfg), Auth: n.auth,
		MaxRunning: c.MaxRunningJobs, Logger: n.log.Named("jobs"), LogLimits: logLimits(n.cfg),
		MaxFinished: n.cfg.GCS.History.FinishedJobs, // (the GCS's history cap)
	})
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sup.Load(lctx); err != nil {
		n.log.Warn("job records of earlier heads not loaded", "error", err)
	}
	jobs.Register(srv, sup, bins)
	ui.Register(srv, ui.Options{Source: state.NewGCSSource(n.gcsCC, n.auth), Jobs: sup, Auth: n.auth, Logger: n.log.Named("dashboard")})
	n.dash = &nodeDashboard{srv: srv, jobs: sup}
	n.info.DashboardAddress = srv.Addr()
	return nil
}

// serveDashboard starts serving (the node is registered).
func (n *Node) serveDashboard() {
	if n.dash != nil {
		n.dash.srv.Serve()
	}
}

// Dashboard returns the head's dashboard server (nil when it serves
// none), so more routes can be mounted before the node serves.
func (n *Node) Dashboard() *dashboard.Server {
	if n.dash == nil {
		return nil
	}
	return n.dash.srv
}

// stopDashboard stops the server, then every job's driver (while the
// raylet and the GCS still serve, so drivers end cleanly and the last
// records are written).
func (n *Node) stopDashboard(ctx context.Context) {
	if n.dash == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = n.dash.srv.Shutdown(sctx)
	if err := n.dash.jobs.Close(ctx); err != nil {
		n.log.Warn("stopping jobs", "error", err)
	}
	n.dash = nil
}
