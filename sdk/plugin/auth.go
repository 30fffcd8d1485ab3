package plugin

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/connlimit"
)

// clusterCreds are the credentials the node put in this plugin's
// environment, read once.
var clusterCreds = sync.OnceValues(auth.FromEnv)

// AuthenticateServer runs the server side of goray's connection handshake
// on a connection a plugin accepted for its own data path (a transport's
// peer connections, say): TLS when the cluster uses it, then proof that the
// peer holds the cluster token (the token itself never crosses the wire).
// Use the returned connection; on error, close conn and drop it. Every
// listener a plugin opens to the network must do this, so that only the
// cluster's processes reach it.
//
// A refused connection (a wrong token, a failed TLS handshake, a peer
// that hangs up or says nothing) is logged here, on the plugin's logger,
// once per peer host per minute with a count of the refusals not logged
// (auth.RefusalLog): the caller need not log it, and a flood of refusals
// adds a bounded number of lines to the plugin's and the node's logs.
func AuthenticateServer(conn net.Conn) (net.Conn, error) {
	c, err := clusterCreds()
	if err != nil {
		return nil, err
	}
	ac, err := c.ServerConn(conn)
	if err != nil {
		refusals.Log(refusalLogger(), auth.PeerHost(conn.RemoteAddr().String()), "refused a data connection", "error", err)
		return ac, err
	}
	// The peer showed the token: a connection from Listen is no longer
	// bounded as an unauthenticated one.
	connlimit.Authenticated(conn)
	return ac, nil
}

// refusals logs the refusals of AuthenticateServer.
var refusals auth.RefusalLog

// servedLogger is the logger Serve runs the plugin with (nil before it).
var servedLogger atomic.Pointer[hclog.Logger]

// fallbackLogger logs refusals before Serve (a plugin's own tests).
var fallbackLogger = sync.OnceValue(defaultLogger)

// refusalLogger is where refusals are logged: the plugin's logger, or
// before Serve hclog JSON to stderr, as Serve's.
func refusalLogger() hclog.Logger {
	if l := servedLogger.Load(); l != nil {
		return *l
	}
	return fallbackLogger()
}

// AuthenticateClient runs the client side of the handshake on a connection
// a plugin dialled to a peer plugin that calls AuthenticateServer,
// honouring ctx. Use the returned connection; on error, close conn.
func AuthenticateClient(ctx context.Context, conn net.Conn) (net.Conn, error) {
	c, err := clusterCreds()
	if err != nil {
		return nil, err
	}
	return c.ClientConn(ctx, conn)
}
