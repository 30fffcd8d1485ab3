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

	"github.com/goray-dev/goray/internal/connlimit"
)

// header is the metadata key of the token, as Ray's: "authorization:
// Bearer <token>".
const (
	header       = "authorization"
	bearerPrefix = "Bearer "
)

// Header list limits. A call's headers are read whole before the token
// check can look at them, so a server bounds them small: a goray call
// carries the token and a few short values. A client accepts more, since a
// failed call's status message (an error with its causes) comes back in
// its trailers.
const (
	// MaxServerHeaderList bounds the headers of a call a server reads:
	// larger ones are refused by the transport, which discards them as
	// they arrive instead of holding them.
	MaxServerHeaderList = 64 << 10
	// MaxClientHeaderList bounds the headers and trailers of an answer a
	// client reads.
	MaxClientHeaderList = 1 << 20
)

// ServerOptions returns the options every goray gRPC server is built with:
// the token check on every call, made on the call's headers before any of
// its messages is read (an unauthenticated peer cannot make the server
// decode, or allocate for, anything it sends); header lists bounded by
// MaxServerHeaderList; panic recovery around every handler; and TLS on TCP
// connections when configured. A call that passes the token check marks
// its connection authenticated for the listener's bounds on
// unauthenticated connections (internal/connlimit; the callers wrap their
// TCP listeners with it).
func (c *Credentials) ServerOptions() []grpc.ServerOption {
	c = c.orNone()
	var tc credentials.TransportCredentials = insecure.NewCredentials()
	if c.TLS() {
		tc = &splitCreds{tls: credentials.NewTLS(c.srv), plain: insecure.NewCredentials()}
	}
	return []grpc.ServerOption{
		grpc.Creds(markingCreds{tc}),
		grpc.InTapHandle(c.tap),
		grpc.MaxHeaderListSize(MaxServerHeaderList),
		grpc.ChainUnaryInterceptor(c.unaryInterceptor),
		grpc.ChainStreamInterceptor(c.streamInterceptor),
	}
}

// DialOptions returns the options of a client connection to target (a
// "unix://" URL or an absolute socket path, else host:port): the token on
// every call, TLS for TCP targets when configured, and answers' header
// lists bounded by MaxClientHeaderList.
func (c *Credentials) DialOptions(target string) []grpc.DialOption {
	c = c.orNone()
	opts := []grpc.DialOption{grpc.WithMaxHeaderListSize(MaxClientHeaderList)}
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

// tap checks a new call's token from its headers (see ServerOptions); a
// call that passes marks its connection authenticated.
func (c *Credentials) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if err := c.check(ctx, info.FullMethodName, info.Header); err != nil {
		return ctx, err
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ai, ok := p.AuthInfo.(markingInfo); ok {
			connlimit.Authenticated(ai.raw)
		}
	}
	return ctx, nil
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

// markingCreds are a server's transport credentials with the accepted
// connection in every connection's AuthInfo (markingInfo), so that the
// token check can mark it authenticated.
type markingCreds struct {
	credentials.TransportCredentials
}

func (m markingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, ai, err := m.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	return c, markingInfo{AuthInfo: ai, raw: raw}, nil
}

func (m markingCreds) Clone() credentials.TransportCredentials {
	return markingCreds{m.TransportCredentials.Clone()}
}

// markingInfo is the AuthInfo of a connection served with markingCreds:
// the inner credentials' (TLSInfo with TLS; use Inner to read it) and the
// connection as accepted.
type markingInfo struct {
	credentials.AuthInfo
	raw net.Conn
}

// Inner returns the AuthInfo of the inner transport credentials.
func (m markingInfo) Inner() credentials.AuthInfo { return m.AuthInfo }

// GetCommonAuthInfo passes on the inner AuthInfo's security level, which
// gRPC reads through this interface.
func (m markingInfo) GetCommonAuthInfo() credentials.CommonAuthInfo {
	if ci, ok := m.AuthInfo.(interface {
		GetCommonAuthInfo() credentials.CommonAuthInfo
	}); ok {
		return ci.GetCommonAuthInfo()
	}
	return credentials.CommonAuthInfo{}
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
