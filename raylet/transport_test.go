package raylet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/goray-dev/goray/internal/plugindial"
	collectivev1 "github.com/goray-dev/goray/internal/proto/collectivev1"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	transportv1 "github.com/goray-dev/goray/internal/proto/transportv1"
)

// TestTransportMessagesAcceptsBothServices: every unary method of the
// Transport and Collective services is forwarded with its own message
// types; anything else is refused with a clear code.
func TestTransportMessagesAcceptsBothServices(t *testing.T) {
	for _, svc := range []string{transportService, collectiveService} {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
		ms := d.(protoreflect.ServiceDescriptor).Methods()
		if ms.Len() == 0 {
			t.Fatalf("%s has no methods", svc)
		}
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			in, out, err := transportMessages("/" + svc + "/" + string(m.Name()))
			if err != nil {
				t.Errorf("%s/%s refused: %v", svc, m.Name(), err)
				continue
			}
			if got := in.ProtoReflect().Descriptor().FullName(); got != m.Input().FullName() {
				t.Errorf("%s/%s request type %s, want %s", svc, m.Name(), got, m.Input().FullName())
			}
			if got := out.ProtoReflect().Descriptor().FullName(); got != m.Output().FullName() {
				t.Errorf("%s/%s reply type %s, want %s", svc, m.Name(), got, m.Output().FullName())
			}
		}
	}
	for _, c := range []struct {
		method string
		code   codes.Code
	}{
		{"/goray.v1.Raylet/GetNodeStats", codes.InvalidArgument},
		{"/goray.v1.Gcs/KVPut", codes.InvalidArgument},
		{"/goray.collective.v1.Collective", codes.InvalidArgument},
		{"goray.collective.v1.Collective/AllReduce", codes.InvalidArgument},
		{"", codes.InvalidArgument},
		{"/goray.collective.v1.CollectiveX/AllReduce", codes.InvalidArgument},
		{"/goray.collective.v1.Collective/AllReduceX", codes.Unimplemented},
		{"/goray.transport.v1.Transport/Nope", codes.Unimplemented},
	} {
		if _, _, err := transportMessages(c.method); status.Code(err) != c.code {
			t.Errorf("transportMessages(%q) = %v, want code %v", c.method, err, c.code)
		}
	}
}

// fakeConn is a plugin connection that records calls and answers with a
// canned reply or error.
type fakeConn struct {
	method string
	in     proto.Message
	reply  func(out any)
	err    error
}

func (f *fakeConn) Invoke(_ context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	f.method, f.in = method, args.(proto.Message)
	if f.err != nil {
		return f.err
	}
	if f.reply != nil {
		f.reply(reply)
	}
	return nil
}

func (f *fakeConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("no streams")
}

