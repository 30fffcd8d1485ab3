package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goray-dev/goray/internal/ids"
)

// shortTempDir returns a temp dir with a short path (unix socket paths are
// limited to 108 bytes, which t.TempDir can exceed for long test names).
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "objst")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newTestStore(t testing.TB, capacity int64) *Store {
	t.Helper()
	s, err := New(Config{Capacity: capacity, SocketPath: filepath.Join(shortTempDir(t), "store.sock")})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func oid(n uint32) ids.ObjectID { return ids.ObjectIDFor(ids.ID{1, 2, 3}, n) }

func client(n byte) ids.ID { return ids.ID{0xc1, n} }

func mustCreate(t testing.TB, s *Store, id ids.ObjectID, size int64, c ids.ID) int64 {
	t.Helper()
	off, err := s.Create(id, size, nil, c)
	if err != nil {
		t.Fatalf("Create(%s, %d): %v", id, size, err)
	}
	return off
}

func mustSeal(t testing.TB, s *Store, id ids.ObjectID, c ids.ID, release bool) {
	t.Helper()
	if err := s.Seal(id, c, release); err != nil {
		t.Fatalf("Seal(%s): %v", id, err)
	}
}

func wantUsage(t testing.TB, s *Store, used int64, objects int) {
	t.Helper()
	u := s.Usage()
	if u.Used != used || u.Objects != objects {
		t.Fatalf("usage: used %d, %d objects; want used %d, %d objects", u.Used, u.Objects, used, objects)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	checkAllocator(t, s.alloc)
}

func TestLifecycleDeferredReclaim(t *testing.T) {
	s := newTestStore(t, 1<<20)
	creator, reader := client(1), client(2)
	id := oid(1)
	meta := []byte("meta")

	off, err := s.Create(id, 1000, meta, creator)
	if err != nil {
		t.Fatal(err)
	}
	if off%Alignment != 0 {
		t.Fatalf("offset %d not aligned", off)
	}
	meta[0] = 'X' // the store must have copied it
	if s.Contains(id) {
		t.Fatal("unsealed object is Contained")
	}
	if e := s.Get([]ids.ObjectID{id}, reader)[0]; e.Found || e.ID != id {
		t.Fatalf("Get of unsealed object: %+v", e)
	}
	copy(s.Data(off, 1000), bytes.Repeat([]byte{0xAB}, 1000))
	mustSeal(t, s, id, creator, true)
	if !s.Contains(id) {
		t.Fatal("sealed object not Contained")
	}

	e := s.Get([]ids.ObjectID{id}, reader)[0]
	if !e.Found || !e.Sealed || e.Offset != off || e.DataSize != 1000 || e.Pins != 1 || e.Client != creator || string(e.Metadata) != "meta" {
		t.Fatalf("Get: %+v", e)
	}
	if !bytes.Equal(s.Data(e.Offset, e.DataSize), bytes.Repeat([]byte{0xAB}, 1000)) {
		t.Fatal("data changed")
	}
	s.Get([]ids.ObjectID{id}, reader) // second pin by the same client
	wantUsage(t, s, 1024, 1)

	s.Free([]ids.ObjectID{id})
	if s.Contains(id) {
		t.Fatal("freed object still Contained")
	}
	if e := s.Get([]ids.ObjectID{id}, client(3))[0]; e.Found {
		t.Fatal("freed object still found by Get")
	}
	if _, err := s.Create(id, 10, nil, creator); !errors.Is(err, ErrObjectExists) {
		t.Fatalf("re-Create while freed object is pinned: %v, want ErrObjectExists", err)
	}
	wantUsage(t, s, 1024, 1)                 // deferred: reader still pins it twice
	s.Release([]ids.ObjectID{id}, client(9)) // not a pin holder: ignored
	s.Release([]ids.ObjectID{id}, reader)
	wantUsage(t, s, 1024, 1)
	s.Release([]ids.ObjectID{id}, reader)
	wantUsage(t, s, 0, 0)
	if u := s.Usage(); u.CreatedTotal != 1 || u.FreedTotal != 1 || u.Capacity != 1<<20 {
		t.Fatalf("counters: %+v", u)
	}
	// The id can be reused after reclaim.
	mustCreate(t, s, id, 10, creator)
}

func TestFreeWithoutPinsIsImmediate(t *testing.T) {
	s := newTestStore(t, 1<<20)
	mustCreate(t, s, oid(1), 100, client(1))
	mustSeal(t, s, oid(1), client(1), true)
	s.Free([]ids.ObjectID{oid(1), oid(99)}) // unknown ids are ignored
	wantUsage(t, s, 0, 0)
}

func TestSealWithoutReleaseKeepsCreatorPin(t *testing.T) {
	s := newTestStore(t, 1<<20)
	c := client(1)
	mustCreate(t, s, oid(1), 100, c)
	mustSeal(t, s, oid(1), c, false)
	s.Free([]ids.ObjectID{oid(1)})
	wantUsage(t, s, 128, 1)
	if l := s.List(); len(l) != 1 || l[0].Pins != 1 || !l[0].Freed {
		t.Fatalf("List: %+v", l)
	}
	s.Release([]ids.ObjectID{oid(1)}, c)
	wantUsage(t, s, 0, 0)
}

func TestFreeUnsealedWaitsForSeal(t *testing.T) {
	s := newTestStore(t, 1<<20)
	c := client(1)
	mustCreate(t, s, oid(1), 100, c)
	s.Free([]ids.ObjectID{oid(1)})
	// Even if the creator drops its pin, the region stays while it may
	// still be writing.
	s.Release([]ids.ObjectID{oid(1)}, c)
	wantUsage(t, s, 128, 1)
	mustSeal(t, s, oid(1), c, true)
	wantUsage(t, s, 0, 0)
}

func TestAbort(t *testing.T) {
	s := newTestStore(t, 1<<20)
	c := client(1)
	mustCreate(t, s, oid(1), 5000, c)
	wantUsage(t, s, 5056, 1)
	if err := s.Abort(oid(1)); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, s, 0, 0)
	if s.Contains(oid(1)) {
		t.Fatal("aborted object contained")
	}
	// Same id can be created again.
	mustCreate(t, s, oid(1), 10, c)
	mustSeal(t, s, oid(1), c, true)
	if err := s.Abort(oid(1)); !errors.Is(err, ErrAlreadySealed) {
		t.Fatalf("Abort of sealed object: %v", err)
	}
	if err := s.Abort(oid(2)); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("Abort of missing object: %v", err)
	}
	if u := s.Usage(); u.CreatedTotal != 2 || u.FreedTotal != 1 {
		t.Fatalf("counters: %+v", u)
	}
}

