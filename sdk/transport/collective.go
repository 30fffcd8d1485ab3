package transport

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Collective is an optional interface of a transport: collective
// communication (all-reduce, broadcast, all-gather, reduce-scatter,
// barrier) among the ranks of a named group, in the style of NCCL and Gloo.
// Serve registers its gRPC service (goray.collective.v1.Collective) next to
// the Transport service when the transport implements it; NewCollectiveClient
// is the caller's side.
//
// # Groups and ranks
//
// A group has a name, a world size n and ranks 0..n-1. Every rank's process
// calls CreateGroup with the same name, world size and member list and its
// own rank, through its node's plugin; one plugin instance may host several
// ranks of several groups at once, so every call names the group and the
// rank it acts for. CreateGroup returns once every rank has joined and the
// ranks are connected (or fails on every rank), and DestroyGroup releases
// the rank's connections. A name can be used again after every rank has
// destroyed its member (or its process died); each incarnation has its own
// Epoch.
//
// # Collective calls
//
// Every rank must make the same collective calls in the same order with
// matching arguments (dtype, element count, shape, op, root). Calls of one
// rank are serialized. Tensors are shared-memory handles (see Tensor): the
// implementation maps the caller's segments, so no tensor bytes cross the
// plugin boundary. AllReduce and Broadcast work in place; AllGather and
// ReduceScatter write into Output and leave Input unchanged. Every rank
// ends with bitwise identical results.
//
// # Failures
//
// A collective call that fails on one rank (its context ends, its request
// is invalid, its process dies, a connection breaks) breaks the group: the
// rank's peers fail their current and later calls promptly with an error
// matching ErrRankFailed (whose message names the group and the failed
// rank; errors.As gives a *CollectiveError with FailedRank), instead of
// waiting for their deadlines. The failing rank itself reports its own
// cause (ErrTimeout, context.Canceled, ErrBadMetadata, ...). Arguments that
// differ across ranks (dtype, count, shape, op, root) are detected where
// possible and fail with ErrBadMetadata on the ranks that see them; their
// peers' errors match ErrRankFailed and ErrBadMetadata. A broken group
// stays broken: destroy it on every rank and create it again.
type Collective interface {
	// CreateGroup joins the calling rank to a group: it waits until every
	// rank has joined (at most the request's Timeout, else the transport's
	// configured timeout, and ctx), connects the ranks and returns the
	// group's epoch. Creating a (group, rank) this instance already hosts
	// fails with ErrGroupExists; ranks that disagree on the world size or
	// the members fail with ErrBadMetadata.
	CreateGroup(ctx context.Context, req *CreateGroupRequest) (*CreateGroupResponse, error)
	// DestroyGroup releases the rank's member of the group (connections,
	// rendezvous records); the other ranks' later calls fail with
	// ErrRankFailed. Destroying an unknown (group, rank) fails with
	// ErrGroupNotFound.
	DestroyGroup(ctx context.Context, req *DestroyGroupRequest) (*DestroyGroupResponse, error)
	// AllReduce reduces Tensor element-wise across the ranks with Op and
	// leaves the result in Tensor on every rank.
	AllReduce(ctx context.Context, req *AllReduceRequest) (*AllReduceResponse, error)
	// Broadcast copies Root's Tensor into every other rank's Tensor.
	Broadcast(ctx context.Context, req *BroadcastRequest) (*BroadcastResponse, error)
	// AllGather concatenates every rank's Input, in rank order, into every
	// rank's Output (WorldSize times Input's elements).
	AllGather(ctx context.Context, req *AllGatherRequest) (*AllGatherResponse, error)
	// ReduceScatter reduces Input element-wise across the ranks with Op and
	// leaves part Rank of the result in Output; see ReduceScatterCount for
	// the parts.
	ReduceScatter(ctx context.Context, req *ReduceScatterRequest) (*ReduceScatterResponse, error)
	// Barrier returns once every rank of the group has called it.
	Barrier(ctx context.Context, req *BarrierRequest) (*BarrierResponse, error)
}

