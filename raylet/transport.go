package raylet

import (
	"context"
	"strings"

	"github.com/goray-dev/goray/internal/plugindial"
	_ "github.com/goray-dev/goray/internal/proto/collectivev1" // registers the Collective service's types
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	_ "github.com/goray-dev/goray/internal/proto/transportv1" // registers the Transport service's types
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Services of transport plugins the raylet forwards: the Transport
// service every transport serves and the Collective service of transports
// that implement collectives (sdk/transport.CollectiveService).
const (
	transportService  = "goray.transport.v1.Transport"
	collectiveService = "goray.collective.v1.Collective"
)

// TransportConnFunc returns a connection to the node's transport plugin
// name (see Config.Transports).
type TransportConnFunc func(name string) (grpc.ClientConnInterface, error)

// TransportInvoke forwards one call to a transport plugin of this node: a
// method of the Transport service, or of the Collective service for
// transports with collectives. Workers use it so that they never hold
// connections to plugin processes, which change when a plugin restarts;
// processes on other nodes use it to reach this node's plugins (the source
// side of a cross-node transfer, its garbage collection). Only handles and
// metadata pass here.
func (r *Raylet) TransportInvoke(ctx context.Context, req *gorayv1.TransportInvokeRequest) (*gorayv1.TransportInvokeReply, error) {
	if r.cfg.Transports == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s has no transport plugins", r.cfg.NodeID.Short())
	}
	in, out, err := transportMessages(req.GetMethod())
	if err != nil {
		return nil, err
	}
	if err := proto.Unmarshal(req.GetPayload(), in); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "transport %s: bad %s request: %v", req.GetName(), req.GetMethod(), err)
	}
	conn, err := r.cfg.Transports(req.GetName())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "transport %q on node %s: %v", req.GetName(), r.cfg.NodeID.Short(), err)
	}
	if err := conn.Invoke(ctx, req.GetMethod(), in, out); err != nil {
		return nil, err // the plugin's status (and its details) unchanged
	}
	payload, err := proto.Marshal(out)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "transport %s: marshalling the %s reply: %v", req.GetName(), req.GetMethod(), err)
	}
	return &gorayv1.TransportInvokeReply{Payload: payload}, nil
}

// TransportEndpointFunc returns how a process of this node calls the
// node's transport plugin name directly (see Config.TransportEndpoints).
type TransportEndpointFunc func(name string) (plugindial.Endpoint, error)

// TransportEndpoint tells a process of this node how to call the node's
// transport plugin directly, without TransportInvoke's relay: the
// plugin's socket and its launch's credentials. Only a caller on the
// raylet's unix socket is answered: the plugin's socket is on this node's
// disk, and its credentials are of no use and no business elsewhere.
func (r *Raylet) TransportEndpoint(ctx context.Context, req *gorayv1.TransportEndpointRequest) (*gorayv1.TransportEndpointReply, error) {
	if p, ok := peer.FromContext(ctx); !ok || p.Addr == nil || p.Addr.Network() != "unix" {
		return nil, status.Errorf(codes.PermissionDenied, "transport endpoints are told only to processes of node %s, on its unix socket", r.cfg.NodeID.Short())
	}
	if r.cfg.TransportEndpoints == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s has no transport plugins to call directly", r.cfg.NodeID.Short())
	}
	ep, err := r.cfg.TransportEndpoints(req.GetName())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "transport %q on node %s: %v", req.GetName(), r.cfg.NodeID.Short(), err)
	}
	return &gorayv1.TransportEndpointReply{
		Network: ep.Network, Address: ep.Address,
		ClientCert: ep.ClientCert, ClientKey: ep.ClientKey, ServerCert: ep.ServerCert,
		Pid: int32(ep.Pid),
	}, nil
}

// transportMessages returns fresh request and reply messages for a full
// method name ("/service/Method") of the Transport or Collective service;
// any other method is refused.
func transportMessages(method string) (proto.Message, proto.Message, error) {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok || (svc != transportService && svc != collectiveService) || !strings.HasPrefix(method, "/") {
		return nil, nil, status.Errorf(codes.InvalidArgument, "method %q is not a method of %s or %s", method, transportService, collectiveService)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "%s service descriptor: %v", svc, err)
	}
	m := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name))
	if m == nil {
		return nil, nil, status.Errorf(codes.Unimplemented, "%s method %q does not exist", svc, name)
	}
	if m.IsStreamingClient() || m.IsStreamingServer() {
		return nil, nil, status.Errorf(codes.Unimplemented, "%s method %q streams; only unary calls are forwarded", svc, name)
	}
	in, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "%v", err)
	}
	out, err := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName())
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "%v", err)
	}
	return in.New().Interface(), out.New().Interface(), nil
}
