package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Retries after kills by the memory monitor (Ray's task_oom_retries).
//
// A task whose worker its node's memory monitor killed is retried within
// a budget of its own, MaxOOMRetries (default DefaultMaxOOMRetries; < 0:
// no limit), apart from MaxRetries, which only crashes, errors retried
// with RetryErrors and rebuilt results draw on; a task with MaxRetries 0
// is not retried after a kill either (as Ray ignores task_oom_retries for
// a task that is not retriable). The owner learns of the kill when it
// returns the worker's lease (leaseFailed), before it decides. A killed
// task runs again after a delay, oomBase doubling with each kill up to
// oomRetryMax, so that the node's memory has time to come back before
// the task takes it again (Ray's task_oom_retry_delay_base_ms). When the
// budget is spent the task fails with an OutOfMemoryError. Ray's default
// budget is without limit; goray's is DefaultMaxOOMRetries, so that a task
// that needs more memory than any node has fails (in about ten minutes)
// instead of being killed forever. Actor calls are retried within their
// MaxTaskRetries, kill or not, and their actor restarts within its
// MaxRestarts.

const (
	// DefaultMaxOOMRetries is how often a task the memory monitor killed is
	// retried when its MaxOOMRetries is not set (Ray's task_oom_retries
	// before it became unlimited).
	DefaultMaxOOMRetries = 15
	// oomRetryBase is the delay before the first retry of a killed task
	// (Ray's task_oom_retry_delay_base_ms); oomRetryMax bounds it.
	oomRetryBase = time.Second
	oomRetryMax  = time.Minute
)

// oomBudget is the MaxOOMRetries budget of a task asked for with n (nil:
// the default) and maxRetries (its MaxRetries, resolved): -1 means no
// limit.
func oomBudget(n *int, maxRetries int) int {
	switch {
	case maxRetries == 0:
		return 0
	case n == nil:
		return DefaultMaxOOMRetries
	case *n < 0:
		return -1
	}
	return *n
}

// takeOOMRetry reports whether task rec, whose worker the memory monitor
// killed, runs again, and if so counts the kill against its budget.
func (rec *taskRecord) takeOOMRetry() bool {
	if rec.oomLeft == 0 || rec.ctx.Err() != nil {
		return false
	}
	if rec.oomLeft > 0 {
		rec.oomLeft--
	}
	rec.oomKills++
	return true
}

// oomDelay is how long a task killed for the kills-th time waits before
// it runs again: base, doubled with each kill, at most oomRetryMax.
func oomDelay(base time.Duration, kills int32) time.Duration {
	d := base
	for i := int32(1); i < kills && d < oomRetryMax; i++ {
		d *= 2
	}
	return min(d, oomRetryMax)
}

// requeueAfterKill puts task rec, whose worker the memory monitor killed
// and which is to run again (its next attempt, made by endLeaseLocked),
// back at the head of its key k's queue once its delay is over, or fails
// it at once when it is cancelled or the core worker stops meanwhile.
func (s *submitter) requeueAfterKill(rec *taskRecord, k *schedKey) {
	t := time.NewTimer(oomDelay(s.oomBase, rec.oomKills))
	defer t.Stop()
	select {
	case <-t.C:
	case <-rec.ctx.Done():
	case <-s.cw.ctx.Done():
	}
	s.mu.Lock()
	var err error
	switch {
	case s.closed || s.cw.ctx.Err() != nil:
		err = ErrShutdown
	case rec.cancelled:
		err = cancelledError(rec.spec.Function, errors.New("ray.Cancel"))
	case rec.ctx.Err() != nil:
		err = cancelledError(rec.spec.Function, context.Cause(rec.ctx))
	}
	if err != nil {
		s.mu.Unlock()
		s.fail(rec, err)
		return
	}
	k.queue = append([]*taskRecord{rec}, k.queue...)
	sends := s.dispatchLocked(k)
	s.mu.Unlock()
	s.send(sends)
}

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
