package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	pb "github.com/goray-dev/goray/internal/proto/collectivev1"
	"github.com/goray-dev/goray/sdk/plugin"
)

// CollectiveService is the full gRPC name of the collective service, as it
// appears in method names ("/goray.collective.v1.Collective/AllReduce").
// A proxy that forwards plugin calls (the raylet) must forward this service
// too.
const CollectiveService = "goray.collective.v1.Collective"

// RegisterCollective registers impl as the Collective gRPC service on s.
// Serve does this for transports that implement Collective; tests and
// embedders can use it with their own server.
func RegisterCollective(s *grpc.Server, impl Collective) {
	pb.RegisterCollectiveServer(s, &collectiveServer{impl: impl})
}

// NewCollectiveClient returns a Collective backed by a plugin reachable
// over conn (a plugin's *grpc.ClientConn, or any grpc.ClientConnInterface
// such as a proxy). Errors come back as *CollectiveError whose cause
// matches the same sentinel errors as in the plugin (ErrRankFailed,
// ErrTimeout, ...); a plugin that does not implement Collective gives
// errors matching ErrNotSupported. Context deadlines travel to the plugin.
func NewCollectiveClient(conn grpc.ClientConnInterface) Collective {
	return &collectiveClient{c: pb.NewCollectiveClient(conn)}
}

// ---------------------------------------------------------------- errors

// collectiveStatus turns an implementation's error into a gRPC status error
// carrying an ErrorInfo detail.
func collectiveStatus(op, group string, rank int, err error) error {
	if err == nil {
		return nil
	}
	failed := -1
	msg := err.Error()
	var ce *CollectiveError
	if errors.As(err, &ce) {
		op, group, rank, failed = ce.Op, ce.Group, ce.Rank, ce.FailedRank
		if ce.Err != nil {
			msg = ce.Err.Error()
		}
	}
	_, code := errorTable.Classify(err)
	kinds := errorTable.Kinds(err)
	info := &pb.ErrorInfo{Group: group, Rank: int64(rank), Op: op, Message: msg, FailedRank: int64(failed)}
	if len(kinds) > 0 {
		info.Kind, info.Also = kinds[0], kinds[1:]
	}
	full := (&CollectiveError{Group: group, Rank: rank, Op: op, Err: errors.New(msg)}).Error()
	return plugin.StatusError(code, full, info)
}

// collectiveFromStatus turns a gRPC error back into a *CollectiveError.
func collectiveFromStatus(op, group string, rank int, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return &CollectiveError{Group: group, Rank: rank, Op: op, FailedRank: -1, Err: err}
	}
	if info, ok := plugin.DetailOf[*pb.ErrorInfo](st); ok {
		re := errorTable.Remote(info.Message, append([]string{info.Kind}, info.Also...))
		if re.Kind == "" {
			re = errorTable.Remote(info.Message, nil, err)
		}
		if info.Op != "" {
			op = info.Op
		}
		if info.Group != "" {
			group, rank = info.Group, int(info.Rank)
		}
		return &CollectiveError{Group: group, Rank: rank, Op: op, FailedRank: int(info.FailedRank), Err: re}
	}
	k, ok := errorTable.ForCode(st.Code())
	if !ok {
		// The plugin is down (Unavailable), or another failure of the
		// connection: keep the status so callers can inspect its code.
		return &CollectiveError{Group: group, Rank: rank, Op: op, FailedRank: -1, Err: err}
	}
	return &CollectiveError{Group: group, Rank: rank, Op: op, FailedRank: -1,
		Err: errorTable.Remote(fmt.Sprintf("%s (%s)", st.Message(), st.Code()), []string{k.Name})}
}

// ---------------------------------------------------------------- conversions

func collTensorToPB(t Tensor) *pb.Tensor {
	return &pb.Tensor{Dtype: string(t.DType), Shape: t.Shape, Device: t.Device,
		Segment: t.Buffer.Segment, Offset: t.Buffer.Offset, Length: t.Buffer.Length}
}

func collTensorFromPB(t *pb.Tensor) Tensor {
	if t == nil {
		return Tensor{}
	}
	return Tensor{DType: DType(t.Dtype), Shape: t.Shape, Device: t.Device,
		Buffer: Buffer{Segment: t.Segment, Offset: t.Offset, Length: t.Length}}
}

// rankOf converts a wire rank; values that do not fit an int become -1,
// which every implementation refuses.
func rankOf(v int64) int {
	if v < -1<<31 || v > 1<<31-1 {
		return -1
	}
	return int(v)
}

// ---------------------------------------------------------------- server

