// Package authtest has test helpers for listeners that authenticate raw
// connections with the cluster token (auth.ServerConn, or
// sdk/plugin.AuthenticateServer in a plugin).
package authtest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/auth"
)

// RefusesStrangers dials addr three times: with no token and with a wrong
// one the handshake must be refused (auth.ErrRefused), with token it must
// be accepted.
func RefusesStrangers(t *testing.T, addr, token string) {
	t.Helper()
	wrong, err := auth.New("not-the-"+token, nil)
	if err != nil {
		t.Fatal(err)
	}
	right, err := auth.New(token, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		creds *auth.Credentials
		ok    bool
	}{{"no token", nil, false}, {"wrong token", wrong, false}, {"cluster token", right, true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			raw, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			_, err = c.creds.ClientConn(ctx, raw)
			if c.ok != (err == nil) || (!c.ok && !errors.Is(err, auth.ErrRefused)) {
				t.Fatalf("handshake: %v, want accepted=%v", err, c.ok)
			}
		})
	}
}
