package spill

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/plugins/fs/fsstore"
	"github.com/goray-dev/goray/sdk/storage"
)

// memStore is an in-memory store: each object has its own buffer,
// offsets are indices.
type memStore struct {
	mu   sync.Mutex
	objs []*memObject
}

type memObject struct {
	e    Entry
	data []byte
}

func (m *memStore) find(id ids.ObjectID) *memObject {
	for _, o := range m.objs {
		if o.e.ID == id && !o.e.Freed {
			return o
		}
	}
	return nil
}

func (m *memStore) put(id ids.ObjectID, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs = append(m.objs, &memObject{e: Entry{ID: id, Found: true, Offset: int64(len(m.objs)), DataSize: int64(len(data)), Sealed: true, Seq: int64(len(m.objs))}, data: data})
}

func (m *memStore) ListEntries() []Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Entry
	for _, o := range m.objs {
		if !o.e.Freed {
			out = append(out, o.e)
		}
	}
	return out
}

func (m *memStore) GetEntries(objs []ids.ObjectID, _ ids.ID) []Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Entry, len(objs))
	for i, id := range objs {
		if o := m.find(id); o != nil {
			o.e.Pins++
			out[i] = o.e
		}
	}
	return out
}

func (m *memStore) Release(objs []ids.ObjectID, _ ids.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range objs {
		if o := m.find(id); o != nil {
			o.e.Pins--
		}
	}
}

func (m *memStore) Free(objs []ids.ObjectID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range objs {
		if o := m.find(id); o != nil {
			o.e.Freed = true
		}
	}
}

func (m *memStore) Usage() (int64, int64) {
	var used int64
	for _, e := range m.ListEntries() {
		used += e.DataSize
	}
	return used, m.Capacity()
}

func (m *memStore) Capacity() int64 { return 1 << 20 }
func (m *memStore) Contains(id ids.ObjectID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.find(id) != nil
}
func (m *memStore) Data(off, size int64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.objs[off].data[:size]
}

func (m *memStore) Seal(id ids.ObjectID, _ ids.ID, release bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.find(id)
	o.e.Sealed = true
	if release {
		o.e.Pins--
	}
	return nil
}

func (m *memStore) Abort(id ids.ObjectID) error { m.Free([]ids.ObjectID{id}); return nil }

// fakeObjects says every object is a live primary copy and creates
// objects in the memStore.
type fakeObjects struct {
	store   *memStore
	tracked []ids.ObjectID
}

func (f *fakeObjects) Primaries(objs []ids.ObjectID) []bool { return all(len(objs)) }
func (f *fakeObjects) Alive(objs []ids.ObjectID) []bool     { return all(len(objs)) }
func (f *fakeObjects) EvictSecondaries(int64) int64         { return 0 }
func (f *fakeObjects) Track(oid ids.ObjectID, _ *gorayv1.Address) {
	f.tracked = append(f.tracked, oid)
}

func (f *fakeObjects) CreateMakingRoom(_ context.Context, oid ids.ObjectID, size int64, meta []byte, _ ids.ID) (int64, error) {
	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	f.store.objs = append(f.store.objs, &memObject{e: Entry{ID: oid, Found: true, Offset: int64(len(f.store.objs)), DataSize: size, Metadata: meta, Pins: 1, Seq: int64(len(f.store.objs))}, data: make([]byte, size)})
	return int64(len(f.store.objs) - 1), nil
}

func all(n int) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = true
	}
	return out
}

// TestSpillAndRestore: with fakes for the store and the object
// bookkeeping, a spill round writes the oldest objects to one fused file
// and frees them from memory; a restore brings the bytes back; freeing
// the objects deletes the file.
func TestSpillAndRestore(t *testing.T) {
	ctx := context.Background()
	st, err := fsstore.Open(ctx, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	store := &memStore{}
	objs := &fakeObjects{store: store}
	s := New(Config{Storage: func() (storage.Storage, error) { return st, nil }, Location: "test", MinFileSize: 1},
		ids.New(), store, objs, nil, hclog.NewNullLogger())
	a, b := ids.ObjectIDFor(ids.New(), 1), ids.ObjectIDFor(ids.New(), 2)
	store.put(a, bytes.Repeat([]byte("a"), 100))
	store.put(b, bytes.Repeat([]byte("b"), 50))

	freed, err := s.spillOnce(ctx, 150)
	if err != nil || freed != 150 {
		t.Fatalf("spillOnce = %d, %v; want 150 bytes freed", freed, err)
	}
	for _, id := range []ids.ObjectID{a, b} {
		if store.Contains(id) || !s.Has(id) {
			t.Fatalf("object %s: in memory %v, spilled %v; want only spilled", id, store.Contains(id), s.Has(id))
		}
	}
	if st := s.Stats(); st.GetFiles() != 1 || st.GetSpilledObjects() != 2 {
		t.Fatalf("stats: %d files, %d objects; want both objects in one file", st.GetFiles(), st.GetSpilledObjects())
	}
	if err := s.Restore(ctx, b); err != nil {
		t.Fatal(err)
	}
	es := store.GetEntries([]ids.ObjectID{b}, ids.New())
	if got := store.Data(es[0].Offset, es[0].DataSize); !bytes.Equal(got, bytes.Repeat([]byte("b"), 50)) {
		t.Fatalf("restored %q", got)
	}
	s.Forget([]ids.ObjectID{a, b})
	if st := s.Stats(); st.GetFiles() != 0 {
		t.Fatalf("%d files left after every object was freed", st.GetFiles())
	}
}
