package scale

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/auth"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
)

// TestHarnessRefusesStrangers: the harness's GCS and its simulated nodes'
// server go through the cluster token check like a real node's: a caller
// without the token, or with another, is refused; one with it is served.
func TestHarnessRefusesStrangers(t *testing.T) {
	creds, err := auth.New(auth.GenerateToken(), nil)
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := auth.New("not-the-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := startGCS(ctx, "127.0.0.1", creds, time.Second, 5, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	f, err := newFleet(2, g.Addr(), creds, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	call := func(addr string, c *auth.Credentials, gcs bool) error {
		cc, err := rpc.Dial(addr, c)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		if gcs {
			_, err = gorayv1.NewGcsClient(cc).GetAllNodes(ctx, &gorayv1.GetAllNodesRequest{})
		} else {
			_, err = gorayv1.NewRayletClient(cc).FreeObjects(ctx, &gorayv1.FreeObjectsRequest{})
		}
		return err
	}
	for name, srv := range map[string]struct {
		addr string
		gcs  bool
	}{"gcs": {g.Addr(), true}, "simulated node": {f.lis[0].Addr().String(), false}} {
		for who, c := range map[string]*auth.Credentials{"no token": nil, "wrong token": wrong} {
			if err := call(srv.addr, c, srv.gcs); status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s, %s: %v, want Unauthenticated", name, who, err)
			}
		}
		if err := call(srv.addr, creds, srv.gcs); status.Code(err) == codes.Unauthenticated {
			t.Errorf("%s refused the cluster token: %v", name, err)
		}
	}
}
