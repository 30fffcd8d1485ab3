// Command onesided is goray's one-sided tensor transport plugin, in the
// style of NIXL: the receiver reads the source's registered memory, over
// shared memory within a node and over TCP across nodes; the source never
// sends. See package onesided for the design.
//
// The node host runs it for a block such as
//
//	plugin "transport" "onesided" {
//	  config {
//	    chunk_size = "4MiB"
//	    streams    = 4
//	  }
//	}
//
// with the binary installed as <plugin_dir>/goray-transport-onesided. It
// publishes its agent's metadata in the cluster KV of the GCS named by
// GORAY_GCS_ADDRESS and binds its read server to GORAY_NODE_IP.
package main

import (
	"github.com/goray-dev/goray/plugins/onesided/onesided"
	"github.com/goray-dev/goray/sdk/transport"
)

func main() {
	transport.Serve(onesided.New())
}
