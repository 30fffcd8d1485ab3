// Package host runs goray plugins for a node: it finds plugin binaries in
// the node's plugin_dir, starts one go-plugin process (gRPC only) per
// `plugin "<kind>" "<name>" { config { ... } }` block, negotiates the API
// version of the kind's protocol, decodes the block's config against the
// schema the plugin reports (diagnostics point at the config file's lines),
// configures the plugin, health-checks it and restarts it with exponential
// backoff when it crashes or stops answering.
//
// A plugin never outlives its node: it is forked with Pdeathsig=SIGKILL
// from a thread that never exits, and sdk/plugin.Serve exits when its
// parent goes away, so even kill -9 of the node ends its plugins. Plugin
// logs (hclog JSON on the plugin's stderr) come out in the node's log under
// the plugin binary's name.
//
// While a plugin is down, Client returns an error matching
// ErrPluginUnavailable, and calls in flight on the old connection fail with
// a gRPC error: nothing waits for the plugin to come back.
package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/logrotate"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/plugin/hclspec"
)

// Plugin states, as reported in Status.State.
const (
	// StateStarting: the plugin is being started for the first time.
	StateStarting = "starting"
	// StateRunning: the plugin is configured and serving.
	StateRunning = "running"
	// StateRestarting: the plugin crashed or failed its health checks and
	// is being restarted (with backoff).
	StateRestarting = "restarting"
	// StateFailed: the plugin could not be started or configured by Start;
	// it is not retried.
	StateFailed = "failed"
	// StateStopped: the manager has been stopped.
	StateStopped = "stopped"
)

// Defaults of Options.
const (
	DefaultHealthInterval = 5 * time.Second
	DefaultHealthFailures = 3
	DefaultStartTimeout   = 30 * time.Second
)

// Restart backoff: the first restart waits backoffMin, each further
// consecutive one twice as long up to backoffMax; a plugin that ran for
// stableAfter before crashing starts again from backoffMin.
const (
	backoffMin  = 100 * time.Millisecond
	backoffMax  = 30 * time.Second
	stableAfter = time.Minute
)

// DefaultSupported is what Options.Supported means when nil: every plugin
// kind (plugin.Kinds) at API version 1.
var DefaultSupported = func() map[string][]int {
	m := make(map[string][]int, len(plugin.Kinds))
	for _, k := range plugin.Kinds {
		m[k] = []int{1}
	}
	return m
}()

// Options configures a Manager.
type Options struct {
	// PluginDir is where plugin binaries are found: the binary of
	// `plugin "<kind>" "<name>"` is <PluginDir>/goray-<kind>-<name>, else
	// <PluginDir>/<name>, unless the block names its command.
	PluginDir string
	// LockFile is the plugin lock file (config.LockPath of the node's
	// config; "" for none): a binary it lists must have the sha256 it
	// records, checked before every start and restart (*ChecksumError). A
	// missing file locks nothing.
	LockFile string
	// Blocks are the plugin blocks of the node's config, in file order.
	Blocks []config.Plugin
	// Files are the parsed config files (config.Node.Files), used to render
	// diagnostics in the log.
	Files map[string]*hcl.File
	// Logger receives the manager's and the plugins' logs (nil: none).
	Logger hclog.Logger
	// HealthInterval is the time between health checks of each plugin
	// (default DefaultHealthInterval).
	HealthInterval time.Duration
	// HealthTimeout bounds one health check (default HealthInterval,
	// between 1 s and 10 s).
	HealthTimeout time.Duration
	// HealthFailures is how many consecutive failed health checks make the
	// manager kill and restart a plugin (default DefaultHealthFailures).
	HealthFailures int
	// StartTimeout bounds a plugin's start-up handshake (default
	// DefaultStartTimeout).
	StartTimeout time.Duration
	// Supported maps each plugin kind to the API versions of its protocol
	// the host speaks; go-plugin picks the highest one the plugin speaks
	// too. Nil means DefaultSupported. A block of a kind not listed fails.
	Supported map[string][]int
	// Env is added to every plugin's environment ("NAME=value"), for
	// example plugin.EnvGCSAddress, plugin.EnvNodeID and plugin.EnvNodeIP.
	Env []string
	// LogDir, when set, is where each plugin's raw output (its hclog JSON
	// lines on stderr and anything it prints) is appended as well, to
	// plugin-<kind>-<name>.log, across restarts; the lines also reach
	// Logger.
	LogDir string
	// LogLimits bound each plugin's log file in LogDir: it rotates at
	// LogLimits.MaxFileSize, keeping LogLimits.MaxFiles rotated copies
	// (zero: internal/logrotate's defaults).
	LogLimits logrotate.Limits
	// SocketDir is where go-plugin creates the plugins' unix sockets
	// (default: the system's temporary directory). Keep it short: socket
	// paths are limited to 107 bytes.
	SocketDir string
}

