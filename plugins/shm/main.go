// Command shm is goray's shared-memory tensor transport plugin: one-sided,
// same node, zero copy. Between the actors of one node a tensor moves
// without a copy and without crossing a socket: the destination maps the
// source's shared-memory segment. Only handles travel over gRPC.
//
// The node host runs it for a block such as
//
//	plugin "transport" "shm" {
//	  config {
//	    max_poll = "20ms"
//	  }
//	}
//
// with the binary installed as <plugin_dir>/goray-transport-shm.
package main

import (
	shm "github.com/goray-dev/goray/plugins/shm/shmtransport"
	"github.com/goray-dev/goray/sdk/transport"
)

func main() {
	transport.Serve(shm.New())
}