// Errors of collective calls, in addition to the transport errors
// (ErrBadMetadata, ErrTimeout, ErrNotSupported). They keep their identity
// across the plugin boundary.
var (
	// ErrGroupNotFound means the instance hosts no such (group, rank): it
	// was never created here, was destroyed, or names another incarnation
	// (epoch) of the group.
	ErrGroupNotFound = errors.New("collective group not found")
	// ErrGroupExists means CreateGroup named a (group, rank) the instance
	// already hosts; destroy it first.
	ErrGroupExists = errors.New("collective group already exists")
	// ErrRankFailed means another rank of the group failed: its process
	// died, its connection broke, it left the group or it abandoned a
	// collective (timeout, cancellation, invalid arguments). The group is
	// broken; destroy and re-create it.
	ErrRankFailed = errors.New("collective group rank failed")
)

// Operation names of collective calls, used in CollectiveError.Op.
const (
	OpCreateGroup   = "create_group"
	OpDestroyGroup  = "destroy_group"
	OpAllReduce     = "all_reduce"
	OpBroadcast     = "broadcast"
	OpAllGather     = "all_gather"
	OpReduceScatter = "reduce_scatter"
	OpBarrier       = "barrier"
)

// CollectiveError names the group, the rank and the operation of a failed
// collective call. Implementations may return plain errors; the gRPC bridge
// turns every error into a *CollectiveError, whose cause still matches the
// sentinel errors.
type CollectiveError struct {
	Group string
	// Rank is the rank the call was made for.
	Rank int
	// Op is the operation (OpAllReduce, ...).
	Op string
	// FailedRank is the rank that failed when Err matches ErrRankFailed,
	// else -1.
	FailedRank int
	Err        error
}

// Error implements error.
func (e *CollectiveError) Error() string {
	return fmt.Sprintf("collective %s of group %q rank %d: %v", e.Op, e.Group, e.Rank, e.Err)
}

// Unwrap returns the cause.
func (e *CollectiveError) Unwrap() error { return e.Err }

// ReduceOp is an element-wise reduction. Its value is the name used on the
// wire ("sum").
type ReduceOp string

// Reductions. The empty ReduceOp means ReduceSum. Integers wrap around on
// overflow; floating-point Min and Max propagate NaN. On bool tensors Sum
// and Max are a logical or, Product and Min a logical and.
const (
	ReduceSum     ReduceOp = "sum"
	ReduceProduct ReduceOp = "product"
	ReduceMin     ReduceOp = "min"
	ReduceMax     ReduceOp = "max"
)

// Valid reports whether op is a known reduction (or empty, meaning sum).
func (op ReduceOp) Valid() bool {
	switch op {
	case "", ReduceSum, ReduceProduct, ReduceMin, ReduceMax:
		return true
	}
	return false
}

// OrSum returns op, or ReduceSum when op is empty.
func (op ReduceOp) OrSum() ReduceOp {
	if op == "" {
		return ReduceSum
	}
	return op
}

// MaxGroupNameLen is the longest group name accepted.
const MaxGroupNameLen = 256

// MaxWorldSize is the largest group accepted.
const MaxWorldSize = 1 << 16

// ValidGroup checks a group name and a rank against a world size (0: not
// known, rank only checked to be non-negative). Its error matches
// ErrBadMetadata.
func ValidGroup(group string, rank, worldSize int) error {
	if group == "" {
		return fmt.Errorf("%w: empty group name", ErrBadMetadata)
	}
	if len(group) > MaxGroupNameLen {
		return fmt.Errorf("%w: group name of %d bytes (at most %d)", ErrBadMetadata, len(group), MaxGroupNameLen)
	}
	if rank < 0 || (worldSize > 0 && rank >= worldSize) {
		return fmt.Errorf("%w: rank %d outside [0, %d)", ErrBadMetadata, rank, worldSize)
	}
	return nil
}

// CreateGroupRequest joins a rank to a group.
type CreateGroupRequest struct {
	// Group names the group; every rank passes the same name.
	Group string
	// Rank is the caller's rank, in [0, WorldSize).
	Rank int
	// WorldSize is the number of ranks (at least 1).
	WorldSize int
	// Members are the ranks' actor ids in rank order (len WorldSize), or
	// empty. Every rank passes the same list. Transports use them to find
	// the group and ranks of two actors (CommunicatorMetadata).
	Members []string
	// Timeout bounds the rendezvous; zero means the transport's configured
	// collective timeout. ctx bounds it too.
	Timeout time.Duration
}

