package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/connlimit"
	"github.com/goray-dev/goray/internal/logrotate"
	"github.com/goray-dev/goray/internal/metrics"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// gcsMaxMessage bounds one message to the GCS.
const gcsMaxMessage = 16 << 20

// gcsOpenTimeout bounds opening the GCS's storage (reaching Redis, taking
// the bbolt file lock) when a GCS starts.
const gcsOpenTimeout = 20 * time.Second

// PortInUseError says the GCS port is taken, usually by another head.
type PortInUseError struct {
	Address string
	Err     error
}

func (e *PortInUseError) Error() string {
	return fmt.Sprintf("cannot start the head: %s is already in use (another goray head or program listens there; stop it with `goray stop` or pick another --port)", e.Address)
}

// Unwrap returns the listen error.
func (e *PortInUseError) Unwrap() error { return e.Err }

// gcsAddress is where the head's GCS listens: the config's address with
// the port flag applied. The default address (config.DefaultHeadAddress:
// neither head { address } nor --address names another) stands for the
// node's IP with the default port, so that a head started with --node-ip
// serves its GCS where nodes that join it as that flag suggests look for
// it, as its raylet and metrics do.
func gcsAddress(cfg *config.Node) string {
	addr := cfg.Address
	if addr == "" || addr == config.DefaultHeadAddress {
		_, port, _ := net.SplitHostPort(config.DefaultHeadAddress)
		addr = net.JoinHostPort(nodeIPOf(cfg), port)
	}
	if cfg.Port != 0 {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = "127.0.0.1"
		}
		addr = net.JoinHostPort(host, strconv.Itoa(cfg.Port))
	}
	return addr
}

// gcsStorage is the storage of the head's GCS: the gcs block's choice,
// else bbolt in the data directory for a started head and memory for an
// embedded one (a `go run` program keeps nothing).
func gcsStorage(cfg *config.Node, embedded, fresh bool) (gcs.Storage, error) {
	backend := cfg.GCS.Storage
	if backend == "" {
		backend = config.GCSStorageBolt
		if embedded {
			backend = config.GCSStorageMemory
		}
	}
	// The cluster's name (a cluster file's cluster_name) is its identity
	// in the storage: a GCS never resumes another cluster's state.
	st := gcs.Storage{Fresh: fresh, Cluster: cfg.ClusterName}
	switch backend {
	case config.GCSStorageMemory:
		st.Backend = gcs.BackendMemory
	case config.GCSStorageBolt:
		dir := cfg.GCSDataDir()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return st, fmt.Errorf("GCS storage: creating the data directory %s (data_dir / --data-dir): %w", dir, err)
		}
		st.Backend, st.Path = gcs.BackendBolt, filepath.Join(dir, "gcs.db")
	case config.GCSStorageRedis:
		r := cfg.GCS.Redis
		st.Backend = gcs.BackendRedis
		st.RedisAddress, st.RedisUsername, st.RedisPassword, st.RedisDB, st.RedisPrefix = r.Address, r.Username, r.Password, r.DB, r.Prefix
		if t := r.TLS; t.Enabled {
			// Paths only (made absolute, so that they mean the same to a
			// process started elsewhere): the GCS reads the files itself.
			st.RedisTLS = &gcs.RedisTLS{CAFile: absFile(t.CAFile), CertFile: absFile(t.CertFile), KeyFile: absFile(t.KeyFile), ServerName: t.ServerName}
		}
	default:
		return st, fmt.Errorf("GCS storage: unknown backend %q", backend)
	}
	return st, nil
}

