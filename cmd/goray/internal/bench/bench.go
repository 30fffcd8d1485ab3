// Package bench is goray's microbenchmark: Ray's `ray microbenchmark`
// metrics (same names, workloads, multipliers and timing method) measured on
// a goray runtime, next to the limits of the machine they run on (memory
// bandwidth, loopback sockets, a bare gRPC and go-plugin round trip) so
// figures can be read as ratios of what the hardware allows.
//
// Workers are the driver's binary re-executed, so every task and actor the
// benchmark uses is registered at package level here: a binary that calls
// Run must import this package, call MaybeServeTransport and
// MaybeServePlugin first thing in main (the binary also serves as the shm
// tensor transport plugin and the go-plugin echo plugin), and let ray.Init
// serve in worker mode (`if ray.IsWorker() { ray.Init(ctx) }`) before doing
// anything else.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/cmd/goray/internal/bench/pluginecho"
	"github.com/goray-dev/goray/sdk/ray"
	"github.com/hashicorp/go-hclog"
)

// Result statuses.
const (
	StatusOK           = "ok"
	StatusNotAvailable = "not_available"
	StatusError        = "error"
)

// Units of the figures.
const (
	UnitPerSecond = "/s"
	UnitGBps      = "GB/s"
	UnitMicros    = "µs"
)

// Options configures Run.
type Options struct {
	// Quick uses short rounds (warm-up 0.2 s, 2 rounds of 0.3 s) and
	// smaller large-object sizes, for CI smoke runs.
	Quick bool
	// Filter keeps only the metrics and limits whose name matches (nil:
	// all).
	Filter *regexp.Regexp
	// Address is the cluster to connect to; "" starts a fresh embedded node
	// (ray.Init with no address, which still honours $GORAY_ADDRESS). The
	// embedded node runs this binary as the shm transport plugin when the
	// tensor metric is selected.
	Address string
	// Runtime, when set, is an already initialised goray runtime in this
	// process: Run uses it and neither starts nor shuts one down (Address
	// is then ignored). The tensor metric needs its node to run the shm
	// transport plugin; it is reported not available otherwise.
	Runtime *ray.Runtime
	// Log receives progress lines, one per metric or limit as it finishes
	// (nil: none).
	Log io.Writer
	// Logger receives the runtime's logs when Run starts it (nil:
	// hclog.NewNullLogger()).
	Logger hclog.Logger
	// Settle is slept before each metric to let the machine settle (Ray
	// sleeps 10 s); the default 0 skips it.
	Settle time.Duration
	// MetricTimeout bounds each metric or limit, set-up included (0: 5 min,
	// 1 min in quick mode). A metric that runs out of time is an error.
	MetricTimeout time.Duration
	// Commit is recorded in the report ("": the binary's VCS revision from
	// its build info, else "unknown").
	Commit string
	// Command is recorded in the report ("": the process's command line).
	Command string
}

// Result is one measured figure: a metric or a limit.
type Result struct {
	// Name is the metric's name (Ray's name for metrics).
	Name string `json:"name"`
	// Mean and SD are the mean and population standard deviation of the
	// timed rounds, in Unit.
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
	// Unit is "/s", "GB/s" or "µs".
	Unit string `json:"unit"`
	// LimitName and LimitValue name the limit this metric is compared
	// with, measured in the same run.
	LimitName  string  `json:"limit_name,omitempty"`
	LimitValue float64 `json:"limit_value,omitempty"`
	// Ratio compares the metric with its limit; Note says how.
	Ratio float64 `json:"ratio,omitempty"`
	// Rounds are the figures of the timed rounds Mean and SD summarise.
	Rounds []float64 `json:"rounds,omitempty"`
	// Status is "ok", "not_available" or "error".
	Status string `json:"status"`
	// Error says what failed when Status is "error".
	Error string `json:"error,omitempty"`
	// Note explains how goray's workload differs from Ray's, how the
	// ratio is computed, or why the metric is not available.
	Note string `json:"note,omitempty"`
}

