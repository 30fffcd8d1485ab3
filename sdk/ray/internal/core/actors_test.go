package core

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeActorWorker serves an actor's calls over real gRPC on a unix socket:
// each call returns the worker's name. Replies can be held (calls stay
// under way) and streams cut while the worker lives on.
type fakeActorWorker struct {
	pb.UnimplementedCoreWorkerServer
	name string
	id   ids.ID
	path string
	srv  *grpc.Server

	mu    sync.Mutex
	calls int
	hold  chan struct{} // replies wait until it is closed (nil: none)
	cut   chan struct{} // closing it ends the streams open now

	specs []*pb.TaskSpec // the calls received, in order
}

func startFakeActorWorker(t *testing.T, dir, name string) *fakeActorWorker {
	t.Helper()
	w := &fakeActorWorker{name: name, id: ids.New(), path: filepath.Join(dir, name+".sock"), cut: make(chan struct{})}
	lis, err := net.Listen("unix", w.path)
	if err != nil {
		t.Fatal(err)
	}
	w.srv = grpc.NewServer(rpc.ServerOptions(nil)...)
	pb.RegisterCoreWorkerServer(w.srv, w)
	go func() { _ = w.srv.Serve(lis) }()
	t.Cleanup(w.srv.Stop)
	return w
}

func (w *fakeActorWorker) addr() *pb.Address {
	return &pb.Address{WorkerId: w.id.Bytes(), UnixPath: w.path}
}

func (w *fakeActorWorker) PushTasks(st pb.CoreWorker_PushTasksServer) error {
	w.mu.Lock()
	cut := w.cut
	w.mu.Unlock()
	reqs := make(chan *pb.TaskRequest)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				close(reqs)
				return
			}
			select {
			case reqs <- r:
			case <-st.Context().Done():
				return
			}
		}
	}()
	for {
		select {
		case <-cut:
			return status.Error(codes.Unavailable, "connection reset")
		case r, ok := <-reqs:
			if !ok {
				return nil
			}
			w.mu.Lock()
			w.calls++
			w.specs = append(w.specs, r.Spec)
			hold := w.hold
			w.mu.Unlock()
			if hold != nil {
				select {
				case <-hold:
				case <-cut:
					return status.Error(codes.Unavailable, "connection reset")
				}
			}
			if err := st.Send(&pb.TaskReply{TaskId: r.Spec.TaskId, Ret: &pb.ReturnObject{
				ObjectId: r.Spec.ReturnId, Metadata: codec.FormatRaw.Meta(), Data: []byte(w.name),
			}}); err != nil {
				return err
			}
		}
	}
}

func (w *fakeActorWorker) ListOwned(context.Context, *pb.ListOwnedRequest) (*pb.ListOwnedReply, error) {
	return &pb.ListOwnedReply{Owner: w.addr()}, nil
}

// holdReplies makes calls stay under way until the returned func runs.
func (w *fakeActorWorker) holdReplies() (release func()) {
	ch := make(chan struct{})
	w.mu.Lock()
	w.hold = ch
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		w.hold = nil
		w.mu.Unlock()
		close(ch)
	}
}

// cutStreams ends the streams open now; the worker lives on.
func (w *fakeActorWorker) cutStreams() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.cut)
	w.cut = make(chan struct{})
}

func (w *fakeActorWorker) callCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}