func TestReleaseClient(t *testing.T) {
	s := newTestStore(t, 1<<20)
	a, b := client(1), client(2)
	mustCreate(t, s, oid(1), 64, a) // unsealed: aborted by ReleaseClient(a)
	mustCreate(t, s, oid(2), 64, a) // sealed, pinned by a: stays (not freed)
	mustSeal(t, s, oid(2), a, false)
	mustCreate(t, s, oid(3), 64, b) // b's, pinned twice by a and once by b, freed
	mustSeal(t, s, oid(3), b, true)
	s.Get([]ids.ObjectID{oid(3), oid(3)}, a)
	s.Get([]ids.ObjectID{oid(3)}, b)
	mustCreate(t, s, oid(4), 64, b) // b's, unsealed: untouched by ReleaseClient(a)
	s.Free([]ids.ObjectID{oid(3)})
	wantUsage(t, s, 4*64, 4)

	s.ReleaseClient(a)
	wantUsage(t, s, 3*64, 3)
	if l := s.List(); l[0].ID != oid(2) || l[0].Pins != 0 || l[1].ID != oid(3) || l[1].Pins != 1 || l[2].ID != oid(4) {
		t.Fatalf("List after ReleaseClient(a): %+v", l)
	}
	if !s.Contains(oid(2)) {
		t.Fatal("sealed object lost by ReleaseClient")
	}
	s.ReleaseClient(b)
	wantUsage(t, s, 64, 1) // only oid(2) remains
	s.ReleaseClient(client(7))
	s.mu.Lock()
	nclients := len(s.clients)
	s.mu.Unlock()
	if nclients != 0 {
		t.Fatalf("%d clients still tracked", nclients)
	}
}