// absFile makes a non-empty path absolute (unchanged when that fails).
func absFile(p string) string {
	if p == "" {
		return p
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// historyLimits are the GCS's caps of the history block (zero: the
// defaults).
func historyLimits(h config.GCSHistory) gcs.HistoryLimits {
	return gcs.HistoryLimits{DeadNodes: h.DeadNodes, DeadActors: h.DeadActors, FinishedJobs: h.FinishedJobs,
		RemovedPlacementGroups: h.RemovedPlacementGroups, TaskEvents: h.TaskEvents}
}

// gcsServer is a GCS serving on a listener: what a head runs in its own
// process (RunGCS) or, embedded, inside the node.
type gcsServer struct {
	srv  *gcs.Server
	grpc *grpc.Server
	lis  net.Listener
	res  *gcs.RayletReserver
	done chan struct{}
}

// openGCS listens on addr and opens the GCS's storage (serve serves them);
// errors name the address taken, or the storage's path or address.
// Listening comes first so that a second head on the same port says so,
// rather than that the first one holds the storage. reg (nil: none) times
// the GCS's calls and reads its tables when Prometheus scrapes.
func openGCS(ctx context.Context, addr string, st gcs.Storage, cfg *config.Node, creds *auth.Credentials, log hclog.Logger, reg *metrics.Registry) (*gcsServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, &PortInUseError{Address: addr, Err: err}
		}
		return nil, fmt.Errorf("GCS cannot listen on %s: %w", addr, err)
	}
	lis = connlimit.Wrap(lis, connlimit.Options{Name: "GCS", Logger: log})
	// The GCS reserves placement group bundles on the raylets with the
	// cluster's credentials.
	reserver := gcs.NewRayletReserver(func(target string) (*grpc.ClientConn, error) { return rpc.Dial(target, creds) })
	octx, cancel := context.WithTimeout(ctx, gcsOpenTimeout)
	defer cancel()
	srv, err := gcs.Open(octx, gcs.Options{
		HeartbeatPeriod: cfg.HealthCheck.Period, FailureThreshold: cfg.HealthCheck.FailureThreshold,
		Logger: log, Reserver: reserver, Storage: st,
		// Jobs' env is sealed in the storage with a key derived from it.
		Token:   creds.Token(),
		History: historyLimits(cfg.GCS.History),
	})
	if err != nil {
		_ = lis.Close()
		_ = reserver.Close()
		return nil, err
	}
	// No GCS message comes near the 256 MiB other servers accept (a KV
	// value is at most 8 MiB), so an authenticated but misbehaving peer
	// cannot make the head read more than this per call.
	g := grpc.NewServer(append(append(rpc.ServerOptions(creds), grpc.MaxRecvMsgSize(gcsMaxMessage)), reg.GRPCServerOptions()...)...)
	srv.Register(g)
	if err := reg.Register(metrics.ClusterCollector(srv.MetricsStats)); err != nil {
		log.Warn("GCS metrics", "error", err)
	}
	return &gcsServer{srv: srv, grpc: g, lis: lis, res: reserver, done: make(chan struct{})}, nil
}

// Addr is where the GCS listens.
func (s *gcsServer) Addr() string { return s.lis.Addr().String() }

// serve serves until ctx ends, then stops the server, waits for its
// health checks and placement manager (Run) and closes the storage.
func (s *gcsServer) serve(ctx context.Context) {
	defer close(s.done)
	ran := make(chan struct{})
	go func() { defer close(ran); s.srv.Run(ctx) }()
	go func() { _ = s.grpc.Serve(s.lis) }()
	<-ctx.Done()
	stopGRPC(s.grpc)
	<-ran
	cctx, cancel := context.WithTimeout(context.Background(), gcsCloseTimeout)
	defer cancel()
	_ = s.srv.Close(cctx)
	_ = s.res.Close()
}

// gcsCloseTimeout bounds writing out what the GCS's journal still holds
// when it stops; with stopGRPC's 2 s it stays within the 10 s the head
// gives its GCS process to exit.
const gcsCloseTimeout = 5 * time.Second

// GCSSpec is what a GCS process runs: the head passes it (as JSON in
// EnvGCSSpec) to `goray gcs-server`, which calls RunGCS. The Redis
// password is not part of the JSON: it travels in
// config.EnvGCSRedisPassword.
type GCSSpec struct {
	// Address is where the GCS listens (host:port).
	Address string `json:"address"`
	// Storage is the GCS's storage.
	Storage gcs.Storage `json:"storage"`
	// HeartbeatPeriod and FailureThreshold are the nodes' health checks.
	HeartbeatPeriod  time.Duration `json:"heartbeat_period"`
	FailureThreshold int           `json:"failure_threshold"`
	// LogFile receives the GCS's log; LogLevel is an hclog level name.
	// The head passes its GCS process LogStderr instead: the process logs
	// on its stderr, which the head copies into LogFile through a rotating
	// writer (internal/logrotate, with LogLimits), so that one process
	// writes the file.
	LogFile   string           `json:"log_file"`
	LogLevel  string           `json:"log_level"`
	LogStderr bool             `json:"log_stderr,omitempty"`
	LogLimits logrotate.Limits `json:"-"`
	// ReadyFile is where RunGCS writes a GCSReady once it serves, or the
	// error that stopped it.
	ReadyFile string `json:"ready_file"`
	// MetricsSocket, when set, is the unix socket the GCS serves its
	// metrics on, for the head's node host to serve with its own.
	MetricsSocket string `json:"metrics_socket,omitempty"`
	// History caps what the GCS keeps of the cluster's past (the gcs
	// block's history block; zero fields: the defaults).
	History config.GCSHistory `json:"history"`
}