// Validate checks the request; its error matches ErrBadMetadata.
func (r *CreateGroupRequest) Validate() error {
	if r.WorldSize < 1 || r.WorldSize > MaxWorldSize {
		return fmt.Errorf("%w: world size %d (want 1 to %d)", ErrBadMetadata, r.WorldSize, MaxWorldSize)
	}
	if err := ValidGroup(r.Group, r.Rank, r.WorldSize); err != nil {
		return err
	}
	if len(r.Members) != 0 && len(r.Members) != r.WorldSize {
		return fmt.Errorf("%w: %d members for world size %d", ErrBadMetadata, len(r.Members), r.WorldSize)
	}
	seen := make(map[string]int, len(r.Members))
	for i, m := range r.Members {
		if m == "" {
			return fmt.Errorf("%w: member %d has an empty actor id", ErrBadMetadata, i)
		}
		if j, ok := seen[m]; ok {
			return fmt.Errorf("%w: actor %q is member %d and %d", ErrBadMetadata, m, j, i)
		}
		seen[m] = i
	}
	if r.Timeout < 0 {
		return fmt.Errorf("%w: negative timeout %v", ErrBadMetadata, r.Timeout)
	}
	return nil
}

// CreateGroupResponse answers CreateGroup.
type CreateGroupResponse struct {
	// Epoch identifies this incarnation of the group (the same on every
	// rank; a re-created group gets a new one).
	Epoch string
}

// DestroyGroupRequest releases a rank's member of a group.
type DestroyGroupRequest struct {
	Group string
	Rank  int
}

// DestroyGroupResponse answers DestroyGroup.
type DestroyGroupResponse struct{}

// AllReduceRequest reduces a tensor across the group, in place.
type AllReduceRequest struct {
	Group string
	Rank  int
	// Tensor is the input and, on return, the result. Every rank passes the
	// same dtype and shape.
	Tensor Tensor
	// Op is the reduction (empty: ReduceSum).
	Op ReduceOp
}

// AllReduceResponse answers AllReduce.
type AllReduceResponse struct{}

// BroadcastRequest copies the root's tensor to every rank, in place.
type BroadcastRequest struct {
	Group string
	Rank  int
	// Tensor is the data on Root and the destination elsewhere; every rank
	// passes the same dtype and shape.
	Tensor Tensor
	// Root is the rank whose tensor is copied.
	Root int
}

// BroadcastResponse answers Broadcast.
type BroadcastResponse struct{}

// AllGatherRequest gathers every rank's input into every rank's output.
type AllGatherRequest struct {
	Group string
	Rank  int
	// Input is this rank's part; every rank passes the same dtype and shape.
	Input Tensor
	// Output receives the parts in rank order: same dtype, WorldSize times
	// Input's elements (any shape, for example [WorldSize, ...Input.Shape]).
	Output Tensor
}

// AllGatherResponse answers AllGather.
type AllGatherResponse struct{}

// ReduceScatterRequest reduces the ranks' inputs and scatters the result.
type ReduceScatterRequest struct {
	Group string
	Rank  int
	// Input is this rank's contribution; every rank passes the same dtype
	// and shape.
	Input Tensor
	// Output receives part Rank of the reduced input: same dtype,
	// ReduceScatterCount(elements of Input, WorldSize, Rank) elements (any
	// shape). When Input's elements are WorldSize times Output's, part r is
	// simply the r-th slice.
	Output Tensor
	// Op is the reduction (empty: ReduceSum).
	Op ReduceOp
}

// ReduceScatterResponse answers ReduceScatter.
type ReduceScatterResponse struct{}

// BarrierRequest waits for every rank.
type BarrierRequest struct {
	Group string
	Rank  int
}

// BarrierResponse answers Barrier.
type BarrierResponse struct{}

// ReduceScatterCount returns how many of n elements part rank of a
// reduce-scatter over worldSize ranks gets, and where the part starts: the
// elements are split into worldSize contiguous parts whose sizes differ by
// at most one, the first n%worldSize parts being one element longer. Ring
// all-reduce uses the same parts.
func ReduceScatterCount(n int64, worldSize, rank int) (count, start int64) {
	if worldSize < 1 || rank < 0 || rank >= worldSize || n < 0 {
		return 0, 0
	}
	w, r := int64(worldSize), int64(rank)
	base, rem := n/w, n%w
	count = base
	if r < rem {
		count++
	}
	return count, r*base + min(r, rem)
}
