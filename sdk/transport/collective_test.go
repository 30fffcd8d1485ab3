package transport_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goray-dev/goray/sdk/transport"
)

// fakeCollective records requests and returns the error it is told to.
type fakeCollective struct {
	err  error
	last any
}

func (f *fakeCollective) CreateGroup(_ context.Context, r *transport.CreateGroupRequest) (*transport.CreateGroupResponse, error) {
	f.last = r
	if f.err != nil {
		return nil, f.err
	}
	return &transport.CreateGroupResponse{Epoch: "e1"}, nil
}

func (f *fakeCollective) DestroyGroup(_ context.Context, r *transport.DestroyGroupRequest) (*transport.DestroyGroupResponse, error) {
	f.last = r
	return nil, f.err
}

func (f *fakeCollective) AllReduce(_ context.Context, r *transport.AllReduceRequest) (*transport.AllReduceResponse, error) {
	f.last = r
	if r.Group == "panic" {
		panic("boom")
	}
	return nil, f.err
}

func (f *fakeCollective) Broadcast(_ context.Context, r *transport.BroadcastRequest) (*transport.BroadcastResponse, error) {
	f.last = r
	return nil, f.err
}

func (f *fakeCollective) AllGather(_ context.Context, r *transport.AllGatherRequest) (*transport.AllGatherResponse, error) {
	f.last = r
	return nil, f.err
}

func (f *fakeCollective) ReduceScatter(_ context.Context, r *transport.ReduceScatterRequest) (*transport.ReduceScatterResponse, error) {
	f.last = r
	return nil, f.err
}

func (f *fakeCollective) Barrier(ctx context.Context, r *transport.BarrierRequest) (*transport.BarrierResponse, error) {
	f.last = r
	if r.Group == "block" {
		<-ctx.Done()
		return nil, transport.ContextError(ctx)
	}
	return nil, f.err
}

// serveCollective serves impl (nil: no Collective service at all) over a
// unix socket and returns a client.
func serveCollective(t *testing.T, impl transport.Collective) transport.Collective {
	t.Helper()
	dir, err := os.MkdirTemp("", "gc")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	if impl != nil {
		transport.RegisterCollective(srv, impl)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-served
		_ = os.RemoveAll(dir)
	})
	return transport.NewCollectiveClient(conn)
}

func TestCollectiveOverGRPC(t *testing.T) {
	f := &fakeCollective{}
	c := serveCollective(t, f)
	ctx := context.Background()
	tn := transport.Tensor{DType: transport.Float32, Shape: []int64{2, 3}, Device: "cpu",
		Buffer: transport.Buffer{Segment: "goray-t-x", Offset: 64, Length: 24}}
	out := transport.Tensor{DType: transport.Float32, Shape: []int64{12}, Buffer: transport.Buffer{Segment: "goray-t-y", Length: 48}}

	res, err := c.CreateGroup(ctx, &transport.CreateGroupRequest{Group: "g", Rank: 1, WorldSize: 2, Members: []string{"a", "b"}, Timeout: 1500 * time.Millisecond})
	if err != nil || res.Epoch != "e1" {
		t.Fatalf("CreateGroup: %+v, %v", res, err)
	}
	if got := f.last.(*transport.CreateGroupRequest); got.Group != "g" || got.Rank != 1 || got.WorldSize != 2 ||
		!slices.Equal(got.Members, []string{"a", "b"}) || got.Timeout != 1500*time.Millisecond {
		t.Errorf("CreateGroup arrived as %+v", got)
	}
	calls := []struct {
		call func() error
		want any
	}{
		{func() error {
			_, err := c.DestroyGroup(ctx, &transport.DestroyGroupRequest{Group: "g", Rank: 1})
			return err
		},
			&transport.DestroyGroupRequest{Group: "g", Rank: 1}},
		{func() error {
			_, err := c.AllReduce(ctx, &transport.AllReduceRequest{Group: "g", Rank: 1, Tensor: tn, Op: transport.ReduceMax})
			return err
		}, &transport.AllReduceRequest{Group: "g", Rank: 1, Tensor: tn, Op: transport.ReduceMax}},
		{func() error {
			_, err := c.Broadcast(ctx, &transport.BroadcastRequest{Group: "g", Rank: 1, Tensor: tn, Root: 1})
			return err
		}, &transport.BroadcastRequest{Group: "g", Rank: 1, Tensor: tn, Root: 1}},
		{func() error {
			_, err := c.AllGather(ctx, &transport.AllGatherRequest{Group: "g", Rank: 1, Input: tn, Output: out})
			return err
		}, &transport.AllGatherRequest{Group: "g", Rank: 1, Input: tn, Output: out}},
		{func() error {
			_, err := c.ReduceScatter(ctx, &transport.ReduceScatterRequest{Group: "g", Rank: 1, Input: out, Output: tn, Op: transport.ReduceProduct})
			return err
		}, &transport.ReduceScatterRequest{Group: "g", Rank: 1, Input: out, Output: tn, Op: transport.ReduceProduct}},
		{func() error { _, err := c.Barrier(ctx, &transport.BarrierRequest{Group: "g", Rank: 1}); return err },
			&transport.BarrierRequest{Group: "g", Rank: 1}},
	}
	for _, tc := range calls {
		if err := tc.call(); err != nil {
			t.Errorf("%T: %v", tc.want, err)
		}
		if got, want := fmt.Sprintf("%+v", f.last), fmt.Sprintf("%+v", tc.want); got != want {
			t.Errorf("request arrived as %s, want %s", got, want)
		}
	}
}