func TestErrors(t *testing.T) {
	s := newTestStore(t, 4096)
	a, b := client(1), client(2)
	mustCreate(t, s, oid(1), 10, a)
	mustCreate(t, s, oid(2), 10, a)
	mustSeal(t, s, oid(2), a, true)

	tests := []struct {
		name string
		err  error
		want error
	}{
		{"create existing", func() error { _, err := s.Create(oid(1), 10, nil, a); return err }(), ErrObjectExists},
		{"create negative", func() error { _, err := s.Create(oid(3), -1, nil, a); return err }(), ErrInvalidSize},
		{"create too big", func() error { _, err := s.Create(oid(3), 4097, nil, a); return err }(), ErrStoreFull},
		{"seal twice", s.Seal(oid(2), a, true), ErrNotSealable},
		{"seal someone else's", s.Seal(oid(1), b, true), ErrNotSealable},
		{"seal missing", s.Seal(oid(3), a, true), ErrObjectNotFound},
		{"abort missing", s.Abort(oid(3)), ErrObjectNotFound},
		{"abort sealed", s.Abort(oid(2)), ErrAlreadySealed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, tt.want) {
				t.Fatalf("got %v, want %v", tt.err, tt.want)
			}
			if tt.want == ErrStoreFull {
				return
			}
			var oe *ObjectError
			if !errors.As(tt.err, &oe) {
				t.Fatalf("%v is not an *ObjectError", tt.err)
			}
			if oe.ID != oid(1) && oe.ID != oid(2) && oe.ID != oid(3) {
				t.Fatalf("ObjectError names %s", oe.ID)
			}
			if !strings.Contains(tt.err.Error(), oe.ID.String()) {
				t.Fatalf("message %q does not name the object", tt.err)
			}
		})
	}
	// Failed operations changed nothing.
	if s.Contains(oid(1)) || !s.Contains(oid(2)) {
		t.Fatal("state changed by failed operations")
	}
}

func TestStoreFull(t *testing.T) {
	const u = Alignment
	s := newTestStore(t, 4*u)
	c := client(1)
	for i := range uint32(4) {
		mustCreate(t, s, oid(i), u, c)
		mustSeal(t, s, oid(i), c, true)
	}
	s.Free([]ids.ObjectID{oid(0), oid(2)})
	wantUsage(t, s, 2*u, 2)
	// 128 bytes are free, but not contiguously.
	_, err := s.Create(oid(9), 2*u, nil, c)
	var full *StoreFullError
	if !errors.As(err, &full) || !errors.Is(err, ErrStoreFull) {
		t.Fatalf("Create in fragmented store: %v, want *StoreFullError", err)
	}
	want := StoreFullError{Requested: 2 * u, Used: 2 * u, Capacity: 4 * u, LargestFree: u, ObjectID: oid(9)}
	if *full != want {
		t.Fatalf("StoreFullError = %+v, want %+v", *full, want)
	}
	if s.Contains(oid(9)) || s.Usage().Objects != 2 {
		t.Fatal("failed Create left an object behind")
	}
	// A zero-size object still fits in a full store.
	mustCreate(t, s, oid(10), 0, c)
	mustCreate(t, s, oid(11), u, c)
	mustCreate(t, s, oid(12), u, c)
	if _, err := s.Create(oid(13), 1, nil, c); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("Create in full store: %v", err)
	}
}

