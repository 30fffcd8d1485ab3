package raylet

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Targeted frees: an owner names, for each object it frees, the nodes that
// may hold a copy (its primary copy's node and the nodes of the processes
// that borrowed it: a process pulls a copy only while it borrows the object,
// and registers as a borrower before it pulls). The owner's raylet frees
// the objects here and tells only those nodes, one FreeObjects per node
// (see "Ownership" in docs/architecture.md).

// maxFreeNodes bounds the distinct nodes one FreeObjectCopies names: each
// is told by a goroutine of its own.
const maxFreeNodes = 4096

// objectCopiesService is the ObjectCopies service: it decodes and calls
// the raylet.
type objectCopiesService struct {
	gorayv1.UnimplementedObjectCopiesServer
	r *Raylet
}

// registerObjectCopies registers the ObjectCopies service on g.
func (r *Raylet) registerObjectCopies(g *grpc.Server) {
	gorayv1.RegisterObjectCopiesServer(g, &objectCopiesService{r: r})
}

// FreeObjectCopies frees objects here and on the nodes named for each.
func (s *objectCopiesService) FreeObjectCopies(ctx context.Context, req *gorayv1.FreeObjectCopiesRequest) (*gorayv1.FreeObjectCopiesReply, error) {
	objs := make([]ids.ObjectID, 0, len(req.GetObjects()))
	byNode := map[ids.ID][][]byte{}
	for i, o := range req.GetObjects() {
		oid, err := ids.ObjectIDFromBytes(o.GetObjectId())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "objects[%d].object_id: %v", i, err)
		}
		objs = append(objs, oid)
		for j, b := range o.GetNodeIds() {
			node, err := ids.FromBytes(b)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "objects[%d].node_ids[%d]: %v", i, j, err)
			}
			if node == s.r.cfg.NodeID || node.IsNil() {
				continue
			}
			if _, ok := byNode[node]; !ok && len(byNode) == maxFreeNodes {
				return nil, status.Errorf(codes.InvalidArgument, "objects[%d].node_ids: more than %d distinct nodes", i, maxFreeNodes)
			}
			if l := byNode[node]; len(l) == 0 || string(l[len(l)-1]) != string(o.GetObjectId()) {
				byNode[node] = append(l, o.GetObjectId())
			}
		}
	}
	s.r.freeObjectCopies(objs, byNode)
	return &gorayv1.FreeObjectCopiesReply{}, nil
}

// freeObjectCopies frees objs here and tells each node of byNode to free
// the objects listed for it, in the background.
func (r *Raylet) freeObjectCopies(objs []ids.ObjectID, byNode map[ids.ID][][]byte) {
	r.objects.free(objs)
	for node, raw := range byNode {
		r.cluster.tellNode(node, r.peerClient, "free objects", func(ctx context.Context, c gorayv1.RayletClient) error {
			_, err := c.FreeObjects(ctx, &gorayv1.FreeObjectsRequest{ObjectIds: raw})
			return err
		})
	}
}

// tellNode runs call against node's raylet in the background, bounded by
// gcsTimeout. A node not in the view is looked up with lookup (which
// refreshes the view once); a dead or unknown one is skipped.
func (cv *clusterView) tellNode(node ids.ID, lookup func(ids.ID) (gorayv1.RayletClient, *gorayv1.NodeInfo, error), what string, call func(context.Context, gorayv1.RayletClient) error) {
	cv.wg.Add(1)
	go func() {
		defer cv.wg.Done()
		var cli gorayv1.RayletClient
		var err error
		if p := cv.peer(node); p != nil {
			cli, err = cv.client(p)
		} else {
			cli, _, err = lookup(node)
		}
		if err != nil {
			cv.log.Debug("not telling another node", "what", what, "node_id", node, "error", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), gcsTimeout)
		defer cancel()
		if err := call(ctx, cli); err != nil {
			cv.log.Debug("telling another node failed", "what", what, "node_id", node, "error", err)
		}
	}()
}
