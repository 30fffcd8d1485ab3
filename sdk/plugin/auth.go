package plugin

import (
	"context"
	"net"
	"sync"

	"github.com/goray-dev/goray/internal/auth"
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
func AuthenticateServer(conn net.Conn) (net.Conn, error) {
	c, err := clusterCreds()
	if err != nil {
		return nil, err
	}
	return c.ServerConn(conn)
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
