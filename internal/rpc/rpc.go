// Package rpc holds the gRPC options every goray server and client uses:
// the message limits and buffers, and the cluster's credentials (token
// check, panic recovery, TLS; see internal/auth). The GCS, the raylet, the
// core worker and the CLI build their servers and connections with it, so a
// limit or a check is set in one place.
package rpc

import (
	"path/filepath"

	"google.golang.org/grpc"

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

// DialOptions are the gRPC options for every goray client connection to
// target: the message limits and buffers, and creds' token and TLS.
func DialOptions(target string, creds *auth.Credentials) []grpc.DialOption {
	return append(creds.DialOptions(target),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
		grpc.WithWriteBufferSize(bufferSize),
		grpc.WithReadBufferSize(bufferSize),
	)
}

// ServerOptions are the gRPC options for every goray server: the message
// limits and buffers, and creds' token check, panic recovery and TLS.
func ServerOptions(creds *auth.Credentials) []grpc.ServerOption {
	return append(creds.ServerOptions(),
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.MaxSendMsgSize(MaxMessageSize),
		grpc.WriteBufferSize(bufferSize),
		grpc.ReadBufferSize(bufferSize),
	)
}

// Dial connects to a goray gRPC endpoint, a unix socket path (absolute) or
// host:port, with creds. Like grpc.NewClient it does not wait for the
// connection; the first call does.
func Dial(target string, creds *auth.Credentials) (*grpc.ClientConn, error) {
	if filepath.IsAbs(target) {
		target = "unix://" + target
	}
	return grpc.NewClient(target, DialOptions(target, creds)...)
}
