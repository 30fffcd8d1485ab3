package core

import (
	"context"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// AnyBundle places a task or actor in any bundle of its placement group.
const AnyBundle = -1

// Placement places a task or actor in a placement group's bundle.
type Placement struct {
	// Group is the placement group's id.
	Group ids.ID
	// Bundle is the bundle's index, or AnyBundle.
	Bundle int
	// CaptureChildTasks places what the task or actor submits in the same
	// group (any bundle) unless it chooses otherwise.
	CaptureChildTasks bool
}

func (p *Placement) proto() *pb.PlacementOptions {
	return &pb.PlacementOptions{PlacementGroupId: p.Group.Bytes(), BundleIndex: int32(p.Bundle), CaptureChildTasks: p.CaptureChildTasks}
}

func placementFromProto(p *pb.PlacementOptions) *Placement {
	if p == nil || len(p.GetPlacementGroupId()) != ids.Size {
		return nil
	}
	return &Placement{Group: ids.MustFromBytes(p.GetPlacementGroupId()), Bundle: int(p.GetBundleIndex()), CaptureChildTasks: p.GetCaptureChildTasks()}
}

// placementOf returns where a submission made with ctx and opts goes: its
// own Placement, else the group of the task or actor submitting it when
// that one captures child tasks and the submission chose no other
// strategy (nor opted out, NoCapture); nil for none.
func placementOf(ctx context.Context, opts TaskOptions) *Placement {
	if opts.Placement != nil {
		return opts.Placement
	}
	if opts.Strategy != StrategyDefault || opts.NoCapture {
		return nil
	}
	if t, ok := CurrentTask(ctx); ok && t.Placement != nil && t.Placement.CaptureChildTasks {
		return &Placement{Group: t.Placement.Group, Bundle: AnyBundle, CaptureChildTasks: true}
	}
	return nil
}

// placeSpec puts spec in p's group: its resources become the group's
// (resources.InGroup) and the spec carries the placement, for the worker
// running it (child tasks) and for the lease request.
func placeSpec(spec *pb.TaskSpec, p *Placement) {
	if p == nil {
		return
	}
	spec.Placement = p.proto()
	spec.Resources = &pb.Resources{Amounts: resources.InGroup(spec.GetResources().GetAmounts(), p.Group.String(), p.Bundle)}
}
