package state

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/internal/auth"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc"
)

// GCSSource is a Source over a connection to the GCS (and each node's
// raylet at its TCP address, with the cluster token), plus the GCS's
// tables of jobs, actors and placement groups: what the dashboard's state
// API serves from inside the head.
type GCSSource struct {
	gcs   pb.GcsClient
	tasks pb.TaskEventServiceClient
	creds *auth.Credentials
}

// NewGCSSource asks the GCS over cc; raylets are dialled with creds.
func NewGCSSource(cc grpc.ClientConnInterface, creds *auth.Credentials) *GCSSource {
	return &GCSSource{gcs: pb.NewGcsClient(cc), tasks: pb.NewTaskEventServiceClient(cc), creds: creds}
}

// Nodes returns every node the GCS knows, dead ones included.
func (s *GCSSource) Nodes(ctx context.Context) ([]*pb.NodeView, error) {
	r, err := s.gcs.GetAllNodes(ctx, &pb.GetAllNodesRequest{})
	if err != nil {
		return nil, fmt.Errorf("querying nodes from the GCS: %w", err)
	}
	return r.GetNodes(), nil
}

// ListTasks queries the task events the GCS keeps.
func (s *GCSSource) ListTasks(ctx context.Context, req *pb.ListTasksRequest) (*pb.ListTasksReply, error) {
	r, err := s.tasks.ListTasks(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("querying tasks from the GCS: %w", err)
	}
	return r, nil
}

// NodeStats asks the raylet of node for its stats (RayletStats).
func (s *GCSSource) NodeStats(ctx context.Context, node *pb.NodeInfo, includeOwned bool) (*pb.GetNodeStatsReply, error) {
	return RayletStats(ctx, node, s.creds, includeOwned)
}

// Jobs returns every job the GCS knows.
func (s *GCSSource) Jobs(ctx context.Context) ([]*pb.JobInfo, error) {
	r, err := s.gcs.GetAllJobs(ctx, &pb.GetAllJobsRequest{})
	if err != nil {
		return nil, fmt.Errorf("querying jobs from the GCS: %w", err)
	}
	return r.GetJobs(), nil
}

// Actors returns every actor the GCS knows.
func (s *GCSSource) Actors(ctx context.Context) ([]*pb.ActorInfo, error) {
	r, err := s.gcs.ListActors(ctx, &pb.ListActorsRequest{})
	if err != nil {
		return nil, fmt.Errorf("querying actors from the GCS: %w", err)
	}
	return r.GetActors(), nil
}

// PlacementGroups returns every placement group the GCS knows.
func (s *GCSSource) PlacementGroups(ctx context.Context) ([]*pb.PlacementGroupInfo, error) {
	r, err := s.gcs.ListPlacementGroups(ctx, &pb.ListPlacementGroupsRequest{})
	if err != nil {
		return nil, fmt.Errorf("querying placement groups from the GCS: %w", err)
	}
	return r.GetGroups(), nil
}
