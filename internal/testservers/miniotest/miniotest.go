package miniotest

import (
	"context"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/minioserver"
)

// EnvBinary names the environment variable that overrides where the MinIO
// server binary is.
const EnvBinary = minioserver.EnvBinary

// Binary returns the path of the MinIO server binary: $GORAY_MINIO, else
// <module root>/.tools/minio (`make tools` installs it there). The error
// says how to get it.
func Binary() (string, error) { return minioserver.Binary() }

// Option configures Start.
type Option func(*minioserver.Options)

// Region sets the server's region (MINIO_SITE_REGION); the default is
// us-east-1.
func Region(r string) Option { return func(o *minioserver.Options) { o.Region = r } }

// startTimeout bounds starting (and restarting) a server.
const startTimeout = 2 * time.Minute

// Server is a running MinIO server of a test, listening on 127.0.0.1 (see
// minioserver.Server for its fields and methods).
type Server struct {
	*minioserver.Server
	t testing.TB
}

// Start starts a MinIO server with a fresh data directory, free ports and
// random root credentials, waits until it answers, and registers cleanup
// (the process is killed, its directories removed) with t. A missing
// binary fails t with a message that says to run `make tools`.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var o minioserver.Options
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := minioserver.Start(ctx, o)
	if err != nil {
		t.Fatalf("miniotest: %v", err)
	}
	t.Cleanup(s.Close)
	return &Server{Server: s, t: t}
}

// Restart stops the server if it runs and starts it again with the same
// data directory, address and credentials, and waits until it is ready;
// failing t if it does not come back.
func (s *Server) Restart() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.Server.Restart(ctx); err != nil {
		s.t.Fatalf("miniotest: %v", err)
	}
}

// CreateBucket creates a bucket, failing t on error.
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Server.CreateBucket(ctx, name); err != nil {
		t.Fatalf("miniotest: %v", err)
	}
}
