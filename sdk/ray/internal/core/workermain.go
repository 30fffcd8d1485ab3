package core

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/logrotate"
	"github.com/goray-dev/goray/internal/workerenv"
)

// IsWorker reports whether this process was started by a raylet as a
// worker (internal/workerenv.Worker is "1").
func IsWorker() bool { return os.Getenv(workerenv.Worker) == "1" }

// RunWorker is a worker process's life: it reads what the raylet put in the
// environment (internal/workerenv), connects, registers, serves tasks until
// the raylet goes away, and exits the process. It never returns.
// transferTimeout bounds tensor transfers (0: the default).
func RunWorker(transferTimeout time.Duration) {
	level := os.Getenv(workerenv.LogLevel)
	wid, err := ids.Parse(os.Getenv(workerenv.WorkerID))
	if err != nil {
		fmt.Fprintf(os.Stderr, "goray worker: bad %s: %v\n", workerenv.WorkerID, err)
		os.Exit(2)
	}
	// The runtime's own log goes to logs/worker-<id>.log; stdout and stderr
	// carry only what user code prints (the raylet copies them).
	// It rotates within the node's logs block (internal/logrotate).
	var logOut io.Writer = os.Stderr
	size, _ := strconv.ParseInt(os.Getenv(workerenv.LogMaxFileSize), 10, 64)
	files, _ := strconv.Atoi(os.Getenv(workerenv.LogMaxFiles))
	f := logrotate.Open(filepath.Join(os.Getenv(workerenv.SessionDir), "logs", "worker-"+wid.String()+".log"), logrotate.Limits{MaxFileSize: size, MaxFiles: files})
	if _, err := f.Write(nil); err == nil {
		logOut = f
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "goray-worker", Output: logOut, Level: hclog.LevelFromString(level)})
	creds, err := auth.FromEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "goray worker: %v\n", err)
		os.Exit(2)
	}
	creds.SetLogger(log.Named("auth"))
	lost := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cw, err := Start(ctx, Config{
		Mode: ModeWorker, RayletSocket: os.Getenv(workerenv.RayletSocket), SessionDir: os.Getenv(workerenv.SessionDir), NodeIP: os.Getenv(workerenv.NodeIP),
		WorkerID: wid, Logger: log, TransferTimeout: transferTimeout, Auth: creds, Namespace: os.Getenv(EnvNamespace),
		OnRayletLost: func(err error) {
			select {
			case lost <- err:
			default:
			}
		},
	})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "goray worker: %v\n", err)
		os.Exit(1)
	}
	log.Debug("worker serving", "worker", wid.Short(), "functions", len(Registered()))
	// The raylet ends a worker with EXIT and SIGTERM: either way the task
	// events it still holds go to the GCS first (within 1 s, under the
	// raylet's 2 s grace before SIGKILL).
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	select {
	case err = <-lost:
	case s := <-term:
		err = fmt.Errorf("received %v", s)
	}
	log.Info("worker exiting", "reason", err)
	cw.stopTaskEvents(time.Second)
	os.Exit(0)
}
