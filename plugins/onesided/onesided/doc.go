// Package onesided implements goray's one-sided tensor transport in the
// style of NIXL: the receiver alone drives a transfer by reading the
// source's registered memory; the source application never sends.
//
// # Agents and registered memory
//
// Every plugin process runs one Agent, named after its node
// (plugin.EnvNodeID) plus a random suffix unless configured. ExtractMetadata
// registers the shared-memory segments holding an object's tensors with the
// agent: the segment is mapped read-only (MAP_POPULATE, the analogue of
// pinning) and gets a registration id. A segment registered already is
// reused (a reference count per registration); it is deregistered at
// GarbageCollect once no object uses it. Agent.Stats reports the count,
// duration and bytes of registrations.
//
// # Metadata
//
// The agent publishes its metadata — TCP endpoint, shared-memory domain
// (boot id plus the device and inode of /dev/shm), process id and the
// descriptors of its registered regions — in the cluster KV
// (plugin.ClusterKV, namespace kv_namespace) under "agents/<name>", with a
// version that grows whenever registrations change. An object's
// TransportData names the agent, its incarnation, the metadata version at
// extraction, a random access key of the extraction and, per tensor, the
// region descriptor (registration id, offset, length). Readers cache agent
// metadata; a reader whose cache is older than the version in the
// TransportData, or whose read fails because the source does not know the
// registration or the key, refreshes it from the KV once and retries.
//
// # Transfers
//
// Agent.PostRead posts a read request (an Xfer, NIXL's xfer request) that
// runs in the background; Xfer.State, Xfer.Wait and Xfer.Abort poll, wait
// for and cancel it. Between agents of one shared-memory domain (one
// machine and /dev/shm) a read copies once, in the kernel and without
// mapping anything per transfer: pwrite from the source registration's
// mapping when the source is this agent, copy_file_range (or pread) from
// the source's segment otherwise. A Receive without targets does not even
// copy: it returns the source's own buffers (zero copy, as plugins/shm
// does). Across domains the reader pulls pipelined chunks (chunk_size,
// default 4 MiB) over several TCP connections (streams, default 4) from
// the source agent's read server, straight into the destination buffer.
// The read server only serves ranges of registered memory that belong to a
// live extraction (bounds-checked). See wire.go for the protocol.
//
// Every read, on every path, is checked against the source's live
// extraction (its access key): a collected object fails with
// transport.ErrBadMetadata even while another object keeps its segment
// registered.
//
// # Crashes
//
// An agent whose process dies leaves its metadata in the KV, its owned
// segments and its rendezvous files. The next agent started in the same
// shared-memory domain (for example the plugin restarted by its host)
// removes them (NewAgent), and a GarbageCollect naming a dead agent of the
// domain does the same. Readers of a dead agent fail with
// ErrSourceUnreachable (or transport.ErrBadMetadata once its metadata is
// gone), never at their deadline.
//
// # Receive without transport data
//
// A Receive with empty TransportData waits until the object is extracted
// by an agent of this node: extraction publishes a small rendezvous file in
// /dev/shm (RendezvousName) holding the object's TransportData.
package onesided
