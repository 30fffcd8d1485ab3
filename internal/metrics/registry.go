package metrics

import (
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
)

// Registry is one process's metrics: the Go runtime and process
// collectors, the gRPC server metrics of every server built with
// GRPCServerOptions, the spill and restore histograms, the collectors
// Register adds, and other processes' metrics (AddGatherer). A nil
// *Registry is a node whose metrics are off: every method does nothing.
type Registry struct {
	reg     *prometheus.Registry
	grpc    *grpcprom.ServerMetrics
	spill   prometheus.Histogram
	restore prometheus.Histogram
	extra   prometheus.Gatherers
}

// NewRegistry returns a registry with the runtime collectors and the
// gRPC metrics. A node host's (component "") also has the spill and
// restore histograms; another process of the node (component "gcs": the
// head's GCS process, whose metrics the head's node host serves with its
// own) has its Go runtime and process metrics labelled component.
func NewRegistry(component string) *Registry {
	r := &Registry{reg: prometheus.NewRegistry()}
	var rt prometheus.Registerer = r.reg
	if component != "" {
		rt = prometheus.WrapRegistererWith(prometheus.Labels{"component": component}, r.reg)
	}
	rt.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.grpc = grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace(Namespace)),
		grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramNamespace(Namespace), grpcprom.WithHistogramBuckets(rpcBuckets)),
	)
	r.reg.MustRegister(r.grpc)
	if component == "" {
		r.spill = prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: nameSpillDuration, Buckets: durationBuckets,
			Help: "Time to write one spill file (one or more fused objects) to storage.",
		})
		r.restore = prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: nameRestoreDuration, Buckets: durationBuckets,
			Help: "Time to restore one object from storage into the store.",
		})
		r.reg.MustRegister(r.spill, r.restore)
	}
	r.extra = prometheus.Gatherers{r.reg}
	return r
}

// Register adds collectors (RayletCollector, ClusterCollector, ...).
func (r *Registry) Register(cs ...prometheus.Collector) error {
	if r == nil {
		return nil
	}
	for _, c := range cs {
		if err := r.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// AddGatherer adds another source of metrics to what Gather returns (the
// GCS process's, on a head). Not safe to call while serving.
func (r *Registry) AddGatherer(g prometheus.Gatherer) {
	if r != nil {
		r.extra = append(r.extra, g)
	}
}

// Gather returns every metric of the registry and the added gatherers.
func (r *Registry) Gather() ([]*dto.MetricFamily, error) {
	if r == nil {
		return nil, nil
	}
	return r.extra.Gather()
}

// GRPCServerOptions returns the interceptors that time every call of a
// gRPC server (goray_grpc_server_handling_seconds and the call counters,
// by service and method). They come after the options of
// rpc.ServerOptions: the token check runs first, so refused calls are not
// timed.
func (r *Registry) GRPCServerOptions() []grpc.ServerOption {
	if r == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(r.grpc.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(r.grpc.StreamServerInterceptor()),
	}
}

// ObserveSpill records one spill file written in took.
func (r *Registry) ObserveSpill(_ int64, took time.Duration) {
	if r != nil && r.spill != nil {
		r.spill.Observe(took.Seconds())
	}
}

// ObserveRestore records one object restored in took.
func (r *Registry) ObserveRestore(_ int64, took time.Duration) {
	if r != nil && r.restore != nil {
		r.restore.Observe(took.Seconds())
	}
}
