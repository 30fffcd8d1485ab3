// Package rpc holds the gRPC options every goray server and client uses:
// the message limits and buffers, and the cluster's credentials (token
// check, panic recovery, TLS; see internal/auth). The GCS, the raylet, the
// core worker and the CLI build their servers and connections with it, so a
// limit or a check is set in one place.
package rpc

import (
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/limits"
)

// MaxMessageSize is the gRPC message limit on both sides of every goray
// connection. Values above the inline limit travel through shared memory,
// so messages stay small; the limit is raised deliberately so that a task
// with many inline arguments or an object holding many references fits.
// config.Validate keeps object_store.inline_limit below it.
const MaxMessageSize = limits.MaxMessageSize

// bufferSize is the read and write buffer of every connection.
const bufferSize = 256 << 10

// reconnectMaxDelay caps the backoff between a connection's attempts to
// reconnect (gRPC's default grows to 120 s): a server back after an outage,
// such as a restarted GCS, is reached again within a few seconds.
const reconnectMaxDelay = 5 * time.Second

// connectParams are gRPC's default reconnect parameters with the delay
// capped at reconnectMaxDelay.
var connectParams = grpc.ConnectParams{
	Backoff:           grpcbackoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectMaxDelay},
	MinConnectTimeout: 20 * time.Second,
}

// DialOptions are the gRPC options for every goray client connection to
// target: the message limits and buffers, a reconnect backoff capped at a
// few seconds, and creds' token and TLS.
func DialOptions(target string, creds *auth.Credentials) []grpc.DialOption {
	return append(creds.DialOptions(target),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
		grpc.WithWriteBufferSize(bufferSize),
		grpc.WithReadBufferSize(bufferSize),
		grpc.WithConnectParams(connectParams),
	)
}

// ServerOptions are the gRPC options for every goray server: the message
// limits and buffers, and creds' token check, header list limit, panic
// recovery and TLS. A call that passes the token check marks its
// connection authenticated: serve TCP on a listener wrapped with
// internal/connlimit, so that connections that never do are bounded.
// Clients' keepalive pings are allowed as often as every
// MinKeepaliveTime/2 (keepalive.go).
func ServerOptions(creds *auth.Credentials) []grpc.ServerOption {
	return append(creds.ServerOptions(),
		grpc.KeepaliveEnforcementPolicy(keepaliveEnforcement),
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.MaxSendMsgSize(MaxMessageSize),
		grpc.WriteBufferSize(bufferSize),
		grpc.ReadBufferSize(bufferSize),
	)
}

// Dial connects to a goray gRPC endpoint, a unix socket path (absolute) or
// host:port, with creds and the extra options (for example WaitForServer).
// Like grpc.NewClient it does not wait for the connection; the first call
// does.
func Dial(target string, creds *auth.Credentials, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	if filepath.IsAbs(target) {
		target = "unix://" + target
	}
	return grpc.NewClient(target, append(DialOptions(target, creds), extra...)...)
}

// Flow-control windows of connections on a call path (core worker to core
// worker, core worker to its raylet; the plugin protocol has its own,
// plugin.StreamWindow). Setting them turns
// off gRPC's bandwidth-delay-product estimator, which on every data frame
// received after its last probe was answered writes a connection window
// update and a PING, and the peer a PING ack: with one small message each
// way per call, that is two extra frames and a wake-up of the writer
// goroutine on each side per message. The sizes are as large as the
// estimator lets windows grow (16 MiB), so the throughput of large
// messages does not suffer; they also bound what a peer may send before
// its messages are read. See "Where the time goes" in docs/benchmarks.md.
const (
	StreamWindow = 4 << 20
	ConnWindow   = 16 << 20
)

// FixedWindowDialOptions are the client side of StreamWindow and
// ConnWindow.
func FixedWindowDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(StreamWindow),
		grpc.WithInitialConnWindowSize(ConnWindow),
	}
}

// FixedWindowServerOptions are the server side of StreamWindow and
// ConnWindow.
func FixedWindowServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(StreamWindow),
		grpc.InitialConnWindowSize(ConnWindow),
	}
}
