package transport

import (
	"context"
	"testing"

	"google.golang.org/grpc"
)

// withCollective is a Transport that also implements Collective.
type withCollective struct {
	Transport
	Collective
}

func (withCollective) Info(context.Context, *InfoRequest) (*InfoResponse, error) {
	return &InfoResponse{Name: "coll"}, nil
}

// TestServeRegistersCollective: Serve registers the Collective service next
// to Transport exactly when the transport implements it.
func TestServeRegistersCollective(t *testing.T) {
	for _, tc := range []struct {
		impl Transport
		want bool
	}{{withCollective{}, true}, {named{}, false}} {
		srv := grpc.NewServer()
		kindServer(tc.impl).APIVersions[APIVersion](srv)
		info := srv.GetServiceInfo()
		if _, ok := info["goray.transport.v1.Transport"]; !ok {
			t.Errorf("%T: Transport service not registered", tc.impl)
		}
		if _, ok := info[CollectiveService]; ok != tc.want {
			t.Errorf("%T: Collective service registered = %v, want %v", tc.impl, ok, tc.want)
		}
		srv.Stop()
	}
}