func TestCollectiveErrorsOverGRPC(t *testing.T) {
	f := &fakeCollective{}
	c := serveCollective(t, f)
	ctx := context.Background()
	peer := &transport.CollectiveError{Group: "g", Rank: 0, Op: transport.OpAllReduce, FailedRank: 2,
		Err: fmt.Errorf("rank 2 disagrees: %w", errors.Join(transport.ErrRankFailed, transport.ErrBadMetadata))}
	cases := []struct {
		err        error
		want       []error
		notWant    []error
		failedRank int
	}{
		{peer, []error{transport.ErrRankFailed, transport.ErrBadMetadata}, []error{transport.ErrTimeout}, 2},
		{fmt.Errorf("x: %w", transport.ErrGroupNotFound), []error{transport.ErrGroupNotFound}, []error{transport.ErrRankFailed}, -1},
		{fmt.Errorf("x: %w", transport.ErrGroupExists), []error{transport.ErrGroupExists}, nil, -1},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), []error{transport.ErrTimeout, context.DeadlineExceeded}, nil, -1},
		{fmt.Errorf("x: %w", context.Canceled), []error{context.Canceled}, nil, -1},
		{fmt.Errorf("x: %w", transport.ErrNotSupported), []error{transport.ErrNotSupported}, nil, -1},
		{errors.New("plain"), nil, []error{transport.ErrRankFailed, transport.ErrBadMetadata}, -1},
	}
	for _, tc := range cases {
		f.err = tc.err
		_, err := c.AllReduce(ctx, &transport.AllReduceRequest{Group: "g", Rank: 0})
		var ce *transport.CollectiveError
		if !errors.As(err, &ce) || ce.Group != "g" || ce.Op != transport.OpAllReduce || ce.FailedRank != tc.failedRank {
			t.Errorf("%v came back as %#v (%v)", tc.err, ce, err)
			continue
		}
		for _, w := range tc.want {
			if !errors.Is(err, w) {
				t.Errorf("%v came back as %v, which does not match %v", tc.err, err, w)
			}
		}
		for _, w := range tc.notWant {
			if errors.Is(err, w) {
				t.Errorf("%v came back as %v, which matches %v", tc.err, err, w)
			}
		}
	}

	// A panic becomes an error; the server keeps serving.
	if _, err := c.AllReduce(ctx, &transport.AllReduceRequest{Group: "panic"}); err == nil {
		t.Error("a panicking AllReduce returned no error")
	}
	// Deadlines travel to the plugin.
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Barrier(dctx, &transport.BarrierRequest{Group: "block"}); !errors.Is(err, transport.ErrTimeout) {
		t.Errorf("blocked Barrier past its deadline: %v, want ErrTimeout", err)
	}

	// A plugin without the service: ErrNotSupported.
	none := serveCollective(t, nil)
	if _, err := none.Barrier(ctx, &transport.BarrierRequest{Group: "g"}); !errors.Is(err, transport.ErrNotSupported) {
		t.Errorf("Barrier on a plugin without Collective: %v, want ErrNotSupported", err)
	}
}

func TestCollectiveHelpers(t *testing.T) {
	for _, tc := range []struct {
		n, world int64
	}{{0, 3}, {1, 3}, {2, 3}, {10, 3}, {12, 4}, {7, 1}} {
		var next int64
		for r := range int(tc.world) {
			c, start := transport.ReduceScatterCount(tc.n, int(tc.world), r)
			if start != next {
				t.Errorf("ReduceScatterCount(%d, %d, %d): start %d, want %d", tc.n, tc.world, r, start, next)
			}
			if c < tc.n/tc.world || c > tc.n/tc.world+1 {
				t.Errorf("ReduceScatterCount(%d, %d, %d) = %d", tc.n, tc.world, r, c)
			}
			next += c
		}
		if next != tc.n {
			t.Errorf("parts of %d over %d ranks add up to %d", tc.n, tc.world, next)
		}
	}
	if c, s := transport.ReduceScatterCount(10, 3, 3); c != 0 || s != 0 {
		t.Errorf("rank outside the world: %d, %d", c, s)
	}
	if !transport.ReduceOp("").Valid() || transport.ReduceOp("").OrSum() != transport.ReduceSum || transport.ReduceOp("avg").Valid() {
		t.Error("ReduceOp validity")
	}
	for _, bad := range []string{"", string(make([]byte, transport.MaxGroupNameLen+1))} {
		if err := transport.ValidGroup(bad, 0, 1); !errors.Is(err, transport.ErrBadMetadata) {
			t.Errorf("ValidGroup(%.10q): %v", bad, err)
		}
	}
}
