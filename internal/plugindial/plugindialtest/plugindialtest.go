// Package plugindialtest serves gRPC services the way a launched plugin
// does, with mutual TLS on certificates made for it over a unix socket,
// and returns the plugindial.Endpoint that reaches them: for tests of the
// code that calls plugins directly.
package plugindialtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/goray-dev/goray/internal/plugindial"
)

// Certificate returns a new self-signed certificate for "localhost" (DER)
// and its private key (PKCS #8, DER), good for a client or a server, as
// go-plugin makes them.
func Certificate(t testing.TB) (cert, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	if cert, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k); err != nil {
		t.Fatal(err)
	}
	if key, err = x509.MarshalPKCS8PrivateKey(k); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// Server is a running server of Serve.
type Server struct {
	// Endpoint reaches the server: its socket and the credentials of this
	// "launch".
	Endpoint plugindial.Endpoint
	srv      *grpc.Server
	once     sync.Once
}

// Stop stops the server and removes its socket, as a plugin that exits
// does; calls in flight fail. Serve registers it with t.Cleanup too.
func (s *Server) Stop() {
	s.once.Do(func() {
		s.srv.Stop()
		_ = os.Remove(s.Endpoint.Address)
	})
}

// Serve serves the services register adds on a new unix socket in a
// temporary directory, accepting only the client certificate of the
// returned Endpoint, until Stop or the end of the test.
func Serve(t testing.TB, register func(*grpc.Server)) *Server {
	t.Helper()
	serverCert, serverKey := Certificate(t)
	clientCert, clientKey := Certificate(t)
	key, err := x509.ParsePKCS8PrivateKey(serverKey)
	if err != nil {
		t.Fatal(err)
	}
	client, err := x509.ParseCertificate(clientCert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(client)
	cfg := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{serverCert}, PrivateKey: key}},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	// Short: a unix socket path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "pdt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "plugin.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	s := &Server{srv: srv, Endpoint: plugindial.Endpoint{
		Network: "unix", Address: path,
		ClientCert: clientCert, ClientKey: clientKey, ServerCert: serverCert,
		Pid: os.Getpid(),
	}}
	t.Cleanup(s.Stop)
	return s
}
