package scale

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/auth"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
)

// BenchmarkConnectionHeap measures what one goray gRPC connection costs
// in heap once a call went through it, both ends together (both are in
// this process): b.N connections made with internal/rpc's options (256 KiB
// read and write buffers on each end) to a server with its server options,
// the heap in use after garbage collection before and after, per
// connection (docs/scale.md, "What the harness cannot show").
func BenchmarkConnectionHeap(b *testing.B) {
	creds, err := auth.New(auth.GenerateToken(), nil)
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(rpc.ServerOptions(creds)...)
	gorayv1.RegisterRayletServer(srv, &simRaylet{f: &fleet{}})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	h0 := heapInUse()
	var ccs []*grpc.ClientConn
	for range b.N {
		cc, err := rpc.Dial(lis.Addr().String(), creds)
		if err != nil {
			b.Fatal(err)
		}
		ccs = append(ccs, cc)
		if _, err := gorayv1.NewRayletClient(cc).ReleaseUnusedBundles(context.Background(), &gorayv1.ReleaseUnusedBundlesRequest{}); err != nil {
			b.Fatal(err)
		}
	}
	h1 := heapInUse()
	b.ReportMetric(float64(h1-h0)/float64(b.N), "B/conn")
	for _, cc := range ccs {
		_ = cc.Close()
	}
}
