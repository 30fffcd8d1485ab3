package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host/autoscalersvc"
	"github.com/goray-dev/goray/host/dashsvc"
	"github.com/goray-dev/goray/host/node"
	"github.com/goray-dev/goray/internal/logrotate"
	"github.com/goray-dev/goray/internal/spawn"
	"github.com/hashicorp/hcl/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// startTimeout is how long `goray start` waits for the node it starts in the
// background to serve. The node bounds its own waits (30 s to register with
// the GCS, a few seconds when nothing listens at the GCS address) and exits
// saying why, which start prints at once; this is the bound for a node that
// hangs, so it is longer than those.
const startTimeout = 60 * time.Second

// startOptions are the flags of `goray start`.
type startOptions struct {
	configPath        string
	head              bool
	address           string
	port              int
	tempDir           string
	block             bool
	numCPUs           float64
	numGPUs           float64
	resources         string
	labels            string
	objectStoreMemory string
	memory            string
	nodeName          string
	nodeIP            string
	rayletPort        int
	readyFile         string
	authTokenFile     string
	dataDir           string
	fresh             bool
	resume            bool
	metricsPort       int
	noMetrics         bool
	dashboardHost     string
	dashboardPort     int
	includeDashboard  bool
}

func (o *startOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.configPath, "config", "", "node config file (HCL, or JSON when it ends in .json); flags override it")
	fs.BoolVar(&o.head, "head", false, "start the head node (GCS, raylet and object store)")
	fs.StringVar(&o.address, "address", "", "GCS address host:port: where the head listens, or the head to join (head default: --node-ip, port 6380 or --port)")
	fs.IntVar(&o.port, "port", 0, "GCS port on the head (overrides the port of the address)")
	fs.StringVar(&o.tempDir, "temp-dir", "", "root of session directories, sockets and logs (default "+defaultTempDir+")")
	fs.BoolVar(&o.block, "block", false, "run the node in the foreground until interrupted")
	fs.Float64Var(&o.numCPUs, "num-cpus", 0, "CPUs the node offers (default: the number of logical CPUs)")
	fs.Float64Var(&o.numGPUs, "num-gpus", 0, "GPUs the node offers (default: the number NVML reports)")
	fs.StringVar(&o.resources, "resources", "", `custom resources as JSON ('{"disk": 2}') or a list ("disk=2,tpu=1")`)
	fs.StringVar(&o.labels, "labels", "", `node labels as JSON ('{"zone": "a"}') or a list ("zone=a,rack=3")`)
	fs.StringVar(&o.objectStoreMemory, "object-store-memory", "", `object store capacity ("2GiB", "512MB" or bytes; default 30% of memory)`)
	fs.StringVar(&o.memory, "memory", "", `memory the node offers to tasks and actors ("4GiB" or bytes; default: the machine's memory less the object store)`)
	fs.StringVar(&o.nodeName, "node-name", "", "node name shown in status (default: the hostname)")
	fs.StringVar(&o.nodeIP, "node-ip", "", "IP address the node listens on and advertises to other nodes (default 127.0.0.1)")
	fs.IntVar(&o.rayletPort, "raylet-port", 0, "raylet TCP port for other nodes (default: any free port)")
	fs.StringVar(&o.authTokenFile, "auth-token-file", "", "file holding the cluster token (default $GORAY_AUTH_TOKEN_PATH, else ~/.goray/auth_token; a head creates it)")
	fs.StringVar(&o.dataDir, "data-dir", "", "head: where the GCS keeps the cluster's state across restarts (default <temp-dir>/data)")
	fs.BoolVar(&o.fresh, "fresh", false, "head: start a new cluster, discarding the one stored in the data directory or Redis (default: a new cluster after a clean goray stop, the stored one after a crash)")
	fs.BoolVar(&o.resume, "resume", false, "head: resume the cluster stored in the data directory or Redis, even after a clean goray stop")
	fs.IntVar(&o.metricsPort, "metrics-port", 0, "port of the node's Prometheus endpoint on its node IP (default: the config's metrics.port, else any free port)")
	fs.BoolVar(&o.noMetrics, "no-metrics", false, "serve no Prometheus metrics (metrics { enabled = false })")
	fs.StringVar(&o.dashboardHost, "dashboard-host", "", "head: address the dashboard and job API listen on (default 127.0.0.1, this machine only)")
	fs.IntVar(&o.dashboardPort, "dashboard-port", 0, "head: port of the dashboard and job API (default 8265; -1: a free port)")
	fs.BoolVar(&o.includeDashboard, "include-dashboard", true, "head: serve the dashboard and job API (dashboard { enabled })")
	fs.StringVar(&o.readyFile, "ready-file", "", "write the node's info as JSON to this file once it serves")
	_ = fs.MarkHidden("ready-file")
}

