package collective_test

import (
	"context"
	"testing"

	"github.com/goray-dev/goray/internal/auth/authtest"
	"github.com/goray-dev/goray/plugins/collective/collective"
)

// TestDataListenerRefusesStrangers: the data listener serves only peers
// that prove they hold the cluster token; the others get nothing.
func TestDataListenerRefusesStrangers(t *testing.T) {
	tr := collective.New()
	defer tr.Close()
	cfg := map[string]any{"listen": "127.0.0.1:0", "segment_prefix": testPrefix}
	if err := tr.ConfigSpec().Configure(context.Background(), cfg); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	authtest.RefusesStrangers(t, tr.Addr(), testToken)
}