// Machine describes the machine a report was measured on.
type Machine struct {
	Cores       int    `json:"cores"`
	MemoryBytes int64  `json:"memory_bytes"`
	GoVersion   string `json:"go_version"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	CPUModel    string `json:"cpu_model"`
}

// Report is the outcome of one Run.
type Report struct {
	Machine Machine   `json:"machine"`
	Commit  string    `json:"commit"`
	Date    time.Time `json:"date"`
	Command string    `json:"command"`
	// Method describes the timing method (and settle time) of the run.
	Method string `json:"method"`
	// Limits are the machine's limits, measured before the metrics.
	Limits []Result `json:"limits"`
	// Metrics are Ray's microbenchmark metrics, in Ray's order, then
	// goray's own (tensor transfers).
	Metrics []Result `json:"metrics"`
}

// Failed returns the metrics whose Status is "error" (limits are not
// included: CI smoke runs fail only on broken metrics, never on figures).
func (r *Report) Failed() []Result {
	var out []Result
	for _, m := range r.Metrics {
		if m.Status == StatusError {
			out = append(out, m)
		}
	}
	return out
}

// pluginHook records that the binary calls MaybeServePlugin, so the
// go-plugin limit can re-execute it as the plugin.
var pluginHook atomic.Bool

// MaybeServePlugin serves the benchmark's go-plugin echo plugin and exits
// when this process was started as that plugin (by the go_plugin_round_trip
// limit, which re-executes the running binary); otherwise it returns at
// once. Call it first thing in main, before ray.Init.
func MaybeServePlugin() {
	pluginHook.Store(true)
	pluginecho.MaybeServe()
}

// notAvailableError marks a workload that cannot be measured here.
type notAvailableError struct{ reason string }

func (e *notAvailableError) Error() string { return "not available: " + e.reason }

// Run measures the limits, then the metrics, and returns the report. A
// metric that fails gets Status "error"; Run itself fails only when the
// goray runtime cannot start (or ctx ends before it does).
func Run(ctx context.Context, opts Options) (*Report, error) {
	tm := rayTiming()
	if opts.Quick {
		tm = quickTiming()
	}
	timeout := opts.MetricTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
		if opts.Quick {
			timeout = time.Minute
		}
	}
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	stall := stallTimeout
	if opts.Quick {
		stall = quickStallTimeout
	}
	e := &env{quick: opts.Quick, half: max(1, runtime.NumCPU()/2), logger: logger}
	defer e.closeS3()
	limits := selectWorkloads(e.limits(), opts.Filter)
	metrics := selectWorkloads(e.metrics(), opts.Filter)

	rep := &Report{
		Machine: detectMachine(),
		Commit:  commit(opts.Commit),
		Date:    time.Now().UTC().Truncate(time.Second),
		Command: opts.Command,
		Method:  tm.describe() + settleNote(opts.Settle),
		Limits:  []Result{},
		Metrics: []Result{},
	}
	if rep.Command == "" {
		rep.Command = strings.Join(os.Args, " ")
	}
	if len(metrics) > 0 && opts.Runtime == nil {
		rt, cleanup, err := e.startRuntime(ctx, opts.Address, needsTransport(metrics))
		if err != nil {
			return nil, fmt.Errorf("bench: starting goray: %w", err)
		}
		e.gcsAddress = rt.GCSAddress()
		defer func() {
			rt.Shutdown(context.Background())
			cleanup()
		}()
	}
	r := runner{timing: tm, timeout: timeout, stall: stall, log: opts.Log}
	byName := map[string]Result{}
	for _, w := range limits {
		res := r.run(ctx, w)
		byName[w.name] = res
		rep.Limits = append(rep.Limits, res)
		r.progress(res)
	}
	for _, w := range metrics {
		if err := sleepCtx(ctx, opts.Settle); err != nil {
			break
		}
		res := r.run(ctx, w)
		if lim, ok := byName[w.limit]; ok && w.ratio != nil && res.Status == StatusOK && lim.Status == StatusOK && lim.Mean > 0 {
			res.LimitName, res.LimitValue = lim.Name, lim.Mean
			res.Ratio = w.ratio(res.Mean, lim.Mean)
		}
		rep.Metrics = append(rep.Metrics, res)
		r.progress(res)
		runtime.GC() // let handles the workload dropped release their objects
	}
	return rep, nil
}

// needsTransport reports whether a workload needs a tensor transport on
// the node.
func needsTransport(ws []workload) bool {
	for _, w := range ws {
		if w.transport != "" && w.unavailable == "" {
			return true
		}
	}
	return false
}

// startRuntime starts the goray runtime Run measures: a connection to the
// cluster at address, else an embedded node. With withShm the embedded node
// runs this binary as the shm transport plugin; when it cannot (the binary
// does not call MaybeServeTransport, or the plugin fails to start) the node
// starts without it and the metrics needing it are reported not available.
// The returned function cleans up after the runtime has shut down.
func (e *env) startRuntime(ctx context.Context, address string, withShm bool) (*ray.Runtime, func(), error) {
	initOpts := []ray.InitOption{ray.WithLogger(e.logger)}
	if address != "" {
		initOpts = append(initOpts, ray.Address(address))
	}
	if !withShm || address != "" || os.Getenv(ray.EnvAddress) != "" {
		rt, err := ray.Init(ctx, initOpts...)
		return rt, func() {}, err
	}
	cfg, cleanup, err := shmNodeConfig()
	if err != nil {
		e.shmUnavailable = err.Error()
		rt, err := ray.Init(ctx, initOpts...)
		return rt, func() {}, err
	}
	rt, err := ray.Init(ctx, append(initOpts, ray.WithConfig(cfg))...)
	if err == nil {
		return rt, cleanup, nil
	}
	cleanup()
	if ctx.Err() != nil {
		return nil, nil, err
	}
	e.shmUnavailable = "the embedded node could not start this binary as the shm transport plugin: " + err.Error()
	rt, err = ray.Init(ctx, initOpts...)
	return rt, func() {}, err
}

func settleNote(d time.Duration) string {
	if d <= 0 {
		return "; no settle sleep before each metric (Ray sleeps 10 s)"
	}
	return fmt.Sprintf("; settle sleep %s before each metric (Ray: 10 s)", d)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// workload is one metric or limit.
type workload struct {
	name string
	unit string
	note string
	// mult is Ray's multiplier: the figure is mult × calls / seconds.
	mult float64
	// latency makes the figure the time per call in µs instead.
	latency bool
	// unavailable, when set, says why the workload cannot run.
	unavailable string
	// transport names the tensor transport the workload needs on the node
	// ("" for none).
	transport string
	// limit names the limit the metric is compared with; ratio computes
	// the comparison from the two means.
	limit string
	ratio func(mean, limit float64) float64
	// report, when set, is called after a successful measurement (before
	// the clean-up) and what it returns is added to the note: figures the
	// system measured itself during the run.
	report func(context.Context) string
	// setup prepares the workload and returns one unit of work and the
	// clean-up.
	setup func(ctx context.Context) (fn func(context.Context) error, teardown func(context.Context), err error)
}

func selectWorkloads(ws []workload, filter *regexp.Regexp) []workload {
	if filter == nil {
		return ws
	}
	var out []workload
	for _, w := range ws {
		if filter.MatchString(w.name) {
			out = append(out, w)
		}
	}
	return out
}

// stallTimeout is how long a metric may go without finishing a call (or
// a group of calls) before it is stopped as hung; it also bounds set-up.
const (
	stallTimeout      = 60 * time.Second
	quickStallTimeout = 30 * time.Second
)

// stallError says a metric stopped making progress.
type stallError struct{ d time.Duration }

func (e *stallError) Error() string {
	return fmt.Sprintf("no call finished for %s (hung)", e.d)
}

// runner measures workloads.
type runner struct {
	timing  timing
	timeout time.Duration
	stall   time.Duration
	log     io.Writer
}

// watch cancels ctx with a stallError when beat stops moving for r.stall.
func (r runner) watch(ctx context.Context, beat *atomic.Int64, cancel context.CancelCauseFunc) {
	every := max(r.stall/20, time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	last, since := beat.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if b := beat.Load(); b != last {
				last, since = b, now
			} else if now.Sub(since) >= r.stall {
				cancel(&stallError{d: r.stall})
				return
			}
		}
	}
}

// withCause adds ctx's cancellation cause to err when it explains it.
func withCause(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	if c := context.Cause(ctx); c != nil && !errors.Is(err, c) && c != ctx.Err() {
		return fmt.Errorf("%w: %w", c, err)
	}
	return err
}

func (r runner) run(ctx context.Context, w workload) (res Result) {
	res = Result{Name: w.name, Unit: w.unit, Note: w.note, Status: StatusOK}
	if w.unavailable != "" {
		res.Status, res.Note = StatusNotAvailable, w.unavailable
		return res
	}
	ctx, cancel := context.WithTimeoutCause(ctx, r.timeout, fmt.Errorf("the metric ran longer than %s", r.timeout))
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			res.Status, res.Error = StatusError, fmt.Sprintf("panic: %v", p)
		}
	}()
	sctx, scancel := context.WithTimeoutCause(ctx, r.stall, fmt.Errorf("set-up took longer than %s", r.stall))
	fn, teardown, err := w.setup(sctx)
	err = withCause(sctx, err)
	scancel()
	if err != nil {
		var na *notAvailableError
		if errors.As(err, &na) {
			res.Status, res.Note = StatusNotAvailable, na.reason
			return res
		}
		res.Status, res.Error = StatusError, "set-up: "+err.Error()
		return res
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		teardown(tctx)
	}()
	mctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var beat atomic.Int64
	go r.watch(mctx, &beat, stop)
	rounds, err := r.timing.measure(mctx, fn, &beat)
	if err != nil {
		res.Status, res.Error = StatusError, withCause(mctx, err).Error()
		return res
	}
	if w.report != nil {
		res.Note = joinNotes(res.Note, w.report(ctx))
	}
	var figures []float64
	if w.latency {
		figures = latenciesMicros(rounds)
	} else {
		figures = rates(rounds, w.mult)
	}
	res.Mean, res.SD = meanSD(figures)
	res.Rounds = figures
	return res
}

func (r runner) progress(res Result) {
	if r.log == nil {
		return
	}
	fmt.Fprintf(r.log, "%-46s %s\n", res.Name, resultSummary(res))
}

func noTeardown(context.Context) {}