// configFlags maps the flags the user set onto config.Flags. fs tells which
// flags were given; logLevel is the global --log-level.
func (o *startOptions) configFlags(fs *pflag.FlagSet, logLevel string) (config.Flags, error) {
	f := config.Flags{
		Address:  o.address,
		Port:     o.port,
		TempDir:  o.tempDir,
		LogLevel: logLevel,
		NodeName: o.nodeName,
		NodeIP:   o.nodeIP,

		RayletPort:    o.rayletPort,
		AuthTokenFile: o.authTokenFile,
		DataDir:       o.dataDir,
		NoMetrics:     o.noMetrics,
		DashboardHost: o.dashboardHost,
		NoDashboard:   !o.includeDashboard,
	}
	if fs.Changed("dashboard-port") {
		p := o.dashboardPort
		f.DashboardPort = &p
	}
	if fs.Changed("metrics-port") {
		p := o.metricsPort
		f.MetricsPort = &p
	}
	if fs.Changed("head") {
		h := o.head
		f.Head = &h
	}
	if fs.Changed("num-cpus") {
		v := o.numCPUs
		f.CPUs = &v
	}
	if fs.Changed("num-gpus") {
		v := o.numGPUs
		f.GPUs = &v
	}
	if o.objectStoreMemory != "" {
		n, err := config.ParseSize(o.objectStoreMemory)
		if err != nil {
			return f, usagef("invalid --object-store-memory: %v", err)
		}
		if n <= 0 {
			return f, usagef("invalid --object-store-memory %q: the store needs a positive size", o.objectStoreMemory)
		}
		f.ObjectStoreMemory = n
	}
	if o.memory != "" {
		n, err := config.ParseSize(o.memory)
		if err != nil {
			return f, usagef("invalid --memory: %v", err)
		}
		if n <= 0 {
			return f, usagef("invalid --memory %q: want a positive size", o.memory)
		}
		f.Memory = n
	}
	if o.resources != "" {
		r, err := parseResources(o.resources)
		if err != nil {
			return f, usagef("invalid --resources: %v", err)
		}
		f.Resources = r
	}
	if o.labels != "" {
		l, err := parseLabels(o.labels)
		if err != nil {
			return f, usagef("invalid --labels: %v", err)
		}
		f.Labels = l
	}
	return f, nil
}

// parseResources reads custom resources given as a JSON object of numbers
// or as a comma-separated list of name=amount.
func parseResources(s string) (map[string]float64, error) {
	s = strings.TrimSpace(s)
	out := map[string]float64{}
	if strings.HasPrefix(s, "{") {
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("%q is not a JSON object of numbers: %w", s, err)
		}
	} else {
		pairs, err := parsePairs(s)
		if err != nil {
			return nil, err
		}
		for _, p := range pairs {
			v, err := strconv.ParseFloat(p[1], 64)
			if err != nil {
				return nil, fmt.Errorf("amount %q of resource %q is not a number", p[1], p[0])
			}
			out[p[0]] = v
		}
	}
	for k, v := range out {
		if strings.TrimSpace(k) == "" {
			return nil, errors.New("a resource name is empty")
		}
		if v < 0 {
			return nil, fmt.Errorf("resource %q: amount must not be negative, got %v", k, v)
		}
	}
	return out, nil
}

// parseLabels reads labels given as a JSON object of strings or as a
// comma-separated list of key=value.
func parseLabels(s string) (map[string]string, error) {
	s = strings.TrimSpace(s)
	out := map[string]string{}
	if strings.HasPrefix(s, "{") {
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("%q is not a JSON object of strings: %w", s, err)
		}
		return out, nil
	}
	pairs, err := parsePairs(s)
	if err != nil {
		return nil, err
	}
	for _, p := range pairs {
		out[p[0]] = p[1]
	}
	return out, nil
}

// parsePairs splits "a=1,b=2" into name/value pairs.
func parsePairs(s string) ([][2]string, error) {
	var out [][2]string
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not name=value", item)
		}
		out = append(out, [2]string{k, v})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q has no name=value entries", s)
	}
	return out, nil
}

// loadConfig loads the config file with the flags applied. Diagnostics come
// back as a *config.DiagnosticsError. The temp dir is made absolute, since
// socket paths under it must be.
func loadConfig(path string, f config.Flags) (*config.Node, hcl.Diagnostics, error) {
	n, diags := config.LoadWithFlags(path, f)
	if err := config.NewDiagnosticsError(diags, n.Files()); err != nil {
		return nil, diags, err
	}
	if n.TempDir == "" {
		n.TempDir = defaultTempDir
	}
	n.TempDir = absPath(n.TempDir)
	return n, diags, nil
}

