// Package node runs one goray node in the current process: the shared-memory
// object store, the raylet and, on the head, the GCS. `goray start` runs it
// as a daemon; sdk/ray runs it embedded inside a driver when no cluster
// address is given.
package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/gcs"
	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/connlimit"
	"github.com/goray-dev/goray/internal/gpu"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/logrotate"
	"github.com/goray-dev/goray/internal/metrics"
	"github.com/goray-dev/goray/internal/objstore"
	"github.com/goray-dev/goray/internal/plugindial"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/spawn"
	"github.com/goray-dev/goray/plugins/fs/fsstore"
	"github.com/goray-dev/goray/raylet"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/storage"
	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Options configures Start.
type Options struct {
	// Config is the node's configuration, already validated.
	Config *config.Node
	// Embedded runs the node inside a driver: the session directory is a
	// fresh temporary directory removed by Stop.
	Embedded bool
	// Logger overrides the node's log (default: logs/node.log in the
	// session directory).
	Logger hclog.Logger
	// WorkerOutput, when set, also receives worker stdout/stderr lines.
	WorkerOutput io.Writer
	// Auth is the cluster's credentials, required of every caller of the
	// node's servers and handed to its workers and plugins. Nil generates a
	// new token (an embedded node: only this process and its children know
	// it).
	Auth *auth.Credentials
	// GCSCommand, on a head that is not embedded, runs the GCS as its own
	// process: the command line of `goray gcs-server` (RunGCS). The node
	// supervises it and restarts it when it dies, so the GCS can fail and
	// come back alone while the head's raylet and workers go on. Nil runs
	// the GCS inside the node process.
	GCSCommand []string
	// Fresh discards the cluster the head's GCS storage holds and starts a
	// new one (`goray start --head --fresh`); Resume resumes it even when
	// it ended cleanly (--resume). Without either, a head resumes a
	// stored cluster that did not end cleanly (its head crashed or was
	// killed) and starts a new one after a clean end (End), or when the
	// storage holds another cluster that ended cleanly; it refuses to
	// start on one that did not (gcs/lifecycle.go). The cluster is
	// Config.ClusterName (a cluster file's cluster_name), else
	// gcs.DefaultClusterName.
	Fresh, Resume bool
	// Cluster, on a head started by `goray up`, is the cluster file: the
	// head runs its provider plugin (under the plugin host, restarted when
	// it dies) and the cluster's autoscaler. Config is then Cluster.Head.
	Cluster *config.Cluster
	// GorayBinary is the goray executable running this node, when it is
	// one (not an embedded node): plugins learn it as
	// plugin.EnvGorayBinary.
	GorayBinary string
	// HeadServices run beside the GCS and raylet on a head a command
	// starts (the dashboard, the autoscaler; headservice.go), set up,
	// started and stopped in this order.
	HeadServices []HeadService
}

// Info is what a running node writes to SessionDir/node.json so that CLI
// commands can find it.
type Info struct {
	NodeID       string `json:"node_id"`
	NodeName     string `json:"node_name"`
	Head         bool   `json:"head"`
	GCSAddress   string `json:"gcs_address"`
	RayletSocket string `json:"raylet_socket"`
	// RayletAddress is the raylet's host:port for other nodes.
	RayletAddress string `json:"raylet_address"`
	SessionDir    string `json:"session_dir"`
	Pid           int    `json:"pid"`
	LogFile       string `json:"log_file"`
	// On a head: the cluster's id, the GCS's storage, whether the GCS
	// resumed a stored cluster, and the GCS process (0 when the GCS runs
	// inside the node process) and its log.
	ClusterID   string `json:"cluster_id,omitempty"`
	GCSStorage  string `json:"gcs_storage,omitempty"`
	GCSRestored bool   `json:"gcs_restored,omitempty"`
	GCSPid      int    `json:"gcs_pid,omitempty"`
	GCSLogFile  string `json:"gcs_log_file,omitempty"`

	// GCSDiscarded is the id of the stored cluster the GCS discarded to
	// start this one (it had ended cleanly, or --fresh).
	GCSDiscarded string `json:"gcs_discarded,omitempty"`

	// ClusterName is the cluster file's cluster_name on a head started by
	// `goray up` (which runs the autoscaler); goray down finds it by it.
	ClusterName string `json:"cluster_name,omitempty"`
	// TLS names the node's TLS files (paths, no secrets), so that commands
	// on this machine speak TLS to the cluster without being told.
	TLS *auth.TLSFiles `json:"tls,omitempty"`
	// MetricsAddress is the node's Prometheus endpoint (host:port; ""
	// when metrics are off); MetricsDiscoveryFile, on the head, the
	// Prometheus file_sd file listing every node's (docs/metrics.md).
	MetricsAddress       string `json:"metrics_address,omitempty"`
	MetricsDiscoveryFile string `json:"metrics_discovery_file,omitempty"`
	// DashboardAddress, on a head, is its dashboard and job API
	// (host:port; https when the node has TLS).
	DashboardAddress string `json:"dashboard_address,omitempty"`
}

