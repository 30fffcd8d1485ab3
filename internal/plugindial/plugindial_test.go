package plugindial

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestTLSConfig(t *testing.T) {
	cert, key := selfSigned(t)
	good := Endpoint{Network: "unix", Address: "/tmp/plugin.sock", ClientCert: cert, ClientKey: key, ServerCert: cert}
	with := func(f func(*Endpoint)) Endpoint { ep := good; f(&ep); return ep }
	for _, tc := range []struct {
		name string
		ep   Endpoint
		want string // in the error; "" for none
	}{
		{"good", good, ""},
		{"tcp", with(func(e *Endpoint) { e.Network = "tcp" }), "not a unix socket"},
		{"no address", with(func(e *Endpoint) { e.Address = "" }), "not a unix socket"},
		{"no key", with(func(e *Endpoint) { e.ClientKey = nil }), "no credentials"},
		{"bad key", with(func(e *Endpoint) { e.ClientKey = []byte("nope") }), "client key"},
		{"bad server certificate", with(func(e *Endpoint) { e.ServerCert = []byte("nope") }), "server certificate"},
		{"bad client certificate", with(func(e *Endpoint) { e.ClientCert = []byte("nope") }), "client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := TLSConfig(tc.ep)
			if tc.want == "" {
				if err != nil || len(cfg.Certificates) != 1 || cfg.RootCAs == nil || cfg.ServerName != serverName {
					t.Fatalf("TLSConfig = %+v, %v", cfg, err)
				}
				conn, err := Dial(tc.ep)
				if err != nil {
					t.Fatal(err)
				}
				_ = conn.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one about %q", err, tc.want)
			}
			if _, err := Dial(tc.ep); err == nil {
				t.Fatal("Dial accepted the endpoint")
			}
		})
	}
}

func selfSigned(t *testing.T) (cert, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
	if cert, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k); err != nil {
		t.Fatal(err)
	}
	if key, err = x509.MarshalPKCS8PrivateKey(k); err != nil {
		t.Fatal(err)
	}
	return cert, key
}