type collectiveServer struct {
	pb.UnimplementedCollectiveServer
	impl Collective
}

func (s *collectiveServer) CreateGroup(ctx context.Context, req *pb.CreateGroupRequest) (_ *pb.CreateGroupResponse, err error) {
	g, r := req.GetGroup(), rankOf(req.GetRank())
	defer plugin.Recover(&err, "collective %s of group %q rank %d", OpCreateGroup, g, r)
	res, err := s.impl.CreateGroup(ctx, &CreateGroupRequest{
		Group: g, Rank: r, WorldSize: rankOf(req.GetWorldSize()), Members: req.GetMembers(),
		Timeout: time.Duration(req.GetTimeoutMs()) * time.Millisecond,
	})
	if err != nil {
		return nil, collectiveStatus(OpCreateGroup, g, r, err)
	}
	if res == nil {
		res = &CreateGroupResponse{}
	}
	return &pb.CreateGroupResponse{Epoch: res.Epoch}, nil
}

func (s *collectiveServer) DestroyGroup(ctx context.Context, req *pb.DestroyGroupRequest) (_ *pb.DestroyGroupResponse, err error) {
	g, r := req.GetGroup(), rankOf(req.GetRank())
	defer plugin.Recover(&err, "collective %s of group %q rank %d", OpDestroyGroup, g, r)
	if _, err := s.impl.DestroyGroup(ctx, &DestroyGroupRequest{Group: g, Rank: r}); err != nil {
		return nil, collectiveStatus(OpDestroyGroup, g, r, err)
	}
	return &pb.DestroyGroupResponse{}, nil
}

func (s *collectiveServer) AllReduce(ctx context.Context, req *pb.AllReduceRequest) (_ *pb.AllReduceResponse, err error) {
	g, r := req.GetGroup(), rankOf(req.GetRank())
	defer plugin.Recover(&err, "collective %s of group %q rank %d", OpAllReduce, g, r)
	_, err = s.impl.AllReduce(ctx, &AllReduceRequest{Group: g, Rank: r, Tensor: collTensorFromPB(req.GetTensor()), Op: ReduceOp(req.GetOp())})
	if err != nil {
		return nil, collectiveStatus(OpAllReduce, g, r, err)
	}
	return &pb.AllReduceResponse{}, nil
}

func (s *collectiveServer) Broadcast(ctx context.Context, req *pb.BroadcastRequest) (_ *pb.BroadcastResponse, err error) {
	g, r := req.GetGroup(), rankOf(req.GetRank())
	defer plugin.Recover(&err, "collective %s of group %q rank %d", OpBroadcast, g, r)
	_, err = s.impl.Broadcast(ctx, &BroadcastRequest{Group: g, Rank: r, Tensor: collTensorFromPB(req.GetTensor()), Root: rankOf(req.GetRoot())})
	if err != nil {
		return nil, collectiveStatus(OpBroadcast, g, r, err)
	}
	return &pb.BroadcastResponse{}, nil
}

func (s *collectiveServer) AllGather(ctx context.Context, req *pb.AllGatherRequest) (_ *pb.AllGatherResponse, err error) {
	g, r := req.GetGroup(), rankOf(req.GetRank())
	defer plugin.Recover(&err, "collective %s of group %q rank %d", OpAllGather, g, r)
	_, err = s.impl.AllGather(ctx, &AllGatherRequest{Group: g, Rank: r,
		Input: collTensorFromPB(req.GetInput()), Output: collTensorFromPB(req.GetOutput())})
	if err != nil {
		return nil, collectiveStatus(OpAllGather, g, r, err)
	}
	return &pb.AllGatherResponse{}, nil
}

func (s *collectiveServer) ReduceScatter(ctx context.Context, req *pb.ReduceScatterRequest) (_ *pb.ReduceScatterResponse, err error) {
	g, r := req.GetGroup(), rankOf(req.GetRank())
	defer plugin.Recover(&err, "collective %s of group %q rank %d", OpReduceScatter, g, r)
	_, err = s.impl.ReduceScatter(ctx, &ReduceScatterRequest{Group: g, Rank: r,
		Input: collTensorFromPB(req.GetInput()), Output: collTensorFromPB(req.GetOutput()), Op: ReduceOp(req.GetOp())})
	if err != nil {
		return nil, collectiveStatus(OpReduceScatter, g, r, err)
	}
	return &pb.ReduceScatterResponse{}, nil
}

