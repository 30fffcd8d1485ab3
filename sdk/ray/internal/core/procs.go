package core

import (
	"os"
	"runtime"

	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// procLimit sizes a worker's Go scheduler to what the task or actor it
// runs asked for: GOMAXPROCS is the call's CPUs rounded up, at least 1 and
// at most the process's own default, as Ray sets OMP_NUM_THREADS in its
// workers. A node runs a worker per CPU it hands out; each with the Go
// default (every core of the machine) would wake threads on cores that
// belong to other workers, and on a small machine each such wake-up costs
// more than the call it serves. A worker whose environment sets
// GOMAXPROCS (the node's, or the job's) keeps it.
type procLimit struct {
	fixed bool // never change GOMAXPROCS
	max   int  // the process's default
}

// newProcLimit returns the limit of a process in mode: only a worker
// sizes itself.
func newProcLimit(mode Mode) procLimit {
	return procLimit{fixed: mode != ModeWorker || os.Getenv("GOMAXPROCS") != "", max: runtime.GOMAXPROCS(0)}
}

// apply sets GOMAXPROCS for a call that asked for res.
func (p procLimit) apply(res *pb.Resources) {
	if p.fixed {
		return
	}
	if n := procsFor(res, p.max); runtime.GOMAXPROCS(0) != n {
		runtime.GOMAXPROCS(n)
	}
}

// procsFor is the GOMAXPROCS of a call that asked for res: its CPUs
// rounded up, between 1 and limit.
func procsFor(res *pb.Resources, limit int) int {
	cpu := res.GetAmounts()[resources.CPU]
	n := int((cpu + resources.Unit - 1) / resources.Unit)
	return max(1, min(n, limit))
}