// Node is a running node.
type Node struct {
	opts    Options
	cfg     *config.Node
	log     hclog.Logger
	logFile io.WriteCloser // node.log, rotating
	id      ids.ID
	info    Info

	auth    *auth.Credentials
	store   *objstore.Store
	plugins *host.Manager
	// tensorPool is the node's pool of freed tensor segments (nil: off);
	// ownsDefaultPool: this node set it as the process's default.
	tensorPool      *shmem.Pool
	ownsDefaultPool bool
	gcsIn           *gcsServer  // the GCS inside this process
	gcsProc         *gcsProcess // or the GCS process
	infoMu          sync.Mutex  // info's GCS fields change when the GCS restarts
	published       bool        // node.json was written (infoMu)
	gcsCC           *grpc.ClientConn
	raylet          *raylet.Raylet
	rayletGRPC      *grpc.Server
	dataLis         net.Listener // the raylet's object data plane
	metrics         *nodeMetrics // the Prometheus endpoint (nil: off; metrics.go)

	// gcsStorage is the head's GCS storage, which End marks; failed is why
	// the node stopped itself (Err), guarded by failMu.
	gcsStorage gcs.Storage
	failMu     sync.Mutex
	failed     error

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}
	once   sync.Once
}

// Start starts a node and returns once it serves. Descriptors the process
// inherited from its parent are marked close-on-exec first, so the node's
// workers and plugins never hold them (spawn.CloseOnExecInherited).
func Start(ctx context.Context, opts Options) (_ *Node, err error) {
	if err := spawn.CloseOnExecInherited(); err != nil {
		return nil, err
	}
	cfg := opts.Config
	if cfg == nil {
		cfg = config.Default()
		cfg.Head = true
	}
	// A config made in code (ray.WithConfig) gets the checks a file gets.
	if diags := cfg.Validate(); diags.HasErrors() {
		return nil, config.NewDiagnosticsError(diags, cfg.Files())
	}
	if opts.Cluster != nil {
		if !cfg.Head {
			return nil, errors.New("a cluster file configures a head node")
		}
		// The provider is one more plugin of the head.
		c := *cfg
		c.Plugins = append(slices.Clone(cfg.Plugins), ProviderBlock(opts.Cluster))
		cfg = &c
	}
	n := &Node{opts: opts, cfg: cfg, id: ids.New(), done: make(chan struct{})}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.Stop(context.Background())
		}
	}()
	if err := n.makeSessionDir(); err != nil {
		return nil, err
	}
	if err := n.openLog(); err != nil {
		return nil, err
	}
	if n.auth = opts.Auth; n.auth == nil {
		if n.auth, err = auth.New(auth.GenerateToken(), nil); err != nil {
			return nil, err
		}
	}
	n.auth.SetLogger(n.log.Named("auth"))
	n.info.TLS = n.auth.TLSFiles()
	if !n.auth.Enabled() {
		n.log.Warn("authentication is disabled: anyone who can reach this node's ports can run code on it as this user; use it only on a trusted network")
	}
	if err := n.listenMetrics(); err != nil {
		return nil, err
	}

	total, storeCap, err := n.resources()
	if err != nil {
		return nil, err
	}
	inline := cfg.ObjectStore.InlineLimit
	if inline <= 0 {
		inline = 100 << 10
	}
	n.store, err = objstore.New(objstore.Config{Capacity: storeCap, SocketPath: filepath.Join(n.info.SessionDir, "sockets", "store.sock"), Logger: n.log.Named("store")})
	if err != nil {
		return nil, fmt.Errorf("starting the object store: %w", err)
	}

	gcsAddr := cfg.Address
	if cfg.Head {
		if gcsAddr, err = n.startGCS(ctx); err != nil {
			return nil, err
		}
	}
	if gcsAddr == "" {
		return nil, errors.New("no GCS address: start a head node or give --address")
	}
	n.info.GCSAddress = gcsAddr

	// Plugins start before the raylet serves, so every configured transport
	// is registered before any actor can be created on this node. They
	// learn the GCS (for rendezvous through its KV store), the node id and
	// the node IP from their environment.
	if err := n.startTensorPool(); err != nil {
		return nil, fmt.Errorf("the tensor segment pool: %w", err)
	}
	if err := n.startPlugins(ctx); err != nil {
		return nil, err
	}
	if n.gcsCC, err = rpc.Dial(gcsAddr, n.auth); err != nil {
		return nil, fmt.Errorf("connecting to GCS %s: %w", gcsAddr, err)
	}
	if err := n.listenHeadServices(ctx); err != nil {
		return nil, err
	}

	n.info.RayletSocket = filepath.Join(n.info.SessionDir, "sockets", "raylet.sock")
	name := cfg.NodeName
	if name == "" {
		name, _ = os.Hostname()
	}
	n.info.NodeName = name
	nodeIP := nodeIPOf(cfg)
	tcpLis, err := net.Listen("tcp", net.JoinHostPort(nodeIP, strconv.Itoa(cfg.RayletPort)))
	if err != nil {
		return nil, fmt.Errorf("the raylet cannot listen on %s:%d (raylet_port / --raylet-port): %w", nodeIP, cfg.RayletPort, err)
	}
	// Peers that have not shown the token are bounded on every TCP
	// listener (internal/connlimit): a flood of idle connections cannot
	// take the node's descriptors.
	tcpLis = connlimit.Wrap(tcpLis, connlimit.Options{Name: "raylet gRPC", Logger: n.log})
	n.info.RayletAddress = tcpLis.Addr().String()
	dataLis, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		_ = tcpLis.Close()
		return nil, fmt.Errorf("the raylet cannot listen on %s for object transfers: %w", nodeIP, err)
	}
	dataLis = connlimit.Wrap(dataLis, connlimit.Options{Name: "object data plane", Logger: n.log})
	n.dataLis = dataLis
	spill, err := n.spillConfig(ctx)
	if err != nil {
		_ = tcpLis.Close()
		return nil, err
	}
	spill.Observer = n.spillObserver()
	n.raylet, err = raylet.New(raylet.Config{
		Spill:      spill,
		TCPAddress: n.info.RayletAddress, ObjectAddress: dataLis.Addr().String(), NodeIP: nodeIP, BinaryCacheDir: filepath.Join(cfg.TempDir, "binaries"),
		NodeID: n.id, NodeName: name, SessionDir: n.info.SessionDir, SocketPath: n.info.RayletSocket,
		Resources: total, Labels: cfg.Labels, Store: storeAdapter{n.store}, InlineLimit: inline,
		GCS: pb.NewGcsClient(n.gcsCC), GCSAddress: gcsAddr, IsHead: cfg.Head, Pool: cfg.WorkerPool,
		HeartbeatPeriod: cfg.HealthCheck.Period, GCSReconnectTimeout: cfg.GCS.ReconnectTimeout, Logger: n.log.Named("raylet"), LogLevel: cfg.LogLevel,
		LogLimits:    logLimits(cfg),
		WorkerOutput: opts.WorkerOutput, Plugins: n.pluginStatus, Transports: n.transportConn, TransportEndpoints: n.transportEndpoint, Auth: n.auth,
		MetricsAddress: n.info.MetricsAddress, DashboardAddress: n.info.DashboardAddress,
		MemoryMonitor: cfg.MemoryMonitor,
		TensorPool:    raylet.TensorPoolConfig{Pool: n.tensorPool, MaxMemory: cfg.TensorPool.MaxMemory, IdleTimeout: cfg.TensorPool.IdleTimeout},
	})
	if err != nil {
		_ = tcpLis.Close()
		return nil, fmt.Errorf("starting the raylet: %w", err)
	}
	lis, err := net.Listen("unix", n.info.RayletSocket)
	if err != nil {
		_ = tcpLis.Close()
		return nil, fmt.Errorf("listening on %s: %w", n.info.RayletSocket, err)
	}
	n.rayletGRPC = grpc.NewServer(append(append(rpc.ServerOptions(n.auth), rpc.FixedWindowServerOptions()...), n.registry().GRPCServerOptions()...)...)
	n.raylet.Register(n.rayletGRPC)
	n.wg.Add(3)
	go func() { defer n.wg.Done(); _ = n.rayletGRPC.Serve(lis) }()
	go func() { defer n.wg.Done(); _ = n.rayletGRPC.Serve(tcpLis) }()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.raylet.ServeData(dataLis) }()
	go func() {
		defer n.wg.Done()
		if err := n.raylet.Run(n.ctx); err != nil && n.ctx.Err() == nil {
			n.log.Error("raylet stopped", "error", err)
		}
		n.signalDone()
	}()
	go func() {
		select {
		case <-n.raylet.Done():
			if err := n.raylet.Err(); err != nil {
				// The GCS is gone for good, belongs to another cluster,
				// or declared this node dead: say why the node stops.
				n.log.Error("stopping the node", "reason", err)
				n.fail(err)
			} else {
				n.log.Info("shutdown requested")
			}
			n.signalDone()
		case <-n.done:
		}
	}()
	// Serving means registered: drivers find nodes through the GCS.
	if err := n.waitRegistered(ctx); err != nil {
		return nil, err
	}
	if err := n.serveMetrics(); err != nil {
		return nil, err
	}
	if opts.Cluster != nil {
		n.info.ClusterName = opts.Cluster.Name
	}
	if err := n.startHeadServices(ctx); err != nil {
		return nil, err
	}
	if err := n.writeInfo(); err != nil {
		return nil, err
	}
	if !opts.Embedded && cfg.Head {
		// Only a head that came up becomes "the latest session".
		latest := filepath.Join(filepath.Dir(n.info.SessionDir), "session_latest")
		_ = os.Remove(latest)
		_ = os.Symlink(n.info.SessionDir, latest)
	}
	n.log.Info("node started", "node", n.id.Short(), "head", cfg.Head, "gcs", gcsAddr, "resources", total.String(), "session", n.info.SessionDir)
	return n, nil
}

