// Command collective is the goray transport plugin "collective": collective
// communication (all-reduce, broadcast, all-gather, reduce-scatter,
// barrier) among the ranks of named groups, NCCL/Gloo style, on CPU tensors
// in shared memory over TCP, and two-sided transfers of actor tensors
// between members of a group. The implementation is in package
// plugins/collective/collective.
//
// Build it as goray-transport-collective into a node's plugin_dir and
// declare it in the node's config:
//
//	plugin "transport" "collective" {
//	  config {
//	    timeout    = "30s"    # bound on every collective call
//	    chunk_size = "1MiB"   # largest ring pipeline chunk
//	    # algorithm = "auto"  # or "ring", "recursive_doubling"
//	    # in_process = true   # ranks of this node linked through memory
//	    # listen   = "10.0.0.5:7070"   # default: GORAY_NODE_IP on a free port
//	    # kv_namespace = "transport/collective"
//	  }
//	}
//
// Groups meet through the cluster KV store of the GCS named by
// GORAY_GCS_ADDRESS; see plugins/collective/README.md.
package main

import (
	"github.com/goray-dev/goray/plugins/collective/collective"
	"github.com/goray-dev/goray/sdk/transport"
)

func main() {
	transport.Serve(collective.New())
}
