package ray

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host/node"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/workerenv"
	"github.com/goray-dev/goray/sdk/ray/internal/core"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EnvAddress names the environment variable Init reads for the cluster
// address when no Address option is given.
const EnvAddress = "GORAY_ADDRESS"

func current() (*core.CoreWorker, error) {
	cw := core.Current()
	if cw == nil {
		return nil, ErrNotInitialized
	}
	return cw, nil
}

// InitOption configures Init.
type InitOption func(*initOptions)

type initOptions struct {
	address    string
	configPath string
	cfg        *config.Node
	logger     hclog.Logger
	logLevel   string
	cpus       *float64
	resources  map[string]float64
	storeBytes int64
	quiet      bool
	output     io.Writer
	transfer   time.Duration
	forward    []string
	envVars    map[string]string // EnvVars' (envvars.go)
	workingDir *workingDirOption // WorkingDir's (workingdir.go)
	tokenFile  string
	namespace  *string // Namespace's (nil: $GORAY_NAMESPACE, else anonymous)

	// logToDriver is LogToDriver's (nil: $GORAY_LOG_TO_DRIVER, else on).
	logToDriver *bool
}

// Address connects to the cluster whose head (GCS) listens at addr
// ("host:port") instead of starting an embedded node. "auto" finds a node
// started with `goray start` on this machine.
func Address(addr string) InitOption { return func(o *initOptions) { o.address = addr } }

// AuthTokenFile names the file holding the cluster's token, for a driver
// that connects to a cluster (Address or $GORAY_ADDRESS). Without it the
// driver uses $GORAY_AUTH_TOKEN, else the file $GORAY_AUTH_TOKEN_PATH
// names, else ~/.goray/auth_token (where `goray start --head` keeps it).
// The file must be readable by its owner only.
func AuthTokenFile(path string) InitOption { return func(o *initOptions) { o.tokenFile = path } }

// ConfigFile configures the embedded node from an HCL file.
func ConfigFile(path string) InitOption { return func(o *initOptions) { o.configPath = path } }

// WithConfig configures the embedded node.
func WithConfig(cfg *config.Node) InitOption { return func(o *initOptions) { o.cfg = cfg } }

// WithLogger sends the driver's and embedded node's logs to l.
func WithLogger(l hclog.Logger) InitOption { return func(o *initOptions) { o.logger = l } }

// LogLevel sets the log level (trace, debug, info, warn, error).
func LogLevel(level string) InitOption { return func(o *initOptions) { o.logLevel = level } }

// NumCPUs sets the embedded node's CPU count (default: the machine's).
func NumCPUs(n float64) InitOption { return func(o *initOptions) { o.cpus = &n } }

// Resources adds custom resources to the embedded node.
func Resources(r map[string]float64) InitOption { return func(o *initOptions) { o.resources = r } }

// ObjectStoreMemory sets the embedded node's object store capacity.
func ObjectStoreMemory(bytes int64) InitOption { return func(o *initOptions) { o.storeBytes = bytes } }

// WorkerOutput sets where the driver prints the lines its workers write
// on stdout and stderr, on every node (default: stdout lines on
// os.Stdout, stderr lines on os.Stderr; see LogToDriver). nil turns that
// off, as LogToDriver(false): the lines stay in the workers' log files.
func WorkerOutput(w io.Writer) InitOption {
	return func(o *initOptions) { o.output = w; o.quiet = w == nil }
}

// TensorTransferTimeout bounds each tensor transfer made by this process
// (default 60 s, as in Ray). A transfer that runs out of time fails with an
// error matching ErrTransferFailed and transport.ErrTimeout, and is aborted
// where the transport can.
func TensorTransferTimeout(d time.Duration) InitOption {
	return func(o *initOptions) { o.transfer = d }
}

// ForwardEnv names variables of the driver's environment that the job's
// workers get, on every node. A name ending in "*" is a prefix:
// ForwardEnv("AWS_REGION", "MYAPP_*") forwards AWS_REGION and every
// MYAPP_ variable. Options add up, and the comma-separated names in
// $GORAY_FORWARD_ENV are added too (ForwardEnv never needs a code change).
//
// Nothing else of the driver's environment leaves it, as in Ray: a worker
// gets its node's environment (that of `goray start`) plus the forwarded
// variables, which win over the node's. Prefixes never match GORAY_
// variables (the runtime sets those itself); name one exactly to forward
// it. Forwarded values are stored in the GCS with the job, for raylets of
// other nodes, but never shown by listings (`goray list jobs`). With an
// embedded node the node's environment is the driver's own, so its
// workers see every variable anyway.
func ForwardEnv(names ...string) InitOption {
	return func(o *initOptions) { o.forward = append(o.forward, names...) }
}