// Status describes one plugin, as Plugins returns it.
type Status struct {
	// Kind and Name are the block's labels.
	Kind, Name string
	// Version is what the plugin reports about itself.
	Version string
	// Path is the plugin's binary ("" when not found).
	Path string
	// State is one of the State* constants.
	State string
	// Restarts counts restart attempts since Start.
	Restarts int
	// Pid is the plugin's process id (0 while it is not running).
	Pid int
	// APIVersion is the negotiated API version (0 before the first start).
	APIVersion int
	// LastError says why the plugin last failed ("" if it never did).
	LastError string
	// SHA256 is the block's sha256 pin of the binary (lowercase hex), or
	// else the lock file's, "" when neither pins it. A pinned binary is
	// checked before every start; pinning is how a node trusts a plugin
	// binary.
	SHA256 string
}

// ErrPluginUnavailable is matched (errors.Is) by the errors Client returns
// for a plugin that exists but cannot serve now: starting, restarting,
// failed or stopped. The error is an *UnavailableError.
var ErrPluginUnavailable = errors.New("plugin unavailable")

// ErrPluginNotFound is wrapped by the error Client returns for a kind and
// name no plugin block declares.
var ErrPluginNotFound = errors.New("no such plugin")

// UnavailableError is the error Client returns while a plugin cannot serve.
type UnavailableError struct {
	Kind, Name string
	// State is the plugin's state (see the State* constants).
	State string
	// Err is why the plugin is down (nil if it is just starting).
	Err error
}

// Error names the plugin, its state and the last error.
func (e *UnavailableError) Error() string {
	msg := fmt.Sprintf("plugin %s %q is unavailable (%s)", e.Kind, e.Name, e.State)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrPluginUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrPluginUnavailable }

// Unwrap returns the last error.
func (e *UnavailableError) Unwrap() error { return e.Err }

// BinaryNotFoundError reports that no binary of a plugin block exists.
type BinaryNotFoundError struct {
	Kind, Name string
	// Dir is the plugin_dir searched.
	Dir string
	// Tried are the file names looked for, in order.
	Tried []string
}

// Error names the plugin, plugin_dir and every file name tried.
func (e *BinaryNotFoundError) Error() string {
	return fmt.Sprintf("no binary for plugin %s %q in plugin_dir %q: tried %s",
		e.Kind, e.Name, e.Dir, quoteJoin(e.Tried))
}

// PluginPathError reports a plugin name that would reach outside
// plugin_dir: the binary of `plugin "<kind>" "<name>"` must be a file
// directly in plugin_dir, so a name with a path separator or a directory
// reference ("..") is refused.
type PluginPathError struct {
	Kind, Name string
	// Dir is the plugin_dir.
	Dir string
	// Problem says what is wrong with the name.
	Problem string
}

// Error names the plugin, its name's problem and plugin_dir.
func (e *PluginPathError) Error() string {
	return fmt.Sprintf("plugin %s name %q %s: its binary must be a file directly in plugin_dir %q, and a name cannot reach outside it",
		e.Kind, e.Name, e.Problem, e.Dir)
}

// ChecksumError reports a plugin binary that does not match its sha256
// pin: the block's sha256, or the one the lock file records.
type ChecksumError struct {
	Path string
	// Want is the pinned checksum, Got the binary's (lowercase hex).
	Want, Got string
	// LockFile is the lock file that records Want; "" when the config's
	// plugin block pins it.
	LockFile string
}

