//go:build !linux

package plugin

import (
	"os"
	"strconv"

	"github.com/hashicorp/go-hclog"
)

// watchParent exits the process once its parent is no longer the host
// (EnvHostPID, else the parent at start).
func watchParent(log hclog.Logger) {
	host, err := strconv.Atoi(os.Getenv(EnvHostPID))
	if err != nil || host <= 0 {
		host = os.Getppid()
	}
	if os.Getppid() != host {
		log.Error("host process is gone; exiting", "host_pid", host)
		os.Exit(1)
	}
	go pollParent(host, log)
}
