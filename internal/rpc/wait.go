package rpc

import (
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Retry backoff of calls made on a connection dialled with WaitForServer:
// gRPC's WaitForReady already waits for the connection, so these only pace
// calls the server itself answers Unavailable (a GCS whose storage is slow,
// a server stopping under the call).
const (
	retryInitial = 100 * time.Millisecond
	retryMax     = 2 * time.Second
)

// WaitForServer returns the dial options that make every call on the
// connection wait while its server is down instead of failing at once, as
// the core worker's calls to the GCS do while the GCS restarts: unary calls
// and new streams wait for the connection to be ready (gRPC's
// WaitForReady), and a unary call that fails with Unavailable all the same
// (the server went away under it, or answered Unavailable) is tried again
// with exponential backoff. Every wait ends with the call's context; the
// call then fails with a *ServerWaitError that wraps the context's error.
// Use it only for servers whose unary calls may be repeated: a call that
// failed with Unavailable may have been carried out.
func WaitForServer() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(waitUnary),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(ctx, desc, cc, method, append([]grpc.CallOption{grpc.WaitForReady(true)}, opts...)...)
		}),
	}
}

// ServerWaitError is the error of a call on a connection dialled with
// WaitForServer whose context ended while it waited for the server. It
// wraps the context's error (errors.Is(err, context.DeadlineExceeded)
// holds) and carries the matching gRPC status (DeadlineExceeded or
// Canceled) for status.Code.
type ServerWaitError struct {
	// Target is the connection's target; Method the call.
	Target, Method string
	// Err is the context's error; Last the call's last error.
	Err, Last error
}

// Error says which call gave up waiting for which server, and why.
func (e *ServerWaitError) Error() string {
	return fmt.Sprintf("rpc: %s on %s: gave up waiting for the server: %v (last error: %v)", e.Method, e.Target, e.Err, e.Last)
}

// Unwrap returns the context's error.
func (e *ServerWaitError) Unwrap() error { return e.Err }

// GRPCStatus maps the error to the status of the context's error.
func (e *ServerWaitError) GRPCStatus() *status.Status {
	return status.New(status.FromContextError(e.Err).Code(), e.Error())
}

// waitUnary is WaitForServer's unary interceptor.
func waitUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return Retry(ctx, cc.Target(), method, func(ctx context.Context, more ...grpc.CallOption) error {
		return invoker(ctx, method, req, reply, cc, append(more, opts...)...)
	})
}

// Retry makes one call wait while its server is down, as every call on a
// connection dialled with WaitForServer does: call gets gRPC's
// WaitForReady option to pass on, and is tried again with exponential
// backoff while it fails with Unavailable, until ctx ends (the error is
// then a *ServerWaitError naming target and method). Use it for a call
// that may be repeated on a connection whose other calls must fail fast.
func Retry(ctx context.Context, target, method string, call func(ctx context.Context, opts ...grpc.CallOption) error) error {
	opts := []grpc.CallOption{grpc.WaitForReady(true)}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = retryInitial, retryMax
	var last error
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		last = call(ctx, opts...)
		if last != nil && status.Code(last) != codes.Unavailable {
			return struct{}{}, backoff.Permanent(last)
		}
		return struct{}{}, last
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
	if err == nil || ctx.Err() == nil {
		return err
	}
	switch status.Code(last) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return &ServerWaitError{Target: target, Method: method, Err: ctx.Err(), Last: last}
	}
	return err
}