// Error names the binary, both checksums and where Want comes from.
func (e *ChecksumError) Error() string {
	if e.LockFile != "" {
		return fmt.Sprintf("plugin binary %s has sha256 %s, but the lock file %s records %s: the binary changed since it was installed (reinstall it with goray plugins install, or restore the locked binary)",
			e.Path, e.Got, e.LockFile, e.Want)
	}
	return fmt.Sprintf("plugin binary %s has sha256 %s, but the config pins %s", e.Path, e.Got, e.Want)
}

// KindMismatchError reports a plugin binary of another kind than its block.
type KindMismatchError struct {
	Path string
	// Want is the block's kind, Got the plugin's.
	Want, Got string
}

// Error names the binary and both kinds.
func (e *KindMismatchError) Error() string {
	return fmt.Sprintf("plugin binary %s is a %q plugin, not a %q plugin", e.Path, e.Got, e.Want)
}

func quoteJoin(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, " and ")
}

// Manager runs the plugins of one node. Create it with New, call Start once
// and Stop when the node shuts down.
type Manager struct {
	opts      Options
	log       hclog.Logger
	supported map[string][]int

	ctx    context.Context // cancelled by Stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // supervisors

	backoffMin, backoffMax, stableAfter time.Duration

	lock *config.Lock // read by Start (nil: no lock file)

	mu       sync.Mutex
	started  bool
	stopped  bool
	list     []*instance
	byKey    map[string]*instance
	stopOnce sync.Once
	stopDone chan struct{}
}

// New returns a Manager for opts; nothing starts before Start.
func New(opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = DefaultHealthInterval
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = min(max(opts.HealthInterval, time.Second), 10*time.Second)
	}
	if opts.HealthFailures <= 0 {
		opts.HealthFailures = DefaultHealthFailures
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	supported := opts.Supported
	if supported == nil {
		supported = DefaultSupported
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{
		opts:        opts,
		log:         opts.Logger,
		supported:   supported,
		ctx:         ctx,
		cancel:      cancel,
		backoffMin:  backoffMin,
		backoffMax:  backoffMax,
		stableAfter: stableAfter,
		byKey:       map[string]*instance{},
		stopDone:    make(chan struct{}),
	}
}

func pluginKey(kind, name string) string { return kind + "\x00" + name }

// instance is one plugin block and its current process.
type instance struct {
	m     *Manager
	block config.Plugin
	label string // transport "tcp"
	log   hclog.Logger

	// Set once before the supervisor starts.
	path     string
	locked   string // the lock file's sha256 of path ("" when not locked)
	versions []int
	cfg      map[string]any

	mu        sync.Mutex
	logFile   io.WriteCloser // LogDir's file of this plugin (rotating), or nil
	state     string
	proc      *proc
	version   string
	apiVer    int
	restarts  int
	lastErr   error
	runningAt time.Time
}

// Start launches every plugin, verifies the optional sha256 pin, checks the
// handshake, API version and kind, fetches the schema, decodes the block's
// config body against it (errors are diagnostics pointing at the block's
// file:line), calls Configure, and starts health checks. Plugins start in
// parallel; ctx bounds their start-up. A plugin that fails is reported and
// left in state "failed"; the others keep running until Stop (callers
// usually Stop when the diagnostics have errors). A plugin that crashes
// later is restarted with exponential backoff.
func (m *Manager) Start(ctx context.Context) hcl.Diagnostics {
	m.mu.Lock()
	if m.started || m.stopped {
		m.mu.Unlock()
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Plugin host already started",
			Detail: "Manager.Start may be called only once, before Stop."}}
	}
	m.started = true
	var diags hcl.Diagnostics
	var todo []*instance
	for _, b := range m.opts.Blocks {
		k := pluginKey(b.Kind, b.Name)
		if first, dup := m.byKey[k]; dup {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate plugin",
				Detail:  fmt.Sprintf("Plugin %s %q is declared more than once; the first is at %s.", b.Kind, b.Name, first.block.DeclRange),
				Subject: b.DeclRange.Ptr()})
			continue
		}
		label := fmt.Sprintf("%s %q", b.Kind, b.Name)
		in := &instance{m: m, block: b, label: label, state: StateStarting,
			log: m.log.Named("plugin").With("plugin", b.Kind+"/"+b.Name)}
		m.byKey[k] = in
		m.list = append(m.list, in)
		todo = append(todo, in)
	}
	m.mu.Unlock()

	if m.opts.LockFile != "" {
		lock, err := config.LoadLock(m.opts.LockFile)
		if err != nil {
			for _, in := range todo {
				diags = append(diags, in.fail(in.errDiag("Plugin lock file unreadable", err))...)
			}
			m.log.Error("plugins failed to start: " + err.Error())
			return diags
		}
		m.lock = lock
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopWatch := context.AfterFunc(m.ctx, cancel) // Stop aborts Start
	defer stopWatch()

	results := make([]hcl.Diagnostics, len(todo))
	var wg sync.WaitGroup
	for i, in := range todo {
		wg.Go(func() { results[i] = in.start(ctx) })
	}
	wg.Wait()
	for _, r := range results {
		diags = append(diags, r...)
	}
	if diags.HasErrors() {
		m.log.Error("plugins failed to start:\n" + strings.TrimSpace(config.FormatDiagnostics(diags, m.opts.Files, 0, false)))
	}
	return diags
}

