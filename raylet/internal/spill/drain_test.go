package spill

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/plugins/fs/fsstore"
	"github.com/goray-dev/goray/sdk/storage"
)

// kvGCS is the GCS's key-value store, in memory, failing puts while
// failPuts is set. Other methods panic (nil embedded interface).
type kvGCS struct {
	gorayv1.GcsClient

	mu       sync.Mutex
	kv       map[string][]byte
	failPuts bool
}

var errKVDown = errors.New("the GCS is down")

func (g *kvGCS) KVPut(_ context.Context, in *gorayv1.KVPutRequest, _ ...grpc.CallOption) (*gorayv1.KVPutReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failPuts {
		return nil, errKVDown
	}
	g.kv[in.GetNs()+"|"+in.GetKey()] = in.GetValue()
	return &gorayv1.KVPutReply{}, nil
}

func (g *kvGCS) KVGet(_ context.Context, in *gorayv1.KVGetRequest, _ ...grpc.CallOption) (*gorayv1.KVGetReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.kv[in.GetNs()+"|"+in.GetKey()]
	return &gorayv1.KVGetReply{Value: v, Found: ok}, nil
}

func (g *kvGCS) KVDel(_ context.Context, in *gorayv1.KVDelRequest, _ ...grpc.CallOption) (*gorayv1.KVDelReply, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.kv, in.GetNs()+"|"+in.GetKey())
	return &gorayv1.KVDelReply{}, nil
}

func (g *kvGCS) has(node ids.ID, oid ids.ObjectID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.kv[spillRecordNS+"|"+recordKey(node, oid)]
	return ok
}

func (g *kvGCS) setFailPuts(fail bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failPuts = fail
}

// sharedSpiller is a spiller of node spilling to dir as the shared
// storage "shared", recording in g.
func sharedSpiller(t *testing.T, dir string, node ids.ID, store *memStore, g *kvGCS) *Spiller {
	t.Helper()
	st, err := fsstore.Open(context.Background(), dir, false)
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Storage: func() (storage.Storage, error) { return st, nil }, Location: "test", Shared: "shared",
		MinFileSize: 100, Prefix: node.Short() + "/"}, node, store, &fakeObjects{store: store}, g, hclog.NewNullLogger())
}

// entries returns the store's entries (all of them primary copies here).
func entries(m *memStore) []Entry { return m.ListEntries() }

