package collective_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/plugins/collective/collective"
)

// TestDataListenerRefusesStrangers: the data listener serves only peers
// that prove they hold the cluster token; the others get nothing.
func TestDataListenerRefusesStrangers(t *testing.T) {
	tr := collective.New()
	defer tr.Close()
	cfg := map[string]any{"listen": "127.0.0.1:0", "segment_prefix": testPrefix}
	if err := tr.Configure(context.Background(), cfg); err != nil {
		t.Fatalf("Configure: %v", err)
	}
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
			raw, err := net.Dial("tcp", tr.Addr())
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