// absPath makes p absolute; it returns p unchanged when that fails.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// reportDiagnostics prints config diagnostics with source snippets and a
// one-line summary naming the first error's file:line.
func (a *app) reportDiagnostics(de *config.DiagnosticsError) error {
	width, color := termInfo(a.stderr)
	fmt.Fprint(a.stderr, de.Format(width, color))
	var errs []*hcl.Diagnostic
	for _, d := range de.Diags {
		if d.Severity == hcl.DiagError {
			errs = append(errs, d)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	first := errs[0]
	where := ""
	if first.Subject != nil {
		where = fmt.Sprintf("%s:%d,%d: ", first.Subject.Filename, first.Subject.Start.Line, first.Subject.Start.Column)
	}
	more := ""
	if len(errs) > 1 {
		more = fmt.Sprintf(" (and %s, shown above)", plural(len(errs)-1, "more error", "more errors"))
	}
	fmt.Fprintf(a.stderr, "Error: invalid configuration: %s%s%s\n", where, first.Summary, more)
	return &silentError{code: exitError}
}

// termInfo returns the width of the terminal w writes to and whether it is
// one (for colour); 0 and false for anything else.
func termInfo(w io.Writer) (uint, bool) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, false
	}
	return uint(ws.Col), true
}

func (a *app) startCmd() *cobra.Command {
	var o startOptions
	cmd := &cobra.Command{
		Use:   "start (--head | --address HOST:PORT) [flags]",
		Short: "Start a goray node (in the background unless --block)",
		Long: "Start a goray node on this machine: with --head the cluster's head (GCS, raylet and object store),\n" +
			"with --address a node that joins the head at that address. Without --block the node runs in the\n" +
			"background and start returns once it serves; stop it with `goray stop`.",
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if o.configPath == "" && !o.head && o.address == "" {
				return usagef("start needs --head, --address HOST:PORT or a --config file that says which")
			}
			f, err := o.configFlags(cmd.Flags(), a.logLevel)
			if err != nil {
				return err
			}
			cfg, diags, err := loadConfig(o.configPath, f)
			var de *config.DiagnosticsError
			if errors.As(err, &de) {
				return a.reportDiagnostics(de)
			}
			if err != nil {
				return err
			}
			if len(diags) > 0 { // warnings only
				w, c := termInfo(a.stderr)
				fmt.Fprint(a.stderr, config.FormatDiagnostics(diags, cfg.Files(), w, c))
			}
			na, err := nodeCredentials(cfg)
			if err != nil {
				return err
			}
			lc := lifecycle{fresh: o.fresh, resume: o.resume}
			if err := lc.check(cfg.Head); err != nil {
				return err
			}
			if o.block {
				return a.runNode(cmd.Context(), cfg, o.readyFile, na, lc, nil)
			}
			return a.startDaemon(cmd.Context(), cfg, na)
		}),
	}
	o.register(cmd.Flags())
	return cmd
}

// lifecycle is a head's --fresh and --resume: what it does with the
// cluster its GCS storage holds (node.Options.Fresh, Resume).
type lifecycle struct{ fresh, resume bool }

// check refuses both flags at once, and either on a node that is not a
// head.
func (lc lifecycle) check(head bool) error {
	switch {
	case lc.fresh && lc.resume:
		return usagef("--fresh starts a new cluster and --resume resumes the stored one: give one of them")
	case lc.fresh && !head:
		return usagef("--fresh starts a new cluster: it goes with --head")
	case lc.resume && !head:
		return usagef("--resume resumes the cluster a head's storage holds: it goes with --head")
	}
	return nil
}

