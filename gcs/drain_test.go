package gcs

import (
	"context"
	"errors"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// fakeDrainer records the drains forwarded to raylets and answers with
// reply, or err.
type fakeDrainer struct {
	mu    sync.Mutex
	calls []drainCall
	reply *gorayv1.DrainRayletReply
	err   error
}

type drainCall struct {
	node ids.ID
	req  *gorayv1.DrainRayletRequest
}

func (f *fakeDrainer) Drain(_ context.Context, node *gorayv1.NodeInfo, req *gorayv1.DrainRayletRequest) (*gorayv1.DrainRayletReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, drainCall{ids.MustFromBytes(node.GetNodeId()), proto.Clone(req).(*gorayv1.DrainRayletRequest)})
	return f.reply, f.err
}

func (f *fakeDrainer) set(reply *gorayv1.DrainRayletReply, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reply, f.err = reply, err
}

func (f *fakeDrainer) last() drainCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[len(f.calls)-1]
}

func (f *fakeDrainer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// TestDrainNode: DrainNode forwards the request to the node's raylet and
// returns its reply unchanged; an accepted drain shows in the node's view
// at once, a refused one does not, a cancel clears it; an unknown node, a
// dead one and a malformed id are refused without calling a raylet; a
// raylet's error keeps its code.
func TestDrainNode(t *testing.T) {
	f := &fakeDrainer{}
	s, c := startServer(t, Options{Drainer: f})
	ctx := ctxT(t)
	node, dead := newID(), newID()
	registerNode(t, c, node, "n")
	registerNode(t, c, dead, "d")
	_, err := c.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: dead.Bytes(), Reason: "terminated"})
	mustOK(t, err)
	drain := func(id ids.ID, cancel bool) (*gorayv1.DrainNodeReply, error) {
		return c.DrainNode(ctx, &gorayv1.DrainNodeRequest{NodeId: id.Bytes(), Reason: "idle", Cancel: cancel})
	}
	placeable := func() bool {
		nodes, _ := s.placementNodes()
		for _, n := range nodes {
			if n.ID == node.String() {
				return true
			}
		}
		return false
	}

	refused := &gorayv1.DrainRayletReply{RejectionReason: "2 leases granted"}
	f.set(refused, nil)
	rep, err := drain(node, false)
	mustOK(t, err)
	if rep.GetAccepted() || rep.GetRejectionReason() != "2 leases granted" {
		t.Fatalf("reply = %v, want the raylet's refusal", rep)
	}
	if call := f.last(); call.node != node || call.req.GetReason() != "idle" || call.req.GetCancel() {
		t.Fatalf("forwarded %v to %s, want reason idle to %s", call.req, call.node.Short(), node.Short())
	}
	if nodeView(t, c, node).GetDraining() || !placeable() {
		t.Fatal("a refused drain marked the node draining")
	}

	accepted := &gorayv1.DrainRayletReply{Accepted: true, PrimariesLeft: 3, Progress: "spilled 2 of 5 primary copies"}
	f.set(accepted, nil)
	rep, err = drain(node, false)
	mustOK(t, err)
	want := &gorayv1.DrainNodeReply{Accepted: true, PrimariesLeft: 3, Progress: "spilled 2 of 5 primary copies"}
	if !proto.Equal(rep, want) {
		t.Fatalf("reply = %v, want %v", rep, want)
	}
	if !nodeView(t, c, node).GetDraining() || placeable() {
		t.Fatal("an accepted drain does not show in the node's view, or the node still takes bundles")
	}

	f.set(&gorayv1.DrainRayletReply{Accepted: true, Progress: "drain cancelled"}, nil)
	_, err = drain(node, true)
	mustOK(t, err)
	if !f.last().req.GetCancel() {
		t.Fatal("the cancel was not forwarded as one")
	}
	if nodeView(t, c, node).GetDraining() || !placeable() {
		t.Fatal("the node still shows draining after the cancel")
	}

	// The raylet's error keeps its code; the view is unchanged.
	f.set(nil, status.Error(codes.Unavailable, "connection refused"))
	_, err = drain(node, false)
	wantCode(t, err, codes.Unavailable, "drain node "+node.String()+": its raylet: connection refused")
	if nodeView(t, c, node).GetDraining() {
		t.Fatal("a failed drain marked the node draining")
	}

	calls := f.count()
	unknown := newID()
	for _, tt := range []struct {
		name string
		req  *gorayv1.DrainNodeRequest
		code codes.Code
		want string
	}{
		{"unknown node", &gorayv1.DrainNodeRequest{NodeId: unknown.Bytes()}, codes.NotFound, "no node with id " + unknown.String()},
		{"dead node", &gorayv1.DrainNodeRequest{NodeId: dead.Bytes()}, codes.NotFound, "cannot drain node " + dead.String() + ": it is dead (terminated)"},
		{"malformed id", &gorayv1.DrainNodeRequest{NodeId: []byte("short")}, codes.InvalidArgument, "invalid node_id"},
		{"no id", &gorayv1.DrainNodeRequest{}, codes.InvalidArgument, "invalid node_id: required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.DrainNode(ctx, tt.req)
			wantCode(t, err, tt.code, tt.want)
		})
	}
	if f.count() != calls {
		t.Fatal("a refused DrainNode called a raylet")
	}
}

// TestDrainNodeInProcessErrors: in process the errors are typed: an
// unknown node is a NotFoundError, a dead one a NodeGoneError, and a GCS
// without raylet connections says so (FailedPrecondition).
func TestDrainNodeInProcessErrors(t *testing.T) {
	s := New(Options{})
	ctx := context.Background()
	node := newID()
	if _, err := s.RegisterNode(ctx, &gorayv1.RegisterNodeRequest{Node: nodeInfo(node, "n")}); err != nil {
		t.Fatal(err)
	}
	_, err := s.DrainNode(ctx, &gorayv1.DrainNodeRequest{NodeId: node.Bytes()})
	var rc *RayletCallError
	if !errors.As(err, &rc) || !errors.Is(err, ErrNoRaylets) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("DrainNode without raylet connections: %v; want a RayletCallError wrapping ErrNoRaylets", err)
	}
	_, err = s.DrainNode(ctx, &gorayv1.DrainNodeRequest{NodeId: newID().Bytes()})
	var nf *NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("unknown node: %v, want NotFoundError", err)
	}
	if _, err := s.UnregisterNode(ctx, &gorayv1.UnregisterNodeRequest{NodeId: node.Bytes()}); err != nil {
		t.Fatal(err)
	}
	_, err = s.DrainNode(ctx, &gorayv1.DrainNodeRequest{NodeId: node.Bytes()})
	var gone *NodeGoneError
	if !errors.As(err, &gone) || gone.ID != node {
		t.Fatalf("dead node: %v, want NodeGoneError", err)
	}
}

// TestHeartbeatDraining: the node's view says it drains as its heartbeats
// do.
func TestHeartbeatDraining(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)
	node := newID()
	registerNode(t, c, node, "n")
	for _, draining := range []bool{true, false} {
		_, err := c.ReportHeartbeat(ctx, &gorayv1.HeartbeatRequest{NodeId: node.Bytes(), Draining: draining})
		mustOK(t, err)
		if got := nodeView(t, c, node).GetDraining(); got != draining {
			t.Fatalf("after a heartbeat with draining=%v the view says %v", draining, got)
		}
	}
}