// EnvForwardEnv names the environment variable with more names for
// ForwardEnv, comma-separated ("AWS_REGION,MYAPP_*").
const EnvForwardEnv = "GORAY_FORWARD_ENV"

// Runtime is an initialized goray driver.
type Runtime struct {
	cw       *core.CoreWorker
	node     *node.Node
	log      hclog.Logger
	shutdown sync.Once
}

// IsWorker reports whether this process was started by a raylet as a
// worker. Code before Init runs in workers too; use IsWorker to skip work
// that only the driver should do.
func IsWorker() bool { return core.IsWorker() }

// Init starts goray in this process.
//
// In a driver: with an address (the Address option, else $GORAY_ADDRESS)
// it connects to that cluster; with none it starts an embedded single-node
// cluster in this process, so `go run` needs no setup. Call Shutdown when
// done.
//
// In a worker process (the same binary started by a raylet), Init serves
// task calls and never returns. Register tasks and actors at package level
// so they exist before Init runs.
func Init(ctx context.Context, opts ...InitOption) (*Runtime, error) {
	if IsWorker() {
		core.RunWorker(transferTimeoutFromEnv())
	}
	if core.Current() != nil {
		return nil, errors.New("goray: Init called twice; call Shutdown first")
	}
	var o initOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.address == "" {
		o.address = os.Getenv(EnvAddress)
	}
	forward, err := forwardPatterns(o.forward, os.Getenv(EnvForwardEnv))
	if err != nil {
		return nil, err
	}
	setEnv, err := envVarList("EnvVars", o.envVars)
	if err != nil {
		return nil, err
	}
	logStdout, logStderr, err := driverOutput(&o, os.Getenv)
	if err != nil {
		return nil, err
	}
	// The working dir is packed first: a missing or oversized one fails
	// before anything starts. The raylet copies the archive when the job
	// registers; the driver's file goes once Init returns.
	pkgPath, pkgSum, err := packWorkingDir(o.workingDir, os.Getenv)
	if err != nil {
		return nil, err
	}
	defer removePackage(pkgPath)
	rt := &Runtime{log: o.logger}
	if rt.log == nil {
		level := o.logLevel
		if level == "" {
			level = "warn"
		}
		rt.log = hclog.New(&hclog.LoggerOptions{Name: "goray", Output: os.Stderr, Level: hclog.LevelFromString(level)})
	}
	rayletSock, sessionDir, nodeIP := "", "", ""
	var creds *auth.Credentials
	if o.address == "" {
		cfg, err := embeddedConfig(&o)
		if err != nil {
			return nil, err
		}
		nd, err := node.Start(ctx, node.Options{Config: cfg, Embedded: true})
		if err != nil {
			return nil, fmt.Errorf("goray: starting the embedded node: %w", err)
		}
		rt.node = nd
		creds = nd.Auth()
		rayletSock, sessionDir = nd.Info().RayletSocket, nd.Info().SessionDir
		nodeIP, _, _ = net.SplitHostPort(nd.Info().RayletAddress)
	} else {
		var err error
		if creds, err = driverCredentials(o.tokenFile); err != nil {
			return nil, err
		}
		info, err := findLocalNode(ctx, o.address, creds)
		if err != nil {
			return nil, err
		}
		rayletSock, sessionDir = info.RayletUnix, info.SessionDir
		nodeIP, _, _ = net.SplitHostPort(info.RayletTcp)
	}
	extraEnv := setEnv // after the forwarded variables: they win
	if o.transfer > 0 {
		// Workers of this job use the same transfer deadline.
		extraEnv = append(extraEnv, envTransferTimeout+"="+o.transfer.String())
	}
	job, err := jobInfo(forward, extraEnv...)
	var ns string
	if err == nil {
		job.WorkingDirSha256, job.WorkingDirPackage = pkgSum, pkgPath
		ns, err = jobNamespace(job, o.namespace, os.Getenv(EnvNamespace))
	}
	if err != nil {
		rt.stopNode()
		return nil, err
	}
	cw, err := core.Start(ctx, core.Config{
		Mode: core.ModeDriver, RayletSocket: rayletSock, SessionDir: sessionDir, NodeIP: nodeIP, Job: job, Namespace: ns, Logger: rt.log, TransferTimeout: o.transfer,
		Auth: creds, LogStdout: logStdout, LogStderr: logStderr,
		OnRayletLost: func(err error) { rt.log.Error("lost the connection to the raylet", "error", err) },
	})
	if err != nil {
		rt.stopNode()
		return nil, fmt.Errorf("goray: connecting the driver: %w", err)
	}
	rt.cw = cw
	return rt, nil
}

