package core

import (
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/sdk/transport"
)

// Collective returns the collective service (transport.Collective) of the
// transport plugin name on node, reached through that node's raylet like
// every other transport call; the nil id (or this process's node) means
// this node's plugin. Calls fail with errors matching
// transport.ErrNotSupported when the plugin has no collectives, and with a
// gRPC Unavailable status when the plugin or the node is down. The client
// holds no connection of its own and is cheap to make.
func (cw *CoreWorker) Collective(name string, node ids.ID) transport.Collective {
	if node == cw.nodeID {
		node = ids.ID{}
	}
	return transport.NewCollectiveClient(&transportProxy{cw: cw, name: name, node: node})
}

// TransportClient returns a client of the transport plugin name on node
// (the nil id, or this process's node: the local plugin), reached through
// that node's raylet. The runtime drives transfers itself (extraction on
// return, receive on read, garbage collection); this is for programs that
// call a transport's duties directly, such as benchmarks and tools.
func (cw *CoreWorker) TransportClient(name string, node ids.ID) transport.Transport {
	return cw.transportOn(name, node)
}

// GCSAddress returns the cluster's GCS address (host:port) as the node
// reported it, or "" when the process has none.
func (cw *CoreWorker) GCSAddress() string { return cw.gcsAddr }
