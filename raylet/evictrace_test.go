package raylet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/objstore"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/plugins/fs/fsstore"
	"github.com/goray-dev/goray/sdk/storage"
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
	// pullAgain stands for pull (runPull): create the copy, write it,
	// seal it, track it as a secondary copy. Pulls of one object are one at a time
	// (om.pulls shares one transfer); another reader may have brought it
	// back meanwhile.
	var pulling [n]sync.Mutex
	pullAgain := func(i int) error {
		pulling[i].Lock()
		defer pulling[i].Unlock()
		creator := ids.New()
		off, err := store.Create(oid(i), size, nil, creator)
		// As runPull: a copy that exists and is visible arrived meanwhile
		// (another reader pulled it; it may be evicted again at once, so
		// that is decided when seen, not looked at again later). A freed
		// copy a reader's lookup pinned for a moment blocks the id until
		// the pin goes. A copy freed while pinned for good would block it
		// until the deadline: the failure this test is for.
		deadline := time.Now().Add(waitfor.Generous)
		for pause := 100 * time.Microsecond; err != nil && errors.Is(err, objstore.ErrObjectExists) && time.Now().Before(deadline); pause = min(2*pause, 20*time.Millisecond) {
			if store.Contains(oid(i)) {
				return nil // arrived meanwhile (and may be evicted again at once)
			}
			time.Sleep(pause) // a retry's pause, as runPull's
			off, err = store.Create(oid(i), size, nil, creator)
		}
		if err != nil {
			for _, e := range store.List() {
				if e.ID == oid(i) {
					return fmt.Errorf("%w (the store holds it: %d pins, sealed %v, freed %v)", err, e.Pins, e.Sealed, e.Freed)
				}
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

// unreachablePeers is a cluster view in which no other node can be
// reached (and none is dead).
type unreachablePeers struct{}

func (unreachablePeers) peerInfo(node ids.ID) (*gorayv1.NodeInfo, error) {
	return nil, fmt.Errorf("node %s is unreachable", node.Short())
}
func (unreachablePeers) nodeDied(ids.ID, error) bool { return false }

// TestPullFindsSpilledCopy: a pull of an object whose copy here is
// spilled restores that copy instead of pulling a second one (whose
// create would race the restore's, "already exists"), even when the node
// named cannot be reached; readers restoring it at the same time share the
// work.
func TestPullFindsSpilledCopy(t *testing.T) {
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
	st, err := fsstore.Open(context.Background(), t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	closing := make(chan struct{})
	defer close(closing)
	node := ids.New()
	om := newObjectManager(Config{NodeID: node, Store: realStore{store}, Spill: SpillConfig{Storage: func() (storage.Storage, error) { return st, nil }, Location: "local disk"}},
		hclog.NewNullLogger(), closing, unreachablePeers{})

	ctx := context.Background()
	owner, creator := ids.New(), ids.New()
	oid := ids.ObjectIDFor(ids.New(), 1)
	want := bytes.Repeat([]byte("p"), 1<<20)
	off, err := om.create(ctx, oid, int64(len(want)), nil, owner, node, creator)
	if err != nil {
		t.Fatal(err)
	}
	copy(store.Data(off, int64(len(want))), want)
	if err := om.seal(oid, true); err != nil {
		t.Fatal(err)
	}
	if n, err := om.spill.SpillAll(ctx); err != nil || n != 1 || store.Contains(oid) {
		t.Fatalf("SpillAll = %d, %v; in memory %v; want the object spilled", n, err, store.Contains(oid))
	}

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				errs[i] = om.pull(ctx, oid, ids.New(), &gorayv1.Address{WorkerId: owner.Bytes(), NodeId: node.Bytes()})
				return
			}
			client := ids.New()
			es, err := om.get(ctx, []ids.ObjectID{oid}, client)
			if err == nil && !es[0].Found {
				err = errors.New("not found")
			}
			if err == nil {
				om.store.Release([]ids.ObjectID{oid}, client)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("reader %d: %v", i, err)
		}
	}
	es := store.Get([]ids.ObjectID{oid}, creator)
	if !es[0].Found || !bytes.Equal(store.Data(es[0].Offset, es[0].DataSize), want) {
		t.Fatalf("after the pull the object is found %v, with its bytes %v", es[0].Found, es[0].Found && bytes.Equal(store.Data(es[0].Offset, es[0].DataSize), want))
	}
	store.Release([]ids.ObjectID{oid}, creator)
	if got := om.spill.Stats().GetRestoredObjects(); got != 1 {
		t.Errorf("restored %d times, want once", got)
	}
}
