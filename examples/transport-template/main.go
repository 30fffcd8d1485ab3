// Command transport-template is the goray transport plugin "tcp-template":
// a two-sided tensor transport that pushes tensor bytes from the source to
// the destination over its own TCP connection, written as a starting point
// for third-party transports. The implementation is in package tcptemplate;
// this file only serves it.
//
// Build it as goray-transport-tcp-template into a node's plugin_dir and
// declare it in the node's config:
//
//	plugin_dir = "/opt/goray/plugins"
//
//	plugin "transport" "tcp-template" {
//	  config {
//	    listen_address = "127.0.0.1:0"
//	    dial_timeout   = "5s"
//	  }
//	}
//
// See README.md and docs/writing-a-transport.md.
package main

import (
	"github.com/goray-dev/goray/examples/transport-template/tcptemplate"
	"github.com/goray-dev/goray/sdk/transport"
)

func main() {
	// Serve never returns: it answers the host's handshake, serves the
	// Transport gRPC service (API version 1) plus the common PluginInfo
	// service, and exits when the host goes away.
	transport.Serve(tcptemplate.New())
}
