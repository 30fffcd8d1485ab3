package core

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/objstore"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// storeRaylet is the part of a raylet these tests need, over a real
// object store: pulls answer what pull says (per source node), creates,
// reads and releases go to the store. Other methods panic (nil embedded
// interface).
type storeRaylet struct {
	pb.RayletClient
	store *objstore.Store

	mu      sync.Mutex
	pulls   map[ids.ID]int // pulls asked for, per source node
	pull    func(node ids.ID, n int) error
	creates []*pb.CreateObjectRequest
}

func (r *storeRaylet) PullObject(ctx context.Context, in *pb.PullObjectRequest, _ ...grpc.CallOption) (*pb.PullObjectReply, error) {
	node := ids.MustFromBytes(in.NodeId)
	r.mu.Lock()
	if r.pulls == nil {
		r.pulls = map[ids.ID]int{}
	}
	r.pulls[node]++
	n := r.pulls[node]
	r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return &pb.PullObjectReply{}, r.pull(node, n)
}

func (r *storeRaylet) pullsFrom(node ids.ID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pulls[node]
}

func (r *storeRaylet) CreateObject(ctx context.Context, in *pb.CreateObjectRequest, _ ...grpc.CallOption) (*pb.CreateObjectReply, error) {
	r.mu.Lock()
	r.creates = append(r.creates, in)
	r.mu.Unlock()
	oid, _ := ids.ObjectIDFromBytes(in.ObjectId)
	off, err := r.store.Create(oid, in.DataSize, in.Metadata, ids.MustFromBytes(in.CreatorId))
	if errors.Is(err, objstore.ErrObjectExists) {
		return nil, status.Error(codes.AlreadyExists, err.Error())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.CreateObjectReply{Offset: off}, nil
}

func (r *storeRaylet) SealObject(ctx context.Context, in *pb.SealObjectRequest, _ ...grpc.CallOption) (*pb.SealObjectReply, error) {
	oid, _ := ids.ObjectIDFromBytes(in.ObjectId)
	r.mu.Lock()
	creator := ids.MustFromBytes(r.creates[len(r.creates)-1].CreatorId)
	r.mu.Unlock()
	return &pb.SealObjectReply{}, r.store.Seal(oid, creator, in.Release)
}

func (r *storeRaylet) GetObjects(ctx context.Context, in *pb.GetObjectsRequest, _ ...grpc.CallOption) (*pb.GetObjectsReply, error) {
	var oids []ids.ObjectID
	for _, b := range in.ObjectIds {
		oid, _ := ids.ObjectIDFromBytes(b)
		oids = append(oids, oid)
	}
	rep := &pb.GetObjectsReply{}
	for _, e := range r.store.Get(oids, ids.MustFromBytes(in.ClientId)) {
		rep.Objects = append(rep.Objects, &pb.StoreObject{ObjectId: e.ID.Bytes(), Found: e.Found, Offset: e.Offset, DataSize: e.DataSize, Metadata: e.Metadata})
	}
	return rep, nil
}

func (r *storeRaylet) ReleaseObjects(ctx context.Context, in *pb.ReleaseObjectsRequest, _ ...grpc.CallOption) (*pb.ReleaseObjectsReply, error) {
	var oids []ids.ObjectID
	for _, b := range in.ObjectIds {
		oid, _ := ids.ObjectIDFromBytes(b)
		oids = append(oids, oid)
	}
	r.store.Release(oids, ids.MustFromBytes(in.ClientId))
	return &pb.ReleaseObjectsReply{}, nil
}

// newStoreWorker returns a test worker of a node whose raylet is r over a
// real object store, mapped as a worker maps it.
func newStoreWorker(t *testing.T, pull func(node ids.ID, n int) error) (*CoreWorker, *storeRaylet) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := objstore.New(objstore.Config{Capacity: 8 << 20, SocketPath: filepath.Join(dir, "store.sock")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := objstore.Map(context.Background(), filepath.Join(dir, "store.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	cw := newTestWorker(t)
	cw.log = hclog.NewNullLogger()
	cw.nodeID = ids.New()
	cw.addr.NodeId = cw.nodeID.Bytes()
	cw.store = m
	cw.inlineLimit = 100
	r := &storeRaylet{store: st, pull: pull}
	cw.raylet = r
	return cw, r
}

// ownedOn makes an owned store object of cw whose primary copy is on node
// and whose copies may be on copies.
func ownedOn(cw *CoreWorker, node ids.ID, copies ...ids.ID) ids.ObjectID {
	id := ids.ObjectIDFor(cw.idgen.Next(), 1)
	cw.objects.newOwned(id, nil, 1)
	ret := storeRet(id)
	ret.NodeId = node.Bytes()
	cw.objects.complete(id, ret, nil, false)
	for _, c := range copies {
		cw.objects.addCopyNode(id, c)
	}
	return id
}

var (
	errUnreachable = status.Error(codes.Unavailable, "connection refused")
	errNodeDead    = status.Error(codes.FailedPrecondition, "node is dead (test)")
)

// TestPullRetriesUntilNodeDead: a pull that fails while its node is not
// reported dead is tried again (the node may be slow, frozen or cut off),
// until it succeeds, the node is reported dead (then the copy is lost,
// saying why) or the caller gives up; a node the raylet finds dead, or
// one that does not hold the object, is a loss at once. Before, the first
// failure was ErrObjectLost.
func TestPullRetriesUntilNodeDead(t *testing.T) {
	tests := []struct {
		name string
		// pull answers the n-th pull; cw is the worker (to report deaths,
		// or end the caller's context through cancel).
		pull      func(cw *CoreWorker, cancel context.CancelFunc, node ids.ID, n int) error
		wantErr   error  // nil: the pull succeeds
		wantMsg   string // in the error
		wantPulls int    // pulls asked for at least
	}{
		{"unreachable, then back", func(cw *CoreWorker, _ context.CancelFunc, _ ids.ID, n int) error {
			if n < 4 {
				return errUnreachable
			}
			return nil
		}, nil, "", 4},
		{"unreachable until reported dead", func(cw *CoreWorker, _ context.CancelFunc, node ids.ID, n int) error {
			if n == 3 {
				cw.markNodeDead(node, "health checks failed")
			}
			return errUnreachable
		}, ErrObjectLost, "died (health checks failed)", 3},
		{"found dead by the raylet", func(*CoreWorker, context.CancelFunc, ids.ID, int) error { return errNodeDead }, ErrObjectLost, "node is dead (test)", 1},
		{"not held by its live node", func(*CoreWorker, context.CancelFunc, ids.ID, int) error {
			return status.Error(codes.NotFound, "object is not in the store")
		}, ErrObjectLost, "does not hold it", 1},
		{"the caller gives up", func(_ *CoreWorker, cancel context.CancelFunc, _ ids.ID, n int) error {
			if n == 3 {
				cancel()
			}
			return errUnreachable
		}, context.Canceled, "", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var cw *CoreWorker
			cw, r := newStoreWorker(t, func(node ids.ID, n int) error { return tt.pull(cw, cancel, node, n) })
			node := ids.New()
			id := ids.ObjectIDFor(cw.idgen.Next(), 1)
			err := cw.pullObject(ctx, id, node, otherOwner())
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("pull: %v, want success", err)
			case tt.wantErr != nil && (!errors.Is(err, tt.wantErr) && status.Code(err) != codes.Canceled):
				t.Fatalf("pull: %v, want %v", err, tt.wantErr)
			case tt.wantMsg != "" && !strings.Contains(err.Error(), tt.wantMsg):
				t.Fatalf("pull: %v, want it to say %q", err, tt.wantMsg)
			}
			if got := r.pullsFrom(node); got < tt.wantPulls {
				t.Fatalf("%d pulls, want at least %d", got, tt.wantPulls)
			}
		})
	}
}

// putCopy stores data as object id in r's store, sealed: a copy pulled
// here.
func putCopy(t *testing.T, r *storeRaylet, id ids.ObjectID, data []byte) {
	t.Helper()
	creator := ids.New()
	off, err := r.store.Create(id, int64(len(data)), codec.FormatRaw.Meta(), creator)
	if err != nil {
		t.Fatal(err)
	}
	copy(r.store.Data(off, int64(len(data))), data)
	if err := r.store.Seal(id, creator, true); err != nil {
		t.Fatal(err)
	}
}

// TestLostObjectTakesLiveCopy: the owner of an object whose primary copy
// died with its node first uses a live copy — one in its own node's store,
// else one pulled from a node recorded as holding a copy — makes it the
// primary copy here (a create that finds it) and records this node as the
// object's location; no task is re-run. Only when no copy is left does it
// fall back to lineage (here: no task to re-run, so lost, saying why).
// Before, it went straight to re-running the task.
func TestLostObjectTakesLiveCopy(t *testing.T) {
	data := bytes.Repeat([]byte("copy"), 64)
	tests := []struct {
		name      string
		copyHere  bool // a copy is in this node's store already
		copyAlive bool // the other copy's node is alive
		wantFrom  bool // pulled from the copy's node
		wantLost  bool
	}{
		{"copy in this node's store", true, true, false, false},
		{"copy on another live node", false, true, true, false},
		{"copy's node dead too", false, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r *storeRaylet
			var id ids.ObjectID
			dead, other := ids.New(), ids.New()
			cw, r := newStoreWorker(t, func(node ids.ID, _ int) error {
				if node == dead {
					return errNodeDead
				}
				putCopy(t, r, id, data) // the pull lands the copy here
				return nil
			})
			id = ownedOn(cw, dead, other)
			cw.markNodeDead(dead, "killed")
			if !tt.copyAlive {
				cw.markNodeDead(other, "killed too")
			}
			if tt.copyHere {
				putCopy(t, r, id, data)
			}
			ctx := context.Background()
			ret, err := cw.recoverLost(ctx, id, &pb.ReturnObject{ObjectId: id.Bytes(), InStore: true, NodeId: dead.Bytes()})
			if tt.wantLost {
				if !errors.Is(err, ErrObjectLost) || !strings.Contains(err.Error(), "killed") {
					t.Fatalf("recover: %v, want ErrObjectLost saying the node was killed", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("recover: %v", err)
			}
			if string(ret.NodeId) != string(cw.nodeID.Bytes()) {
				t.Fatalf("the object is recorded on node %x, want this node", ret.NodeId)
			}
			if got := r.pullsFrom(other) > 0; got != tt.wantFrom {
				t.Fatalf("pulled from the copy's node: %v, want %v", got, tt.wantFrom)
			}
			var claimed bool
			for _, c := range r.creates {
				claimed = claimed || (string(c.ObjectId) == string(id.Bytes()) && string(c.Owner.GetWorkerId()) == string(cw.id.Bytes()))
			}
			if !claimed {
				t.Fatal("the copy here was not claimed as the primary copy (no create by its owner)")
			}
			v, err := cw.materialize(ctx, ret, cw.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Release()
			if !bytes.Equal(v.Data, data) {
				t.Fatal("the recovered object reads other bytes")
			}
		})
	}
}

// TestResultExistingCopyIsTheResult: a task's result whose object exists
// already in the node's store (a re-run landing where a copy was pulled)
// is that copy: storeValue returns its record instead of failing with
// AlreadyExists, and keeps the copy even when the bytes differ (readers
// may have read it). Before, the re-run failed and its owner recorded the
// object as lost for good.
func TestResultExistingCopyIsTheResult(t *testing.T) {
	data := bytes.Repeat([]byte("result"), 100)
	tests := []struct {
		name     string
		existing []byte
	}{
		{"same bytes", data},
		{"other bytes", bytes.Repeat([]byte("RESULT"), 50)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cw, r := newStoreWorker(t, nil)
			id := ids.ObjectIDFor(ids.New(), 1)
			putCopy(t, r, id, tt.existing)
			ret, err := cw.storeValue(context.Background(), id, otherOwner(), codec.FormatRaw, data, true)
			if err != nil {
				t.Fatalf("storeValue: %v", err)
			}
			if !ret.InStore || string(ret.NodeId) != string(cw.nodeID.Bytes()) || ret.Size != int64(len(tt.existing)) {
				t.Fatalf("result record %v, want the existing copy on this node (%d bytes)", ret, len(tt.existing))
			}
			v, err := cw.materialize(context.Background(), ret, cw.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Release()
			if !bytes.Equal(v.Data, tt.existing) {
				t.Fatal("the result reads other bytes than the copy kept")
			}
		})
	}
}
