package redisstore

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/testservers/redistest"
)

// clientTLS is the TLS settings of a client of srv (started WithTLS), with
// the client certificate.
func clientTLS(srv *redistest.Server) *store.RedisTLS {
	return &store.RedisTLS{CAFile: srv.TLS.CA, CertFile: srv.TLS.ClientCert, KeyFile: srv.TLS.ClientKey}
}

// otherCA makes a CA that signed nothing of the server's, and a client
// certificate it signed; it returns the CA's directory.
func otherCA(t *testing.T) string {
	dir := t.TempDir()
	if err := auth.CreateCA(dir, "another CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, err := auth.IssueCert(dir, dir, "client", nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRedisTLS: the store works over TLS with a real redis-server (and
// across a restart of it); a wrong CA, a wrong server name, a missing
// client certificate, plaintext to the TLS port and TLS to a plaintext
// port are refused at open, each with an error that says what is wrong.
func TestRedisTLS(t *testing.T) {
	required := redistest.Start(t, redistest.WithTLS(redistest.ClientCertRequired))
	optional := redistest.Start(t, redistest.WithTLS(redistest.ClientCertOptional))
	plain := redistest.Start(t)

	t.Run("write and read", func(t *testing.T) {
		ctx := ctxT(t)
		r, err := OpenRedis(ctx, store.RedisOptions{Address: required.Address, Password: required.Password, Prefix: "tls", TLS: clientTLS(required)})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		must(t, r.Put(ctx, "nodes", map[string][]byte{"n1": []byte("over TLS")}))
		required.Restart()
		if v, err := r.Get(ctx, "nodes", "n1"); err != nil || string(v) != "over TLS" {
			t.Fatalf("Get after a restart = %q, %v", v, err)
		}
		if d := r.Describe(); !strings.Contains(d, "TLS") || !strings.Contains(d, required.Address) {
			t.Errorf("Describe = %q, want the address and TLS", d)
		}
	})
	t.Run("no client certificate where it is optional", func(t *testing.T) {
		r, err := OpenRedis(ctxT(t), store.RedisOptions{Address: optional.Address, Password: optional.Password, TLS: &store.RedisTLS{CAFile: optional.TLS.CA}})
		if err != nil {
			t.Fatal(err)
		}
		must(t, r.Close())
	})
	t.Run("server name given", func(t *testing.T) {
		tc := clientTLS(required)
		tc.ServerName = "localhost"
		r, err := OpenRedis(ctxT(t), store.RedisOptions{Address: required.Address, Password: required.Password, TLS: tc})
		if err != nil {
			t.Fatal(err)
		}
		must(t, r.Close())
	})

	other := otherCA(t)
	wrongCA := clientTLS(required)
	wrongCA.CAFile = filepath.Join(other, auth.CAFile)
	otherCert := clientTLS(required)
	otherCert.CertFile, otherCert.KeyFile = filepath.Join(other, "client.pem"), filepath.Join(other, "client-key.pem")
	wrongName := clientTLS(required)
	wrongName.ServerName = "redis.example"
	noCert := clientTLS(required)
	noCert.CertFile, noCert.KeyFile = "", ""
	for _, tc := range []struct {
		name string
		srv  *redistest.Server
		tls  *store.RedisTLS
		is   error
		want []string
	}{
		{"wrong CA", required, wrongCA, ErrTLSVerify, []string{"TLS verification", "ca_file", "unknown authority"}},
		{"wrong server name", required, wrongName, ErrTLSVerify, []string{"TLS verification", "server_name", "redis.example"}},
		{"no client certificate where it is required", required, noCert, ErrTLSRefused, []string{"refused this client's TLS connection", "cert_file"}},
		{"client certificate from another CA", required, otherCert, ErrTLSRefused, []string{"refused this client's TLS connection"}},
		{"plaintext to the TLS port", required, nil, nil, []string{"closed the connection", "TLS only", "tls {"}},
		{"TLS to a plaintext port", plain, clientTLS(required), nil, []string{"no TLS answer", "tls-port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenRedis(ctxT(t), store.RedisOptions{Address: tc.srv.Address, Password: tc.srv.Password, TLS: tc.tls})
			var oe *store.OpenError
			if !errors.As(err, &oe) || !strings.Contains(err.Error(), tc.srv.Address) {
				t.Fatalf("OpenRedis = %v; want an store.OpenError naming %s", err, tc.srv.Address)
			}
			t.Logf("%v", err)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("OpenRedis = %v; want errors.Is %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
			if strings.Contains(err.Error(), tc.srv.Password) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// TestRedisTLSFileErrors: TLS files that cannot be used are refused before
// dialling, with a *TLSFileError naming the setting, the path and the
// problem.
func TestRedisTLSFileErrors(t *testing.T) {
	srv := redistest.Start(t, redistest.WithTLS(redistest.ClientCertRequired))
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	must(t, writeFile(notPEM, "not a certificate"))
	openKey := filepath.Join(dir, "open-key.pem")
	b, err := os.ReadFile(srv.TLS.ClientKey)
	must(t, err)
	must(t, os.WriteFile(openKey, b, 0o600))
	must(t, os.Chmod(openKey, 0o644))
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name    string
		tls     store.RedisTLS
		setting string
		path    string
		want    string
	}{
		{"missing CA", store.RedisTLS{CAFile: missing}, "ca_file", missing, "no such file"},
		{"CA not PEM", store.RedisTLS{CAFile: notPEM}, "ca_file", notPEM, "holds no PEM certificate"},
		{"key without a certificate", store.RedisTLS{CAFile: srv.TLS.CA, KeyFile: srv.TLS.ClientKey}, "key_file", srv.TLS.ClientKey, "set cert_file"},
		{"certificate without its key", store.RedisTLS{CAFile: srv.TLS.CA, CertFile: srv.TLS.ClientCert}, "cert_file", srv.TLS.ClientCert, "set key_file"},
		{"missing key", store.RedisTLS{CAFile: srv.TLS.CA, CertFile: srv.TLS.ClientCert, KeyFile: missing}, "key_file", missing, "no such file"},
		{"key readable by others", store.RedisTLS{CAFile: srv.TLS.CA, CertFile: srv.TLS.ClientCert, KeyFile: openKey}, "key_file", openKey, "chmod 600"},
		{"certificate not PEM", store.RedisTLS{CAFile: srv.TLS.CA, CertFile: notPEM, KeyFile: srv.TLS.ClientKey}, "cert_file", notPEM, "loading it with key_file"},
		{"key of another certificate", store.RedisTLS{CAFile: srv.TLS.CA, CertFile: srv.TLS.ServerCert, KeyFile: srv.TLS.ClientKey}, "cert_file", srv.TLS.ServerCert, "private key does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tls := tc.tls
			_, err := OpenRedis(ctxT(t), store.RedisOptions{Address: srv.Address, Password: srv.Password, TLS: &tls})
			var fe *TLSFileError
			if !errors.As(err, &fe) || fe.Setting != tc.setting || fe.Path != tc.path {
				t.Fatalf("OpenRedis = %v; want a TLSFileError for %s %s", err, tc.setting, tc.path)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("the error does not say %q about %s: %v", tc.want, tc.path, err)
			}
		})
	}
	var ie *auth.InsecureFileError
	_, err = OpenRedis(ctxT(t), store.RedisOptions{Address: srv.Address, TLS: &store.RedisTLS{CertFile: srv.TLS.ClientCert, KeyFile: openKey}})
	if !errors.As(err, &ie) {
		t.Errorf("a key readable by others: %v, want an *auth.InsecureFileError", err)
	}
}

// TestRedisTLSHandshakeHonoursContext: a server that accepts and never
// answers the handshake does not hold OpenRedis past its context.
func TestRedisTLSHandshakeHonoursContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
			cancel() // the handshake has started: give up on it
		}
		close(accepted)
	}()
	srv := redistest.Start(t, redistest.WithTLS(redistest.ClientCertRequired))
	_, err = OpenRedis(ctx, store.RedisOptions{Address: l.Addr().String(), TLS: clientTLS(srv)})
	if err == nil {
		t.Fatal("OpenRedis of a silent server succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("OpenRedis = %v, want it to end with its context", err)
	}
	for c := range accepted {
		c.Close()
	}
}
