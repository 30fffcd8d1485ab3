package onesided

import (
	"testing"

	"github.com/goray-dev/goray/internal/auth/authtest"
	"github.com/goray-dev/goray/sdk/plugin"
)

// TestReadServerRefusesStrangers: an agent's read server serves registered
// memory only to peers that prove they hold the cluster token.
func TestReadServerRefusesStrangers(t *testing.T) {
	a := newAgent(t, plugin.NewMemoryKV(), testConfig(false))
	authtest.RefusesStrangers(t, a.Endpoint(), testToken)
}