// runNode runs the node in this process until SIGINT, SIGTERM or a
// shutdown request, which end its cluster (node.End: the next head on its
// storage starts a new one); with a cluster file (goray up) the head runs
// the cluster's provider and autoscaler.
func (a *app) runNode(ctx context.Context, cfg *config.Node, readyFile string, na nodeAuth, lc lifecycle, cluster *config.Cluster) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The config holds the Redis password now; no worker or plugin of the
	// node inherits it (the GCS process gets it from the node alone).
	_ = os.Unsetenv(config.EnvGCSRedisPassword)
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the goray executable (it runs the GCS): %w", err)
	}
	n, err := node.Start(ctx, node.Options{Config: cfg, Auth: na.creds, GCSCommand: []string{exe, "gcs-server"}, Fresh: lc.fresh, Resume: lc.resume, Cluster: cluster, GorayBinary: exe,
		HeadServices: []node.HeadService{dashsvc.New(), autoscalersvc.New()}})
	if err != nil {
		return err
	}
	info := n.Info()
	writeStarted(a.stdout, info, os.Getpid(), na)
	if readyFile == "" {
		fmt.Fprintln(a.stdout, "\nRunning in the foreground; press Ctrl-C to stop.")
	} else {
		if err := writeReadyFile(readyFile, info); err != nil {
			_ = n.Stop(context.Background())
			return err
		}
		// Detached: the starter deletes our output file, so later output
		// goes to the node log instead, and a crash report to its own file.
		flush := redirectOutput(n.LogWriter(), filepath.Join(info.SessionDir, "logs", "node-crash.log"))
		defer flush()
	}
	why := "shutdown requested"
	select {
	case <-ctx.Done():
		why = "signal received"
	case <-n.Done():
	}
	stop() // a second signal kills the process
	fmt.Fprintf(a.stdout, "Stopping goray node %s (%s)\n", shortHex(info.NodeID), why)
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A signal or a shutdown request (goray stop, goray down) ends the
	// cluster; a node that stopped itself on a failure does not (End).
	if err := n.End(sctx); err != nil {
		return fmt.Errorf("stopping node %s: %w", shortHex(info.NodeID), err)
	}
	fmt.Fprintf(a.stdout, "goray node %s stopped\n", shortHex(info.NodeID))
	return nil
}

// writeReadyFile writes info as JSON to path atomically.
func writeReadyFile(path string, info node.Info) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("writing ready file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing ready file %s: %w", path, err)
	}
	return nil
}

// readReadyFile reads what writeReadyFile wrote; ok is false until it is
// complete.
func readReadyFile(path string) (node.Info, bool) {
	var info node.Info
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &info) != nil || info.NodeID == "" {
		return info, false
	}
	return info, true
}

// redirectOutput points stdout and stderr at a pipe whose reader copies
// into w, the node's log through its rotating writer (so that stray
// output cannot fill the disk either), and the runtime's report of a
// fatal crash, which that copy would not live to write, at crashPath as
// well (debug.SetCrashOutput; written once, when the process dies). The
// returned flush points stdout and stderr at /dev/null and waits until
// what they held is copied. Best effort: with no w, nothing changes.
func redirectOutput(w io.Writer, crashPath string) (flush func()) {
	if w == nil {
		return func() {}
	}
	if f, err := os.OpenFile(crashPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		_ = debug.SetCrashOutput(f, debug.CrashOptions{}) // it keeps a copy of the descriptor
		_ = f.Close()
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return func() {}
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_ = logrotate.Copy(w, pr)
	}()
	_ = unix.Dup3(int(pw.Fd()), 1, 0)
	_ = unix.Dup3(int(pw.Fd()), 2, 0)
	_ = pw.Close()
	return func() {
		if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
			_ = unix.Dup3(int(null.Fd()), 1, 0)
			_ = unix.Dup3(int(null.Fd()), 2, 0)
			_ = null.Close()
		}
		<-copied // the pipe's last writer is gone: the copy ends
	}
}

