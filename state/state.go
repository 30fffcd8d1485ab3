// Package state gathers the cluster-wide state behind `goray list`,
// `goray summary`, `goray memory` and `goray timeline`, as rows that the
// CLI prints and the dashboard can serve as JSON: tasks from the task
// events the GCS keeps (TaskEventService), workers, plugins and objects
// from every alive node's raylet, reached at its TCP address with the
// cluster token (a raylet asks its own drivers and workers what they own,
// over their unix sockets, in the same call), so any machine sees every
// node. It also parses and applies the lists' filters and limits, counts
// the summaries and writes the Chrome trace of the timeline.
package state

import (
	"context"
	"fmt"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
)

// Source is what the gathering asks of a cluster.
type Source interface {
	// Nodes returns every node the GCS knows.
	Nodes(ctx context.Context) ([]*pb.NodeView, error)
	// ListTasks queries the GCS's task events.
	ListTasks(ctx context.Context, req *pb.ListTasksRequest) (*pb.ListTasksReply, error)
	// NodeStats asks the raylet of node for its stats; with includeOwned
	// also what each of its drivers and workers owns.
	NodeStats(ctx context.Context, node *pb.NodeInfo, includeOwned bool) (*pb.GetNodeStatsReply, error)
}

// FanoutTimeout bounds each raylet query.
const FanoutTimeout = 10 * time.Second

// maxFanout bounds concurrent raylet queries.
const maxFanout = 16

// RayletStats asks the raylet of node for its stats over its TCP address
// (its unix socket when it has none), presenting creds.
func RayletStats(ctx context.Context, node *pb.NodeInfo, creds *auth.Credentials, includeOwned bool) (*pb.GetNodeStatsReply, error) {
	target := node.GetRayletTcp()
	if target == "" {
		target = node.GetRayletUnix()
	}
	if target == "" {
		return nil, fmt.Errorf("node %x has no raylet address", node.GetNodeId())
	}
	cc, err := rpc.Dial(target, creds)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	rep, err := pb.NewRayletClient(cc).GetNodeStats(ctx, &pb.GetNodeStatsRequest{IncludeOwned: includeOwned})
	if err != nil {
		return nil, fmt.Errorf("GetNodeStats at %s: %w", target, err)
	}
	return rep, nil
}
