package core

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// When a node dies, or only stops answering.
//
// A node declared dead (NODE_DIED from this node's raylet, markNodeDead)
// may not be gone: frozen (SIGSTOP, a hung kernel) or cut off by a network
// that keeps its TCP connections open, it answers nothing and closes
// nothing. So the owner ends everything it has on the node at once
// (afterNodeDeath): every lease on it (its tasks are retried elsewhere
// within MaxRetries, at-least-once as in Ray, or fail with a
// WorkerCrashedError naming the node; submitter.nodeDied), and every
// connection to a process of the node, which fails the calls and streams
// under way on it (an actor's stream then waits for the GCS's verdict, a
// borrower's call to an owner there fails as the owner's death, a
// generator's acks stop); no new connection to a process of the node is
// made. A node that comes back has its late results ignored: the
// attempts it ran were taken off their leases first, so their replies
// find no task.
//
// Without the GCS — or before it decides — a silent peer is found by the
// connections' keepalive pings (rpc.Keepalive, GORAY_GRPC_KEEPALIVE_TIME
// and _TIMEOUT): a connection whose peer does not acknowledge a ping in
// time is closed, which fails the leases' streams like a crash of their
// workers (submitter.leaseFailed: retried within MaxRetries).

// afterNodeDeath ends what this process has on node id, just declared
// dead (reason): called by markNodeDead once the node is recorded dead.
func (cw *CoreWorker) afterNodeDeath(id ids.ID, reason string) {
	if id == cw.nodeID {
		return // this process's own node: its raylet ends this process
	}
	if cw.submitter != nil {
		cw.submitter.nodeDied(id, reason)
	}
	cw.closeNodeConns(id)
}

// peerNode is the node of the core worker at addr when its connection is
// bound to that node (a process of another node, reached over TCP), else
// the nil id. Connections to other nodes' raylets are not bound: lease
// requests follow their node's death themselves (leaseWorker).
func (cw *CoreWorker) peerNode(addr *pb.Address, target string) ids.ID {
	if len(addr.GetWorkerId()) == 0 || target != addr.GetTcpAddr() {
		return ids.ID{}
	}
	n, err := ids.FromBytes(addr.GetNodeId())
	if err != nil || n == cw.nodeID {
		return ids.ID{}
	}
	return n
}

// deadNodeError is the error of a call to a process of node id, declared
// dead (reason): Unavailable, as a peer that is gone.
func deadNodeError(id ids.ID, reason string, cause error) error {
	msg := fmt.Sprintf("node %s was declared dead (%s)", id.Short(), reason)
	if cause != nil {
		msg += ": " + status.Convert(cause).Message()
	}
	return status.Error(codes.Unavailable, msg)
}

// peerConnOptions are the options of a connection to another core
// worker, bound to node (nil: not bound): keepalive pings, and calls that
// fail once the node is declared dead say so.
func (cw *CoreWorker) peerConnOptions(node ids.ID) []grpc.DialOption {
	opts := append(peerDialOptions(), cw.keepalive.DialOptions()...)
	if node.IsNil() {
		return opts
	}
	return append(opts, grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil && ctx.Err() == nil {
			if dead, reason := cw.nodeDead(node); dead {
				return deadNodeError(node, reason, err)
			}
		}
		return err
	}))
}

// closeNodeConns closes the connections to processes of node id, declared
// dead: the calls and streams under way on them fail at once, whether or
// not the node answers. conn makes no new one (it checks the node under
// connsMu, so none made meanwhile escapes).
func (cw *CoreWorker) closeNodeConns(id ids.ID) {
	var gone []*grpc.ClientConn
	cw.connsMu.Lock()
	for target, n := range cw.connNode {
		if n != id {
			continue
		}
		if c := cw.conns[target]; c != nil {
			gone = append(gone, c)
		}
		delete(cw.conns, target)
		delete(cw.connNode, target)
	}
	for w, target := range cw.connOf {
		if _, ok := cw.conns[target]; !ok {
			delete(cw.connOf, w)
		}
	}
	cw.connsMu.Unlock()
	for _, c := range gone {
		_ = c.Close()
	}
}
