package onesided

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/sdk/plugin"
)

// TestReadServerRefusesStrangers: an agent's read server serves registered
// memory only to peers that prove they hold the cluster token.
func TestReadServerRefusesStrangers(t *testing.T) {
	a := newAgent(t, plugin.NewMemoryKV(), testConfig(false))
	none, _ := auth.Disabled(nil)
	wrong, err := auth.New("not-the-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	right, err := auth.New(testToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		creds *auth.Credentials
		ok    bool
	}{{"no token", none, false}, {"wrong token", wrong, false}, {"cluster token", right, true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			raw, err := net.Dial("tcp", a.Endpoint())
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
