package node

import (
	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/sdk/plugin"
)

// ProviderBlock is the cluster file's provider block as a plugin block of
// the head: the head's plugin host runs (and restarts) the provider plugin
// like any other.
func ProviderBlock(c *config.Cluster) config.Plugin {
	return config.Plugin{Kind: plugin.KindProvider, Name: c.Provider.Name, SHA256: c.Provider.SHA256,
		Config: c.Provider.Config, DeclRange: c.Provider.DeclRange}
}
