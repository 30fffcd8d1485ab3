// Package plugindial connects a process of a node to one of the node's
// plugins directly, with the mutual-TLS credentials go-plugin made for
// that plugin's launch, instead of through the node host that launched it.
// The host reads an Endpoint when it launches a plugin (host.Manager's
// Endpoint), the raylet hands it to its workers (TransportEndpoint), and
// Dial connects with it.
package plugindial

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/goray-dev/goray/sdk/plugin"
)

// Endpoint is how to call a running plugin: its socket and the credentials
// of its current launch. A restarted plugin has a new Endpoint (and
// another Pid); the old one reaches nothing.
type Endpoint struct {
	// Network and Address are the plugin's listener ("unix" and the
	// socket's path).
	Network, Address string
	// ClientCert is the client certificate (DER) the plugin accepts, and
	// ClientKey its private key (PKCS #8, DER).
	ClientCert, ClientKey []byte
	// ServerCert is the plugin's certificate (DER): the only server to
	// trust at Address.
	ServerCert []byte
	// Pid is the plugin's process id.
	Pid int
}

// serverName is the name in the certificates go-plugin makes.
const serverName = "localhost"

// TLSConfig returns the client TLS configuration for ep: ep's client
// certificate, and ep's server certificate as the only root.
func TLSConfig(ep Endpoint) (*tls.Config, error) {
	if ep.Network != "unix" || ep.Address == "" {
		return nil, fmt.Errorf("plugindial: endpoint %s %q is not a unix socket", ep.Network, ep.Address)
	}
	if len(ep.ClientCert) == 0 || len(ep.ClientKey) == 0 || len(ep.ServerCert) == 0 {
		return nil, errors.New("plugindial: the endpoint has no credentials")
	}
	key, err := x509.ParsePKCS8PrivateKey(ep.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("plugindial: the client key: %w", err)
	}
	server, err := x509.ParseCertificate(ep.ServerCert)
	if err != nil {
		return nil, fmt.Errorf("plugindial: the server certificate: %w", err)
	}
	if _, err := x509.ParseCertificate(ep.ClientCert); err != nil {
		return nil, fmt.Errorf("plugindial: the client certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(server)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{ep.ClientCert}, PrivateKey: key}},
		RootCAs:      roots,
		ServerName:   serverName,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// ProtocolDialOptions are the client side of the plugin protocol: its
// message limit and flow-control windows (the plugin SDK's server sets
// the same). The host's connection and Dial's both use them.
func ProtocolDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(plugin.MaxMessageSize),
			grpc.MaxCallSendMsgSize(plugin.MaxMessageSize),
		),
		grpc.WithInitialWindowSize(plugin.StreamWindow),
		grpc.WithInitialConnWindowSize(plugin.ConnWindow),
	}
}

// Dial returns a connection to the plugin at ep, with the plugin
// protocol's options (ProtocolDialOptions), as the host's own connection
// has. Like grpc.NewClient it connects lazily; opts come after these.
func Dial(ep Endpoint, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	cfg, err := TLSConfig(ep)
	if err != nil {
		return nil, err
	}
	base := append(ProtocolDialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	conn, err := grpc.NewClient("unix://"+ep.Address, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("plugindial: %w", err)
	}
	return conn, nil
}