// TestSpillAllRecordsEveryPrimary: SpillAll writes every sealed primary
// copy no reader pins, fused into files, records each in the GCS and
// leaves none in memory; pinned and unsealed copies stay (Holdings counts
// them as left, busy); an object whose record failed is recorded by the
// next SpillAll; a draining node's DeleteAll keeps the files and records,
// another node restores the objects from them, and a node that does not
// drain deletes both.
func TestSpillAllRecordsEveryPrimary(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	g := &kvGCS{kv: map[string][]byte{}}
	node := ids.New()
	store := &memStore{}
	s := sharedSpiller(t, dir, node, store, g)
	if !s.Shared() {
		t.Fatal("a spiller to a storage plugin recorded in the GCS is not shared")
	}
	data := map[ids.ObjectID][]byte{}
	for i := range 5 {
		oid := ids.ObjectIDFor(ids.New(), 1)
		data[oid] = bytes.Repeat([]byte{byte('a' + i)}, 60)
		store.put(oid, data[oid])
	}
	pinned, unsealed := ids.ObjectIDFor(ids.New(), 1), ids.ObjectIDFor(ids.New(), 1)
	store.put(pinned, []byte("pinned"))
	store.GetEntries([]ids.ObjectID{pinned}, ids.New())
	store.put(unsealed, []byte("unsealed"))
	store.mu.Lock()
	store.find(unsealed).e.Sealed = false
	store.mu.Unlock()

	if h := s.Holdings(entries(store)); h.Left != 7 || h.Busy != 2 || h.Moved != 0 {
		t.Fatalf("before: %+v; want 7 left, 2 of them busy", h)
	}
	g.setFailPuts(true) // the records of the first file fail
	n, err := s.SpillAll(ctx)
	if err != nil || n != 5 {
		t.Fatalf("SpillAll = %d, %v; want the 5 sealed unpinned copies written", n, err)
	}
	if h := s.Holdings(entries(store)); h.Left != 7 || h.Moved != 0 {
		t.Fatalf("with the GCS down: %+v; want every copy still left (stored, not recorded)", h)
	}
	if st := s.Stats(); st.GetFiles() != 3 || st.GetStoredObjects() != 5 {
		t.Fatalf("stats: %d files, %d stored; want the 5 copies fused in 3 files of at least 100 bytes", st.GetFiles(), st.GetStoredObjects())
	}
	g.setFailPuts(false)
	if n, err := s.SpillAll(ctx); err != nil || n != 0 {
		t.Fatalf("SpillAll again = %d, %v; want nothing written", n, err)
	}
	for oid := range data {
		if store.Contains(oid) || !g.has(node, oid) {
			t.Fatalf("object %s: in memory %v, recorded %v; want only stored, and recorded", oid, store.Contains(oid), g.has(node, oid))
		}
	}
	if h := s.Holdings(entries(store)); h.Left != 2 || h.Busy != 2 || h.Moved != 5 || h.LeftBytes != int64(len("pinned")+len("unsealed")) {
		t.Fatalf("after: %+v; want 5 moved, the pinned and unsealed ones left", h)
	}

	// The node drains and stops: files and records stay; another node
	// spilling to the same storage restores the objects from them.
	s.SetDraining(true)
	s.DeleteAll(ctx)
	files, _ := filepath.Glob(filepath.Join(dir, node.Short(), "*.spill"))
	if len(files) != 3 {
		t.Fatalf("%d files left after a drained node stopped, want its 3", len(files))
	}
	other := &memStore{}
	s2 := sharedSpiller(t, dir, ids.New(), other, g)
	for oid, want := range data {
		if !g.has(node, oid) {
			t.Fatalf("the record of object %s was deleted when the drained node stopped", oid)
		}
		if err := s2.RestoreFromRecord(oid, node, &gorayv1.Address{}); err != nil {
			t.Fatalf("restoring object %s of the stopped node: %v", oid, err)
		}
		e := other.GetEntries([]ids.ObjectID{oid}, ids.New())[0]
		if got := other.Data(e.Offset, e.DataSize); !bytes.Equal(got, want) {
			t.Fatalf("object %s restored as %q, want %q", oid, got, want)
		}
	}

	// A node that does not drain deletes its files and records.
	third := ids.New()
	store3 := &memStore{}
	s3 := sharedSpiller(t, dir, third, store3, g)
	oid := ids.ObjectIDFor(ids.New(), 1)
	store3.put(oid, bytes.Repeat([]byte("z"), 200))
	if n, err := s3.SpillAll(ctx); err != nil || n != 1 || !g.has(third, oid) {
		t.Fatalf("SpillAll = %d, %v, recorded %v", n, err, g.has(third, oid))
	}
	s3.DeleteAll(ctx)
	if _, err := os.Stat(filepath.Join(dir, third.Short())); err == nil {
		if files, _ := filepath.Glob(filepath.Join(dir, third.Short(), "*.spill")); len(files) != 0 {
			t.Fatalf("a node that did not drain left its files: %v", files)
		}
	}
	if g.has(third, oid) {
		t.Fatal("a node that did not drain left its records")
	}
}

// TestSpillAllHandsOverRestoredCopies: a copy this node restored from a
// dead node's record is recorded under this node too when it drains, so
// that it survives this node as well.
func TestSpillAllHandsOverRestoredCopies(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	g := &kvGCS{kv: map[string][]byte{}}
	dead, here := ids.New(), ids.New()
	deadStore := &memStore{}
	s1 := sharedSpiller(t, dir, dead, deadStore, g)
	oid := ids.ObjectIDFor(ids.New(), 1)
	deadStore.put(oid, bytes.Repeat([]byte("x"), 150))
	if _, err := s1.SpillAll(ctx); err != nil {
		t.Fatal(err)
	}
	s1.SetDraining(true)
	s1.DeleteAll(ctx) // as when it died: its file and record stay

	store := &memStore{}
	s := sharedSpiller(t, dir, here, store, g)
	if err := s.RestoreFromRecord(oid, dead, &gorayv1.Address{}); err != nil {
		t.Fatal(err)
	}
	if h := s.Holdings(entries(store)); h.Left != 1 || h.Moved != 0 {
		t.Fatalf("a copy restored from another node's record: %+v; want it left (not recorded under this node)", h)
	}
	if _, err := s.SpillAll(ctx); err != nil {
		t.Fatal(err)
	}
	if h := s.Holdings(entries(store)); h.Left != 0 || h.Moved != 1 || !g.has(here, oid) {
		t.Fatalf("after SpillAll: %+v, recorded under this node %v; want it moved", h, g.has(here, oid))
	}
	s.Forget([]ids.ObjectID{oid}) // freed: both records go (in the background)
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for g.has(here, oid) || g.has(dead, oid) {
		if time.Now().After(deadline) {
			t.Fatalf("records left after the object was freed: under this node %v, under the dead node %v", g.has(here, oid), g.has(dead, oid))
		}
		<-tick.C
	}
}
