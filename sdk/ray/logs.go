package ray

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// EnvLogToDriver names the environment variable that turns worker output
// to the driver off ("0", "false") or on ("1", "true") when no
// LogToDriver option is given.
const EnvLogToDriver = "GORAY_LOG_TO_DRIVER"

// shutdownFlushTimeout bounds how long Shutdown waits for the job's worker
// output to be printed (less when its context ends sooner).
const shutdownFlushTimeout = 10 * time.Second

// LogToDriver says whether the lines the job's workers print on stdout
// and stderr, on every node, are printed by this driver (on its stdout
// and stderr), each prefixed with the task's function or the actor, the
// worker's pid and its node:
//
//	(main.square pid=4711 node=5c1e9a02 ip=127.0.0.2) computing 7
//
// On by default, as Ray's log_to_driver; $GORAY_LOG_TO_DRIVER=0 turns it
// off without a code change. Workers' log files on their nodes are
// written either way (`goray logs`). See docs/logs.md.
func LogToDriver(on bool) InitOption { return func(o *initOptions) { o.logToDriver = &on } }

// driverOutput returns where the driver prints its workers' lines (nil
// stdout: nowhere).
func driverOutput(o *initOptions, getenv func(string) string) (stdout, stderr io.Writer, err error) {
	on := true
	if o.logToDriver != nil {
		on = *o.logToDriver
	} else if v := strings.TrimSpace(getenv(EnvLogToDriver)); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, nil, fmt.Errorf("goray: $%s=%q: want 1, 0, true or false", EnvLogToDriver, v)
		}
		on = b
	}
	switch {
	case !on || o.quiet:
		return nil, nil, nil
	case o.output != nil:
		return o.output, o.output, nil
	}
	return os.Stdout, os.Stderr, nil
}

// flushLogs prints what the job's workers wrote so far (Shutdown).
func (rt *Runtime) flushLogs(ctx context.Context) {
	if rt.cw == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, shutdownFlushTimeout)
	defer cancel()
	if err := rt.cw.FlushLogs(ctx); err != nil {
		rt.log.Warn("worker output may be incomplete", "error", err)
	}
}
