package core

import (
	"errors"
	"fmt"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// ErrOutOfMemory matches a task whose worker the memory monitor of its
// node killed on its last attempt (Ray's OutOfMemoryError).
var ErrOutOfMemory = errors.New("out of memory")

// KindOutOfMemory is RemoteError.Kind of an OutOfMemoryError that crossed
// a process boundary.
const KindOutOfMemory = "out_of_memory"

// OutOfMemoryError says the memory monitor of a node killed the worker
// running a task because the node was low on memory, on the task's last
// attempt (earlier attempts were retried like crashes). It names the
// node, its memory use and the threshold.
type OutOfMemoryError struct {
	Function string
	TaskID   ids.ID
	Attempts int
	// Node is the hex id of the node whose memory monitor killed the
	// worker; NodeName and NodeIP name it too.
	Node, NodeName, NodeIP string
	// UsedBytes of TotalBytes is the node's memory when the worker was
	// killed; Threshold is the monitor's usage threshold (a fraction).
	UsedBytes, TotalBytes int64
	Threshold             float64
	// Reason is the monitor's account of the kill.
	Reason string
}

func (e *OutOfMemoryError) Error() string {
	if e.Attempts == 0 { // a copy that crossed a process boundary: Reason is the whole message
		return e.Reason
	}
	return fmt.Sprintf("task %s (%s) ran out of memory on its last of %d attempts: %s. "+
		"Give the node more memory, run fewer such tasks at once (ask for more CPU or memory per task), or raise memory_monitor.usage_threshold",
		e.Function, e.TaskID.Short(), e.Attempts, e.Reason)
}

// Is matches ErrOutOfMemory.
func (e *OutOfMemoryError) Is(target error) bool { return target == ErrOutOfMemory }

// outOfMemory is the error of rec's task whose worker k says the memory
// monitor killed.
func outOfMemory(rec *taskRecord, k *pb.MemoryKill) *OutOfMemoryError {
	node, _ := ids.FromBytes(k.GetNodeId())
	return &OutOfMemoryError{
		Function: rec.spec.Function, TaskID: ids.MustFromBytes(rec.spec.TaskId), Attempts: int(rec.spec.Attempt) + 1,
		Node: node.String(), NodeName: k.GetNodeName(), NodeIP: k.GetNodeIp(),
		UsedBytes: k.GetUsedBytes(), TotalBytes: k.GetTotalBytes(), Threshold: k.GetThreshold(),
		Reason: k.Describe(),
	}
}
