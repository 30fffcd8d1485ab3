package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/plugindial"
	"github.com/goray-dev/goray/internal/spawn"
	"github.com/goray-dev/goray/sdk/plugin"
)

// launchSpec says how to start one plugin process.
type launchSpec struct {
	label        string // `transport "tcp"`, for messages
	path         string
	args         []string // the binary's arguments
	logLevel     string   // the plugin's log level ("": the host logger's)
	versions     []int    // API versions the host speaks
	log          hclog.Logger
	socketDir    string
	startTimeout time.Duration
	env          []string  // added to the plugin's environment
	output       io.Writer // also gets the plugin's raw stdout and stderr (nil: none)
}

// proc is one running plugin process and the gRPC connection to it.
type proc struct {
	client  *goplugin.Client
	runner  *procRunner
	conn    *grpc.ClientConn
	version int
	info    *plugin.InfoClient
	// endpoint is how other processes of the node call the plugin
	// directly (its Address is empty when it could not be read).
	endpoint Endpoint
}

// pid is the plugin's process id.
func (p *proc) pid() int { return p.runner.pid() }

// kill ends the process at once and releases the client's resources. It
// returns once the process has been reaped.
func (p *proc) kill() {
	p.runner.kill()
	p.client.Kill()
}

// gracefulStop bounds a plugin's graceful shutdown.
const gracefulStop = 5 * time.Second

// stop asks the plugin to shut down (go-plugin closes the connection and
// waits up to 2 s), killing it when ctx ends or gracefulStop passes first
// (a plugin that does not answer cannot hold Stop up). It returns once the
// process has been reaped.
func (p *proc) stop(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		p.client.Kill()
		close(done)
	}()
	t := time.NewTimer(gracefulStop)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-ctx.Done():
	case <-t.C:
	}
	p.runner.kill()
	<-done
}

// launch starts the plugin binary, performs go-plugin's handshake
// (negotiating the API version) and connects. ctx bounds the whole start: a
// plugin still starting when it ends is killed.
func launch(ctx context.Context, s launchSpec) (*proc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sets := make(map[int]goplugin.PluginSet, len(s.versions))
	for _, v := range s.versions {
		sets[v] = goplugin.PluginSet{plugin.PluginName: &plugin.GRPCPlugin{}}
	}
	tail := &tailWriter{max: 8}
	var (
		mu      sync.Mutex
		aborted bool
		r       *procRunner
	)
	var stdio, stderr io.Writer = s.log.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true}), tail
	if s.output != nil {
		stdio, stderr = io.MultiWriter(stdio, s.output), io.MultiWriter(tail, s.output)
	}
	cfg := &goplugin.ClientConfig{
		HandshakeConfig:  plugin.Handshake,
		VersionedPlugins: sets,
		RunnerFunc: func(l hclog.Logger, cmd *exec.Cmd, socketDir string) (runner.Runner, error) {
			mu.Lock()
			defer mu.Unlock()
			if aborted {
				// go-plugin removes the socket directory only once a
				// runner exists.
				_ = os.RemoveAll(socketDir)
				return nil, context.Canceled
			}
			var err error
			r, err = newProcRunner(l, s.path, s.args, s.logLevel, append(cmd.Env, s.env...))
			return r, err
		},
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		// Mutual TLS with a certificate made for this one launch: only this
		// host, and the node's processes the raylet hands that certificate
		// to (host/endpoint.go), can call the plugin, even over its socket.
		AutoMTLS:         true,
		Logger:           s.log,
		StartTimeout:     s.startTimeout,
		Stderr:           stderr,
		SyncStdout:       stdio,
		SyncStderr:       stdio,
		GRPCDialOptions:  plugindial.ProtocolDialOptions(),
		UnixSocketConfig: &goplugin.UnixSocketConfig{TempDir: s.socketDir},
	}
	client := goplugin.NewClient(cfg)

	type result struct {
		rpc goplugin.ClientProtocol
		err error
	}
	done := make(chan result, 1)
	go func() {
		rpc, err := client.Client()
		done <- result{rpc, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		mu.Lock()
		aborted = true
		rr := r
		mu.Unlock()
		if rr != nil {
			rr.kill() // makes client.Client return at once
		}
		<-done
		client.Kill()
		return nil, fmt.Errorf("starting plugin %s (%s): %w", s.label, s.path, ctx.Err())
	}
	if res.err != nil {
		client.Kill()
		return nil, startError(s, res.err, tail.String())
	}
	raw, err := res.rpc.Dispense(plugin.PluginName)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("connecting to plugin %s (%s): %w", s.label, s.path, err)
	}
	conn, ok := raw.(*grpc.ClientConn)
	if !ok {
		client.Kill()
		return nil, fmt.Errorf("connecting to plugin %s (%s): go-plugin returned %T, not a gRPC connection", s.label, s.path, raw)
	}
	// A plugin whose endpoint cannot be read still serves the host; other
	// processes then reach it through the host only.
	ep, err := endpointOf(ctx, client, cfg, conn)
	if err != nil {
		s.log.Debug("the plugin cannot be called directly", "plugin", s.label, "error", err)
	}
	mu.Lock()
	rr := r
	mu.Unlock()
	return &proc{
		client:   client,
		runner:   rr,
		conn:     conn,
		version:  client.NegotiatedVersion(),
		info:     plugin.NewInfoClient(conn),
		endpoint: ep,
	}, nil
}