// newActorTestWorker returns a driver-like core worker whose only cluster
// service is a real GCS (no raylet): enough to call actors it does not own.
func newActorTestWorker(t *testing.T, gcsPath string) *CoreWorker {
	t.Helper()
	cw := &CoreWorker{log: hclog.NewNullLogger(), id: ids.New(), idgen: ids.NewGenerator(), jobID: ids.New(),
		conns: map[string]*grpc.ClientConn{}, connOf: map[string]string{}, closed: make(chan struct{}), ownsKick: make(chan struct{}, 1)}
	cw.addr = &pb.Address{WorkerId: cw.id.Bytes(), UnixPath: "/nonexistent/driver.sock"}
	cw.ctx, cw.cancel = context.WithCancel(context.Background())
	cw.objects = newObjectTable(cw)
	cw.submitter = newSubmitter(cw)
	cw.actors = newActorManager(cw)
	cw.exec = newExecutor(cw)
	gc, err := dialGCS(gcsPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	cw.gcs = pb.NewGcsClient(gc)
	t.Cleanup(func() {
		cw.cancel()
		cw.actors.close()
		_ = gc.Close()
		cw.connsMu.Lock()
		for _, c := range cw.conns {
			_ = c.Close()
		}
		cw.connsMu.Unlock()
	})
	return cw
}

// TestActorClientFollowsTheGCS: a caller's view of an actor changes when,
// and only when, the GCS's does — not when its stream breaks — and a
// stream that broke while the worker lives on is replaced.
func TestActorClientFollowsTheGCS(t *testing.T) {
	dir, gpath := serveTestGCS(t)
	cw := newActorTestWorker(t, gpath)
	gc := cw.gcs
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// newActor registers a restartable actor alive on w (the owner's part,
	// played by the test).
	newActor := func(t *testing.T, w *fakeActorWorker) ActorRef {
		t.Helper()
		ref := ActorRef{ID: ids.New(), Class: "Fake"}
		if _, err := gc.RegisterActor(ctx, &pb.RegisterActorRequest{Actor: &pb.ActorInfo{ActorId: ref.ID.Bytes(), JobId: cw.jobID.Bytes(), ClassName: "Fake", MaxRestarts: -1}}); err != nil {
			t.Fatal(err)
		}
		aliveOn(t, gc, ref, w)
		return ref
	}
	call := func(ref ActorRef) *Handle { return cw.SubmitActorTask(ctx, ref, "m", nil, TaskOptions{}) }
	answer := func(t *testing.T, h *Handle) (string, error) {
		t.Helper()
		v, err := cw.Get(ctx, h)
		if err != nil {
			return "", err
		}
		return string(v.Data), nil
	}
	wantAnswer := func(t *testing.T, h *Handle, want string) {
		t.Helper()
		if got, err := answer(t, h); err != nil || got != want {
			t.Fatalf("call answered %q, %v; want %q", got, err, want)
		}
	}
	wantErr := func(t *testing.T, h *Handle, want error) {
		t.Helper()
		if got, err := answer(t, h); !errors.Is(err, want) {
			t.Fatalf("call answered %q, %v; want an error matching %v", got, err, want)
		}
	}
	// wantPending checks that h is still not answered a while after the
	// event (longer than the first probe of a suspended client).
	wantPending := func(t *testing.T, h *Handle) {
		t.Helper()
		sctx, scancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer scancel()
		if _, err := cw.Get(sctx, h); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrGetTimeout) {
			t.Fatalf("call decided before the GCS: %v", err)
		}
	}
	failWorker := func(t *testing.T, w *fakeActorWorker) {
		t.Helper()
		if _, err := gc.ReportWorkerFailure(ctx, &pb.ReportWorkerFailureRequest{WorkerId: w.id.Bytes(), Reason: "node died"}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("stream breaks, worker lives: reconnects", func(t *testing.T) {
		w1 := startFakeActorWorker(t, dir, "w1a")
		ref := newActor(t, w1)
		wantAnswer(t, call(ref), "w1a")
		release := w1.holdReplies()
		under := call(ref)
		waitUntil(t, "the call to reach the worker", func() bool { return w1.callCount() == 2 })
		w1.cutStreams()
		release()
		wantErr(t, under, ErrActorUnavailable)
		wantAnswer(t, call(ref), "w1a")
	})
	t.Run("worker gone: calls wait for the GCS, then go to the new instance", func(t *testing.T) {
		w1, w2 := startFakeActorWorker(t, dir, "w1b"), startFakeActorWorker(t, dir, "w2b")
		ref := newActor(t, w1)
		wantAnswer(t, call(ref), "w1b")
		w1.holdReplies()
		under := call(ref)
		waitUntil(t, "the call to reach the worker", func() bool { return w1.callCount() == 2 })
		w1.srv.Stop()
		waitUntil(t, "the client to see the stream end", func() bool { return suspended(cw, ref) })
		later := call(ref)
		wantPending(t, under)
		wantPending(t, later)
		failWorker(t, w1)
		wantErr(t, under, ErrActorUnavailable)
		aliveOn(t, gc, ref, w2)
		wantAnswer(t, later, "w2b")
		wantAnswer(t, call(ref), "w2b")
	})
	t.Run("frozen node: restarted elsewhere while the stream is fine", func(t *testing.T) {
		w1, w2 := startFakeActorWorker(t, dir, "w1c"), startFakeActorWorker(t, dir, "w2c")
		ref := newActor(t, w1)
		wantAnswer(t, call(ref), "w1c")
		w1.holdReplies()
		under := call(ref)
		waitUntil(t, "the call to reach the worker", func() bool { return w1.callCount() == 2 })
		failWorker(t, w1)
		wantErr(t, under, ErrActorUnavailable)
		later := call(ref)
		aliveOn(t, gc, ref, w2)
		wantAnswer(t, later, "w2c")
		wantAnswer(t, call(ref), "w2c")
		if n := w1.callCount(); n != 2 {
			t.Fatalf("the old instance got %d calls, want none after the restart", n-2)
		}
	})
	t.Run("dead in the GCS while the stream is fine", func(t *testing.T) {
		w1 := startFakeActorWorker(t, dir, "w1d")
		ref := newActor(t, w1)
		wantAnswer(t, call(ref), "w1d")
		w1.holdReplies()
		under := call(ref)
		waitUntil(t, "the call to reach the worker", func() bool { return w1.callCount() == 2 })
		if _, err := gc.UpdateActor(ctx, &pb.UpdateActorRequest{Actor: &pb.ActorInfo{ActorId: ref.ID.Bytes(), State: pb.ActorState_ACTOR_STATE_DEAD, DeathReason: "killed by ray.Kill"}}); err != nil {
			t.Fatal(err)
		}
		wantErr(t, under, ErrActorDied)
		wantErr(t, call(ref), ErrActorDied)
	})
}

// suspended reports whether cw's client of ref lost its stream and waits
// for the GCS: neither alive nor dead.
func suspended(cw *CoreWorker, ref ActorRef) bool {
	cw.actors.mu.Lock()
	c := cw.actors.clients[ref.ID]
	cw.actors.mu.Unlock()
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.alive && c.dead == nil && c.addr != nil
}

func aliveOn(t *testing.T, gc pb.GcsClient, ref ActorRef, w *fakeActorWorker) {
	t.Helper()
	if _, err := gc.UpdateActor(context.Background(), &pb.UpdateActorRequest{Actor: &pb.ActorInfo{ActorId: ref.ID.Bytes(), State: pb.ActorState_ACTOR_STATE_ALIVE, Address: w.addr()}}); err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond until it holds, for at most 10 seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitfor.Cond(t, waitfor.Generous, what, cond)
}

// frozenableRaylet grants every lease at once, or (frozen) answers nothing, like
// the raylet of a stopped node whose socket still accepts connections.
type frozenableRaylet struct {
	pb.UnimplementedRayletServer
	frozen bool
	asked  chan struct{} // gets a value per request
}

func (r *frozenableRaylet) RequestWorkerLease(ctx context.Context, req *pb.LeaseRequest) (*pb.LeaseReply, error) {
	r.asked <- struct{}{}
	if r.frozen {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &pb.LeaseReply{LeaseId: ids.New().Bytes(), Worker: &pb.Address{WorkerId: ids.New().Bytes()}}, nil
}

func serveFrozenableRaylet(t *testing.T, network, addr string, r *frozenableRaylet) string {
	t.Helper()
	lis, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(rpc.ServerOptions(nil)...)
	pb.RegisterRayletServer(s, r)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestLeaseLeavesANodeReportedDead: a lease request held by another node's
// raylet that answers nothing (its node frozen) goes back to the local
// raylet once that node is reported dead, instead of waiting for ever.
func TestLeaseLeavesANodeReportedDead(t *testing.T) {
	dir, err := os.MkdirTemp("", "gc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	local := &frozenableRaylet{asked: make(chan struct{}, 10)}
	frozen := &frozenableRaylet{frozen: true, asked: make(chan struct{}, 10)}
	localPath := serveFrozenableRaylet(t, "unix", filepath.Join(dir, "raylet.sock"), local)
	frozenAddr := serveFrozenableRaylet(t, "tcp", "127.0.0.1:0", frozen)

	cw := newTestWorker(t)
	cw.log = hclog.NewNullLogger()
	cw.conns, cw.connOf = map[string]*grpc.ClientConn{}, map[string]string{}
	cw.nodeID = ids.New()
	lc, err := rpc.Dial(localPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	cw.raylet = pb.NewRayletClient(lc)
	t.Cleanup(func() {
		for _, c := range cw.conns {
			_ = c.Close()
		}
	})
	node := ids.New()
	cw.nodeDir.nodes = map[ids.ID]*pb.NodeInfo{node: {NodeId: node.Bytes(), State: "ALIVE", RayletTcp: frozenAddr}}

	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	type result struct {
		g   *grantedLease
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := cw.leaseWorker(ctx, &pb.LeaseRequest{RequestId: ids.New().Bytes()}, node)
		done <- result{g, err}
	}()
	select {
	case <-frozen.asked:
	case <-ctx.Done():
		t.Fatal("the request never reached the frozen node")
	}
	select {
	case r := <-done:
		t.Fatalf("the request to the frozen node ended before its node was reported dead: %v, %v", r.g, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	cw.markNodeDead(node, "missed 5 health checks")
	r := <-done
	if r.err != nil || r.g.node != cw.nodeID {
		t.Fatalf("lease after the node was reported dead: %+v, %v; want one from the local raylet", r.g, r.err)
	}
	if len(local.asked) != 1 {
		t.Fatalf("the local raylet was asked %d times, want once", len(local.asked))
	}
}

// TestActorOwnerIsNotIdle: a process that created an actor (not detached)
// that is not dead reports that it owns something, so its raylet does not
// reap it as an idle worker: the raylets where its actors run kill them
// when it dies (as Ray ties an actor to its owner). A detached actor's
// creator, or one whose actors are dead, owns nothing.
func TestActorOwnerIsNotIdle(t *testing.T) {
	_, gpath := serveTestGCS(t)
	cw := newActorTestWorker(t, gpath)
	if cw.objects.ownsAny() {
		t.Fatal("a fresh worker owns something")
	}
	add := func(detached bool) *actorClient {
		c := &actorClient{m: cw.actors, ref: ActorRef{ID: ids.New()}, ready: make(chan struct{}), inflight: map[ids.ID]*taskRecord{}, owner: true, detached: detached}
		cw.actors.mu.Lock()
		cw.actors.clients[c.ref.ID] = c
		cw.actors.mu.Unlock()
		return c
	}
	d := add(true)
	if cw.objects.ownsAny() {
		t.Fatal("the creator of a detached actor owns it")
	}
	c := add(false)
	if !cw.objects.ownsAny() {
		t.Fatal("the creator of a live actor owns nothing")
	}
	c.setDead(errors.New("killed"))
	d.setDead(errors.New("killed"))
	if cw.objects.ownsAny() {
		t.Fatal("the creator of dead actors still owns something")
	}
}
