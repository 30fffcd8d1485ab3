package raylet

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/waitfor"
)

// TestObjectCopiesService: FreeObjectCopies answers only callers with the
// cluster token, refuses bad ids naming where they are, and with the
// token frees the objects in this node's store.
func TestObjectCopiesService(t *testing.T) {
	dir, err := os.MkdirTemp("", "rl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store := newFakeStore()
	r, err := New(Config{Store: store, SessionDir: dir, SocketPath: filepath.Join(dir, "r.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	creds, err := auth.New("the-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(rpc.ServerOptions(creds)...)
	r.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	defer g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	client := func(c *auth.Credentials) gorayv1.ObjectCopiesClient {
		cc, err := rpc.Dial(lis.Addr().String(), c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return gorayv1.NewObjectCopiesClient(cc)
	}
	wrong, err := auth.New("not-the-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	oid := ids.ObjectIDFor(ids.New(), 1)
	if _, err := store.Create(oid, 8, nil, ids.New()); err != nil {
		t.Fatal(err)
	}
	if err := store.Seal(oid, ids.Nil, true); err != nil {
		t.Fatal(err)
	}
	free := &gorayv1.FreeObjectCopiesRequest{Objects: []*gorayv1.ObjectCopyNodes{{ObjectId: oid.Bytes(), NodeIds: [][]byte{r.cfg.NodeID.Bytes()}}}}
	for name, c := range map[string]*auth.Credentials{"no token": nil, "wrong token": wrong} {
		if _, err := client(c).FreeObjectCopies(ctx, free); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", name, err)
		}
	}
	if !store.Contains(oid) {
		t.Fatal("a refused caller freed the object")
	}
	good := client(creds)
	for _, tt := range []struct {
		name  string
		req   *gorayv1.FreeObjectCopiesRequest
		where string
	}{
		{"short object id", &gorayv1.FreeObjectCopiesRequest{Objects: []*gorayv1.ObjectCopyNodes{{ObjectId: []byte{1}}}}, "objects[0].object_id"},
		{"short node id", &gorayv1.FreeObjectCopiesRequest{Objects: []*gorayv1.ObjectCopyNodes{{ObjectId: oid.Bytes(), NodeIds: [][]byte{{1, 2}}}}}, "objects[0].node_ids[0]"},
	} {
		_, err := good.FreeObjectCopies(ctx, tt.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.where) {
			t.Errorf("%s: %v, want InvalidArgument naming %s", tt.name, err, tt.where)
		}
	}
	if _, err := good.FreeObjectCopies(ctx, free); err != nil {
		t.Fatal(err)
	}
	if store.Contains(oid) {
		t.Error("the object is still in the store after FreeObjectCopies")
	}
}
