package transport

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/goray-dev/goray/internal/proto/transportv1"
	"github.com/goray-dev/goray/sdk/plugin"
)

// APIVersion is the newest version of the transport plugin protocol this
// SDK speaks.
const APIVersion = 1

// Register registers impl as the Transport gRPC service (API version 1) on
// s. Serve does this for plugins; tests and embedders can use it with their
// own server.
func Register(s *grpc.Server, impl Transport) {
	pb.RegisterTransportServer(s, &server{impl: impl})
}

// NewClient returns a Transport backed by a transport plugin reachable over
// conn, which speaks the negotiated apiVersion. Errors keep their identity:
// errors.Is(err, ErrAborted) works on an abort that happened in the plugin,
// and a *TransferError names the object and duty. Context cancellation and
// deadlines travel to the plugin.
//
// conn is usually the *grpc.ClientConn of a plugin; any
// grpc.ClientConnInterface works (goray's workers reach their node's
// plugins through a proxy).
func NewClient(conn grpc.ClientConnInterface, apiVersion int) Transport {
	return &client{c: pb.NewTransportClient(conn), version: apiVersion}
}

// ---------------------------------------------------------------- errors

// errorTable is the transport kind's error table: what each sentinel error
// is called on the wire and which gRPC code carries it.
var errorTable = plugin.ErrorTable{
	{Name: "aborted", Errors: []error{ErrAborted}, Code: codes.Aborted},
	{Name: "bad_metadata", Errors: []error{ErrBadMetadata}, Code: codes.InvalidArgument},
	{Name: "not_supported", Errors: []error{ErrNotSupported}, Code: codes.Unimplemented},
	{Name: "timeout", Errors: []error{ErrTimeout, context.DeadlineExceeded}, Code: codes.DeadlineExceeded},
	{Name: "canceled", Errors: []error{context.Canceled}, Code: codes.Canceled},
	// Collective errors (collective.go).
	{Name: "group_not_found", Errors: []error{ErrGroupNotFound}, Code: codes.NotFound},
	{Name: "group_exists", Errors: []error{ErrGroupExists}, Code: codes.AlreadyExists},
	{Name: "rank_failed", Errors: []error{ErrRankFailed}, Code: codes.Aborted},
}

// toStatus turns an implementation's error into a gRPC status error that
// carries an ErrorInfo detail.
func toStatus(op, objectID string, err error) error {
	if err == nil {
		return nil
	}
	kind, code := errorTable.Classify(err)
	msg := err.Error()
	var te *TransferError
	if errors.As(err, &te) {
		if te.ObjectID != "" {
			objectID = te.ObjectID
		}
		if te.Op != "" {
			op = te.Op
		}
		if te.Err != nil {
			msg = te.Err.Error()
		}
	}
	full := (&TransferError{ObjectID: objectID, Op: op, Err: errors.New(msg)}).Error()
	return plugin.StatusError(code, full, &pb.ErrorInfo{Kind: kind, ObjectId: objectID, Op: op, Message: msg})
}

// fromStatus turns a gRPC error from the plugin back into a
// *TransferError whose cause matches the original sentinel errors. ctx is
// the caller's: a call cancelled while ctx is alive lost its connection
// (the plugin died and the host is restarting it), which keeps an
// Unavailable status, as for any other lost plugin.
func fromStatus(ctx context.Context, op, objectID string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return &TransferError{ObjectID: objectID, Op: op, Err: err}
	}
	if lost := plugin.LostConnection(ctx, st); lost != st {
		st, err = lost, lost.Err()
	}
	if info, ok := plugin.DetailOf[*pb.ErrorInfo](st); ok {
		if info.ObjectId != "" {
			objectID = info.ObjectId
		}
		if info.Op != "" {
			op = info.Op
		}
		re := errorTable.Remote(info.Message, []string{info.Kind})
		if re.Kind == "" {
			re = errorTable.Remote(info.Message, nil, err)
		}
		return &TransferError{ObjectID: objectID, Op: op, Err: re}
	}
	k, ok := errorTable.ForCode(st.Code())
	if !ok {
		// Transport-level failures (the plugin died, Unavailable, ...): keep
		// the status error so callers can inspect its code.
		return &TransferError{ObjectID: objectID, Op: op, Err: err}
	}
	// No detail (an older plugin, a deadline hit on the way): keep the
	// status error in the chain so callers can still inspect its code, as
	// storage does.
	return &TransferError{ObjectID: objectID, Op: op,
		Err: errorTable.Remote(fmt.Sprintf("%s (%s)", st.Message(), st.Code()), []string{k.Name}, err)}
}

