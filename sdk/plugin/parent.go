package plugin

import (
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
)

// pollParent exits the process once its parent pid is no longer host.
func pollParent(ppid int, log hclog.Logger) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for range t.C {
		if os.Getppid() != ppid {
			log.Error("host process is gone; exiting", "host_pid", ppid)
			os.Exit(1)
		}
	}
}
