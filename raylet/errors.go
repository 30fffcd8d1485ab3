package raylet

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
)

// ErrShuttingDown is returned for requests that arrive while (or after) the
// raylet shuts down, and to lease requests still waiting when it does.
var ErrShuttingDown = errors.New("raylet: node is shutting down")

// JobNotFoundError means a request names a job that has no driver
// registered on this node.
type JobNotFoundError struct {
	Job ids.ID
}

func (e *JobNotFoundError) Error() string {
	return fmt.Sprintf("raylet: job %s is not registered on this node", e.Job)
}

// JobFinishedError is returned to lease requests of a job whose driver has
// disconnected.
type JobFinishedError struct {
	Job ids.ID
}

func (e *JobFinishedError) Error() string {
	return fmt.Sprintf("raylet: job %s has finished", e.Job)
}

// WorkerStartError means worker processes of a job cannot be started: the
// binary could not be executed, or workers repeatedly exited before
// registering. Lease requests waiting for that job fail with it.
type WorkerStartError struct {
	Job ids.ID
	Err error
}

func (e *WorkerStartError) Error() string {
	return fmt.Sprintf("raylet: starting a worker for job %s: %v", e.Job, e.Err)
}

// Unwrap returns the underlying cause.
func (e *WorkerStartError) Unwrap() error { return e.Err }

// LeaseCancelledError is returned to a RequestWorkerLease call whose request
// was cancelled with CancelWorkerLease (a lease granted for it, if any, has
// been returned).
type LeaseCancelledError struct {
	RequestID []byte
}

func (e *LeaseCancelledError) Error() string {
	return fmt.Sprintf("raylet: lease request %x was cancelled", e.RequestID)
}

// WorkerNotFoundError means a request names a worker that is not alive on
// this node.
type WorkerNotFoundError struct {
	Worker ids.ID
}

func (e *WorkerNotFoundError) Error() string {
	return fmt.Sprintf("raylet: worker %s is not alive on this node", e.Worker)
}

// toStatus converts the raylet's errors to gRPC status errors.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var (
		nf  *JobNotFoundError
		fin *JobFinishedError
		ws  *WorkerStartError
		lc  *LeaseCancelledError
		wnf *WorkerNotFoundError
		pgr *PlacementGroupRemovedError
		bnp *BundleNotPreparedError
	)
	switch {
	case errors.Is(err, ErrShuttingDown):
		return status.Error(codes.Unavailable, err.Error())
	case errors.As(err, &nf), errors.As(err, &fin), errors.As(err, &ws), errors.As(err, &pgr):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.As(err, &lc):
		return status.Error(codes.Canceled, err.Error())
	case errors.As(err, &wnf), errors.As(err, &bnp):
		return status.Error(codes.NotFound, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// GCSUnreachableError is why a node stopped itself after no call to the
// GCS succeeded for Config.GCSReconnectTimeout (Raylet.Err returns it).
type GCSUnreachableError struct {
	// Address is the GCS's address; For how long no call succeeded.
	Address string
	For     time.Duration
	// Err is the last call's error.
	Err error
}

// Error says how long the GCS has been unreachable and where it is.
func (e *GCSUnreachableError) Error() string {
	return fmt.Sprintf("raylet: the GCS at %s has been unreachable for %s; stopping the node (last error: %v)", e.Address, e.For.Round(time.Millisecond), e.Err)
}

// Unwrap returns the last call's error.
func (e *GCSUnreachableError) Unwrap() error { return e.Err }

// OtherClusterError is why a node stopped itself when the GCS refused it as
// a node of another cluster: a GCS started afresh, or another cluster's
// (Raylet.Err returns it).
type OtherClusterError struct {
	// Address is the GCS's address; Node the refused node; Cluster the
	// cluster the node belongs to.
	Address string
	Node    ids.ID
	Cluster string
	// Err is the GCS's answer.
	Err error
}

// Error says which GCS refused the node as another cluster's.
func (e *OtherClusterError) Error() string {
	return fmt.Sprintf("raylet: the GCS at %s belongs to another cluster than node %s (of cluster %s); stopping the node: %v", e.Address, e.Node, e.Cluster, e.Err)
}

// Unwrap returns the GCS's answer.
func (e *OtherClusterError) Unwrap() error { return e.Err }

// RegistrationRefusedError is why a node stopped itself when the GCS at
// Address refused to register it for another reason than its cluster (for
// example because it had declared the node dead).
type RegistrationRefusedError struct {
	Address string
	Node    ids.ID
	// Err is the GCS's answer.
	Err error
}

// Error says which GCS refused the node and why.
func (e *RegistrationRefusedError) Error() string {
	return fmt.Sprintf("raylet: the GCS at %s refused to register node %s: %v", e.Address, e.Node, e.Err)
}

// Unwrap returns the GCS's answer.
func (e *RegistrationRefusedError) Unwrap() error { return e.Err }

// DeclaredDeadError is why a node stopped itself when the GCS at Address
// answered its heartbeat saying it had declared the node dead.
type DeclaredDeadError struct {
	Address string
	Node    ids.ID
}

// Error says which GCS declared the node dead.
func (e *DeclaredDeadError) Error() string {
	return fmt.Sprintf("raylet: the GCS at %s declared node %s dead; stopping the node", e.Address, e.Node)
}
