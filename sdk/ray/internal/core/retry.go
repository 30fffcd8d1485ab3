package core

import (
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/rpc"
)

// dialGCS connects to the GCS at addr. Calls on the connection wait while
// the GCS is down (it may be restarting on durable storage) and go on once
// it is back, each until its context ends (rpc.WaitForServer).
func dialGCS(addr string, creds *auth.Credentials) (*grpc.ClientConn, error) {
	return rpc.Dial(addr, creds, rpc.WaitForServer()...)
}

// retryInitial is the first delay of the core worker's retry loops.
const retryInitial = 50 * time.Millisecond

// errNotYet is what a retried operation returns when it succeeded but
// what it waits for has not happened yet: ask again after a backoff.
var errNotYet = errors.New("not yet")

// newBackOff returns the exponential backoff of the core worker's retry
// loops: from retryInitial, doubling (with some jitter), at most maxDelay.
func newBackOff(maxDelay time.Duration) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = retryInitial
	b.Multiplier = 2
	b.RandomizationFactor = 0.2
	b.MaxInterval = maxDelay
	return b
}

// forever are the options of a retry loop bounded only by its context.
func forever(maxDelay time.Duration) []backoff.RetryOption {
	return []backoff.RetryOption{backoff.WithBackOff(newBackOff(maxDelay)), backoff.WithMaxElapsedTime(0)}
}
