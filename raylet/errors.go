package raylet

import (
	"errors"
	"fmt"

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
