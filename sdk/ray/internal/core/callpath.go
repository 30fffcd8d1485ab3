package core

import "google.golang.org/grpc"

// The call path between core workers (task pushes, actor calls and their
// replies) is latency-bound: a synchronous call is one stream message each
// way, and every extra frame or goroutine hand-off shows in its round
// trip. What keeps it short: the submitting goroutine writes the stream
// (submitter.send; for actor calls actorClient.runFirst when the client is
// idle), the worker runs a task on the goroutine that received it
// (coreWorkerService.PushTasks), the flush loop is woken only when there
// is something to flush (objectTable.signal), one timer per lease serves
// all its idle spells (submitter.lingerThenReturn), and the connections
// between core workers have fixed flow-control windows (below). See
// "Where the time goes" in docs/benchmarks.md for the profile.

// Flow-control windows of the connections between core workers. Setting
// them turns off gRPC's bandwidth-delay-product estimator, which on every
// data frame received after its last probe was answered writes a
// connection window update and a PING, and the peer a PING ack: with one
// small message each way per call, that is two extra frames and a
// wake-up of the writer goroutine on each side per message. The sizes are
// as large as the estimator lets windows grow (16 MiB), so throughput of
// large inline values does not suffer; they also bound what a peer may
// send before its messages are read.
const (
	peerStreamWindow = 4 << 20
	peerConnWindow   = 16 << 20
)

// peerDialOptions are the extra options of this core worker's
// connections to other core workers (and to other nodes' raylets, which
// share them: CoreWorker.conn); see peerStreamWindow.
func peerDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(peerStreamWindow),
		grpc.WithInitialConnWindowSize(peerConnWindow),
	}
}

// peerServerOptions are the extra options of the core worker's server
// (see peerStreamWindow).
func peerServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(peerStreamWindow),
		grpc.InitialConnWindowSize(peerConnWindow),
	}
}
