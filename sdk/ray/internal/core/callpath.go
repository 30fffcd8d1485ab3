package core

import (
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/rpc"
)

// The call path between core workers (task pushes, actor calls and their
// replies) is latency-bound: a synchronous call is one stream message each
// way, and every extra frame or goroutine hand-off shows in its round
// trip. What keeps it short: the submitting goroutine writes the stream
// (submitter.send; for actor calls actorClient.runFirst when the client is
// idle), the worker runs a task on the goroutine that received it
// (coreWorkerService.PushTasks), the flush loop is woken only when there
// is something to flush (objectTable.signal), one timer per lease serves
// all its idle spells (submitter.lingerThenReturn), and the connections
// between core workers, and to the raylet, have fixed flow-control
// windows (rpc.StreamWindow says why). See "Where the time goes" in
// docs/benchmarks.md for the profile.

// peerDialOptions are the extra options of this core worker's
// connections to other core workers (and to other nodes' raylets, which
// share them: CoreWorker.conn) and to its own raylet.
func peerDialOptions() []grpc.DialOption { return rpc.FixedWindowDialOptions() }

// peerServerOptions are the extra options of the core worker's server.
func peerServerOptions() []grpc.ServerOption { return rpc.FixedWindowServerOptions() }