func (in *instance) fail(diags hcl.Diagnostics) hcl.Diagnostics {
	var msgs []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		if d.Subject != nil {
			msg = fmt.Sprintf("%s:%d: %s", d.Subject.Filename, d.Subject.Start.Line, msg)
		}
		msgs = append(msgs, msg)
	}
	in.mu.Lock()
	in.state = StateFailed
	in.lastErr = errors.New(strings.Join(msgs, "; "))
	in.mu.Unlock()
	return diags
}

func (in *instance) errDiag(summary string, err error) hcl.Diagnostics {
	return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: summary,
		Detail: fmt.Sprintf("Plugin %s: %s.", in.label, err), Subject: in.block.DeclRange.Ptr()}}
}

// binaryDiag is errDiag at the block's command when it sets one.
func (in *instance) binaryDiag(summary string, err error) hcl.Diagnostics {
	d := in.errDiag(summary, err)
	if in.block.CommandRange != (hcl.Range{}) {
		d[0].Subject = in.block.CommandRange.Ptr()
		d[0].Context = in.block.DeclRange.Ptr()
	}
	return d
}

// start brings the plugin up for the first time.
func (in *instance) start(ctx context.Context) hcl.Diagnostics {
	m := in.m
	b := in.block
	versions, ok := m.supported[b.Kind]
	if !ok || len(versions) == 0 {
		kinds := slices.Sorted(maps.Keys(m.supported))
		return in.fail(in.errDiag("Unsupported plugin kind", fmt.Errorf("this host does not run %q plugins; it runs %s", b.Kind, strings.Join(kinds, ", "))))
	}
	in.versions = slices.Clone(versions)
	path, err := m.findBinary(b)
	var pe *PluginPathError
	if errors.As(err, &pe) {
		return in.fail(in.binaryDiag("Plugin name escapes plugin_dir", err))
	}
	if err != nil {
		return in.fail(in.binaryDiag("Plugin binary not found", err))
	}
	in.mu.Lock()
	in.path = path
	in.mu.Unlock()
	if m.lock != nil {
		if lp, ok := m.lock.Find(path); ok {
			in.locked = lp.SHA256
		}
	}
	if m.opts.LogDir != "" {
		f := logrotate.Open(filepath.Join(m.opts.LogDir, LogFileName(b.Kind, b.Name)), m.opts.LogLimits)
		if _, err := f.Write(nil); err != nil {
			return in.fail(in.errDiag("Plugin log file", err))
		}
		in.mu.Lock()
		in.logFile = f
		in.mu.Unlock()
	}
	if err := in.checkBinary(); err != nil {
		return in.fail(in.binaryDiag("Plugin checksum mismatch", err))
	}
	p, err := launch(ctx, in.spec())
	if err != nil {
		return in.fail(in.errDiag("Plugin failed to start", err))
	}
	info, err := in.identify(ctx, p)
	if err != nil {
		p.kill()
		var km *KindMismatchError
		if errors.As(err, &km) {
			return in.fail(in.errDiag("Plugin kind mismatch", err))
		}
		return in.fail(in.errDiag("Plugin failed to start", err))
	}
	schema, err := p.info.Schema(ctx)
	if err != nil {
		p.kill()
		return in.fail(in.errDiag("Plugin failed to report its config schema", err))
	}
	cfg, diags := hclspec.Decode(b.Config, schema, b.DeclRange)
	if diags.HasErrors() {
		p.kill()
		return in.fail(diags)
	}
	if err := p.info.Configure(ctx, cfg); err != nil {
		p.kill()
		return in.fail(append(diags, in.errDiag("Plugin rejected its configuration", err)...))
	}
	in.cfg = cfg

	m.mu.Lock()
	if m.stopped { // Stop ran meanwhile
		m.mu.Unlock()
		p.kill()
		in.mu.Lock()
		in.state = StateStopped
		in.mu.Unlock()
		return append(diags, in.errDiag("Plugin host stopped", errors.New("the host stopped while the plugin was starting"))...)
	}
	m.wg.Add(1) // before Stop can Wait: Stop sets stopped under m.mu first
	in.mu.Lock()
	in.setRunningLocked(p, info)
	in.mu.Unlock()
	m.mu.Unlock()
	in.log.Info("plugin running", "path", path, "pid", p.pid(), "version", info.Version, "api_version", p.version)
	go in.supervise()
	return diags
}