// registerTimeout bounds how long a starting node waits to be listed as
// alive by the GCS; gcsAbsentGrace how long a joining node goes on while
// nothing listens at the GCS address (connection refused, a name that does
// not resolve) before its start fails saying so: enough for a head whose
// GCS process is restarting, without making `goray start --address` of a
// head that is not there wait for registerTimeout.
const (
	registerTimeout = 30 * time.Second
	gcsAbsentGrace  = 3 * time.Second
)

// waitRegistered waits until the GCS lists this node as alive. It fails at
// once when the GCS refuses the node (a wrong token, a TLS mismatch: a
// *auth.TLSError), after gcsAbsentGrace when a joining node finds nothing
// listening at the GCS address (a *GCSAbsentError), and otherwise after
// registerTimeout, with the last error seen.
func (n *Node) waitRegistered(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	client := pb.NewGcsClient(n.gcsCC)
	addr := n.info.GCSAddress
	var (
		last        error
		absentSince time.Time
	)
	for {
		rep, err := client.GetAllNodes(ctx, &pb.GetAllNodesRequest{})
		if err := refusedByHead(addr, n.auth.TLS(), err); err != nil {
			return err
		}
		if err == nil {
			for _, v := range rep.Nodes {
				if bytes.Equal(v.GetInfo().GetNodeId(), n.id[:]) && v.GetInfo().GetState() == "ALIVE" {
					return nil
				}
			}
		} else if ctx.Err() == nil {
			last = err
		}
		switch {
		case n.cfg.Head || !gcsAbsent(err):
			absentSince = time.Time{}
		case absentSince.IsZero():
			absentSince = time.Now()
		case time.Since(absentSince) >= gcsAbsentGrace:
			return &GCSAbsentError{Address: addr, Err: err}
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("the node did not register with the GCS at %s within %s: %w (last error: %v)", addr, registerTimeout, ctx.Err(), last)
			}
			return fmt.Errorf("the node did not register with the GCS at %s within %s: %w", addr, registerTimeout, ctx.Err())
		case <-n.done:
			if err := n.raylet.Err(); err != nil {
				return fmt.Errorf("the node stopped before it registered with the GCS at %s: %w", addr, err)
			}
			return fmt.Errorf("the node stopped before it registered with the GCS at %s", addr)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// GCSAbsentError says that a joining node found nothing listening at the
// GCS address: the connection was refused, or the name does not resolve.
type GCSAbsentError struct {
	// Address is the GCS address the node was given.
	Address string
	// Err is the last call's error.
	Err error
}

// Error names the address and the connection's error.
func (e *GCSAbsentError) Error() string {
	return fmt.Sprintf("cannot reach the GCS at %s: %s (is a goray head running there? check --address, or start one with `goray start --head`)",
		e.Address, dialCause(e.Err))
}

// Unwrap returns the last call's error.
func (e *GCSAbsentError) Unwrap() error { return e.Err }

// gcsAbsent reports whether err says that nothing listens at the address
// (as opposed to a slow or lossy network, which is worth waiting for).
func gcsAbsent(err error) bool {
	if status.Code(err) != codes.Unavailable {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"connection refused", "no such host", "no route to host", "network is unreachable"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// dialCause is the part of a gRPC connection error that says what the
// dial found ("dial tcp 10.0.0.5:6380: connect: connection refused"), or
// the whole error when it has no such part.
func dialCause(err error) string {
	msg := status.Convert(err).Message()
	if _, after, ok := strings.Cut(msg, "Error while dialing: "); ok {
		return strings.TrimRight(after, `"`)
	}
	return msg
}

// refusedByHead returns err, explained, when it says the GCS at addr will
// never accept this node as it is (a wrong token; TLS on one side only, or
// a certificate the other side does not trust: a *auth.TLSError), so that
// start fails at once instead of retrying until it times out; nil for
// errors worth retrying.
func refusedByHead(addr string, clientTLS bool, err error) error {
	switch {
	case err == nil:
		return nil
	case status.Code(err) == codes.Unauthenticated:
		return fmt.Errorf("the GCS at %s refused this node: %w", addr, err)
	case status.Code(err) == codes.Unavailable:
		var te *auth.TLSError
		if err := auth.ExplainTLS(addr, clientTLS, err); errors.As(err, &te) {
			return err
		}
	}
	return nil
}

// PluginDir is the node's plugin_dir; a relative one is relative to the
// config file, like other paths in it, and made absolute.
func PluginDir(cfg *config.Node) string {
	dir := cfg.PluginDir
	if dir != "" && !filepath.IsAbs(dir) && cfg.Filename != "" {
		dir = absFile(filepath.Join(filepath.Dir(cfg.Filename), dir))
	}
	return dir
}

// startPlugins runs the config's plugin blocks under a supervised host.
func (n *Node) startPlugins(ctx context.Context) error {
	if len(n.cfg.Plugins) == 0 {
		return nil
	}
	lockFile := ""
	if n.cfg.Filename != "" {
		lockFile = config.LockPath(n.cfg.Filename)
	}
	n.plugins = host.New(host.Options{
		PluginDir: PluginDir(n.cfg), LockFile: lockFile, Blocks: n.cfg.Plugins, Files: n.cfg.Files(), Logger: n.log.Named("plugins"),
		SocketDir: filepath.Join(n.info.SessionDir, "sockets"), LogDir: filepath.Join(n.info.SessionDir, "logs"), LogLimits: logLimits(n.cfg),
		Env: append([]string{plugin.EnvGCSAddress + "=" + n.info.GCSAddress, plugin.EnvNodeID + "=" + n.id.String(),
			plugin.EnvNodeIP + "=" + nodeIPOf(n.cfg), plugin.EnvGorayBinary + "=" + n.opts.GorayBinary}, append(n.auth.Env(), n.tensorPoolEnv()...)...),
		Supported: map[string][]int{plugin.KindTransport: {transport.APIVersion}, plugin.KindStorage: {storage.APIVersion}, plugin.KindProvider: {provider.APIVersion}},
	})
	if diags := n.plugins.Start(ctx); diags.HasErrors() {
		return config.NewDiagnosticsError(diags, n.cfg.Files())
	}
	return nil
}

// pluginStatus reports the node's plugins (raylet GetNodeStats).
func (n *Node) pluginStatus() []*pb.PluginStatus {
	if n.plugins == nil {
		return nil
	}
	var out []*pb.PluginStatus
	for _, s := range n.plugins.Plugins() {
		out = append(out, &pb.PluginStatus{Kind: s.Kind, Name: s.Name, Version: s.Version, Path: s.Path, State: s.State,
			Restarts: int32(s.Restarts), Pid: int32(s.Pid), ApiVersion: int32(s.APIVersion), LastError: s.LastError, Sha256: s.SHA256})
	}
	return out
}

// transportConn returns a connection to the transport plugin name.
func (n *Node) transportConn(name string) (grpc.ClientConnInterface, error) {
	if n.plugins == nil {
		return nil, fmt.Errorf("no transport %q: this node runs no plugins", name)
	}
	conn, _, err := n.plugins.Client(plugin.KindTransport, name)
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// transportEndpoint returns how the node's workers call transport plugin
// name directly.
func (n *Node) transportEndpoint(name string) (plugindial.Endpoint, error) {
	if n.plugins == nil {
		return plugindial.Endpoint{}, fmt.Errorf("no transport %q: this node runs no plugins", name)
	}
	return n.plugins.Endpoint(plugin.KindTransport, name)
}

// spillConfig sets up spilling: to the configured storage plugin, else to
// local disk through the fs backend run in-process.
func (n *Node) spillConfig(ctx context.Context) (raylet.SpillConfig, error) {
	sp := n.cfg.Spilling
	sc := raylet.SpillConfig{
		Threshold: n.cfg.ObjectStore.SpillThreshold, MinFileSize: sp.MinFileSize, MaxObjectsPerFile: sp.MaxObjectsPerFile,
		KeepFiles: sp.KeepFiles, Wait: sp.Wait,
		Prefix: filepath.Base(n.info.SessionDir) + "/" + n.id.String()[:12] + "/",
	}
	if sp.Disabled {
		return sc, nil
	}
	if sp.Storage != "" {
		name := sp.Storage
		sc.Storage = func() (storage.Storage, error) {
			conn, v, err := n.plugins.Client(plugin.KindStorage, name)
			if err != nil {
				return nil, err
			}
			return storage.NewClient(conn, v), nil
		}
		sc.Location = "plugin storage " + strconv.Quote(name)
		sc.Shared = name // other nodes with the same plugin read its files
		sc.ArenaPath = n.store.ArenaPath()
		if st, err := sc.Storage(); err == nil {
			ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if info, err := st.Info(ictx, &storage.InfoRequest{}); err == nil && info.Location != "" {
				sc.Location = info.Location
			}
			cancel()
		}
		return sc, nil
	}
	dir := sp.Directory
	if dir == "" {
		dir = filepath.Join(n.info.SessionDir, "spill")
	}
	fs, err := fsstore.Open(ctx, dir, false)
	if err != nil {
		return sc, fmt.Errorf("spilling to %s: %w", dir, err)
	}
	sc.Storage = func() (storage.Storage, error) { return fs, nil }
	sc.Location = fs.Location()
	return sc, nil
}

// Auth returns the node's credentials (what a driver in the same process
// presents).
func (n *Node) Auth() *auth.Credentials { return n.auth }

// Plugins returns the node's plugin host (nil when no plugin is configured).
func (n *Node) Plugins() *host.Manager { return n.plugins }

func (n *Node) signalDone() {
	n.once.Do(func() { close(n.done) })
}

func (n *Node) makeSessionDir() error {
	var dir string
	var err error
	if n.opts.Embedded {
		// Short paths: unix socket paths are limited to 107 bytes.
		dir, err = os.MkdirTemp("", "goray-")
	} else {
		root := n.cfg.TempDir
		if root == "" {
			root = config.DefaultTempDir()
		}
		if err = PrepareTempRoot(root); err != nil {
			return err
		}
		dir = filepath.Join(root, fmt.Sprintf("session_%s_%d", time.Now().Format("2006-01-02_15-04-05"), os.Getpid()))
		err = os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		return fmt.Errorf("creating session dir: %w", err)
	}
	// Private to this user: sockets, logs and node.json.
	for _, sub := range []string{"sockets", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
	}
	n.info.SessionDir = dir
	n.info.Pid = os.Getpid()
	n.info.NodeID = n.id.String()
	n.info.Head = n.cfg.Head
	return nil
}

func (n *Node) openLog() error {
	if n.opts.Logger != nil {
		n.log = n.opts.Logger
		return nil
	}
	path := filepath.Join(n.info.SessionDir, "logs", "node.log")
	f := logrotate.Open(path, logLimits(n.cfg))
	if _, err := f.Write(nil); err != nil { // the file exists from the start
		return fmt.Errorf("opening log %s: %w", path, err)
	}
	n.logFile = f
	n.info.LogFile = path
	n.log = hclog.New(&hclog.LoggerOptions{Name: "goray", Output: f, Level: hclog.LevelFromString(n.cfg.LogLevel)})
	return nil
}

// LogWriter returns the writer of the node's log file (node.log, through
// its rotating writer): bytes written to it land in node.log as they are.
// It is nil when Options.Logger replaced the file.
func (n *Node) LogWriter() io.Writer {
	if n.logFile == nil {
		return nil
	}
	return n.logFile
}

// logLimits are the bounds of every log file of the node (the logs
// block).
func logLimits(cfg *config.Node) logrotate.Limits {
	return logrotate.Limits{MaxFileSize: cfg.Logs.MaxFileSize, MaxFiles: cfg.Logs.MaxFiles}
}

// resources computes the node's totals from config and detection.
func (n *Node) resources() (resources.Set, int64, error) {
	rc := n.cfg.Resources
	memTotal := totalMemory()
	storeCap := n.cfg.ObjectStore.Memory
	if storeCap <= 0 {
		storeCap = memTotal * 3 / 10
		if storeCap <= 0 {
			storeCap = 2 << 30
		}
	}
	fl := map[string]float64{}
	for k, v := range rc.Custom {
		fl[k] = v
	}
	fl[resources.CPU] = float64(runtime.NumCPU())
	if rc.CPU != nil {
		fl[resources.CPU] = *rc.CPU
	}
	if rc.GPU != nil {
		fl[resources.GPU] = *rc.GPU
	} else {
		fl[resources.GPU] = float64(gpu.Count(gpu.NewNVML(), n.log.Named("gpu")))
	}
	mem := memTotal - storeCap
	if rc.Memory != nil {
		mem = *rc.Memory
	}
	if mem > 0 {
		fl[resources.Memory] = float64(mem)
	}
	fl[resources.ObjectStoreMemory] = float64(storeCap)
	set, err := resources.FromFloats(fl)
	return set, storeCap, err
}

// startGCS starts the head's GCS, as its own process when Options.GCSCommand
// says how, else inside this process, and returns its address.
func (n *Node) startGCS(ctx context.Context) (string, error) {
	st, err := gcsStorage(n.cfg, n.opts.Embedded, n.opts.Fresh)
	if err != nil {
		return "", err
	}
	st.Resume = n.opts.Resume
	n.gcsStorage = st
	addr := gcsAddress(n.cfg)
	if len(n.opts.GCSCommand) == 0 || n.opts.Embedded {
		s, err := openGCS(ctx, addr, st, n.cfg, n.auth, n.log.Named("gcs"), n.registry())
		if err != nil {
			return "", err
		}
		n.gcsIn = s
		n.info.ClusterID, n.info.GCSRestored = s.srv.ClusterID(), s.srv.Restored()
		n.info.GCSStorage, n.info.GCSDiscarded = st.String(), s.srv.Discarded()
		n.wg.Add(1)
		go func() { defer n.wg.Done(); s.serve(n.ctx) }()
		return s.Addr(), nil
	}
	n.info.GCSLogFile = filepath.Join(n.info.SessionDir, "logs", "gcs.log")
	spec := GCSSpec{
		Address: addr, Storage: st,
		HeartbeatPeriod: n.cfg.HealthCheck.Period, FailureThreshold: n.cfg.HealthCheck.FailureThreshold,
		LogFile: n.info.GCSLogFile, LogLevel: n.cfg.LogLevel, LogLimits: logLimits(n.cfg), ReadyFile: filepath.Join(n.info.SessionDir, "gcs.json"),
		MetricsSocket: n.gcsMetricsSocketPath(),
		History:       n.cfg.GCS.History,
	}
	if spec.MetricsSocket != "" {
		n.metrics.reg.AddGatherer(metrics.UnixGatherer(spec.MetricsSocket, n.auth))
	}
	p, ready, err := startGCSProcess(ctx, n.opts.GCSCommand, spec, n.auth, nil, n.log.Named("gcs"), n.gcsRestarted, n.gcsLost)
	if err != nil {
		return "", err
	}
	n.gcsProc = p
	n.infoMu.Lock()
	n.info.ClusterID, n.info.GCSRestored, n.info.GCSStorage, n.info.GCSPid = ready.ClusterID, ready.Restored, ready.Storage, ready.Pid
	n.info.GCSDiscarded = ready.Discarded
	n.infoMu.Unlock()
	return ready.Address, nil
}

// gcsRestarted records a restarted GCS process in node.json (once Start
// has written it).
func (n *Node) gcsRestarted(r GCSReady) {
	n.infoMu.Lock()
	defer n.infoMu.Unlock()
	n.info.GCSPid, n.info.GCSRestored, n.info.ClusterID = r.Pid, r.Restored, r.ClusterID
	if !n.published {
		return
	}
	if err := n.writeInfoLocked(); err != nil {
		n.log.Warn("updating node.json", "error", err)
	}
}

// gcsLost stops the node: its GCS died and cannot come back.
func (n *Node) gcsLost(err error) {
	n.log.Error("stopping the node", "reason", err)
	n.fail(err)
	n.signalDone()
}

// fail records why the node stops itself (the first reason wins).
func (n *Node) fail(err error) {
	n.failMu.Lock()
	defer n.failMu.Unlock()
	if n.failed == nil {
		n.failed = err
	}
}

// Err says why the node stopped itself (its GCS gone for good, another
// cluster's, or this node declared dead); nil while it runs and when it
// was asked to stop (a shutdown request, Stop, End).
func (n *Node) Err() error {
	n.failMu.Lock()
	defer n.failMu.Unlock()
	return n.failed
}

func (n *Node) writeInfo() error {
	n.infoMu.Lock()
	defer n.infoMu.Unlock()
	return n.writeInfoLocked()
}

func (n *Node) writeInfoLocked() error {
	n.published = true
	b, _ := json.MarshalIndent(n.info, "", "  ")
	path := filepath.Join(n.info.SessionDir, "node.json")
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// Stats returns the node's raylet statistics (what `goray status` shows
// of it, and more).
func (n *Node) Stats(ctx context.Context) (*pb.GetNodeStatsReply, error) {
	return n.raylet.GetNodeStats(ctx, &pb.GetNodeStatsRequest{})
}

// Info returns where the node serves.
func (n *Node) Info() Info {
	n.infoMu.Lock()
	defer n.infoMu.Unlock()
	return n.info
}

// ID returns the node id.
func (n *Node) ID() ids.ID { return n.id }

// Done is closed when the node was asked to stop (ShutdownNode) or failed.
func (n *Node) Done() <-chan struct{} { return n.done }

// Stop shuts the node down: workers are killed, servers stop, the store's
// memory is released and sockets are removed. An embedded node also removes
// its session directory. Idempotent. A head's cluster does not end: the
// next head on its GCS storage resumes it (End ends it).
func (n *Node) Stop(ctx context.Context) error { return n.stop(ctx, false) }

// End shuts the node down as Stop does and, on a head, ends its cluster:
// once the GCS stopped, the GCS storage is marked (durably, gcs.End) so
// that the next head on it starts a new cluster unless told --resume.
// It is the orderly end of `goray stop` and `goray down` (a shutdown
// request or SIGTERM); a head that dies or is killed, and one that stops
// itself on a failure (Err), leaves its cluster to be resumed. An error
// says the cluster was not marked (the node is stopped all the same).
func (n *Node) End(ctx context.Context) error { return n.stop(ctx, true) }

// endCluster marks the head's cluster ended in its storage (End), and
// logs it; the GCS has stopped.
func (n *Node) endCluster(ctx context.Context) error {
	if !n.cfg.Head || n.Err() != nil {
		return nil
	}
	st, id := n.gcsStorage, n.Info().ClusterID
	if st.Backend == "" || st.Backend == gcs.BackendMemory || id == "" {
		return nil // nothing outlives the GCS
	}
	ctx, cancel := context.WithTimeout(ctx, gcsOpenTimeout)
	defer cancel()
	if err := gcs.End(ctx, st, id); err != nil {
		n.log.Error("the cluster is not marked as ended: the next head on its storage resumes it", "cluster", id, "error", err)
		return fmt.Errorf("cluster %s is not marked as ended, so the next head on its storage resumes it (start that one with --fresh for a new cluster): %w", id, err)
	}
	n.log.Info("cluster ended: the next head on its storage starts a new cluster (--resume resumes this one)", "cluster", id, "storage", st.String())
	return nil
}

func (n *Node) stop(ctx context.Context, end bool) error {
	n.signalDone()
	n.stopMetrics(ctx)
	// First: a stopping head launches, drains and terminates nothing, and
	// its jobs' drivers end while the raylet and the GCS still serve.
	n.stopHeadServices(ctx)
	if n.raylet != nil {
		if err := n.raylet.Shutdown(ctx); err != nil {
			n.log.Warn("raylet shutdown", "error", err)
		}
	}
	n.cancel()
	if n.dataLis != nil {
		_ = n.dataLis.Close()
	}
	if n.rayletGRPC != nil {
		stopGRPC(n.rayletGRPC)
	}
	n.wg.Wait() // the GCS inside this process stops with n.ctx
	if n.gcsProc != nil {
		n.gcsProc.stop(ctx)
	}
	var err error
	if end {
		err = n.endCluster(ctx)
	}
	if n.plugins != nil {
		if err := n.plugins.Stop(ctx); err != nil {
			n.log.Warn("stopping plugins", "error", err)
		}
	}
	if n.gcsCC != nil {
		_ = n.gcsCC.Close()
	}
	n.stopTensorPool() // after the plugins: nobody puts segments in it any more
	if n.store != nil {
		_ = n.store.Close()
	}
	if n.info.SessionDir != "" {
		_ = os.RemoveAll(filepath.Join(n.info.SessionDir, "sockets"))
		_ = os.Remove(filepath.Join(n.info.SessionDir, "node.json"))
		_ = os.Remove(filepath.Join(n.info.SessionDir, "gcs.json"))
		if n.opts.Embedded {
			_ = os.RemoveAll(n.info.SessionDir)
		}
	}
	if n.logFile != nil {
		_ = n.logFile.Close()
		n.logFile = nil
	}
	return err
}

func stopGRPC(s *grpc.Server) {
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		s.Stop()
	}
}

// totalMemory returns the machine's memory in bytes from /proc/meminfo.
func totalMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// ReadInfo reads the node.json of a session directory.
func ReadInfo(sessionDir string) (Info, error) {
	var info Info
	b, err := os.ReadFile(filepath.Join(sessionDir, "node.json"))
	if err != nil {
		return info, err
	}
	return info, json.Unmarshal(b, &info)
}

// storeAdapter presents an objstore.Store as a raylet.ObjectStore.
type storeAdapter struct{ *objstore.Store }

func convertEntry(e objstore.Entry) raylet.StoreEntry {
	return raylet.StoreEntry{ID: e.ID, Found: e.Found, Offset: e.Offset, DataSize: e.DataSize, Metadata: e.Metadata, Pins: e.Pins, Sealed: e.Sealed, Freed: e.Freed, Seq: e.Seq}
}

func (a storeAdapter) GetEntries(objs []ids.ObjectID, client ids.ID) []raylet.StoreEntry {
	es := a.Store.Get(objs, client)
	out := make([]raylet.StoreEntry, len(es))
	for i, e := range es {
		out[i] = convertEntry(e)
	}
	return out
}

func (a storeAdapter) ListEntries() []raylet.StoreEntry {
	es := a.Store.List()
	out := make([]raylet.StoreEntry, len(es))
	for i, e := range es {
		out[i] = convertEntry(e)
	}
	return out
}

func (a storeAdapter) Usage() raylet.StoreUsage {
	u := a.Store.Usage()
	return raylet.StoreUsage{Used: u.Used, Capacity: u.Capacity, Objects: u.Objects}
}

// nodeIPOf is the node's IP: the config's, else 127.0.0.1.
func nodeIPOf(cfg *config.Node) string {
	if cfg.NodeIP != "" {
		return cfg.NodeIP
	}
	return "127.0.0.1"
}