// writeStarted tells the user where the node serves and how to use it.
func writeStarted(w io.Writer, info node.Info, pid int, na nodeAuth) {
	kind := "node"
	if info.Head {
		kind = "head node"
	}
	fmt.Fprintf(w, "Started goray %s %s (pid %d)\n", kind, shortHex(info.NodeID), pid)
	t := newTable(w)
	t.row("  node id:", info.NodeID)
	t.row("  node name:", orDash(info.NodeName))
	t.row("  GCS address:", info.GCSAddress)
	if info.Head {
		what := "new cluster " + shortHex(info.ClusterID)
		if info.GCSDiscarded != "" {
			what += " (the stored cluster " + shortHex(info.GCSDiscarded) + " is discarded)"
		}
		if info.GCSRestored {
			what = "resumed cluster " + shortHex(info.ClusterID) + " (start a new one with --fresh)"
		}
		t.row("  GCS storage:", info.GCSStorage+", "+what)
		if info.GCSPid != 0 {
			t.row("  GCS process:", fmt.Sprintf("pid %d, log %s", info.GCSPid, info.GCSLogFile))
		}
	}
	t.row("  raylet socket:", info.RayletSocket)
	t.row("  raylet address:", info.RayletAddress)
	if info.DashboardAddress != "" {
		t.row("  dashboard:", dashboardURL(info.DashboardAddress, na.creds.TLS())+" (job API: goray job submit)")
	}
	if info.MetricsAddress != "" {
		metrics := info.MetricsAddress + " (Prometheus, /metrics"
		if info.MetricsDiscoveryFile != "" {
			metrics += "; every node's: " + info.MetricsDiscoveryFile
		}
		t.row("  metrics:", metrics+")")
	}
	t.row("  session dir:", info.SessionDir)
	t.row("  log file:", orDash(info.LogFile))
	authRow, authNotes := "", []string(nil)
	if na.creds != nil {
		authRow, authNotes = na.describe()
		t.row("  auth:", authRow)
	}
	_ = t.flush()
	for _, n := range authNotes {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintf(w, "\nTo use this cluster from this machine:\n  export %s=%s\n  goray status\n", envAddress, info.GCSAddress)
	if info.Head {
		join := "goray start --address " + info.GCSAddress + " --node-ip <this machine's IP>"
		if na.creds.Enabled() && strings.HasPrefix(na.from, "/") {
			join = fmt.Sprintf("copy %s to the same place there (chmod 600), then\n  %s", na.from, join)
		}
		fmt.Fprintf(w, "To add a node on another machine:\n  %s\n", join)
	}
	stop := "goray stop"
	if root := filepath.Dir(info.SessionDir); root != defaultTempDir {
		stop += " --temp-dir " + root
	}
	fmt.Fprintf(w, "To stop it:\n  %s\n", stop)
}

// startDaemon starts `goray start ... --block` detached from this process
// and returns once the node serves.
func (a *app) startDaemon(ctx context.Context, cfg *config.Node, na nodeAuth) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the goray executable: %w", err)
	}
	root := cfg.TempDir
	if err := node.PrepareTempRoot(root); err != nil {
		return err
	}
	base := filepath.Join(root, fmt.Sprintf("goray-start-%d", os.Getpid()))
	outPath, readyPath := base+".out", base+".ready"
	defer func() {
		for _, p := range []string{outPath, readyPath, readyPath + ".tmp"} {
			_ = os.Remove(p)
		}
	}()
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", outPath, err)
	}
	args := append(append([]string{}, a.args...), "--block", "--ready-file", readyPath)
	child := exec.Command(exe, args...)
	child.Stdout, child.Stderr = out, out // stdin is /dev/null
	child.Env = append(os.Environ(), envDaemonRoot+"="+root)
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// exec passes only stdin/out/err, but descriptors this process
	// inherited (a lock `flock` holds) are not close-on-exec: the node
	// would hold them until it stops.
	if err := spawn.CloseOnExecInherited(); err != nil {
		out.Close()
		return err
	}
	err = child.Start()
	out.Close()
	if err != nil {
		return fmt.Errorf("starting %s: %w", exe, err)
	}
	a.log.Debug("started node process", "pid", child.Process.Pid, "args", args)
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	_, stopSpin := a.spinner("starting the node (pid " + strconv.Itoa(child.Process.Pid) + ")")
	info, err := waitReady(ctx, readyPath, exited, startTimeout)
	stopSpin()
	if err == nil {
		writeStarted(a.stdout, info, child.Process.Pid, na)
		return nil
	}
	var ee *earlyExitError
	if !errors.As(err, &ee) {
		// Timed out or interrupted: do not leave a half-started node.
		_ = child.Process.Kill()
		<-exited
	}
	output, _ := os.ReadFile(outPath)
	if len(output) > 0 {
		a.stderr.Write(output)
		if ee != nil && strings.Contains(string(output), "Error: ") {
			return &silentError{code: exitError}
		}
	}
	return err
}

// earlyExitError says the node process exited before it served.
type earlyExitError struct{ err error }

// Error says the node process exited, with its status.
func (e *earlyExitError) Error() string {
	if e.err == nil {
		return "the goray node process exited before serving"
	}
	return fmt.Sprintf("the goray node process exited before serving: %v", e.err)
}

// Unwrap returns the wait error (the exit status).
func (e *earlyExitError) Unwrap() error { return e.err }

// waitReady polls for the ready file until it appears, the process exits,
// ctx ends or timeout passes.
func waitReady(ctx context.Context, readyPath string, exited <-chan error, timeout time.Duration) (node.Info, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if info, ok := readReadyFile(readyPath); ok {
			return info, nil
		}
		select {
		case err := <-exited:
			return node.Info{}, &earlyExitError{err: err}
		case <-ctx.Done():
			return node.Info{}, fmt.Errorf("interrupted while waiting for the node to start: %w", ctx.Err())
		case <-deadline.C:
			return node.Info{}, fmt.Errorf("the goray node did not start serving within %s", timeout)
		case <-tick.C:
		}
	}
}
