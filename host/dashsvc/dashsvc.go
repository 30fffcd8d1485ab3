// Package dashsvc runs the dashboard and its job API on a head, as a
// node.HeadService that `goray start` passes to the node: the dashboard's
// HTTP server (package dashboard), the job supervisor and binary store
// (dashboard/jobs) and the web UI (dashboard/ui). A program embedding a
// node does not link it.
package dashsvc

import (
	"context"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/dashboard/jobs"
	"github.com/goray-dev/goray/dashboard/ui"
	"github.com/goray-dev/goray/host/node"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/state"
)

// JobBinaryDir is where a head keeps uploaded job binaries: in its data
// directory, so they outlive the session.
func JobBinaryDir(dataDir string) string { return filepath.Join(dataDir, "job_binaries") }

// Service is the head's dashboard and job API. Only a head started by a
// command serves it: not an embedded node, nor a node that joins, nor
// with dashboard.enabled false.
type Service struct {
	srv  *dashboard.Server
	jobs *jobs.Supervisor
	log  hclog.Logger
}

// New returns the service; it does nothing until the node calls it.
func New() *Service { return &Service{} }

// Listen opens the dashboard's listener and sets up the job API (records
// loaded from the GCS KV); it serves once the node is registered (Start).
func (s *Service) Listen(ctx context.Context, h *node.Head) error {
	c := h.Config().Dashboard
	if !h.IsHead() || c.Disabled {
		return nil
	}
	s.log = h.Logger()
	srv, err := dashboard.Listen(dashboard.Options{
		Host: c.Host, Port: c.Port, Auth: h.Auth(), Logger: s.log.Named("dashboard"),
	})
	if err != nil {
		return err
	}
	bins, err := jobs.NewBinaries(JobBinaryDir(h.DataDir()), c.MaxBinaryBytes, s.log.Named("jobs"))
	if err != nil {
		_ = srv.Shutdown(ctx)
		return err
	}
	sup := jobs.NewSupervisor(jobs.Options{
		Binaries: bins, Store: jobs.NewGCSStore(pb.NewGcsClient(h.GCS()), h.GCSAddress(), h.NodeID().Bytes()),
		SessionDir: h.SessionDir(), GCSAddress: h.GCSAddress(), NodeIP: h.NodeIP(), Auth: h.Auth(),
		MaxRunning: c.MaxRunningJobs, Logger: s.log.Named("jobs"), LogLimits: h.LogLimits(),
		MaxFinished: h.Config().GCS.History.FinishedJobs, // (the GCS's history cap)
	})
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sup.Load(lctx); err != nil {
		s.log.Warn("job records of earlier heads not loaded", "error", err)
	}
	jobs.Register(srv, sup, bins)
	ui.Register(srv, ui.Options{Source: state.NewGCSSource(h.GCS(), h.Auth()), Jobs: sup, Auth: h.Auth(), Logger: s.log.Named("dashboard")})
	s.srv, s.jobs = srv, sup
	h.SetDashboardAddress(srv.Addr())
	return nil
}

// Start starts serving (the node is registered).
func (s *Service) Start(context.Context) error {
	if s.srv != nil {
		s.srv.Serve()
	}
	return nil
}

// Server returns the dashboard's server (nil when it serves none), so
// more routes can be mounted before the node serves.
func (s *Service) Server() *dashboard.Server { return s.srv }

// Stop stops the server, then every job's driver (while the raylet and
// the GCS still serve, so drivers end cleanly and the last records are
// written).
func (s *Service) Stop(ctx context.Context) {
	if s.srv == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(sctx)
	if err := s.jobs.Close(ctx); err != nil {
		s.log.Warn("stopping jobs", "error", err)
	}
	s.srv, s.jobs = nil, nil
}
