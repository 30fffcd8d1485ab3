package auth

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goray-dev/goray/internal/leaktest"
)

// TestExplainTLS has clients with and without TLS call real servers with
// and without it: each failure that comes from TLS becomes a *TLSError
// saying which side lacks it (and naming the tls block and the GORAY_TLS_*
// variables), and a matching pair still works. Before TLSError, a client
// without TLS got only "error reading server preface: EOF".
func TestExplainTLS(t *testing.T) {
	leaktest.Goroutines(t)
	const token = "explain-tls-token"
	p := newPKI(t)
	plainSrv := startServer(t, mustNew(t, token, nil))
	tlsSrv := startServer(t, mustNew(t, token, p.n1))
	tests := []struct {
		name    string
		addr    string
		client  *TLSFiles
		problem string // "" means the call works
	}{
		{"plain client, TLS server", tlsSrv.tcp, nil, TLSClientPlain},
		{"TLS client, plain server", plainSrv.tcp, p.n2, TLSServerPlain},
		{"another CA's certificate", tlsSrv.tcp, p.other, TLSHandshake},
		{"both TLS", tlsSrv.tcp, p.n2, ""},
		{"both plain", plainSrv.tcp, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			creds := mustNew(t, token, tc.client)
			_, err := unary(callCtx(t), dial(t, tc.addr, creds.DialOptions(tc.addr)...), "hi")
			err = ExplainTLS(tc.addr, creds.TLS(), err)
			if tc.problem == "" {
				if err != nil {
					t.Fatalf("want the call to work, got %v", err)
				}
				return
			}
			var te *TLSError
			if !errors.As(err, &te) {
				t.Fatalf("want a *TLSError, got %T: %v", err, err)
			}
			if te.Problem != tc.problem || te.Address != tc.addr {
				t.Errorf("got problem %q at %s, want %q at %s", te.Problem, te.Address, tc.problem, tc.addr)
			}
			for _, want := range []string{"TLS", tc.addr, "tls block", EnvTLSCA} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
			t.Log(err)
		})
	}
	// Errors that are not TLS's pass through unchanged.
	other := fmt.Errorf("connection refused")
	if got := ExplainTLS("a:1", true, other); got != other {
		t.Errorf("ExplainTLS changed a non-TLS error: %v", got)
	}
	if ExplainTLS("a:1", false, nil) != nil {
		t.Error("ExplainTLS(nil) is not nil")
	}
}

// TestTLSPathsAbsolute: relative TLS paths (from the environment, or a
// config read elsewhere) are made absolute when the credentials load them,
// so that Env hands children, which run in other directories, paths that
// still work there.
func TestTLSPathsAbsolute(t *testing.T) {
	p := newPKI(t)
	t.Chdir(filepath.Dir(p.dir1))
	rel := func(path string) string { return filepath.Join(filepath.Base(p.dir1), filepath.Base(path)) }
	c := mustNew(t, "abs-token", &TLSFiles{CA: rel(p.n1.CA), Cert: rel(p.n1.Cert), Key: rel(p.n1.Key)})
	for _, kv := range c.Env() {
		name, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "GORAY_TLS_") && !filepath.IsAbs(v) {
			t.Errorf("Env: %s is relative", kv)
		}
	}
	if f := c.TLSFiles(); f.CA != p.n1.CA || f.Cert != p.n1.Cert || f.Key != p.n1.Key {
		t.Errorf("TLSFiles %+v, want %+v", f, p.n1)
	}
	t.Setenv(EnvTLSCA, rel(p.n1.CA))
	t.Setenv(EnvTLSCert, rel(p.n1.Cert))
	t.Setenv(EnvTLSKey, rel(p.n1.Key))
	f, err := TLSFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if f.CA != p.n1.CA || f.Cert != p.n1.Cert || f.Key != p.n1.Key {
		t.Errorf("TLSFromEnv %+v, want %+v", f, p.n1)
	}
}