func TestStoreFullErrorMessage(t *testing.T) {
	id := oid(7)
	err := &StoreFullError{
		Requested:   800 << 20,
		Used:        1900 << 20,
		Capacity:    2 << 30,
		LargestFree: 100 << 20,
		ObjectID:    id,
	}
	want := fmt.Sprintf("object store full: cannot allocate 800 MiB for object %s (used 1.9 GiB of 2.0 GiB, largest free block 100 MiB)", id)
	if err.Error() != want {
		t.Fatalf("message:\n got %q\nwant %q", err.Error(), want)
	}
	if !errors.Is(err, ErrStoreFull) || errors.Is(err, ErrObjectExists) {
		t.Fatal("errors.Is mismatch")
	}
}

func TestZeroSizeObject(t *testing.T) {
	s := newTestStore(t, 1<<20)
	c := client(1)
	if _, err := s.Create(oid(1), 0, []byte("only metadata"), c); err != nil {
		t.Fatal(err)
	}
	mustSeal(t, s, oid(1), c, true)
	wantUsage(t, s, 0, 1)
	e := s.Get([]ids.ObjectID{oid(1)}, c)[0]
	if !e.Found || e.DataSize != 0 || string(e.Metadata) != "only metadata" {
		t.Fatalf("Get: %+v", e)
	}
	if d := s.Data(e.Offset, 0); d == nil || len(d) != 0 {
		t.Fatalf("Data of zero-size object: %v", d)
	}
	s.Free([]ids.ObjectID{oid(1)})
	wantUsage(t, s, 0, 1)
	s.Release([]ids.ObjectID{oid(1)}, c)
	wantUsage(t, s, 0, 0)
	if u := s.Usage(); u.FreedTotal != 1 {
		t.Fatalf("zero-size object not counted as freed: %+v", u)
	}
}