// EnvGCSSpec holds a GCSSpec as JSON in a GCS process's environment.
const EnvGCSSpec = "GORAY_GCS_SPEC"

// GCSReady is what a GCS process writes to its ready file.
type GCSReady struct {
	Pid       int    `json:"pid"`
	Address   string `json:"address,omitempty"`
	ClusterID string `json:"cluster_id,omitempty"`
	Restored  bool   `json:"restored,omitempty"`
	Storage   string `json:"storage,omitempty"`
	// ClusterName is the cluster's name; Discarded the id of the stored
	// cluster the GCS discarded to start a new one (gcs.Server.Discarded).
	ClusterName string `json:"cluster_name,omitempty"`
	Discarded   string `json:"discarded,omitempty"`
	// Error says why the GCS could not start; PortInUse marks a taken
	// address.
	Error     string `json:"error,omitempty"`
	PortInUse bool   `json:"port_in_use,omitempty"`
}

// GCSSpecFromEnv reads the spec a head gave its GCS process, with the
// Redis password (from config.EnvGCSRedisPassword) in its storage.
func GCSSpecFromEnv() (GCSSpec, error) {
	var spec GCSSpec
	raw := os.Getenv(EnvGCSSpec)
	if raw == "" {
		return spec, fmt.Errorf("$%s is not set: `goray gcs-server` is started by a head node (`goray start --head`), not by hand", EnvGCSSpec)
	}
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return spec, fmt.Errorf("$%s: %w", EnvGCSSpec, err)
	}
	spec.Storage.RedisPassword = os.Getenv(config.EnvGCSRedisPassword)
	return spec, nil
}

// RunGCS runs a GCS in this process until ctx ends: it listens on the
// spec's address, opens its storage, and writes the ready file (the error,
// when it cannot start). It is the main of `goray gcs-server`.
func RunGCS(ctx context.Context, spec GCSSpec, creds *auth.Credentials) error {
	log := hclog.NewNullLogger()
	if spec.LogStderr {
		log = hclog.New(&hclog.LoggerOptions{Name: "gcs", Output: os.Stderr, Level: hclog.LevelFromString(spec.LogLevel)})
	} else if spec.LogFile != "" {
		f, err := os.OpenFile(spec.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("opening log %s: %w", spec.LogFile, err)
		}
		defer f.Close()
		log = hclog.New(&hclog.LoggerOptions{Name: "gcs", Output: f, Level: hclog.LevelFromString(spec.LogLevel)})
	}
	creds.SetLogger(log.Named("auth"))
	cfg := &config.Node{HealthCheck: config.HealthCheck{Period: spec.HeartbeatPeriod, FailureThreshold: spec.FailureThreshold},
		GCS: config.GCS{History: spec.History}}
	var reg *metrics.Registry
	if spec.MetricsSocket != "" {
		reg = metrics.NewRegistry("gcs")
	}
	s, err := openGCS(ctx, spec.Address, spec.Storage, cfg, creds, log, reg)
	ready := GCSReady{Pid: os.Getpid()}
	if err != nil {
		log.Error("the GCS cannot start", "error", err)
		ready.Error = err.Error()
		var pe *PortInUseError
		ready.PortInUse = errors.As(err, &pe)
		_ = writeJSON(spec.ReadyFile, ready)
		return err
	}
	ready.Address, ready.ClusterID, ready.Restored = s.Addr(), s.srv.ClusterID(), s.srv.Restored()
	ready.ClusterName, ready.Discarded = s.srv.ClusterName(), s.srv.Discarded()
	ready.Storage = spec.Storage.String()
	go s.serve(ctx)
	if spec.MetricsSocket != "" {
		stop, err := serveGCSMetrics(spec.MetricsSocket, reg, creds, log.Named("metrics"))
		if err != nil {
			log.Warn("the GCS serves no metrics", "error", err)
		} else {
			defer stop()
		}
	}
	log.Info("GCS serving", "address", ready.Address, "cluster", ready.ClusterID, "name", ready.ClusterName, "storage", ready.Storage, "restored", ready.Restored)
	if err := writeJSON(spec.ReadyFile, ready); err != nil {
		log.Error("writing the ready file", "error", err)
	}
	<-s.done
	log.Info("GCS stopped")
	return nil
}

// writeJSON writes v as JSON to path atomically ("" writes nothing).
func writeJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