// MustInit is Init that panics on error.
func MustInit(ctx context.Context, opts ...InitOption) *Runtime {
	rt, err := Init(ctx, opts...)
	if err != nil {
		panic(err)
	}
	return rt
}

func embeddedConfig(o *initOptions) (*config.Node, error) {
	cfg := o.cfg
	if cfg == nil && o.configPath != "" {
		// Validated as a head's: an embedded node is its cluster's head,
		// so its file needs no head block (diagnostics keep file:line).
		head := true
		n, diags := config.LoadWithFlags(o.configPath, config.Flags{Head: &head})
		if err := config.NewDiagnosticsError(diags, n.Files()); err != nil {
			return nil, err
		}
		cfg = n
	}
	if cfg == nil {
		cfg = config.Default()
	}
	cfg.Head = true
	cfg.Port = 0
	if cfg.Address == "" || cfg.Address == config.DefaultHeadAddress {
		cfg.Address = "127.0.0.1:0"
	}
	if o.cpus != nil {
		cfg.Resources.CPU = o.cpus
	}
	if len(o.resources) > 0 {
		if cfg.Resources.Custom == nil {
			cfg.Resources.Custom = map[string]float64{}
		}
		for k, v := range o.resources {
			cfg.Resources.Custom[k] = v
		}
	}
	if o.storeBytes > 0 {
		cfg.ObjectStore.Memory = o.storeBytes
	}
	if o.logLevel != "" {
		cfg.LogLevel = o.logLevel
	}
	return cfg, nil
}

// EnvNodeIP picks, among the nodes on this machine, the one whose raylet
// listens on this IP for a driver to attach to (several nodes share one
// machine on distinct loopback addresses, as in tests). Unset, the head is
// preferred.
const EnvNodeIP = workerenv.NodeIP

