package pythontest_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/goray-dev/goray/internal/plugindial/plugindialtest"
	"github.com/goray-dev/goray/internal/testservers/pythontest"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/plugin"
)

// selfSigned makes a certificate for localhost and its key, as a host
// makes for go-plugin's AutoMTLS.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	cert, key := plugindialtest.Certificate(t)
	k, err := x509.ParsePKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{cert}, PrivateKey: k}
}

// TestPythonPluginRefusesWithoutHostCert: the Python plugin's socket only
// answers a client holding the certificate the host gave it
// (PLUGIN_CLIENT_CERT): no TLS, and TLS with another certificate, are
// refused; the host's certificate is let in.
func TestPythonPluginRefusesWithoutHostCert(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hostCert := selfSigned(t)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hostCert.Certificate[0]})
	cmd := exec.CommandContext(ctx, pythontest.Plugin(t))
	cmd.Env = append(os.Environ(),
		plugin.Handshake.MagicCookieKey+"="+plugin.Handshake.MagicCookieValue,
		"PLUGIN_PROTOCOL_VERSIONS=1",
		"PLUGIN_UNIX_SOCKET_DIR="+t.TempDir(),
		"PLUGIN_CLIENT_CERT="+string(certPEM))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no handshake line: %v", err)
	}
	parts := strings.Split(strings.TrimSpace(line), "|")
	if len(parts) < 6 || parts[2] != "unix" {
		t.Fatalf("handshake line %q: want a unix socket and the plugin's certificate", line)
	}
	der, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil {
		t.Fatalf("the plugin's certificate: %v", err)
	}
	serverCert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("the plugin's certificate: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(serverCert)
	check := func(creds credentials.TransportCredentials) error {
		cc, err := grpc.NewClient("unix:"+parts[3], grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer cc.Close()
		cctx, cancel := context.WithTimeout(ctx, waitfor.Generous)
		defer cancel()
		_, err = healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{Service: "plugin"})
		return err
	}
	tlsWith := func(certs ...tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{Certificates: certs, RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12})
	}
	if err := check(insecure.NewCredentials()); err == nil {
		t.Error("a client without TLS was answered")
	}
	if err := check(tlsWith()); err == nil {
		t.Error("a TLS client without a certificate was answered")
	}
	if err := check(tlsWith(selfSigned(t))); err == nil {
		t.Error("a TLS client with a certificate other than the host's was answered")
	}
	if err := check(tlsWith(hostCert)); err != nil {
		t.Errorf("the host's certificate was refused: %v", err)
	}
}
