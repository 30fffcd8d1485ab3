package plugindial_test

import (
	"strings"
	"testing"

	"github.com/goray-dev/goray/internal/plugindial"
	"github.com/goray-dev/goray/internal/plugindial/plugindialtest"
)

func TestTLSConfig(t *testing.T) {
	cert, key := plugindialtest.Certificate(t)
	good := plugindial.Endpoint{Network: "unix", Address: "/tmp/plugin.sock", ClientCert: cert, ClientKey: key, ServerCert: cert}
	with := func(f func(*plugindial.Endpoint)) plugindial.Endpoint { ep := good; f(&ep); return ep }
	for _, tc := range []struct {
		name string
		ep   plugindial.Endpoint
		want string // in the error; "" for none
	}{
		{"good", good, ""},
		{"tcp", with(func(e *plugindial.Endpoint) { e.Network = "tcp" }), "not a unix socket"},
		{"no address", with(func(e *plugindial.Endpoint) { e.Address = "" }), "not a unix socket"},
		{"no key", with(func(e *plugindial.Endpoint) { e.ClientKey = nil }), "no credentials"},
		{"bad key", with(func(e *plugindial.Endpoint) { e.ClientKey = []byte("nope") }), "client key"},
		{"bad server certificate", with(func(e *plugindial.Endpoint) { e.ServerCert = []byte("nope") }), "server certificate"},
		{"bad client certificate", with(func(e *plugindial.Endpoint) { e.ClientCert = []byte("nope") }), "client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := plugindial.TLSConfig(tc.ep)
			if tc.want == "" {
				if err != nil || len(cfg.Certificates) != 1 || cfg.RootCAs == nil || cfg.ServerName != "localhost" {
					t.Fatalf("TLSConfig = %+v, %v", cfg, err)
				}
				conn, err := plugindial.Dial(tc.ep)
				if err != nil {
					t.Fatal(err)
				}
				_ = conn.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one about %q", err, tc.want)
			}
			if _, err := plugindial.Dial(tc.ep); err == nil {
				t.Fatal("Dial accepted the endpoint")
			}
		})
	}
}