// ---------------------------------------------------------------- conversions

func metaToPB(m TensorMeta) *pb.TensorMeta {
	return &pb.TensorMeta{Dtype: string(m.DType), Shape: m.Shape, Device: m.Device}
}

func metaFromPB(m *pb.TensorMeta) TensorMeta {
	if m == nil {
		return TensorMeta{}
	}
	return TensorMeta{DType: DType(m.Dtype), Shape: m.Shape, Device: m.Device}
}

// mapSlice converts each element of xs with f; nil stays nil.
func mapSlice[T, U any](xs []T, f func(T) U) []U {
	if xs == nil {
		return nil
	}
	out := make([]U, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func metasToPB(ms []TensorMeta) []*pb.TensorMeta { return mapSlice(ms, metaToPB) }

func metasFromPB(ms []*pb.TensorMeta) []TensorMeta { return mapSlice(ms, metaFromPB) }

func tensorToPB(t Tensor) *pb.Tensor {
	return &pb.Tensor{
		Meta:   &pb.TensorMeta{Dtype: string(t.DType), Shape: t.Shape, Device: t.Device},
		Buffer: &pb.Buffer{Segment: t.Buffer.Segment, Offset: t.Buffer.Offset, Length: t.Buffer.Length},
	}
}

func tensorFromPB(t *pb.Tensor) Tensor {
	if t == nil {
		return Tensor{}
	}
	m := metaFromPB(t.Meta)
	out := Tensor{DType: m.DType, Shape: m.Shape, Device: m.Device}
	if b := t.Buffer; b != nil {
		out.Buffer = Buffer{Segment: b.Segment, Offset: b.Offset, Length: b.Length}
	}
	return out
}

func tensorsToPB(ts []Tensor) []*pb.Tensor { return mapSlice(ts, tensorToPB) }

func tensorsFromPB(ts []*pb.Tensor) []Tensor { return mapSlice(ts, tensorFromPB) }

// ---------------------------------------------------------------- server

// server adapts a Transport to the generated gRPC service. A panic in the
// implementation becomes an Internal error instead of killing the plugin.
type server struct {
	pb.UnimplementedTransportServer
	impl Transport
}

func (s *server) Info(ctx context.Context, _ *pb.InfoRequest) (_ *pb.InfoResponse, err error) {
	defer plugin.Recover(&err, "transport %s of object %s", OpInfo, "")
	r, err := s.impl.Info(ctx, &InfoRequest{})
	if err != nil {
		return nil, toStatus(OpInfo, "", err)
	}
	if r == nil {
		r = &InfoResponse{}
	}
	return &pb.InfoResponse{Name: r.Name, OneSided: r.OneSided, CanAbort: r.CanAbort, SameNode: r.SameNode}, nil
}

func (s *server) ActorHasTransport(ctx context.Context, req *pb.ActorHasTransportRequest) (_ *pb.ActorHasTransportResponse, err error) {
	defer plugin.Recover(&err, "transport %s of object %s", OpActorHasTransport, "")
	r, err := s.impl.ActorHasTransport(ctx, &ActorHasTransportRequest{ActorID: req.GetActorId(), NodeID: req.GetNodeId()})
	if err != nil {
		return nil, toStatus(OpActorHasTransport, "", err)
	}
	if r == nil {
		r = &ActorHasTransportResponse{}
	}
	return &pb.ActorHasTransportResponse{HasTransport: r.HasTransport}, nil
}

func (s *server) ExtractMetadata(ctx context.Context, req *pb.ExtractMetadataRequest) (_ *pb.ExtractMetadataResponse, err error) {
	id := req.GetObjectId()
	defer plugin.Recover(&err, "transport %s of object %s", OpExtractMetadata, id)
	r, err := s.impl.ExtractMetadata(ctx, &ExtractMetadataRequest{
		ObjectID:          id,
		Source:            req.GetSource(),
		Tensors:           tensorsFromPB(req.GetTensors()),
		TransferOwnership: req.GetTransferOwnership(),
	})
	if err != nil {
		return nil, toStatus(OpExtractMetadata, id, err)
	}
	if r == nil {
		r = &ExtractMetadataResponse{}
	}
	return &pb.ExtractMetadataResponse{Tensors: metasToPB(r.Tensors), TransportData: r.TransportData}, nil
}

func (s *server) CommunicatorMetadata(ctx context.Context, req *pb.CommunicatorMetadataRequest) (_ *pb.CommunicatorMetadataResponse, err error) {
	id := req.GetObjectId()
	defer plugin.Recover(&err, "transport %s of object %s", OpCommunicatorMetadata, id)
	r, err := s.impl.CommunicatorMetadata(ctx, &CommunicatorMetadataRequest{
		ObjectID: id, Source: req.GetSource(), Destination: req.GetDestination(),
	})
	if err != nil {
		return nil, toStatus(OpCommunicatorMetadata, id, err)
	}
	if r == nil {
		r = &CommunicatorMetadataResponse{}
	}
	return &pb.CommunicatorMetadataResponse{Data: r.Data}, nil
}

func (s *server) Send(ctx context.Context, req *pb.SendRequest) (_ *pb.SendResponse, err error) {
	id := req.GetObjectId()
	defer plugin.Recover(&err, "transport %s of object %s", OpSend, id)
	_, err = s.impl.Send(ctx, &SendRequest{
		ObjectID:         id,
		Source:           req.GetSource(),
		Destination:      req.GetDestination(),
		Tensors:          metasFromPB(req.GetTensors()),
		TransportData:    req.GetTransportData(),
		CommunicatorData: req.GetCommunicatorData(),
	})
	if err != nil {
		return nil, toStatus(OpSend, id, err)
	}
	return &pb.SendResponse{}, nil
}

func (s *server) Receive(ctx context.Context, req *pb.ReceiveRequest) (_ *pb.ReceiveResponse, err error) {
	id := req.GetObjectId()
	defer plugin.Recover(&err, "transport %s of object %s", OpReceive, id)
	r, err := s.impl.Receive(ctx, &ReceiveRequest{
		ObjectID:         id,
		Source:           req.GetSource(),
		Destination:      req.GetDestination(),
		Tensors:          metasFromPB(req.GetTensors()),
		TransportData:    req.GetTransportData(),
		CommunicatorData: req.GetCommunicatorData(),
		Targets:          tensorsFromPB(req.GetTargets()),
	})
	if err != nil {
		return nil, toStatus(OpReceive, id, err)
	}
	if r == nil {
		r = &ReceiveResponse{}
	}
	return &pb.ReceiveResponse{Tensors: tensorsToPB(r.Tensors), Allocated: r.Allocated}, nil
}

func (s *server) GarbageCollect(ctx context.Context, req *pb.GarbageCollectRequest) (_ *pb.GarbageCollectResponse, err error) {
	id := req.GetObjectId()
	defer plugin.Recover(&err, "transport %s of object %s", OpGarbageCollect, id)
	_, err = s.impl.GarbageCollect(ctx, &GarbageCollectRequest{ObjectID: id, TransportData: req.GetTransportData()})
	if err != nil {
		return nil, toStatus(OpGarbageCollect, id, err)
	}
	return &pb.GarbageCollectResponse{}, nil
}

func (s *server) Abort(ctx context.Context, req *pb.AbortRequest) (_ *pb.AbortResponse, err error) {
	id := req.GetObjectId()
	defer plugin.Recover(&err, "transport %s of object %s", OpAbort, id)
	_, err = s.impl.Abort(ctx, &AbortRequest{ObjectID: id, Reason: req.GetReason()})
	if err != nil {
		return nil, toStatus(OpAbort, id, err)
	}
	return &pb.AbortResponse{}, nil
}

// ---------------------------------------------------------------- client

type client struct {
	c       pb.TransportClient
	version int
}

func (c *client) Info(ctx context.Context, _ *InfoRequest) (*InfoResponse, error) {
	r, err := c.c.Info(ctx, &pb.InfoRequest{})
	if err != nil {
		return nil, fromStatus(ctx, OpInfo, "", err)
	}
	return &InfoResponse{Name: r.Name, OneSided: r.OneSided, CanAbort: r.CanAbort, SameNode: r.SameNode}, nil
}

func (c *client) ActorHasTransport(ctx context.Context, req *ActorHasTransportRequest) (*ActorHasTransportResponse, error) {
	if req == nil {
		req = &ActorHasTransportRequest{}
	}
	r, err := c.c.ActorHasTransport(ctx, &pb.ActorHasTransportRequest{ActorId: req.ActorID, NodeId: req.NodeID})
	if err != nil {
		return nil, fromStatus(ctx, OpActorHasTransport, "", err)
	}
	return &ActorHasTransportResponse{HasTransport: r.HasTransport}, nil
}

func (c *client) ExtractMetadata(ctx context.Context, req *ExtractMetadataRequest) (*ExtractMetadataResponse, error) {
	if req == nil {
		req = &ExtractMetadataRequest{}
	}
	r, err := c.c.ExtractMetadata(ctx, &pb.ExtractMetadataRequest{
		ObjectId:          req.ObjectID,
		Source:            req.Source,
		Tensors:           tensorsToPB(req.Tensors),
		TransferOwnership: req.TransferOwnership,
	})
	if err != nil {
		return nil, fromStatus(ctx, OpExtractMetadata, req.ObjectID, err)
	}
	return &ExtractMetadataResponse{Tensors: metasFromPB(r.Tensors), TransportData: r.TransportData}, nil
}

func (c *client) CommunicatorMetadata(ctx context.Context, req *CommunicatorMetadataRequest) (*CommunicatorMetadataResponse, error) {
	if req == nil {
		req = &CommunicatorMetadataRequest{}
	}
	r, err := c.c.CommunicatorMetadata(ctx, &pb.CommunicatorMetadataRequest{
		ObjectId: req.ObjectID, Source: req.Source, Destination: req.Destination,
	})
	if err != nil {
		return nil, fromStatus(ctx, OpCommunicatorMetadata, req.ObjectID, err)
	}
	return &CommunicatorMetadataResponse{Data: r.Data}, nil
}

func (c *client) Send(ctx context.Context, req *SendRequest) (*SendResponse, error) {
	if req == nil {
		req = &SendRequest{}
	}
	_, err := c.c.Send(ctx, &pb.SendRequest{
		ObjectId:         req.ObjectID,
		Source:           req.Source,
		Destination:      req.Destination,
		Tensors:          metasToPB(req.Tensors),
		TransportData:    req.TransportData,
		CommunicatorData: req.CommunicatorData,
	})
	if err != nil {
		return nil, fromStatus(ctx, OpSend, req.ObjectID, err)
	}
	return &SendResponse{}, nil
}

func (c *client) Receive(ctx context.Context, req *ReceiveRequest) (*ReceiveResponse, error) {
	if req == nil {
		req = &ReceiveRequest{}
	}
	r, err := c.c.Receive(ctx, &pb.ReceiveRequest{
		ObjectId:         req.ObjectID,
		Source:           req.Source,
		Destination:      req.Destination,
		Tensors:          metasToPB(req.Tensors),
		TransportData:    req.TransportData,
		CommunicatorData: req.CommunicatorData,
		Targets:          tensorsToPB(req.Targets),
	})
	if err != nil {
		return nil, fromStatus(ctx, OpReceive, req.ObjectID, err)
	}
	return &ReceiveResponse{Tensors: tensorsFromPB(r.Tensors), Allocated: r.Allocated}, nil
}

func (c *client) GarbageCollect(ctx context.Context, req *GarbageCollectRequest) (*GarbageCollectResponse, error) {
	if req == nil {
		req = &GarbageCollectRequest{}
	}
	_, err := c.c.GarbageCollect(ctx, &pb.GarbageCollectRequest{ObjectId: req.ObjectID, TransportData: req.TransportData})
	if err != nil {
		return nil, fromStatus(ctx, OpGarbageCollect, req.ObjectID, err)
	}
	return &GarbageCollectResponse{}, nil
}

func (c *client) Abort(ctx context.Context, req *AbortRequest) (*AbortResponse, error) {
	if req == nil {
		req = &AbortRequest{}
	}
	_, err := c.c.Abort(ctx, &pb.AbortRequest{ObjectId: req.ObjectID, Reason: req.Reason})
	if err != nil {
		return nil, fromStatus(ctx, OpAbort, req.ObjectID, err)
	}
	return &AbortResponse{}, nil
}
