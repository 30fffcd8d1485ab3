package raylet

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/objstore"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// TestEvictionRacesReaders: readers of copies pulled from another node
// (secondary copies) race the eviction that makes room, in a real store.
// A reader that finds no copy pulls it again, which creates it: that create
// never fails with "already exists" (a copy freed while a reader pinned it
// would be invisible and still block its id), and every copy read has its
// bytes. Before, eviction freed a copy a reader had pinned since it looked
// at the store, and the next pull of it failed with "object already
// exists" on a live node.
func TestEvictionRacesReaders(t *testing.T) {
	dir, err := os.MkdirTemp("", "gr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := objstore.New(objstore.Config{Capacity: 4 << 20, SocketPath: filepath.Join(dir, "store.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	closing := make(chan struct{})
	defer close(closing)
	om := newObjectManager(Config{NodeID: ids.New(), Store: realStore{store}}, hclog.NewNullLogger(), closing, nil)

	const (
		n       = 16
		size    = 64 << 10
		readers = 6
		reads   = 400
	)
	task := ids.New()
	owner := &gorayv1.Address{WorkerId: ids.New().Bytes(), NodeId: ids.New().Bytes()}
	data := func(i int) []byte { return bytes.Repeat([]byte{byte(i + 1)}, size) }
	oid := func(i int) ids.ObjectID { return ids.ObjectIDFor(task, uint32(i+1)) }
	// pullAgain stands for pull: create the copy, write it, seal it,
	// track it as a secondary copy. Pulls of one object are one at a time
	// (om.pulls shares one transfer); another reader may have brought it
	// back meanwhile.
	var pulling [n]sync.Mutex
	pullAgain := func(i int) error {
		pulling[i].Lock()
		defer pulling[i].Unlock()
		creator := ids.New()
		off, err := store.Create(oid(i), size, nil, creator)
		if err != nil {
			if store.Contains(oid(i)) {
				return nil // arrived meanwhile
			}
			return err
		}
		copy(store.Data(off, size), data(i))
		if err := store.Seal(oid(i), creator, true); err != nil {
			return err
		}
		om.track(oid(i), owner, true)
		return nil
	}
	for i := range n {
		if err := pullAgain(i); err != nil {
			t.Fatal(err)
		}
	}

	ctx := context.Background()
	var stop atomic.Bool
	var evicted atomic.Int64
	var ev sync.WaitGroup
	ev.Add(1)
	go func() { // room wanted all the time
		defer ev.Done()
		for !stop.Load() {
			if om.evictSecondaries(4*size) > 0 {
				evicted.Add(1)
			}
		}
	}()
	var wg sync.WaitGroup
	var failures atomic.Int64
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := ids.New()
			for k := range reads {
				if failures.Load() > 10 {
					return
				}
				i := (r*7 + k) % n
				es, err := om.get(ctx, []ids.ObjectID{oid(i)}, client)
				if err != nil {
					failures.Add(1)
					t.Errorf("reading copy %d: %v", i, err)
					continue
				}
				if !es[0].Found {
					if err := pullAgain(i); err != nil {
						failures.Add(1)
						if errors.Is(err, objstore.ErrObjectExists) {
							t.Errorf("pulling copy %d again, which no reader finds: %v", i, err)
						} else {
							t.Errorf("pulling copy %d again: %v", i, err)
						}
					}
					continue
				}
				if !bytes.Equal(store.Data(es[0].Offset, es[0].DataSize), data(i)) {
					failures.Add(1)
					t.Errorf("copy %d: wrong bytes", i)
				}
				om.store.Release([]ids.ObjectID{oid(i)}, client)
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	ev.Wait()
	if evicted.Load() == 0 {
		t.Error("nothing was evicted: the readers did not race the eviction")
	}
	t.Logf("%d evictions", evicted.Load())
}