// startError turns go-plugin's start errors into errors naming the plugin,
// the binary and, when the plugin printed anything, its last output.
func startError(s launchSpec, err error, output string) error {
	msg := err.Error()
	var out error
	switch {
	case strings.Contains(msg, "incompatible API version"):
		offered := 0
		if i := strings.Index(msg, "Plugin version: "); i >= 0 {
			f := strings.FieldsFunc(msg[i+len("Plugin version: "):], func(r rune) bool { return r < '0' || r > '9' })
			if len(f) > 0 {
				offered, _ = strconv.Atoi(f[0])
			}
		}
		out = &APIVersionError{Plugin: s.label, Path: s.path, Host: slices.Clone(s.versions), Offered: offered}
	case strings.Contains(msg, "Unrecognized remote plugin message"):
		out = fmt.Errorf("starting plugin %s: %s is not a goray plugin (it did not answer go-plugin's handshake)", s.label, s.path)
	default:
		out = fmt.Errorf("starting plugin %s (%s): %w", s.label, s.path, err)
	}
	if output != "" {
		out = fmt.Errorf("%w; its last output: %s", out, output)
	}
	return out
}

// APIVersionError reports that a plugin and the host have no API version of
// the kind's protocol in common.
type APIVersionError struct {
	// Plugin names the plugin (`transport "tcp"`), Path its binary.
	Plugin, Path string
	// Host lists the versions the host speaks.
	Host []int
	// Offered is the version the plugin fell back to (its oldest).
	Offered int
}

// Error names the plugin, the binary and both sides' versions.
func (e *APIVersionError) Error() string {
	return fmt.Sprintf("plugin %s (%s) has no API version in common with this host: the host speaks %v, the plugin offered %d (it speaks none of the host's versions)",
		e.Plugin, e.Path, e.Host, e.Offered)
}

// tailWriter keeps the last lines written to it (go-plugin writes the
// plugin's stderr one line per Write).
type tailWriter struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := strings.TrimSpace(string(p))
	if line == "" {
		return len(p), nil
	}
	// hclog JSON entries read better as "level: message".
	var entry struct {
		Level   string `json:"@level"`
		Message string `json:"@message"`
	}
	if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &entry) == nil && entry.Message != "" {
		line = entry.Level + ": " + entry.Message
	}
	if len(line) > 512 {
		line = line[:512] + "..."
	}
	w.lines = append(w.lines, line)
	if len(w.lines) > w.max {
		w.lines = w.lines[len(w.lines)-w.max:]
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, " | ")
}

// procRunner is go-plugin's runner for a plugin process: like go-plugin's
// own, but the process is forked from a thread that never exits with
// Pdeathsig=SIGKILL, in its own process group, and its exit is observable.
type procRunner struct {
	log    hclog.Logger
	cmd    *exec.Cmd
	stdout io.ReadCloser
	stderr io.ReadCloser
	path   string
	exited chan struct{} // closed when Wait returns

	mu      sync.Mutex
	started bool
	killReq bool
	reaped  bool
	waitErr error
	pidV    int
}

var _ runner.Runner = (*procRunner)(nil)

func newProcRunner(log hclog.Logger, path string, args []string, level string, env []string) (*procRunner, error) {
	cmd := exec.Command(path, args...)
	if level == "" {
		level = logLevelName(log)
	}
	cmd.Env = append(env,
		fmt.Sprintf("%s=%d", plugin.EnvHostPID, os.Getpid()),
		fmt.Sprintf("%s=%s", plugin.EnvLogLevel, level))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	return &procRunner{log: log, cmd: cmd, stdout: stdout, stderr: stderr, path: path, exited: make(chan struct{})}, nil
}

func logLevelName(l hclog.Logger) string {
	switch l.GetLevel() {
	case hclog.Trace:
		return "trace"
	case hclog.Debug:
		return "debug"
	case hclog.Warn:
		return "warn"
	case hclog.Error:
		return "error"
	case hclog.Off:
		return "off"
	}
	return "info"
}

func (r *procRunner) Start(context.Context) error {
	if err := spawn.Start(r.cmd); err != nil {
		return fmt.Errorf("executing %s: %w", r.path, err)
	}
	r.mu.Lock()
	r.started = true
	r.pidV = r.cmd.Process.Pid
	kill := r.killReq
	r.mu.Unlock()
	r.log.Debug("plugin started", "path", r.path, "pid", r.pidV)
	if kill {
		r.kill()
	}
	return nil
}

func (r *procRunner) Wait(context.Context) error {
	err := r.cmd.Wait()
	r.mu.Lock()
	r.reaped = true
	r.waitErr = err
	r.mu.Unlock()
	close(r.exited)
	return err
}

// Kill kills the plugin's process group.
func (r *procRunner) Kill(context.Context) error {
	r.kill()
	return nil
}

// kill kills the plugin's process group now, or as soon as it has started.
func (r *procRunner) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.killReq = true
	if !r.started || r.reaped {
		return
	}
	// The process leads its own group (Setpgid), so this also ends anything
	// it started; it is not reaped yet, so the pid is still ours.
	if err := syscall.Kill(-r.pidV, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = r.cmd.Process.Kill()
	}
}

func (r *procRunner) pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pidV
}

// exitErr is the process's exit status once it has exited.
func (r *procRunner) exitErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waitErr
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *procRunner) Name() string          { return r.path }
func (r *procRunner) ID() string            { return strconv.Itoa(r.pid()) }

func (r *procRunner) Diagnose(context.Context) string {
	return "the binary may be for another OS or architecture, not executable, or not a goray plugin (built without sdk/plugin.Serve)"
}

func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