func (s *collectiveServer) Barrier(ctx context.Context, req *pb.BarrierRequest) (_ *pb.BarrierResponse, err error) {
	g, r := req.GetGroup(), rankOf(req.GetRank())
	defer plugin.Recover(&err, "collective %s of group %q rank %d", OpBarrier, g, r)
	if _, err := s.impl.Barrier(ctx, &BarrierRequest{Group: g, Rank: r}); err != nil {
		return nil, collectiveStatus(OpBarrier, g, r, err)
	}
	return &pb.BarrierResponse{}, nil
}

// ---------------------------------------------------------------- client

type collectiveClient struct {
	c pb.CollectiveClient
}

func (c *collectiveClient) CreateGroup(ctx context.Context, req *CreateGroupRequest) (*CreateGroupResponse, error) {
	if req == nil {
		req = &CreateGroupRequest{}
	}
	r, err := c.c.CreateGroup(ctx, &pb.CreateGroupRequest{
		Group: req.Group, Rank: int64(req.Rank), WorldSize: int64(req.WorldSize), Members: req.Members,
		TimeoutMs: req.Timeout.Milliseconds(),
	})
	if err != nil {
		return nil, collectiveFromStatus(OpCreateGroup, req.Group, req.Rank, err)
	}
	return &CreateGroupResponse{Epoch: r.GetEpoch()}, nil
}

func (c *collectiveClient) DestroyGroup(ctx context.Context, req *DestroyGroupRequest) (*DestroyGroupResponse, error) {
	if req == nil {
		req = &DestroyGroupRequest{}
	}
	if _, err := c.c.DestroyGroup(ctx, &pb.DestroyGroupRequest{Group: req.Group, Rank: int64(req.Rank)}); err != nil {
		return nil, collectiveFromStatus(OpDestroyGroup, req.Group, req.Rank, err)
	}
	return &DestroyGroupResponse{}, nil
}

func (c *collectiveClient) AllReduce(ctx context.Context, req *AllReduceRequest) (*AllReduceResponse, error) {
	if req == nil {
		req = &AllReduceRequest{}
	}
	_, err := c.c.AllReduce(ctx, &pb.AllReduceRequest{Group: req.Group, Rank: int64(req.Rank),
		Tensor: collTensorToPB(req.Tensor), Op: string(req.Op)})
	if err != nil {
		return nil, collectiveFromStatus(OpAllReduce, req.Group, req.Rank, err)
	}
	return &AllReduceResponse{}, nil
}

func (c *collectiveClient) Broadcast(ctx context.Context, req *BroadcastRequest) (*BroadcastResponse, error) {
	if req == nil {
		req = &BroadcastRequest{}
	}
	_, err := c.c.Broadcast(ctx, &pb.BroadcastRequest{Group: req.Group, Rank: int64(req.Rank),
		Tensor: collTensorToPB(req.Tensor), Root: int64(req.Root)})
	if err != nil {
		return nil, collectiveFromStatus(OpBroadcast, req.Group, req.Rank, err)
	}
	return &BroadcastResponse{}, nil
}

func (c *collectiveClient) AllGather(ctx context.Context, req *AllGatherRequest) (*AllGatherResponse, error) {
	if req == nil {
		req = &AllGatherRequest{}
	}
	_, err := c.c.AllGather(ctx, &pb.AllGatherRequest{Group: req.Group, Rank: int64(req.Rank),
		Input: collTensorToPB(req.Input), Output: collTensorToPB(req.Output)})
	if err != nil {
		return nil, collectiveFromStatus(OpAllGather, req.Group, req.Rank, err)
	}
	return &AllGatherResponse{}, nil
}

func (c *collectiveClient) ReduceScatter(ctx context.Context, req *ReduceScatterRequest) (*ReduceScatterResponse, error) {
	if req == nil {
		req = &ReduceScatterRequest{}
	}
	_, err := c.c.ReduceScatter(ctx, &pb.ReduceScatterRequest{Group: req.Group, Rank: int64(req.Rank),
		Input: collTensorToPB(req.Input), Output: collTensorToPB(req.Output), Op: string(req.Op)})
	if err != nil {
		return nil, collectiveFromStatus(OpReduceScatter, req.Group, req.Rank, err)
	}
	return &ReduceScatterResponse{}, nil
}

func (c *collectiveClient) Barrier(ctx context.Context, req *BarrierRequest) (*BarrierResponse, error) {
	if req == nil {
		req = &BarrierRequest{}
	}
	if _, err := c.c.Barrier(ctx, &pb.BarrierRequest{Group: req.Group, Rank: int64(req.Rank)}); err != nil {
		return nil, collectiveFromStatus(OpBarrier, req.Group, req.Rank, err)
	}
	return &BarrierResponse{}, nil
}
