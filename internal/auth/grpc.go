package auth

import (
	"context"
	"crypto/subtle"
	"net"
	"path/filepath"
	"runtime/debug"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// header is the metadata key of the token, as Ray's: "authorization:
// Bearer <token>".
const (
	header       = "authorization"
	bearerPrefix = "Bearer "
)

// ServerOptions returns the options every goray gRPC server is built with:
// the token check on every call, made on the call's headers before any of
// its messages is read (an unauthenticated peer cannot make the server
// decode, or allocate for, anything it sends); panic recovery around every
// handler; and TLS on TCP connections when configured.
func (c *Credentials) ServerOptions() []grpc.ServerOption {
	c = c.orNone()
	opts := []grpc.ServerOption{
		grpc.InTapHandle(c.tap),
		grpc.ChainUnaryInterceptor(c.unaryInterceptor),
		grpc.ChainStreamInterceptor(c.streamInterceptor),
	}
	if c.TLS() {
		opts = append(opts, grpc.Creds(&splitCreds{tls: credentials.NewTLS(c.srv), plain: insecure.NewCredentials()}))
	}
	return opts
}

// DialOptions returns the options of a client connection to target (a
// "unix://" URL or an absolute socket path, else host:port): the token on
// every call, and TLS for TCP targets when configured.
func (c *Credentials) DialOptions(target string) []grpc.DialOption {
	c = c.orNone()
	var opts []grpc.DialOption
	if c.TLS() && !isUnixTarget(target) {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(c.cli)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if c.Enabled() {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{md: map[string]string{header: bearerPrefix + string(c.token)}}))
	}
	return opts
}

func isUnixTarget(t string) bool {
	return strings.HasPrefix(t, "unix:") || filepath.IsAbs(t)
}

// tokenCreds puts the token on every call.
type tokenCreds struct{ md map[string]string }

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return t.md, nil
}

// RequireTransportSecurity is false: the token is also what protects a
// cluster without TLS (on a network the operator trusts not to sniff).
func (tokenCreds) RequireTransportSecurity() bool { return false }

// tap checks a new call's token from its headers (see ServerOptions).
func (c *Credentials) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	return ctx, c.check(ctx, info.FullMethodName, info.Header)
}

// check returns nil when md carries the token (or none is required).
func (c *Credentials) check(ctx context.Context, method string, md metadata.MD) error {
	if !c.Enabled() {
		return nil
	}
	why := "no token"
	if vs := md.Get(header); len(vs) > 0 {
		got, ok := strings.CutPrefix(vs[0], bearerPrefix)
		if ok && subtle.ConstantTimeCompare([]byte(got), c.token) == 1 {
			return nil
		}
		why = "wrong token"
	}
	c.logRefusal(peerName(ctx), method, why)
	return status.Errorf(codes.Unauthenticated, "goray: %s: this cluster requires its token (%s); set $%s, or $%s to a file holding it (the head keeps it in ~/.goray/auth_token)",
		why, method, EnvToken, EnvTokenPath)
}

func peerName(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}
	if p.Addr.Network() == "unix" {
		return "unix socket"
	}
	if h, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return h
	}
	return p.Addr.String()
}

func (c *Credentials) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer c.recoverCall(info.FullMethod, &err)
	return handler(ctx, req)
}

func (c *Credentials) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer c.recoverCall(info.FullMethod, &err)
	return handler(srv, ss)
}

// recoverCall turns a handler's panic into an Internal error and logs it
// with its stack: one bad request must not take the node down.
func (c *Credentials) recoverCall(method string, err *error) {
	if r := recover(); r != nil {
		c.mu.Lock()
		l := c.log
		c.mu.Unlock()
		if l != nil {
			l.Error("panic in a call handler; the call fails, the node goes on", "call", method, "panic", r, "stack", string(debug.Stack()))
		}
		*err = status.Errorf(codes.Internal, "goray: internal error in %s: %v", method, r)
	}
}

// splitCreds serves TLS on TCP connections and plain gRPC on unix sockets
// (inside the node's 0700 session directory), so one server can listen on
// both.
type splitCreds struct {
	tls, plain credentials.TransportCredentials
}

func (s *splitCreds) pick(c net.Conn) credentials.TransportCredentials {
	if c.LocalAddr().Network() == "unix" {
		return s.plain
	}
	return s.tls
}

func (s *splitCreds) ClientHandshake(ctx context.Context, authority string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return s.pick(c).ClientHandshake(ctx, authority, c)
}

func (s *splitCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return s.pick(c).ServerHandshake(c)
}

func (s *splitCreds) Info() credentials.ProtocolInfo { return s.tls.Info() }

func (s *splitCreds) Clone() credentials.TransportCredentials {
	return &splitCreds{tls: s.tls.Clone(), plain: s.plain.Clone()}
}

func (s *splitCreds) OverrideServerName(name string) error {
	return s.tls.OverrideServerName(name) //nolint:staticcheck // part of the interface
}