func (in *instance) setRunningLocked(p *proc, info plugin.Info) {
	in.state = StateRunning
	in.proc = p
	in.version = info.Version
	in.apiVer = p.version
	in.runningAt = time.Now()
}

func (in *instance) spec() launchSpec {
	return launchSpec{
		label:        in.label,
		path:         in.path,
		args:         in.block.Args,
		logLevel:     strings.ToLower(in.block.LogLevel),
		versions:     in.versions,
		log:          in.log,
		socketDir:    in.m.opts.SocketDir,
		startTimeout: in.m.opts.StartTimeout,
		env:          in.m.opts.Env,
		output:       in.output(),
	}
}

// output is where the plugin's raw output is copied (nil: nowhere).
func (in *instance) output() io.Writer {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.logFile == nil {
		return nil
	}
	return in.logFile
}

// LogFileName is the name, in Options.LogDir, of the log file of the
// plugin of the given kind and name.
func LogFileName(kind, name string) string {
	return "plugin-" + kind + "-" + name + ".log"
}

// identify asks a freshly started plugin who it is and checks its kind.
func (in *instance) identify(ctx context.Context, p *proc) (plugin.Info, error) {
	info, err := p.info.Info(ctx)
	if err != nil {
		return info, err
	}
	if info.Kind != in.block.Kind {
		return info, &KindMismatchError{Path: in.path, Want: in.block.Kind, Got: info.Kind}
	}
	return info, nil
}

// findBinary finds b's binary: its command, a path or a file name in
// plugin_dir, or else <dir>/goray-<kind>-<name>, then <dir>/<name>.
func (m *Manager) findBinary(b config.Plugin) (string, error) {
	kind, name := b.Kind, b.Name
	tried := []string{"goray-" + kind + "-" + name, name}
	if b.Command != "" {
		if strings.ContainsRune(b.Command, '/') {
			p, err := filepath.Abs(b.Command)
			if err != nil {
				return "", fmt.Errorf("plugin command %q: %w", b.Command, err)
			}
			fi, err := os.Stat(p)
			if err != nil || fi.IsDir() {
				return "", fmt.Errorf("the plugin's command %s is not a file", p)
			}
			return executable(p, fi)
		}
		name, tried = b.Command, []string{b.Command}
	}
	if m.opts.PluginDir == "" {
		return "", fmt.Errorf("plugin_dir is not set, so there is nowhere to look for %s", quoteJoin(tried))
	}
	dir, err := filepath.Abs(m.opts.PluginDir)
	if err != nil {
		return "", fmt.Errorf("plugin_dir %q: %w", m.opts.PluginDir, err)
	}
	if why := nameProblem(name); why != "" {
		return "", &PluginPathError{Kind: kind, Name: name, Dir: dir, Problem: why}
	}
	for _, n := range tried {
		p := filepath.Join(dir, n)
		if filepath.Dir(p) != dir { // (nameProblem rules this out)
			return "", &PluginPathError{Kind: kind, Name: name, Dir: dir, Problem: "resolves to " + p}
		}
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			continue
		}
		return executable(p, fi)
	}
	return "", &BinaryNotFoundError{Kind: kind, Name: b.Name, Dir: dir, Tried: tried}
}

