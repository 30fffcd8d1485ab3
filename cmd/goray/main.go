// Command goray starts, stops and inspects goray nodes and clusters.
//
//	goray start --head              start a head node in the background
//	goray start --address HOST:PORT join a cluster
//	goray status                    show the cluster
//	goray list nodes|jobs|actors|tasks|objects|placement-groups|workers
//	goray summary tasks|actors|objects, goray memory, goray timeline -o trace.json
//	goray stop                      stop every node under the temp dir
//	goray job submit -- ./driver    run a driver on the head (job status|logs|stop|list)
//	goray version
//
// Exit codes: 0 success, 1 error, 2 usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/goray-dev/goray/cmd/goray/internal/bench"
	"github.com/goray-dev/goray/config"
	// The GCS's Redis backend: only the command a head runs links it.
	_ "github.com/goray-dev/goray/gcs/redisstore"
	"github.com/goray-dev/goray/sdk/ray"
	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// Environment variables the CLI reads.
const (
	// envAddress is the GCS address commands connect to when --address is
	// not given (also read by sdk/ray drivers).
	envAddress = "GORAY_ADDRESS"
	// envDaemonRoot marks a `goray start` daemon process with its temp dir,
	// so that `goray stop` finds daemons that have not written node.json.
	envDaemonRoot = "GORAY_DAEMON_TEMP_DIR"
)

// defaultTempDir is the root of session directories unless --temp-dir says
// otherwise: config.DefaultTempDir, goray under $TMPDIR or /tmp.
var defaultTempDir = config.DefaultTempDir()

func main() {
	// The goray binary is also, for `goray microbenchmark`, the shm tensor
	// transport plugin (when run as goray-transport-shm), the other
	// transport plugins, the s3 storage plugin, the go-plugin echo plugin
	// and the workers of its embedded node: all re-execute this binary.
	bench.MaybeServeTransport()
	bench.MaybeServeTransportPlugins() // and the collective and onesided transport plugins
	bench.MaybeServeStoragePlugin()    // and the s3 storage plugin
	bench.MaybeServePlugin()
	if ray.IsWorker() {
		_, _ = ray.Init(context.Background()) // serves tasks; never returns
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// app is the state shared by the commands of one invocation.
type app struct {
	stdout, stderr io.Writer
	// args are the command line arguments (without the program name).
	args []string
	// getenv reads the environment (os.Getenv outside tests).
	getenv func(string) string
	// procRoot is where /proc is mounted.
	procRoot string
	// logLevel is the --log-level flag.
	logLevel string
	log      hclog.Logger
}

// run executes the goray command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	a := &app{args: args, stdout: stdout, stderr: stderr, getenv: os.Getenv, procRoot: "/proc", log: hclog.NewNullLogger()}
	root := a.rootCmd()
	addSuggestions(root)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	return a.report(cmd, err)
}

// report prints err once and returns the exit code it stands for.
func (a *app) report(cmd *cobra.Command, err error) int {
	if err == nil {
		return exitOK
	}
	var silent *silentError
	if errors.As(err, &silent) {
		return silent.code
	}
	var rt *runtimeError
	if errors.As(err, &rt) {
		fmt.Fprintf(a.stderr, "Error: %s\n", strings.TrimRight(rt.err.Error(), "\n"))
		return exitError
	}
	// Everything else comes from cobra's parsing or is a usageError.
	fmt.Fprintf(a.stderr, "Error: %s\n", strings.TrimRight(err.Error(), "\n"))
	if cmd != nil {
		fmt.Fprintf(a.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return exitUsage
}

// usageError is a mistake in how goray was invoked; it exits with 2.
type usageError struct{ msg string }

// Error returns the message.
func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// runtimeError is an error of a command that parsed fine; it exits with 1.
type runtimeError struct{ err error }

// Error returns the message of the wrapped error.
func (e *runtimeError) Error() string { return e.err.Error() }

// Unwrap returns the wrapped error.
func (e *runtimeError) Unwrap() error { return e.err }

// silentError exits with code after the command has already explained the
// problem on stderr.
type silentError struct{ code int }

// Error names the exit status.
func (e *silentError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// runE adapts a command body: its errors are runtime errors (exit 1) unless
// it returned a usageError.
func runE(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		if err == nil {
			return nil
		}
		var ue *usageError
		var se *silentError
		if errors.As(err, &ue) || errors.As(err, &se) {
			return err
		}
		return &runtimeError{err: err}
	}
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "goray",
		Short:         "Start, stop and inspect goray clusters",
		Long:          "goray runs and inspects goray nodes: a head node (GCS, raylet and object store) and nodes that join it.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			level := a.logLevel
			if level == "" {
				level = "warn"
			}
			l := hclog.LevelFromString(level)
			if l == hclog.NoLevel {
				return usagef("invalid --log-level %q (use trace, debug, info, warn or error)", a.logLevel)
			}
			a.log = hclog.New(&hclog.LoggerOptions{Name: "goray", Output: a.stderr, Level: l})
			return nil
		},
	}
	root.SetFlagErrorFunc(flagError)
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "", "log level: trace, debug, info, warn or error (for start: the node's log)")
	root.AddCommand(a.startCmd(), a.stopCmd(), a.upCmd(), a.downCmd(), a.statusCmd(), a.listCmd(), a.versionCmd(), a.microbenchmarkCmd(), a.pluginsCmd(), a.authCmd(), a.certCmd(), a.gcsServerCmd(), a.logsCmd(), a.jobCmd())
	root.AddCommand(a.summaryCmd(), a.memoryCmd(), a.timelineCmd()) // cluster-wide state (statecmds.go)
	root.AddCommand(a.scaleCmd())                                   // the scale harness (scale.go)
	return root
}