func TestTransportInvokeForwardsCollectiveCalls(t *testing.T) {
	ctx := context.Background()
	conn := &fakeConn{reply: func(out any) { out.(*collectivev1.CreateGroupResponse).Epoch = "e1" }}
	var asked string
	r := &Raylet{cfg: Config{Transports: func(name string) (grpc.ClientConnInterface, error) {
		asked = name
		return conn, nil
	}}}
	payload, _ := proto.Marshal(&collectivev1.CreateGroupRequest{Group: "g", Rank: 1, WorldSize: 2, Members: []string{"a", "b"}})
	rep, err := r.TransportInvoke(ctx, &gorayv1.TransportInvokeRequest{Name: "collective", Method: "/goray.collective.v1.Collective/CreateGroup", Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	if asked != "collective" || conn.method != "/goray.collective.v1.Collective/CreateGroup" {
		t.Fatalf("forwarded to %q method %q", asked, conn.method)
	}
	if in := conn.in.(*collectivev1.CreateGroupRequest); in.GetGroup() != "g" || in.GetRank() != 1 || len(in.GetMembers()) != 2 {
		t.Fatalf("plugin got %v", in)
	}
	var out collectivev1.CreateGroupResponse
	if err := proto.Unmarshal(rep.GetPayload(), &out); err != nil || out.GetEpoch() != "e1" {
		t.Fatalf("reply %v, %v", &out, err)
	}

	// The plugin's error comes back unchanged, details included.
	st, _ := status.New(codes.Aborted, "rank 2 failed").WithDetails(&collectivev1.ErrorInfo{Kind: "rank_failed", FailedRank: 2})
	conn.err = st.Err()
	payload, _ = proto.Marshal(&collectivev1.AllReduceRequest{Group: "g"})
	_, err = r.TransportInvoke(ctx, &gorayv1.TransportInvokeRequest{Name: "collective", Method: "/goray.collective.v1.Collective/AllReduce", Payload: payload})
	got, _ := status.FromError(err)
	if got.Code() != codes.Aborted || len(got.Details()) != 1 {
		t.Fatalf("error %v, want the plugin's status with its detail", err)
	}

	// Transport methods still pass; bad payloads and other services do not.
	conn.err = nil
	conn.reply = func(out any) { out.(*transportv1.InfoResponse).Name = "collective" }
	if _, err := r.TransportInvoke(ctx, &gorayv1.TransportInvokeRequest{Name: "collective", Method: "/goray.transport.v1.Transport/Info"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.TransportInvoke(ctx, &gorayv1.TransportInvokeRequest{Name: "collective", Method: "/goray.collective.v1.Collective/Barrier", Payload: []byte{0xff, 0xff}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad payload: %v", err)
	}
	if _, err := r.TransportInvoke(ctx, &gorayv1.TransportInvokeRequest{Name: "collective", Method: "/goray.v1.Raylet/ShutdownNode"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a raylet method through the proxy: %v", err)
	}
	none := &Raylet{}
	if _, err := none.TransportInvoke(ctx, &gorayv1.TransportInvokeRequest{Name: "collective", Method: "/goray.collective.v1.Collective/Barrier"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("node without plugins: %v", err)
	}
}

// TestTransportEndpoint: the endpoint of a local plugin is told on the
// raylet's unix socket only, never over TCP, and a plugin that is down or
// a node without plugins gets a clear status.
func TestTransportEndpoint(t *testing.T) {
	ep := plugindial.Endpoint{Network: "unix", Address: "/run/plugin.sock", ClientCert: []byte("c"), ClientKey: []byte("k"), ServerCert: []byte("s"), Pid: 42}
	h := newHarness(t, func(c *Config) {
		c.TransportEndpoints = func(name string) (plugindial.Endpoint, error) {
			if name != "shm" {
				return plugindial.Endpoint{}, fmt.Errorf("plugin transport %q is unavailable (restarting)", name)
			}
			return ep, nil
		}
	})
	ctx := t.Context()
	rep, err := h.cl.TransportEndpoint(ctx, &gorayv1.TransportEndpointRequest{Name: "shm"})
	if err != nil {
		t.Fatal(err)
	}
	got := plugindial.Endpoint{Network: rep.GetNetwork(), Address: rep.GetAddress(), ClientCert: rep.GetClientCert(),
		ClientKey: rep.GetClientKey(), ServerCert: rep.GetServerCert(), Pid: int(rep.GetPid())}
	if !reflect.DeepEqual(got, ep) {
		t.Errorf("endpoint %+v, want %+v", got, ep)
	}
	if _, err := h.cl.TransportEndpoint(ctx, &gorayv1.TransportEndpointRequest{Name: "down"}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "restarting") {
		t.Errorf("a plugin that is down: %v, want Unavailable saying why", err)
	}

	// The same raylet over TCP, as other nodes reach it: refused.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h.r.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	_, err = gorayv1.NewRayletClient(cc).TransportEndpoint(ctx, &gorayv1.TransportEndpointRequest{Name: "shm"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "unix socket") {
		t.Errorf("over TCP: %v, want PermissionDenied naming the unix socket", err)
	}

	none := newHarness(t, nil)
	if _, err := none.cl.TransportEndpoint(ctx, &gorayv1.TransportEndpointRequest{Name: "shm"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a node without plugins: %v, want FailedPrecondition", err)
	}
}
