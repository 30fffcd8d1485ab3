package scale

import (
	"context"
	"fmt"
	"net"
	"runtime/pprof"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/rpc"
)

// Profile labels: every goroutine the harness starts carries labelPart, so
// that a CPU profile of the process splits its time between the GCS, the
// simulated nodes and the rest (real nodes, driver, workers' raylet side).
// The GCS's handler goroutines also carry labelRPC, the method they serve.
const (
	labelPart = "scale_part"
	labelRPC  = "scale_rpc"

	partGCS = "gcs"
	partSim = "sim"
)

// gcsHandle is a GCS serving in this process, built as a head builds its
// own (host/node openGCS): gcs.Open on memory storage, the raylet reserver
// for placement groups, and the servers' options of internal/rpc with the
// cluster's token check.
type gcsHandle struct {
	srv  *gcs.Server
	grpc *grpc.Server
	lis  net.Listener
	res  *gcs.RayletReserver
	stop context.CancelFunc
	done chan struct{}
}

// startGCS starts the GCS on ip:0. Every goroutine of its server and of its
// health checks carries the profile label partGCS; each RPC's goroutine
// also names its method (labelRPC) once its request is decoded.
func startGCS(ctx context.Context, ip string, creds *auth.Credentials, period time.Duration, threshold int, log hclog.Logger) (*gcsHandle, error) {
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, fmt.Errorf("scale: the GCS cannot listen on %s: %w", ip, err)
	}
	reserver := gcs.NewRayletReserver(func(target string) (*grpc.ClientConn, error) { return rpc.Dial(target, creds) })
	srv, err := gcs.Open(ctx, gcs.Options{HeartbeatPeriod: period, FailureThreshold: threshold, Logger: log, Reserver: reserver})
	if err != nil {
		_ = lis.Close()
		_ = reserver.Close()
		return nil, fmt.Errorf("scale: opening the GCS: %w", err)
	}
	label := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		// Not restored: the reply is encoded on this goroutine after the
		// handler returns, and gRPC ends the goroutine with the call.
		pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels(labelPart, partGCS, labelRPC, info.FullMethod)))
		return h(ctx, req)
	})
	g := grpc.NewServer(append(rpc.ServerOptions(creds), label)...)
	srv.Register(g)
	rctx, cancel := context.WithCancel(context.Background())
	h := &gcsHandle{srv: srv, grpc: g, lis: lis, res: reserver, stop: cancel, done: make(chan struct{})}
	served := make(chan struct{})
	pprof.Do(rctx, pprof.Labels(labelPart, partGCS), func(lctx context.Context) {
		go func() { defer close(served); _ = g.Serve(lis) }()
		go func() {
			defer close(h.done)
			srv.Run(lctx)
			g.Stop()
			<-served
		}()
	})
	return h, nil
}

// Addr is where the GCS listens.
func (h *gcsHandle) Addr() string { return h.lis.Addr().String() }

// Close stops the GCS and waits for it.
func (h *gcsHandle) Close() {
	h.stop()
	<-h.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.srv.Close(ctx)
	_ = h.res.Close()
}
