package gcs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// RayletReserver is the BundleReserver (and NodeDrainer) that calls
// raylets over gRPC, with one connection per raylet address, made by dial
// (the cluster's credentials and options: internal/rpc.Dial). Close
// releases the connections.
type RayletReserver struct {
	dial func(target string) (*grpc.ClientConn, error)

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

var _ BundleReserver = (*RayletReserver)(nil)

// NewRayletReserver returns a reserver that connects with dial.
func NewRayletReserver(dial func(target string) (*grpc.ClientConn, error)) *RayletReserver {
	return &RayletReserver{dial: dial, conns: map[string]*grpc.ClientConn{}}
}

var errReserverClosed = errors.New("gcs: raylet reserver closed")

func (r *RayletReserver) client(node *gorayv1.NodeInfo) (gorayv1.RayletClient, error) {
	addr := node.GetRayletTcp()
	if addr == "" {
		addr = node.GetRayletUnix()
	}
	if addr == "" {
		return nil, fmt.Errorf("node %s has no raylet address", ids.MustFromBytes(node.GetNodeId()).Short())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errReserverClosed
	}
	cc, ok := r.conns[addr]
	if !ok {
		var err error
		if cc, err = r.dial(addr); err != nil {
			return nil, fmt.Errorf("raylet %s: %w", addr, err)
		}
		r.conns[addr] = cc
	}
	return gorayv1.NewRayletClient(cc), nil
}

// Prepare calls the node's PrepareBundleResources.
func (r *RayletReserver) Prepare(ctx context.Context, node *gorayv1.NodeInfo, group ids.ID, bundles []*gorayv1.Bundle) (*gorayv1.PrepareBundlesReply, error) {
	c, err := r.client(node)
	if err != nil {
		return nil, err
	}
	return c.PrepareBundleResources(ctx, &gorayv1.PrepareBundlesRequest{PlacementGroupId: group.Bytes(), Bundles: bundles})
}

// Commit calls the node's CommitBundleResources.
func (r *RayletReserver) Commit(ctx context.Context, node *gorayv1.NodeInfo, group ids.ID, indexes []int32) (*gorayv1.CommitBundlesReply, error) {
	c, err := r.client(node)
	if err != nil {
		return nil, err
	}
	return c.CommitBundleResources(ctx, &gorayv1.CommitBundlesRequest{PlacementGroupId: group.Bytes(), Indexes: indexes})
}

// Cancel calls the node's CancelResourceReserve.
func (r *RayletReserver) Cancel(ctx context.Context, node *gorayv1.NodeInfo, group ids.ID, indexes []int32, reason string) (*gorayv1.CancelReserveReply, error) {
	c, err := r.client(node)
	if err != nil {
		return nil, err
	}
	return c.CancelResourceReserve(ctx, &gorayv1.CancelReserveRequest{PlacementGroupId: group.Bytes(), Indexes: indexes, Reason: reason})
}

// ReleaseUnused calls the node's ReleaseUnusedBundles.
func (r *RayletReserver) ReleaseUnused(ctx context.Context, node *gorayv1.NodeInfo, inUse []*gorayv1.BundleRef, reason string) (*gorayv1.ReleaseUnusedBundlesReply, error) {
	c, err := r.client(node)
	if err != nil {
		return nil, err
	}
	return c.ReleaseUnusedBundles(ctx, &gorayv1.ReleaseUnusedBundlesRequest{InUse: inUse, Reason: reason})
}

// Drain calls the node's DrainRaylet.
func (r *RayletReserver) Drain(ctx context.Context, node *gorayv1.NodeInfo, req *gorayv1.DrainRayletRequest) (*gorayv1.DrainRayletReply, error) {
	c, err := r.client(node)
	if err != nil {
		return nil, err
	}
	return c.DrainRaylet(ctx, req)
}

// Forget closes the connection to a node's raylet (the node died).
func (r *RayletReserver) Forget(node *gorayv1.NodeInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, addr := range []string{node.GetRayletTcp(), node.GetRayletUnix()} {
		if cc, ok := r.conns[addr]; ok {
			cc.Close()
			delete(r.conns, addr)
		}
	}
}

// Close closes every connection; later calls fail.
func (r *RayletReserver) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for addr, cc := range r.conns {
		cc.Close()
		delete(r.conns, addr)
	}
	return nil
}