func TestGetMixed(t *testing.T) {
	s := newTestStore(t, 1<<20)
	c := client(1)
	mustCreate(t, s, oid(1), 10, c)
	mustSeal(t, s, oid(1), c, true)
	mustCreate(t, s, oid(2), 10, c) // unsealed
	got := s.Get([]ids.ObjectID{oid(3), oid(1), oid(2), oid(1)}, client(2))
	wantFound := []bool{false, true, false, true}
	for i, e := range got {
		if e.Found != wantFound[i] || e.ID != []ids.ObjectID{oid(3), oid(1), oid(2), oid(1)}[i] {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	if got[3].Pins != 2 {
		t.Fatalf("second Get of the same id: pins %d, want 2", got[3].Pins)
	}
}

func TestList(t *testing.T) {
	s := newTestStore(t, 1<<20)
	c := client(1)
	mustCreate(t, s, oid(3), 10, c)
	if _, err := s.Create(oid(1), 20, []byte("m"), c); err != nil {
		t.Fatal(err)
	}
	mustSeal(t, s, oid(1), c, true)
	l := s.List()
	if len(l) != 2 || l[0].ID != oid(1) || l[1].ID != oid(3) {
		t.Fatalf("List order: %+v", l)
	}
	if !l[0].Sealed || l[0].Pins != 0 || l[0].DataSize != 20 || string(l[0].Metadata) != "m" || l[1].Sealed || l[1].Pins != 1 {
		t.Fatalf("List: %+v", l)
	}
	if l[1].Seq >= l[0].Seq || l[1].Seq <= 0 { // oid(3) was created first
		t.Fatalf("Seq does not follow creation order: oid(3) %d, oid(1) %d", l[1].Seq, l[0].Seq)
	}
	l[0].Metadata[0] = 'z' // a copy
	if e := s.Get([]ids.ObjectID{oid(1)}, c)[0]; string(e.Metadata) != "m" {
		t.Fatal("List returned the store's metadata slice")
	}
}

func TestData(t *testing.T) {
	s := newTestStore(t, 4096)
	tests := []struct {
		off, size int64
		ok        bool
	}{
		{0, 4096, true}, {4096, 0, true}, {100, 10, true},
		{-1, 1, false}, {0, -1, false}, {4000, 97, false}, {4097, 0, false}, {1, 1<<63 - 1, false},
	}
	for _, tt := range tests {
		d := s.Data(tt.off, tt.size)
		if (d != nil) != tt.ok || (d != nil && (int64(len(d)) != tt.size || int64(cap(d)) != tt.size)) {
			t.Errorf("Data(%d, %d): len %d cap %d nil=%t, want ok=%t", tt.off, tt.size, len(d), cap(d), d == nil, tt.ok)
		}
	}
}

// ArenaPath opens the arena itself: bytes written through a mapping of it
// (as a storage plugin's ReadInto does) are the store's bytes.
func TestArenaPath(t *testing.T) {
	s := newTestStore(t, 1<<20)
	f, err := os.OpenFile(s.ArenaPath(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() != 1<<20 {
		t.Fatalf("the arena path's size: %v, %v; want %d", fi, err, 1<<20)
	}
	if _, err := f.WriteAt([]byte("through the path"), 8192+3); err != nil {
		t.Fatal(err)
	}
	if got := string(s.Data(8192+3, 16)); got != "through the path" {
		t.Fatalf("the store reads %q where the path was written", got)
	}
}

func TestClosedStore(t *testing.T) {
	s, err := New(Config{Capacity: 4096, SocketPath: filepath.Join(shortTempDir(t), "s.sock")})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, oid(1), 10, client(1))
	mustSeal(t, s, oid(1), client(1), true)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Create(oid(2), 10, nil, client(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Create after Close: %v", err)
	}
	if err := s.Seal(oid(1), client(1), true); !errors.Is(err, ErrClosed) {
		t.Fatalf("Seal after Close: %v", err)
	}
	if err := s.Abort(oid(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Abort after Close: %v", err)
	}
	if e := s.Get([]ids.ObjectID{oid(1)}, client(1)); e[0].Found {
		t.Fatal("Get found an object after Close")
	}
	if s.Contains(oid(1)) || s.Data(0, 1) != nil || len(s.List()) != 0 {
		t.Fatal("closed store still serves objects")
	}
	s.Release([]ids.ObjectID{oid(1)}, client(1))
	s.Free([]ids.ObjectID{oid(1)})
	s.ReleaseClient(client(1))
}

func TestNewValidation(t *testing.T) {
	dir := shortTempDir(t)
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"zero capacity", Config{Capacity: 0, SocketPath: filepath.Join(dir, "a.sock")}, "capacity"},
		{"no socket", Config{Capacity: 4096}, "socket path"},
		{"not a socket", Config{Capacity: 4096, SocketPath: regular}, "not a socket"},
		{"missing dir", Config{Capacity: 4096, SocketPath: filepath.Join(dir, "nope", "s.sock")}, "listening"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg)
			if err == nil {
				s.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not mention %q", err, tt.want)
			}
		})
	}
	if _, err := os.Stat(regular); err != nil {
		t.Fatalf("New removed a regular file: %v", err)
	}
}

func TestSocketInUseAndStale(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "s.sock")
	s1, err := New(Config{Capacity: 4096, SocketPath: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	if s2, err := New(Config{Capacity: 4096, SocketPath: path}); err == nil {
		s2.Close()
		t.Fatal("second store on a live socket succeeded")
	} else if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("error %q", err)
	}

	// A stale socket file (nobody listening) is replaced.
	stale := filepath.Join(shortTempDir(t), "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	s3, err := New(Config{Capacity: 4096, SocketPath: stale})
	if err != nil {
		t.Fatalf("New over a stale socket: %v", err)
	}
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
}

// memfdState reports how many fds of this process refer to a goray-store
// memfd and whether one is mapped.
func memfdState(t *testing.T) (fds int, mapped bool) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.Contains(l, "memfd:"+memfdName) {
			fds++
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return fds, bytes.Contains(maps, []byte("memfd:"+memfdName))
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestCloseReleasesEverything(t *testing.T) {
	shmBefore := listDir(t, "/dev/shm")
	fds0, mapped0 := memfdState(t)
	if fds0 != 0 || mapped0 {
		t.Fatalf("a store is already open: %d memfds, mapped %t", fds0, mapped0)
	}
	path := filepath.Join(shortTempDir(t), "s.sock")
	s, err := New(Config{Capacity: 1 << 20, SocketPath: path})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Map(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if fds, mapped := memfdState(t); fds != 1 || !mapped {
		t.Fatalf("open store: %d memfd fds (want 1: Map must close its copy), mapped %t", fds, mapped)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket file: %v", err)
	}
	if got := listDir(t, "/dev/shm"); !slicesEqual(got, shmBefore) {
		t.Fatalf("/dev/shm changed while the store is open: %v -> %v", shmBefore, got)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file still exists after Close: %v", err)
	}
	if fds, mapped := memfdState(t); fds != 0 || mapped {
		t.Fatalf("after Close: %d memfd fds, mapped %t", fds, mapped)
	}
	if got := listDir(t, "/dev/shm"); !slicesEqual(got, shmBefore) {
		t.Fatalf("/dev/shm changed: %v -> %v", shmBefore, got)
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLargeArenaIsLazy checks that an 8 GiB arena allocates no memory until
// written: the memfd's block count stays 0.
func TestLargeArenaIsLazy(t *testing.T) {
	s := newTestStore(t, 8<<30)
	blocks := func() int64 {
		var st unix.Stat_t
		if err := unix.Fstat(s.memfd, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks
	}
	if b := blocks(); b != 0 {
		t.Fatalf("new 8 GiB arena has %d blocks allocated", b)
	}
	off := mustCreate(t, s, oid(1), 4<<30, client(1))
	if b := blocks(); b != 0 {
		t.Fatalf("Create touched the arena: %d blocks", b)
	}
	s.Data(off+2<<30, 1)[0] = 1
	if b := blocks(); b == 0 || b > 1<<12 {
		t.Fatalf("after writing one byte: %d blocks", b)
	}
}

// TestConcurrentUse hammers the store from several goroutines (run with
// -race) and checks that everything is reclaimed at the end.
func TestConcurrentUse(t *testing.T) {
	s := newTestStore(t, 4<<20)
	const workers, iters = 8, 300
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			c := client(byte(w))
			for i := range iters {
				id := ids.ObjectIDFor(ids.ID{byte(w), 0xff}, uint32(i))
				size := int64(1 + (i*131+w*17)%20000)
				off, err := s.Create(id, size, []byte{byte(i)}, c)
				if err != nil {
					errc <- err
					return
				}
				d := s.Data(off, size)
				for j := range d {
					d[j] = byte(w)
				}
				if err := s.Seal(id, c, i%2 == 0); err != nil {
					errc <- err
					return
				}
				other := client(byte(w + 100))
				e := s.Get([]ids.ObjectID{id}, other)[0]
				if !e.Found || s.Data(e.Offset, e.DataSize)[size-1] != byte(w) {
					errc <- fmt.Errorf("object %s: %+v", id, e)
					return
				}
				s.Free([]ids.ObjectID{id})
				s.Release([]ids.ObjectID{id}, other)
				if i%2 == 1 {
					s.ReleaseClient(c)
				}
				_ = s.Usage()
				_ = s.List()
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	wantUsage(t, s, 0, 0)
	if u := s.Usage(); u.CreatedTotal != workers*iters || u.FreedTotal != workers*iters {
		t.Fatalf("counters: %+v", u)
	}
}
