package gcs

import (
	"context"

	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// NodeDrainer drains a node's raylet (its DrainRaylet): what DrainNode
// forwards to. RayletReserver implements it over the GCS's connections to
// the raylets. Never called with a lock held.
type NodeDrainer interface {
	// Drain calls the DrainRaylet of node's raylet with req.
	Drain(ctx context.Context, node *gorayv1.NodeInfo, req *gorayv1.DrainRayletRequest) (*gorayv1.DrainRayletReply, error)
}

// DrainNode drains a node before it is terminated: the request goes to
// the node's raylet (DrainRaylet, which decides whether the drain is
// accepted and reports its progress) and its reply comes back unchanged.
// An unknown node is NotFoundError, a dead one NodeGoneError (both
// codes.NotFound); a raylet that cannot be reached or fails is
// RayletCallError. An accepted drain marks the node draining in its view
// at once (its heartbeats say so from then on), a cancel clears it: the
// placement group manager places no bundle on a draining node, and
// raylets send it no work.
func (s *Server) DrainNode(ctx context.Context, req *gorayv1.DrainNodeRequest) (*gorayv1.DrainNodeReply, error) {
	id, err := parseID("node_id", req.GetNodeId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	n, ok := s.nodes[id]
	var info *gorayv1.NodeInfo
	unverified := false
	if ok {
		info = cloneMsg(n.info)
		unverified = n.fromStorage
	}
	s.mu.Unlock()
	switch {
	case !ok:
		return nil, &NotFoundError{Kind: "node", ID: id}
	case info.GetState() == StateDead:
		return nil, &NodeGoneError{ID: id, Reason: info.GetDeathReason(), Op: "drain"}
	case unverified:
		return nil, &NodeUnverifiedError{ID: id, Op: "drain"}
	case s.drainer == nil:
		return nil, &RayletCallError{Node: id, Op: "drain", Err: ErrNoRaylets}
	}
	cctx, cancel := context.WithTimeout(ctx, reserveTimeout)
	defer cancel()
	rep, err := s.drainer.Drain(cctx, info, &gorayv1.DrainRayletRequest{Reason: req.GetReason(), Cancel: req.GetCancel()})
	if err != nil {
		return nil, &RayletCallError{Node: id, Op: "drain", Err: err}
	}
	s.mu.Lock()
	if n := s.nodes[id]; n != nil && n.info.GetState() == StateAlive {
		was := n.draining
		switch {
		case req.GetCancel():
			n.draining = false
		case rep.GetAccepted():
			n.draining = true
		}
		if n.draining != was {
			s.nodeChangedLocked(id, n)
		}
	}
	s.mu.Unlock()
	switch {
	case req.GetCancel():
		s.log.Info("node drain cancelled", "node", id.Short(), "reason", req.GetReason())
	case !rep.GetAccepted():
		s.log.Info("node drain refused", "node", id.Short(), "reason", rep.GetRejectionReason())
	default:
		s.log.Debug("node draining", "node", id.Short(), "drained", rep.GetDrained(), "progress", rep.GetProgress())
	}
	return &gorayv1.DrainNodeReply{
		Accepted: rep.GetAccepted(), RejectionReason: rep.GetRejectionReason(), Drained: rep.GetDrained(),
		PrimariesLeft: rep.GetPrimariesLeft(), Progress: rep.GetProgress(),
	}, nil
}

// drainerOf is the drainer of opts: Drainer, else the Reserver when it
// drains too (nil: none).
func drainerOf(opts Options) NodeDrainer {
	if opts.Drainer != nil {
		return opts.Drainer
	}
	if d, ok := opts.Reserver.(NodeDrainer); ok {
		return d
	}
	return nil
}

var _ NodeDrainer = (*RayletReserver)(nil)
