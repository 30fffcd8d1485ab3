package host

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/goray-dev/goray/internal/plugindial"
)

// Endpoint is how another process of this node calls a running plugin
// itself rather than through the host: the plugin's socket and the mutual
// TLS credentials go-plugin made for this launch of it
// (plugindial.Dial connects with it).
type Endpoint = plugindial.Endpoint

// ErrNoEndpoint matches a running plugin whose endpoint could not be read
// at its launch (see Manager.Endpoint): it is reached through the host only.
var ErrNoEndpoint = errors.New("the plugin cannot be called directly, only through its host")

// Endpoint returns how to call the named plugin directly while it runs.
// Like Client, it returns an *UnavailableError while the plugin is not
// running, and the endpoint dies with the plugin process: ask again after
// an error.
func (m *Manager) Endpoint(kind, name string) (Endpoint, error) {
	m.mu.Lock()
	in := m.byKey[pluginKey(kind, name)]
	m.mu.Unlock()
	if in == nil {
		return Endpoint{}, fmt.Errorf("%w: plugin %s %q is not configured on this node", ErrPluginNotFound, kind, name)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.state == StateRunning && in.proc != nil {
		ep := in.proc.endpoint
		if ep.Address == "" {
			return Endpoint{}, fmt.Errorf("%w: plugin %s %q", ErrNoEndpoint, kind, name)
		}
		ep.Pid = in.proc.pid()
		return ep, nil
	}
	return Endpoint{}, &UnavailableError{Kind: kind, Name: name, State: in.state, Err: in.lastErr}
}

// endpointOf reads a launched plugin's endpoint: its address from the
// client, the client's certificate and key from cfg (go-plugin's AutoMTLS
// fills cfg.TLSConfig at start), and the plugin's certificate from a
// health check on conn, the one call whose peer is the plugin itself
// (go-plugin keeps the certificate it was sent only in a pool, which
// cannot be read back).
func endpointOf(ctx context.Context, client *goplugin.Client, cfg *goplugin.ClientConfig, conn *grpc.ClientConn) (Endpoint, error) {
	rc := client.ReattachConfig()
	if rc == nil || rc.Addr == nil {
		return Endpoint{}, errors.New("go-plugin gave no address for the plugin")
	}
	if cfg.TLSConfig == nil || len(cfg.TLSConfig.Certificates) != 1 || len(cfg.TLSConfig.Certificates[0].Certificate) == 0 {
		return Endpoint{}, errors.New("the plugin's connection has no client certificate (AutoMTLS off?)")
	}
	cert := cfg.TLSConfig.Certificates[0]
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return Endpoint{}, fmt.Errorf("the plugin connection's client key: %w", err)
	}
	var p peer.Peer
	// go-plugin serves the standard health service under the name
	// "plugin", in every language.
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: goplugin.GRPCServiceName}, grpc.Peer(&p)); err != nil {
		return Endpoint{}, fmt.Errorf("health check: %w", err)
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return Endpoint{}, fmt.Errorf("the plugin's connection is not mutual TLS (%T)", p.AuthInfo)
	}
	return Endpoint{
		Network:    rc.Addr.Network(),
		Address:    rc.Addr.String(),
		ClientCert: cert.Certificate[0],
		ClientKey:  key,
		ServerCert: ti.State.PeerCertificates[0].Raw,
	}, nil
}
