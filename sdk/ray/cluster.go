package ray

import (
	"context"
	"errors"
	"fmt"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host/node"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/sdk/ray/internal/core"
	"github.com/goray-dev/goray/sdk/transport"
)

// CallByName submits a call of the task registered under name with untyped
// arguments (values or Refs). It is the dynamic counterpart of TaskN: the
// worker checks the arguments, so a wrong type fails with ErrArgType and an
// unknown name with ErrFunctionNotFound when the result is read.
func CallByName[R any](ctx context.Context, name string, args ...any) Ref[R] {
	cw, err := current()
	if err != nil {
		panic(err)
	}
	in := make([]core.ArgInput, len(args))
	for i, a := range args {
		if r, ok := a.(ObjectRef); ok {
			in[i] = core.ArgInput{Handle: r.handle()}
		} else {
			in[i] = core.ArgInput{Value: a}
		}
	}
	b := taskBase{name: name}
	opts, _ := b.coreOptions(1)
	return Ref[R]{cw.SubmitTask(ctx, name, in, opts)}
}

// ClusterResources returns the total resources of all alive nodes.
func ClusterResources(ctx context.Context) (map[string]float64, error) {
	return sumNodes(ctx, func(nv *pb.NodeView) map[string]int64 { return nv.GetInfo().GetTotal().GetAmounts() })
}

// AvailableResources returns the resources not in use on alive nodes, as of
// their last heartbeat.
func AvailableResources(ctx context.Context) (map[string]float64, error) {
	return sumNodes(ctx, func(nv *pb.NodeView) map[string]int64 { return nv.GetAvailable().GetAmounts() })
}

func sumNodes(ctx context.Context, pick func(*pb.NodeView) map[string]int64) (map[string]float64, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	if cw.GCS() == nil {
		return nil, ErrNotInitialized
	}
	rep, err := cw.GCS().GetAllNodes(ctx, &pb.GetAllNodesRequest{})
	if err != nil {
		return nil, fmt.Errorf("goray: listing nodes: %w", err)
	}
	total := resources.Set{}
	for _, nv := range rep.Nodes {
		if nv.GetInfo().GetState() == "ALIVE" {
			total.Add(resources.Set(pick(nv)))
		}
	}
	return total.Floats(), nil
}

// StoreUsage is the local node's shared-memory object store use.
type StoreUsage struct {
	Used, Capacity int64
	Objects        int64
}

// ObjectStoreUsage reports the object store use of the node this process
// runs on.
func ObjectStoreUsage(ctx context.Context) (StoreUsage, error) {
	cw, err := current()
	if err != nil {
		return StoreUsage{}, err
	}
	rep, err := cw.Raylet().GetNodeStats(ctx, &pb.GetNodeStatsRequest{})
	if err != nil {
		return StoreUsage{}, fmt.Errorf("goray: node stats: %w", err)
	}
	return StoreUsage{Used: rep.StoreUsed, Capacity: rep.StoreCapacity, Objects: rep.StoreObjects}, nil
}

// TaskContext describes the task a context belongs to (inside a task or
// actor method).
type TaskContext struct {
	TaskID   string
	Function string
	ActorID  string
	// Attempt is 0 for the first run and counts retries after crashes.
	Attempt int
	// PlacementGroupID is the placement group the task (or its actor) runs
	// in ("" for none, Ray's get_current_placement_group); Bundle is the
	// bundle index it was placed in (AnyBundle for any).
	PlacementGroupID string
	Bundle           int
	// CaptureChildTasks says the tasks and actors it submits land in its
	// placement group too (unless they choose otherwise).
	CaptureChildTasks bool
}

// CurrentTask returns the task running with ctx; ok is false outside tasks.
func CurrentTask(ctx context.Context) (tc TaskContext, ok bool) {
	t, ok := core.CurrentTask(ctx)
	if !ok {
		return tc, false
	}
	tc = TaskContext{TaskID: t.TaskID.String(), Function: t.Function, Attempt: t.Attempt, Bundle: AnyBundle}
	if p := t.Placement; p != nil {
		tc.PlacementGroupID, tc.Bundle, tc.CaptureChildTasks = p.Group.String(), p.Bundle, p.CaptureChildTasks
	}
	if !t.ActorID.IsNil() {
		tc.ActorID = t.ActorID.String()
	}
	return tc, true
}

// Node describes a node of the cluster.
type Node struct {
	// ID is the node's id (hex), as NodeAffinity takes it.
	ID   string
	Name string
	// Address is the raylet's host:port for other nodes.
	Address string
	Head    bool
	Alive   bool
	// DeathReason says why a dead node died.
	DeathReason string
	// Resources are the node's totals; Available what was free at its last
	// report.
	Resources map[string]float64
	Available map[string]float64
	Labels    map[string]string
}

// Nodes lists the cluster's nodes, alive and dead, in the order they
// joined.
func Nodes(ctx context.Context) ([]Node, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	if cw.GCS() == nil {
		return nil, ErrNotInitialized
	}
	rep, err := cw.GCS().GetAllNodes(ctx, &pb.GetAllNodesRequest{})
	if err != nil {
		return nil, fmt.Errorf("goray: listing nodes: %w", err)
	}
	out := make([]Node, 0, len(rep.Nodes))
	for _, nv := range rep.Nodes {
		in := nv.GetInfo()
		id, _ := ids.FromBytes(in.GetNodeId())
		out = append(out, Node{
			ID: id.String(), Name: in.GetNodeName(), Address: in.GetRayletTcp(), Head: in.GetIsHead(),
			Alive: in.GetState() == "ALIVE", DeathReason: in.GetDeathReason(),
			Resources: resources.Set(in.GetTotal().GetAmounts()).Floats(),
			Available: resources.Set(nv.GetAvailable().GetAmounts()).Floats(), Labels: in.GetLabels(),
		})
	}
	return out, nil
}

// NodeID returns the id (hex) of the node this process runs on: in a task
// or actor method, the node running it.
func NodeID() string {
	cw, err := current()
	if err != nil {
		return ""
	}
	return cw.NodeID().String()
}

// StartNode starts another node inside this process that joins the cluster
// this process belongs to, with the cluster's address and credentials, as
// Ray's cluster_utils.Cluster.add_node does for tests and benchmarks. cfg
// describes the node (resources, object store, plugins, spilling, temp
// dir); its Address is set to the cluster's. The node is embedded: Stop
// removes its session directory. It fails with ErrNotInitialized before
// Init.
func StartNode(ctx context.Context, cfg *config.Node) (*node.Node, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	gcs := cw.GCSAddress()
	if gcs == "" {
		return nil, errors.New("goray: StartNode: this process does not know its cluster's address")
	}
	if cfg == nil {
		cfg = config.Default()
	}
	cfg.Head = false
	cfg.Address = gcs
	nd, err := node.Start(ctx, node.Options{Config: cfg, Embedded: true, Auth: cw.Credentials()})
	if err != nil {
		return nil, fmt.Errorf("goray: StartNode: %w", err)
	}
	return nd, nil
}

// Transport returns a client of the transport plugin called name on this
// process's node, for applications that move tensors with it directly (the
// one-sided transport's register-and-read, say) rather than through task
// arguments. The client is shared; do not close it.
func Transport(name string) (transport.Transport, error) {
	cw, err := current()
	if err != nil {
		return nil, err
	}
	return cw.TransportClient(name, ids.ID{}), nil
}
