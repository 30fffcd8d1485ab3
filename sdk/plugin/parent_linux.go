package plugin

import (
	"os"
	"strconv"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// watchParent makes the process exit when the host goes away: the kernel
// kills it when its parent dies (PR_SET_PDEATHSIG), and a watcher exits it
// once its parent is no longer the host. The host's pid comes from
// EnvHostPID; without it the parent at start is taken as the host, unless
// that is init (pid 1), which means the host has already gone.
func watchParent(log hclog.Logger) {
	host, err := strconv.Atoi(os.Getenv(EnvHostPID))
	if err != nil || host <= 0 {
		host = os.Getppid()
		if host == 1 {
			log.Error("started without a host (parent is init); exiting")
			os.Exit(1)
		}
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		log.Warn("cannot ask to be killed with the host", "error", err)
	}
	// Checked after the prctl: a host that died before it is caught here.
	if os.Getppid() != host {
		log.Error("host process is gone; exiting", "host_pid", host)
		os.Exit(1)
	}
	go pollParent(host, log)
}
