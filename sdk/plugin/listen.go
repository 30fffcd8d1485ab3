package plugin

import (
	"context"
	"net"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/connlimit"
)

// Listen opens the listener of a plugin's own data path (a transport's
// peer connections, say) on network and address, as net.Listen does,
// with the bounds every goray listener has on peers that have not shown
// the cluster token: a TCP connection that AuthenticateServer has not
// accepted within a few seconds is closed, and such connections are capped
// per peer address and in total (over a cap, a new one is closed at once;
// log, nil for the plugin's logger, gets a line about it at most once a
// minute).
// AuthenticateServer lifts the bounds off the connection it accepts.
// Every plugin that listens on the network opens its listener with it.
func Listen(ctx context.Context, network, address string, log hclog.Logger) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, network, address)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = refusalLogger()
	}
	return connlimit.Wrap(ln, connlimit.Options{Name: "plugin data listener " + ln.Addr().String(), Logger: log}), nil
}
