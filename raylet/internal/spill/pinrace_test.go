package spill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/objstore"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/plugins/fs/fsstore"
	"github.com/goray-dev/goray/sdk/storage"
)

// arenaStore presents a real objstore.Store as the spiller's Store, as the
// raylet does.
type arenaStore struct{ *objstore.Store }

func fromArena(e objstore.Entry) Entry {
	return Entry{ID: e.ID, Found: e.Found, Offset: e.Offset, DataSize: e.DataSize, Metadata: e.Metadata, Pins: e.Pins, Sealed: e.Sealed, Freed: e.Freed, Seq: e.Seq}
}

func (a arenaStore) GetEntries(objs []ids.ObjectID, client ids.ID) []Entry {
	var out []Entry
	for _, e := range a.Store.Get(objs, client) {
		out = append(out, fromArena(e))
	}
	return out
}

func (a arenaStore) ListEntries() []Entry {
	var out []Entry
	for _, e := range a.Store.List() {
		out = append(out, fromArena(e))
	}
	return out
}

func (a arenaStore) Usage() (int64, int64) {
	u := a.Store.Usage()
	return u.Used, u.Capacity
}

// liveObjects is the object bookkeeping of a node whose objects are all
// live primary copies: a create that does not fit waits for the spiller,
// as the raylet's does.
type liveObjects struct {
	store   *objstore.Store
	spiller *Spiller
}

func (l *liveObjects) Primaries(objs []ids.ObjectID) []bool { return all(len(objs)) }
func (l *liveObjects) Alive(objs []ids.ObjectID) []bool     { return all(len(objs)) }
func (l *liveObjects) EvictSecondaries(int64) int64         { return 0 }
func (l *liveObjects) Track(ids.ObjectID, *gorayv1.Address) {}
func (l *liveObjects) CreateMakingRoom(ctx context.Context, oid ids.ObjectID, size int64, meta []byte, creator ids.ID) (int64, error) {
	var off int64
	create := func() (err error) {
		off, err = l.store.Create(oid, size, meta, creator)
		return err
	}
	first := create()
	if !errors.Is(first, objstore.ErrStoreFull) {
		return off, first
	}
	if err := l.spiller.WaitForRoom(ctx, size, create); err != nil {
		return off, fmt.Errorf("%w; %v", first, err)
	}
	return off, nil
}

// pattern is object i's bytes.
func pattern(i, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(i*131 + j*7 + j>>11)
	}
	return b
}

// TestPinRacesSpiller: readers of live objects, in a real store three
// times smaller than what is put, while the spiller writes, drops and
// restores them: every read finds the object with its bytes, several
// readers at once restore one object (sharing the work, never failing
// with "already exists"). Before Pin, a reader checked whether the object
// was stored, then pinned it; the spiller freed it in between and the
// read found nothing (ErrObjectFreed for a live Put object), or a restore
// collided with the copy a reader still pinned ("object already exists").
// Run it under -race.
func TestPinRacesSpiller(t *testing.T) {
	dir, err := os.MkdirTemp("", "gr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := objstore.New(objstore.Config{Capacity: 8 << 20, SocketPath: filepath.Join(dir, "store.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	st, err := fsstore.Open(context.Background(), t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	objs := &liveObjects{store: store}
	s := New(Config{Storage: func() (storage.Storage, error) { return st, nil }, Location: "test",
		MinFileSize: 512 << 10, Threshold: 0.5, Prefix: "race/"}, ids.New(), arenaStore{store}, objs, nil, hclog.NewNullLogger())
	objs.spiller = s
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	run.Add(1)
	go func() { defer run.Done(); s.Run(ctx) }()
	defer func() { cancel(); run.Wait() }()

	const (
		// 24 MiB through an 8 MiB store: at most a quarter of it pinned
		// by readers and restores at any time.
		n       = 96
		size    = 256 << 10
		readers = 8
		reads   = 200
	)
	task := ids.New()
	oid := func(i int) ids.ObjectID { return ids.ObjectIDFor(task, uint32(i+1)) }
	var published atomic.Int64
	first := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // puts, as a driver's Put does
		defer wg.Done()
		creator := ids.New()
		for i := range n {
			off, err := objs.CreateMakingRoom(ctx, oid(i), size, nil, creator)
			if err != nil {
				t.Errorf("put %d: %v", i, err)
				return
			}
			copy(store.Data(off, size), pattern(i, size))
			if err := store.Seal(oid(i), creator, true); err != nil {
				t.Errorf("seal %d: %v", i, err)
				return
			}
			published.Store(int64(i + 1))
			if i == 0 {
				close(first)
			}
		}
	}()
	var failed atomic.Int64
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-first:
			case <-ctx.Done():
				return
			}
			client := ids.New()
			rnd := rand.New(rand.NewPCG(uint64(r), 37))
			for range reads {
				if failed.Load() > 10 {
					return
				}
				// Mostly old objects: the ones spilled first.
				i := rnd.IntN(int(published.Load()))
				if rnd.IntN(2) == 0 {
					i /= 4
				}
				es, err := s.Pin(ctx, []ids.ObjectID{oid(i)}, client)
				if err != nil {
					failed.Add(1)
					t.Errorf("reading live object %d: %v", i, err)
					continue
				}
				if !es[0].Found {
					failed.Add(1)
					t.Errorf("live object %d reads as freed", i)
					continue
				}
				if got := store.Data(es[0].Offset, es[0].DataSize); !bytes.Equal(got, pattern(i, size)) {
					failed.Add(1)
					t.Errorf("object %d: wrong bytes", i)
				}
				store.Release([]ids.ObjectID{oid(i)}, client)
			}
		}()
	}
	wg.Wait()
	stats := s.Stats()
	t.Logf("spilled %d objects, restored %d", stats.GetSpilledObjects(), stats.GetRestoredObjects())
	if stats.GetSpilledObjects() == 0 || stats.GetRestoredObjects() == 0 {
		t.Errorf("the readers did not race the spiller: %d objects spilled, %d restored", stats.GetSpilledObjects(), stats.GetRestoredObjects())
	}
	// Nothing is left pinned: every object but those in memory is stored.
	for _, e := range store.List() {
		if e.Pins != 0 {
			t.Errorf("object %s is left with %d pins", e.ID, e.Pins)
		}
	}
}
