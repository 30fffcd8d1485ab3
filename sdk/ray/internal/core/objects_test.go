package core

import (
	"context"
	"testing"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// newTestWorker returns a core worker with just enough state for the
// object table (no servers, no raylet).
func newTestWorker(t *testing.T) *CoreWorker {
	t.Helper()
	cw := &CoreWorker{id: ids.New(), idgen: ids.NewGenerator(), closed: make(chan struct{})}
	cw.addr = &pb.Address{WorkerId: cw.id.Bytes(), UnixPath: "/nonexistent/self.sock"}
	cw.ctx, cw.cancel = context.WithCancel(context.Background())
	t.Cleanup(cw.cancel)
	cw.objects = newObjectTable(cw)
	return cw
}

func otherOwner() *pb.Address {
	return &pb.Address{WorkerId: ids.New().Bytes(), UnixPath: "/nonexistent/owner.sock"}
}

func storeRet(id ids.ObjectID) *pb.ReturnObject {
	return &pb.ReturnObject{ObjectId: id.Bytes(), InStore: true, Size: 1 << 20}
}

func TestOwnedObjectFreedWhenLastReferenceGoes(t *testing.T) {
	tests := []struct {
		name string
		// hold adds references besides the creator's handle; drop removes them.
		hold, drop func(t *objectTable, id ids.ObjectID)
	}{
		{"handle only", func(*objectTable, ids.ObjectID) {}, func(*objectTable, ids.ObjectID) {}},
		{"submitted task",
			func(tb *objectTable, id ids.ObjectID) { tb.addSubmitted([]codec.RefInfo{{ID: id}}) },
			func(tb *objectTable, id ids.ObjectID) { tb.removeSubmitted([]codec.RefInfo{{ID: id}}) }},
		{"borrower",
			func(tb *objectTable, id ids.ObjectID) {
				tb.updateBorrowers(&pb.UpdateBorrowersRequest{Borrower: otherOwner(), Add: [][]byte{id.Bytes()}})
			},
			func(tb *objectTable, id ids.ObjectID) { tb.borrowerDiedAll() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cw := newTestWorker(t)
			tb := cw.objects
			id := ids.ObjectIDFor(cw.idgen.Next(), 0)
			tb.newOwned(id, nil, 1)
			tb.complete(id, storeRet(id), nil, false)
			tt.hold(tb, id)
			tb.removeLocal(id)
			if tt.name != "handle only" && tb.lookup(id) == nil {
				t.Fatal("object freed while still referenced")
			}
			tt.drop(tb, id)
			if tb.lookup(id) != nil {
				t.Fatal("object not freed after its last reference went")
			}
			if len(tb.frees) != 1 || tb.frees[0].id != id {
				t.Fatalf("store copy not queued for freeing: %v", tb.frees)
			}
			if _, err := cw.objects.readyChan(id); err == nil {
				t.Fatal("freed object still readable")
			}
		})
	}
}

// borrowerDiedAll drops every borrower (test helper).
func (t *objectTable) borrowerDiedAll() {
	t.mu.Lock()
	var ws [][]byte
	for _, o := range t.objs {
		for k := range o.borrowers {
			ws = append(ws, []byte(k))
		}
	}
	t.mu.Unlock()
	for _, w := range ws {
		t.borrowerDied(w)
	}
}

func TestPendingObjectNotFreedBeforeItIsDone(t *testing.T) {
	cw := newTestWorker(t)
	tb := cw.objects
	id := ids.ObjectIDFor(cw.idgen.Next(), 1)
	tb.newOwned(id, nil, 1)
	tb.removeLocal(id)
	if tb.lookup(id) == nil {
		t.Fatal("pending object dropped before its task finished")
	}
	tb.complete(id, storeRet(id), nil, false)
	if tb.lookup(id) != nil {
		t.Fatal("unreferenced object kept after its task finished")
	}
	if len(tb.frees) != 1 {
		t.Fatalf("store copy of an unreferenced result not freed: %v", tb.frees)
	}
}

func TestContainedReferencesLiveWithTheirOuterObject(t *testing.T) {
	cw := newTestWorker(t)
	tb := cw.objects
	inner := ids.ObjectIDFor(cw.idgen.Next(), 0)
	tb.newOwned(inner, nil, 1)
	tb.complete(inner, storeRet(inner), nil, false)

	outer := ids.ObjectIDFor(cw.idgen.Next(), 0)
	tb.newOwned(outer, nil, 1)
	ret := &pb.ReturnObject{ObjectId: outer.Bytes(), Nested: []*pb.ObjectRef{{ObjectId: inner.Bytes(), Owner: cw.addr}}}
	tb.complete(outer, ret, nil, false)

	tb.removeLocal(inner)
	if tb.lookup(inner) == nil {
		t.Fatal("inner object freed while the outer value holds it")
	}
	tb.removeLocal(outer)
	if tb.lookup(outer) != nil || tb.lookup(inner) != nil {
		t.Fatal("outer and inner objects not freed together")
	}
}

func TestBorrowedReferenceRegistersAndUnregisters(t *testing.T) {
	cw := newTestWorker(t)
	tb := cw.objects
	owner := otherOwner()
	id := ids.ObjectIDFor(ids.New(), 0)

	// A handle received and dropped before any flush never bothers the owner.
	tb.addLocal(id, owner)
	tb.removeLocal(id)
	if n := len(tb.adds[keyOf(owner)].ids); n != 0 {
		t.Fatalf("cancelled registration still queued: %d", n)
	}
	if tb.removes[keyOf(owner)] != nil {
		t.Fatal("removal queued for a borrow the owner never heard of")
	}

	// A registered borrow is removed when the last handle goes.
	tb.addLocal(id, owner)
	tb.addLocal(id, owner)
	tb.mu.Lock()
	o := tb.objs[id]
	o.pendingAdd, o.registered = false, true
	delete(tb.adds, keyOf(owner))
	tb.mu.Unlock()
	tb.removeLocal(id)
	if tb.lookup(id) == nil {
		t.Fatal("borrowed entry dropped while a handle remains")
	}
	tb.removeLocal(id)
	if tb.lookup(id) != nil {
		t.Fatal("borrowed entry kept after the last handle")
	}
	if b := tb.removes[keyOf(owner)]; b == nil || len(b.ids) != 1 || b.ids[0] != id {
		t.Fatalf("owner not told the borrow ended: %+v", b)
	}
}

func TestMissingObjectErrors(t *testing.T) {
	cw := newTestWorker(t)
	mine := ids.ObjectIDFor(cw.idgen.Next(), 0)
	if _, err := cw.objects.readyChan(mine); !isKind(err, ErrObjectFreed) {
		t.Fatalf("own unknown object: want ErrObjectFreed, got %v", err)
	}
	theirs := ids.ObjectIDFor(ids.New(), 0)
	if _, err := cw.objects.readyChan(theirs); !isKind(err, ErrObjectUnknown) {
		t.Fatalf("foreign unknown object: want ErrObjectUnknown, got %v", err)
	}
}

func isKind(err, kind error) bool {
	oe, ok := err.(*ObjectError)
	return ok && oe.Kind == kind
}