// executable returns p when its mode lets it be executed.
func executable(p string, fi os.FileInfo) (string, error) {
	if fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("plugin binary %s is not executable (mode %s)", p, fi.Mode().Perm())
	}
	return p, nil
}

// nameProblem says why a plugin name cannot name a file directly in
// plugin_dir ("" when it can).
func nameProblem(name string) string {
	switch {
	case name == "." || name == "..":
		return "is a directory reference"
	case strings.ContainsAny(name, `/\`):
		return "contains a path separator"
	case strings.ContainsRune(name, 0):
		return "contains a NUL byte"
	}
	return ""
}

// checkBinary compares the binary's sha256 with the block's pin and the
// lock file's.
func (in *instance) checkBinary() error {
	if in.block.SHA256 != "" {
		if err := checkPin(in.path, in.block.SHA256, ""); err != nil {
			return err
		}
	}
	if in.locked != "" {
		return checkPin(in.path, in.locked, in.m.opts.LockFile)
	}
	return nil
}

// checkPin compares path's sha256 with the pinned hex checksum, which
// lockFile records ("" when the config pins it).
func checkPin(path, pin, lockFile string) error {
	want := strings.ToLower(strings.TrimSpace(pin))
	if b, err := hex.DecodeString(want); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("the sha256 pin %q is not 64 hexadecimal digits", pin)
	}
	got, err := digest.FileSHA256(path)
	if err != nil {
		return fmt.Errorf("checksumming plugin binary: %w", err)
	}
	if got != want {
		return &ChecksumError{Path: path, Want: want, Got: got, LockFile: lockFile}
	}
	return nil
}

// supervise watches the running plugin and restarts it when it exits or
// fails HealthFailures consecutive health checks, until Stop.
func (in *instance) supervise() {
	m := in.m
	defer m.wg.Done()
	backoff := m.backoffMin
	for {
		in.mu.Lock()
		p := in.proc
		runningAt := in.runningAt
		in.mu.Unlock()
		reason := in.watch(p)
		if reason == nil {
			return // stopping: Stop ends the process
		}
		in.mu.Lock()
		in.state = StateRestarting
		in.proc = nil
		in.lastErr = reason
		in.mu.Unlock()
		in.log.Error("plugin failed; restarting", "error", reason, "pid", p.pid())
		p.kill()
		if time.Since(runningAt) >= m.stableAfter {
			backoff = m.backoffMin
		}
		for {
			t := time.NewTimer(backoff)
			select {
			case <-m.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(backoff*2, m.backoffMax)
			in.mu.Lock()
			in.restarts++
			n := in.restarts
			in.mu.Unlock()
			if err := in.restart(); err != nil {
				if m.ctx.Err() != nil {
					return
				}
				in.mu.Lock()
				in.lastErr = err
				in.mu.Unlock()
				in.log.Error("plugin restart failed", "restart", n, "error", err, "next_attempt_in", backoff)
				continue
			}
			in.log.Info("plugin restarted", "restart", n)
			break
		}
	}
}

// watch returns why p must be restarted, or nil when the manager stops.
func (in *instance) watch(p *proc) error {
	m := in.m
	t := time.NewTicker(m.opts.HealthInterval)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-m.ctx.Done():
			return nil
		case <-p.runner.exited:
			if err := p.runner.exitErr(); err != nil {
				return fmt.Errorf("plugin process %d exited: %w", p.pid(), err)
			}
			return fmt.Errorf("plugin process %d exited", p.pid())
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(m.ctx, m.opts.HealthTimeout)
		err := p.info.Health(ctx)
		cancel()
		if m.ctx.Err() != nil {
			return nil
		}
		if err == nil {
			fails = 0
			continue
		}
		fails++
		in.log.Warn("plugin health check failed", "error", err, "consecutive", fails, "limit", m.opts.HealthFailures)
		if fails >= m.opts.HealthFailures {
			return fmt.Errorf("%d consecutive health checks failed, the last with: %w", fails, err)
		}
	}
}

// restart starts a new process for the plugin and configures it with the
// config decoded at Start.
func (in *instance) restart() error {
	m := in.m
	ctx, cancel := context.WithTimeout(m.ctx, m.opts.StartTimeout)
	defer cancel()
	if err := in.checkBinary(); err != nil {
		return err
	}
	p, err := launch(ctx, in.spec())
	if err != nil {
		return err
	}
	info, err := in.identify(ctx, p)
	if err == nil {
		err = p.info.Configure(ctx, in.cfg)
	}
	if err != nil {
		p.kill()
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if m.ctx.Err() != nil {
		p.kill()
		return m.ctx.Err()
	}
	in.setRunningLocked(p, info)
	return nil
}

// Client returns a live gRPC connection to the named plugin and the
// negotiated API version. While the plugin is starting, restarting, failed
// or stopped it returns an *UnavailableError (matching
// ErrPluginUnavailable), so callers fail their work with a clear error
// instead of waiting. The connection dies with the plugin process: call
// Client again after an error rather than keeping it.
func (m *Manager) Client(kind, name string) (*grpc.ClientConn, int, error) {
	m.mu.Lock()
	in := m.byKey[pluginKey(kind, name)]
	m.mu.Unlock()
	if in == nil {
		return nil, 0, fmt.Errorf("%w: plugin %s %q is not configured on this node", ErrPluginNotFound, kind, name)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.state == StateRunning && in.proc != nil {
		return in.proc.conn, in.proc.version, nil
	}
	return nil, 0, &UnavailableError{Kind: kind, Name: name, State: in.state, Err: in.lastErr}
}

// Plugins returns the status of every plugin, in block order.
func (m *Manager) Plugins() []Status {
	m.mu.Lock()
	list := slices.Clone(m.list)
	m.mu.Unlock()
	out := make([]Status, 0, len(list))
	for _, in := range list {
		in.mu.Lock()
		s := Status{Kind: in.block.Kind, Name: in.block.Name, Version: in.version, Path: in.path,
			State: in.state, Restarts: in.restarts, APIVersion: in.apiVer, SHA256: strings.ToLower(strings.TrimSpace(in.block.SHA256))}
		if s.SHA256 == "" {
			s.SHA256 = in.locked
		}
		if in.proc != nil {
			s.Pid = in.proc.pid()
		}
		if in.lastErr != nil {
			s.LastError = in.lastErr.Error()
		}
		in.mu.Unlock()
		out = append(out, s)
	}
	return out
}

// Stop ends every plugin and waits for their processes to exit. Plugins
// get a graceful shutdown (go-plugin closes the connection and waits up to
// 2 s); when ctx ends first they are killed, and Stop returns ctx's error
// once they are gone. Stop is idempotent: later calls wait for the first.
func (m *Manager) Stop(ctx context.Context) error {
	var err error
	first := false
	m.stopOnce.Do(func() {
		first = true
		m.mu.Lock()
		m.stopped = true
		list := slices.Clone(m.list)
		m.mu.Unlock()
		m.cancel()
		m.wg.Wait() // supervisors and restarts are done
		var wg sync.WaitGroup
		for _, in := range list {
			in.mu.Lock()
			p := in.proc
			in.proc = nil
			if in.state != StateFailed {
				in.state = StateStopped
			}
			in.mu.Unlock()
			if p != nil {
				wg.Go(func() { p.stop(ctx) })
			}
		}
		wg.Wait()
		for _, in := range list {
			in.mu.Lock()
			if in.logFile != nil {
				_ = in.logFile.Close()
				in.logFile = nil
			}
			in.mu.Unlock()
		}
		err = ctx.Err()
		close(m.stopDone)
	})
	if first {
		return err
	}
	select {
	case <-m.stopDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