// findLocalNode asks the GCS for the alive nodes and picks the one whose
// raylet socket exists on this machine: the one on $GORAY_NODE_IP when it
// is set, else the head first.
func findLocalNode(ctx context.Context, addr string, creds *auth.Credentials) (*pb.NodeInfo, error) {
	wantIP := strings.TrimSpace(os.Getenv(EnvNodeIP))
	cc, err := rpc.Dial(addr, creds)
	if err != nil {
		return nil, fmt.Errorf("goray: cluster address %q: %w", addr, err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Tried until ctx ends while the GCS cannot be reached (it may be
	// starting), but not when TLS is the problem: that does not pass.
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 50*time.Millisecond, time.Second
	var last error
	rep, err := backoff.Retry(ctx, func() (*pb.GetAllNodesReply, error) {
		rep, err := pb.NewGcsClient(cc).GetAllNodes(ctx, &pb.GetAllNodesRequest{})
		if err != nil && ctx.Err() == nil {
			last = err
		}
		var te *auth.TLSError
		if errors.As(auth.ExplainTLS(addr, creds.TLS(), err), &te) {
			return nil, backoff.Permanent(error(te))
		}
		if err != nil && status.Code(err) != codes.Unavailable {
			return nil, backoff.Permanent(err)
		}
		return rep, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
	var te *auth.TLSError
	switch {
	case errors.As(err, &te):
		return nil, fmt.Errorf("goray: cannot connect to the cluster: %w", te)
	case status.Code(err) == codes.Unauthenticated:
		return nil, fmt.Errorf("goray: the cluster at %s refused this driver: %w", addr, err)
	case err != nil && last != nil && !errors.Is(err, last):
		return nil, fmt.Errorf("goray: cannot reach the cluster at %s (is `goray start --head` running?): %w (last error: %v)", addr, err, last)
	case err != nil:
		return nil, fmt.Errorf("goray: cannot reach the cluster at %s (is `goray start --head` running?): %w", addr, err)
	}
	var best *pb.NodeInfo
	for _, nv := range rep.Nodes {
		n := nv.Info
		if n.State != "ALIVE" {
			continue
		}
		if _, err := os.Stat(n.RayletUnix); err != nil {
			continue
		}
		if wantIP != "" {
			if host, _, _ := net.SplitHostPort(n.RayletTcp); host != wantIP {
				continue
			}
		}
		if best == nil || (n.IsHead && !best.IsHead) {
			best = n
		}
	}
	if best == nil && wantIP != "" {
		return nil, fmt.Errorf("goray: the cluster at %s has no alive node on this machine listening on $%s=%s", addr, EnvNodeIP, wantIP)
	}
	if best == nil {
		return nil, fmt.Errorf("goray: the cluster at %s has no alive node on this machine to attach the driver to", addr)
	}
	return best, nil
}

// envTransferTimeout carries TensorTransferTimeout to the job's workers.
const envTransferTimeout = "GORAY_TRANSFER_TIMEOUT"

// forwardPatterns checks the ForwardEnv names and those of
// $GORAY_FORWARD_ENV (fromEnv, comma-separated).
func forwardPatterns(names []string, fromEnv string) ([]string, error) {
	bad := func(n string) bool {
		return n == "" || strings.ContainsAny(n, "=\x00") || strings.Contains(strings.TrimSuffix(n, "*"), "*")
	}
	var out []string
	for _, n := range names {
		if bad(n) {
			return nil, fmt.Errorf("goray: ForwardEnv: %q is not a variable name or a prefix ending in *", n)
		}
		out = append(out, n)
	}
	for n := range strings.SplitSeq(fromEnv, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if bad(n) {
			return nil, fmt.Errorf("goray: $%s: %q is not a variable name or a prefix ending in *", EnvForwardEnv, n)
		}
		out = append(out, n)
	}
	return out, nil
}

// forwardedEnv returns the variables of environ ("NAME=value") that
// patterns name: exactly, or by a prefix ending in "*" (never a GORAY_
// variable).
func forwardedEnv(environ, patterns []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		for _, p := range patterns {
			prefix, isPrefix := strings.CutSuffix(p, "*")
			if name == p || (isPrefix && strings.HasPrefix(name, prefix) && !strings.HasPrefix(name, "GORAY_")) {
				out = append(out, kv)
				break
			}
		}
	}
	return out
}

// jobInfo describes this driver's job so raylets can start its workers:
// its binary and the binary's sha256 (raylets run nothing else), and only
// the variables forward names plus extraEnv, never the whole environment.
func jobInfo(forward []string, extraEnv ...string) (*pb.JobInfo, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("goray: finding this program's executable: %w", err)
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	sum, err := digest.FileSHA256(exe)
	if err != nil {
		return nil, err
	}
	wd, _ := os.Getwd()
	env := append(forwardedEnv(os.Environ(), forward), extraEnv...)
	return &pb.JobInfo{JobId: ids.New().Bytes(), BinaryPath: exe, BinarySha256: sum, WorkingDir: wd, Env: env, DriverPid: int32(os.Getpid())}, nil
}

// Shutdown stops what Init started: the driver disconnects (its job's
// workers stop) and an embedded node shuts down, leaving no process,
// socket or shared memory behind.
func (rt *Runtime) Shutdown(ctx context.Context) error {
	var err error
	rt.shutdown.Do(func() {
		if rt.cw != nil {
			rt.flushLogs(ctx)
			rt.cw.Close()
		}
		err = rt.stopNode()
	})
	return err
}

func (rt *Runtime) stopNode() error {
	if rt.node == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return rt.node.Stop(ctx)
}

// NodeID returns the id of the node the driver is attached to.
func (rt *Runtime) NodeID() string { return rt.cw.NodeID().String() }

// JobID returns the driver's job id.
func (rt *Runtime) JobID() string { return rt.cw.JobID().String() }

// GCSAddress returns the cluster address (useful for an embedded node).
func (rt *Runtime) GCSAddress() string {
	if rt.node != nil {
		return rt.node.Info().GCSAddress
	}
	return os.Getenv(EnvAddress)
}

func transferTimeoutFromEnv() time.Duration {
	d, _ := time.ParseDuration(os.Getenv(envTransferTimeout))
	return d
}

// driverCredentials are what a driver presents to a cluster: the token of
// tokenFile when given, else the environment's (auth.FromEnv); TLS from
// the environment either way.
func driverCredentials(tokenFile string) (*auth.Credentials, error) {
	if tokenFile == "" {
		return auth.FromEnv()
	}
	tok, err := auth.ReadTokenFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("goray: AuthTokenFile: %w", err)
	}
	files, err := auth.TLSFromEnv()
	if err != nil {
		return nil, err
	}
	return auth.New(tok, files)
}
