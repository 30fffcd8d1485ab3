package collective

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/sdk/ray/internal/core"
	"github.com/goray-dev/goray/sdk/transport"
)

// Op is an element-wise reduction.
type Op = transport.ReduceOp

// Reductions. Integers wrap around on overflow; floating-point Min and Max
// propagate NaN; on bool tensors Sum and Max are a logical or, Product and
// Min a logical and.
const (
	Sum     Op = transport.ReduceSum
	Product Op = transport.ReduceProduct
	Min     Op = transport.ReduceMin
	Max     Op = transport.ReduceMax
)

// AllReduce reduces t element-wise across the members of group with op and
// leaves the result in t on every member (in place). Every member passes a
// tensor of the same dtype and shape.
func AllReduce(ctx context.Context, group string, t transport.Tensor, op Op) error {
	if err := checkOp(op); err != nil {
		return err
	}
	if err := checkTensor("tensor", t); err != nil {
		return err
	}
	return call(ctx, group, transport.OpAllReduce, func(ctx context.Context, c transport.Collective, m *member) error {
		_, err := c.AllReduce(ctx, &transport.AllReduceRequest{Group: m.group, Rank: m.rank, Tensor: t, Op: op})
		return err
	})
}

// Broadcast copies the tensor of member root (a rank) into t on every
// other member. Every member passes a tensor of the same dtype and shape.
func Broadcast(ctx context.Context, group string, t transport.Tensor, root int) error {
	if err := checkTensor("tensor", t); err != nil {
		return err
	}
	if root < 0 {
		return fmt.Errorf("%w: root rank %d", ErrBadArgument, root)
	}
	return call(ctx, group, transport.OpBroadcast, func(ctx context.Context, c transport.Collective, m *member) error {
		if root >= len(m.decl.Members) {
			return fmt.Errorf("%w: root rank %d of a group of %d", ErrBadArgument, root, len(m.decl.Members))
		}
		_, err := c.Broadcast(ctx, &transport.BroadcastRequest{Group: m.group, Rank: m.rank, Tensor: t, Root: root})
		return err
	})
}

// AllGather concatenates every member's in, in rank order, into out on
// every member: out has in's dtype and world size times its elements (any
// shape, for example [world size, in's shape...]). in may be this rank's
// block of out.
func AllGather(ctx context.Context, group string, in, out transport.Tensor) error {
	if err := checkTensor("input", in); err != nil {
		return err
	}
	if err := checkTensor("output", out); err != nil {
		return err
	}
	return call(ctx, group, transport.OpAllGather, func(ctx context.Context, c transport.Collective, m *member) error {
		n := int64(len(m.decl.Members))
		if in.DType != out.DType || transport.NumElements(out.Shape) != n*transport.NumElements(in.Shape) {
			return fmt.Errorf("%w: all-gather of %s into %s in a group of %d", ErrBadArgument, in.Meta(), out.Meta(), n)
		}
		_, err := c.AllGather(ctx, &transport.AllGatherRequest{Group: m.group, Rank: m.rank, Input: in, Output: out})
		return err
	})
}

// ReduceScatter reduces in element-wise across the members with op and
// leaves this member's part of the result in out: the elements are split
// into world-size contiguous parts whose sizes differ by at most one (the
// first ones longer; see PartOf), and rank r gets part r. When in's
// elements are world size times out's, part r is simply the r-th slice.
func ReduceScatter(ctx context.Context, group string, in, out transport.Tensor, op Op) error {
	if err := checkOp(op); err != nil {
		return err
	}
	if err := checkTensor("input", in); err != nil {
		return err
	}
	if err := checkTensor("output", out); err != nil {
		return err
	}
	return call(ctx, group, transport.OpReduceScatter, func(ctx context.Context, c transport.Collective, m *member) error {
		count, _ := PartOf(transport.NumElements(in.Shape), len(m.decl.Members), m.rank)
		if in.DType != out.DType || transport.NumElements(out.Shape) != count {
			return fmt.Errorf("%w: reduce-scatter of %s gives rank %d %d elements, output is %s", ErrBadArgument, in.Meta(), m.rank, count, out.Meta())
		}
		_, err := c.ReduceScatter(ctx, &transport.ReduceScatterRequest{Group: m.group, Rank: m.rank, Input: in, Output: out, Op: op})
		return err
	})
}

// Barrier returns once every member of group has called it.
func Barrier(ctx context.Context, group string) error {
	return call(ctx, group, transport.OpBarrier, func(ctx context.Context, c transport.Collective, m *member) error {
		_, err := c.Barrier(ctx, &transport.BarrierRequest{Group: m.group, Rank: m.rank})
		return err
	})
}

// PartOf returns how many of n elements rank gets in a reduce-scatter over
// worldSize members, and where its part starts.
func PartOf(n int64, worldSize, rank int) (count, start int64) {
	return transport.ReduceScatterCount(n, worldSize, rank)
}

func checkOp(op Op) error {
	if !op.Valid() {
		return fmt.Errorf("%w: unknown reduction %q", ErrBadArgument, op)
	}
	return nil
}

func checkTensor(what string, t transport.Tensor) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !t.Meta().IsCPU() {
		return fmt.Errorf("%w: %s is on device %q; collectives run on CPU tensors in shared memory", transport.ErrNotSupported, what, t.Device)
	}
	return nil
}

// call runs one collective of the calling member: it joins the group when
// needed, bounds the call by the group's timeout and records a failure
// (which breaks the group in the backend).
func call(ctx context.Context, group, op string, f func(context.Context, transport.Collective, *member) error) error {
	if err := validName(group); err != nil {
		return err
	}
	actor, err := selfActor(ctx)
	if err != nil {
		return err
	}
	cw, err := runtime()
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		m, fresh, err := join(ctx, cw, actor, group)
		if err != nil {
			return err
		}
		cctx, cancel := bound(ctx, m.decl)
		err = f(cctx, cw.Collective(m.decl.Backend, ids.ID{}), m)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrBadArgument) && !isCollectiveErr(err) {
			// Refused here against this process's view of the group, before
			// the backend saw it: if the group was re-created meanwhile,
			// check again against the new declaration.
			if !fresh && attempt == 0 && stale(ctx, cw, group, m) {
				forget(actor, group, m)
				continue
			}
			return err
		}
		if errors.Is(err, ErrGroupNotFound) && !fresh && attempt == 0 {
			// The member was released under us (DestroyGroup from another
			// process): look at the declaration again, which may name a
			// new incarnation.
			forget(actor, group, m)
			continue
		}
		if unreachable(err) {
			// The plugin restarted or is down: whatever it hosted is gone.
			forget(actor, group, m)
			return err
		}
		breakMember(ctx, cw, actor, group, m, err)
		return err
	}
}

// isCollectiveErr reports whether err came from the backend.
func isCollectiveErr(err error) bool {
	var ce *transport.CollectiveError
	return errors.As(err, &ce)
}

// unreachable reports whether err says the plugin (or its node) could not
// be reached.
func unreachable(err error) bool {
	switch status.Code(err) { // the status may be wrapped
	case codes.Unavailable, codes.FailedPrecondition:
		return true
	}
	return false
}

// stale reports whether the group's declaration is no longer m's (the group
// was destroyed, or destroyed and created again).
func stale(ctx context.Context, cw *core.CoreWorker, group string, m *member) bool {
	d, err := readDecl(ctx, cw, group)
	if err != nil {
		return errors.Is(err, ErrGroupNotFound)
	}
	return d.Incarnation != m.decl.Incarnation
}
