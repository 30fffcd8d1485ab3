// Package objstore is the node's shared-memory object store, in the model of
// Ray's plasma store.
//
// The raylet owns one Store per node. The Store's arena is a single memfd
// (so nothing ever appears in /dev/shm and the memory is released when the
// last process unmaps it, even after kill -9), mapped MAP_SHARED. Driver and
// worker processes call Map on the store's unix socket once to receive the
// memfd with SCM_RIGHTS and map the whole arena; afterwards every object is
// just an (offset, size) range of that mapping, so reads and writes are
// zero-copy and need no per-object file descriptor or mmap.
//
// Object lifecycle: Create allocates a 64-byte-aligned region (state CREATED,
// the creator holds one pin) → the creator writes the data in place → Seal
// makes it visible to Get → Get pins it per client → Release unpins → Free
// (the owner no longer needs it) reclaims the region as soon as no client pins
// it. Abort deletes a created-but-unsealed object; ReleaseClient drops every
// pin a disconnected client held and aborts what it never sealed.
package objstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/goray-dev/goray/internal/ids"
)

// memfdName is the name of the arena memfd (visible in /proc/<pid>/fd and
// /proc/<pid>/maps as "/memfd:goray-store (deleted)"). It must stay
// storage.ArenaName: storage plugins' ReadInto writes into nothing else.
const memfdName = "goray-store"

// headerSize is the size of the header sent with the arena fd: the capacity
// as a big-endian uint64.
const headerSize = 8

// sendTimeout bounds sending the fd to one client.
const sendTimeout = 5 * time.Second

// Config configures New.
type Config struct {
	Capacity   int64        // arena size in bytes (> 0)
	SocketPath string       // unix socket where clients fetch the arena fd
	Logger     hclog.Logger // nil means no logging
}

// Entry describes one object, as returned by Get and List.
type Entry struct {
	ID       ids.ObjectID
	Found    bool   // Get: the object is sealed, not freed, and now pinned
	Offset   int64  // start of the data in the arena
	DataSize int64  // bytes of data
	Metadata []byte // owned by the store: do not modify
	Pins     int    // pins held by all clients (including the one just taken)
	Sealed   bool
	Freed    bool   // List only: Free was called; reclaimed at the last Release
	Client   ids.ID // creator
	// Seq orders objects by creation: it grows with every create.
	Seq int64
}

// Usage reports the arena's occupancy.
type Usage struct {
	Used         int64 // bytes allocated (aligned sizes), including freed-but-pinned objects
	Capacity     int64 // arena size
	Objects      int   // objects in the store, in any state
	CreatedTotal int64 // objects ever created
	FreedTotal   int64 // objects whose memory was reclaimed (freed or aborted)
}

// Store is the server side of the object store. All methods are safe for
// concurrent use.
type Store struct {
	log        hclog.Logger
	capacity   int64
	socketPath string
	memfd      int
	mem        []byte // the whole arena; never reassigned

	ln         *net.UnixListener
	done       chan struct{} // closed by Close
	acceptDone chan struct{} // closed when the accept loop returns
	closed     atomic.Bool   // fast check for Data

	mu           sync.Mutex
	isClosed     bool
	alloc        *allocator
	objects      map[ids.ObjectID]*object
	clients      map[ids.ID]map[ids.ObjectID]struct{} // objects a client pins or created unsealed
	createdTotal int64
	freedTotal   int64
}

// object is the store's record of one object. Guarded by Store.mu.
type object struct {
	id        ids.ObjectID
	offset    int64
	size      int64
	allocated bool // a region of the arena backs the object (false when size is 0)
	metadata  []byte
	sealed    bool
	freed     bool
	creator   ids.ID
	seq       int64 // createdTotal when it was created
	pins      map[ids.ID]int
	npins     int
}

// New creates the memfd arena of cfg.Capacity bytes, maps it (lazily: no page
// is touched), and starts serving the arena fd on cfg.SocketPath. A stale
// socket file left by a dead store is replaced; a live one is an error.
func New(cfg Config) (*Store, error) {
	if cfg.Capacity <= 0 {
		return nil, fmt.Errorf("objstore: capacity must be positive, got %d", cfg.Capacity)
	}
	if cfg.SocketPath == "" {
		return nil, errors.New("objstore: socket path is empty")
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("objstore")

	fd, err := unix.MemfdCreate(memfdName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("objstore: memfd_create: %w", err)
	}
	fail := func(err error) (*Store, error) {
		_ = unix.Close(fd)
		return nil, err
	}
	if err := unix.Ftruncate(fd, cfg.Capacity); err != nil {
		return fail(fmt.Errorf("objstore: sizing arena to %d bytes: %w", cfg.Capacity, err))
	}
	// Clients get a read/write fd; forbid resizing so none can make the
	// raylet's mapping fault with SIGBUS. Best effort.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		log.Debug("cannot seal arena size", "error", err)
	}
	mem, err := unix.Mmap(fd, 0, int(cfg.Capacity), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("objstore: mapping %d-byte arena: %w", cfg.Capacity, err))
	}
	ln, err := listen(cfg.SocketPath)
	if err != nil {
		_ = unix.Munmap(mem)
		return fail(err)
	}
	s := &Store{
		log:        log,
		capacity:   cfg.Capacity,
		socketPath: cfg.SocketPath,
		memfd:      fd,
		mem:        mem,
		ln:         ln,
		done:       make(chan struct{}),
		acceptDone: make(chan struct{}),
		alloc:      newAllocator(cfg.Capacity),
		objects:    make(map[ids.ObjectID]*object),
		clients:    make(map[ids.ID]map[ids.ObjectID]struct{}),
	}
	go s.acceptLoop()
	log.Info("object store ready", "capacity", cfg.Capacity, "socket", cfg.SocketPath)
	return s, nil
}

// listen listens on path, replacing a stale socket file nobody accepts on.
func listen(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("objstore: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("objstore: socket %s is in use by another store", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("objstore: removing stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("objstore: listening on %s: %w", path, err)
	}
	return ln, nil
}

func (s *Store) acceptLoop() {
	defer close(s.acceptDone)
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// E.g. EMFILE: back off briefly instead of spinning.
			s.log.Warn("accepting arena client", "error", err)
			select {
			case <-s.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		s.sendArena(c)
	}
}

// sendArena sends the capacity header and the memfd to one client.
func (s *Store) sendArena(c *net.UnixConn) {
	defer c.Close()
	var hdr [headerSize]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(s.capacity))
	_ = c.SetWriteDeadline(time.Now().Add(sendTimeout))
	if _, _, err := c.WriteMsgUnix(hdr[:], unix.UnixRights(s.memfd), nil); err != nil {
		s.log.Warn("sending arena fd to client", "error", err)
		return
	}
	s.log.Trace("sent arena fd to client")
}

// Create allocates dataSize bytes for id on behalf of client and returns the
// data's offset in the arena. The object is CREATED (invisible to Get) and
// pinned once by client until Seal(release=true) or Release. metadata is
// copied. A zero-size object takes no arena space (offset 0).
//
// Errors: ErrObjectExists (also while a freed object with this id is still
// pinned), ErrInvalidSize, ErrClosed, or a *StoreFullError (ErrStoreFull)
// when no free block is large enough.
func (s *Store) Create(id ids.ObjectID, dataSize int64, metadata []byte, client ids.ID) (offset int64, err error) {
	if dataSize < 0 {
		return 0, &ObjectError{Op: "create", ID: id, Err: fmt.Errorf("%w: %d bytes", ErrInvalidSize, dataSize)}
	}
	md := bytes.Clone(metadata)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isClosed {
		return 0, &ObjectError{Op: "create", ID: id, Err: ErrClosed}
	}
	if _, ok := s.objects[id]; ok {
		return 0, &ObjectError{Op: "create", ID: id, Err: ErrObjectExists}
	}
	o := &object{id: id, size: dataSize, metadata: md, creator: client, pins: make(map[ids.ID]int, 1)}
	if dataSize > 0 {
		off, ok := s.alloc.alloc(dataSize)
		if !ok {
			return 0, &StoreFullError{
				Requested:   dataSize,
				Used:        s.alloc.used,
				Capacity:    s.capacity,
				LargestFree: s.alloc.largestFree(),
				ObjectID:    id,
			}
		}
		o.offset, o.allocated = off, true
	}
	s.objects[id] = o
	s.pin(o, client)
	s.createdTotal++
	o.seq = s.createdTotal
	return o.offset, nil
}

// Seal makes a created object visible to Get. Only its creator may seal it,
// once (ErrNotSealable otherwise). release=true also drops the creator's pin.
func (s *Store) Seal(id ids.ObjectID, client ids.ID, release bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isClosed {
		return &ObjectError{Op: "seal", ID: id, Err: ErrClosed}
	}
	o, ok := s.objects[id]
	if !ok {
		return &ObjectError{Op: "seal", ID: id, Err: ErrObjectNotFound}
	}
	if o.sealed {
		return &ObjectError{Op: "seal", ID: id, Err: fmt.Errorf("%w: already sealed", ErrNotSealable)}
	}
	if o.creator != client {
		return &ObjectError{Op: "seal", ID: id, Err: fmt.Errorf("%w: created by client %s, not %s", ErrNotSealable, o.creator, client)}
	}
	o.sealed = true
	if release {
		s.unpin(o, client)
	}
	s.untrackIfIdle(o, client)
	s.reclaimIfUnused(o)
	return nil
}

// Abort deletes a created-but-unsealed object and reclaims its region at
// once. Errors: ErrObjectNotFound, ErrAlreadySealed, ErrClosed.
func (s *Store) Abort(id ids.ObjectID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isClosed {
		return &ObjectError{Op: "abort", ID: id, Err: ErrClosed}
	}
	o, ok := s.objects[id]
	if !ok {
		return &ObjectError{Op: "abort", ID: id, Err: ErrObjectNotFound}
	}
	if o.sealed {
		return &ObjectError{Op: "abort", ID: id, Err: ErrAlreadySealed}
	}
	s.reclaim(o)
	return nil
}

// Get returns one Entry per id, in order. Objects that are sealed and not
// freed are Found and pinned once more for client (each must be Released);
// others have Found=false. After Close nothing is found.
func (s *Store) Get(objs []ids.ObjectID, client ids.ID) []Entry {
	out := make([]Entry, len(objs))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range objs {
		out[i].ID = id
		if s.isClosed {
			continue
		}
		o, ok := s.objects[id]
		if !ok || !o.sealed || o.freed {
			continue
		}
		s.pin(o, client)
		out[i] = o.entry()
	}
	return out
}

// Release drops one pin of client on each object. Ids the client does not
// pin are ignored. A freed object is reclaimed at its last release.
func (s *Store) Release(objs []ids.ObjectID, client ids.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range objs {
		if o, ok := s.objects[id]; ok && s.unpin(o, client) {
			s.reclaimIfUnused(o)
		}
	}
}

// Free marks objects as no longer needed: each is removed from view at once
// (Get and Contains stop finding it) and its region is reclaimed as soon as
// no client pins it. An unsealed object is reclaimed after its creator seals
// and releases it, or at Abort. Unknown ids are ignored.
func (s *Store) Free(objs []ids.ObjectID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range objs {
		if o, ok := s.objects[id]; ok {
			o.freed = true
			s.reclaimIfUnused(o)
		}
	}
}

// ReleaseClient drops every pin held by client (call it when the client
// disconnects) and aborts the objects it created but never sealed.
func (s *Store) ReleaseClient(client ids.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.clients[client]
	delete(s.clients, client)
	for id := range set {
		o, ok := s.objects[id]
		if !ok {
			continue
		}
		o.npins -= o.pins[client]
		delete(o.pins, client)
		if !o.sealed && o.creator == client {
			s.reclaim(o)
		} else {
			s.reclaimIfUnused(o)
		}
	}
}

// Contains reports whether id is sealed and not freed.
func (s *Store) Contains(id ids.ObjectID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[id]
	return ok && o.sealed && !o.freed
}

// Usage returns the arena's occupancy and lifetime counters.
func (s *Store) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Usage{
		Used:         s.alloc.used,
		Capacity:     s.capacity,
		Objects:      len(s.objects),
		CreatedTotal: s.createdTotal,
		FreedTotal:   s.freedTotal,
	}
}

// List returns every object in the store in any state (created, sealed,
// freed but still pinned), sorted by id. Found is true for all of them;
// Metadata is a copy.
func (s *Store) List() []Entry {
	s.mu.Lock()
	out := make([]Entry, 0, len(s.objects))
	for _, o := range s.objects {
		e := o.entry()
		e.Metadata = bytes.Clone(e.Metadata)
		out = append(out, e)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Entry) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return out
}

// ArenaPath returns a path another process of the same user (a storage
// plugin) can open to map the arena read-write: /proc/<pid>/fd/<memfd>.
func (s *Store) ArenaPath() string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), s.memfd)
}

// Data returns the arena bytes [offset, offset+size) from the store's own
// mapping, for direct reads and writes in the raylet's process. It returns
// nil when the range is outside the arena or the store is closed. Slices
// must not be used after Close (the memory is unmapped).
func (s *Store) Data(offset, size int64) []byte {
	if s.closed.Load() {
		return nil
	}
	return subslice(s.mem, offset, size)
}

// SocketPath returns the unix socket on which clients fetch the arena.
func (s *Store) SocketPath() string { return s.socketPath }

// Capacity returns the arena size in bytes.
func (s *Store) Capacity() int64 { return s.capacity }

// Close stops the listener, removes the socket file, unmaps the arena and
// closes the memfd. Later calls return nil. Every object is dropped; the
// memory itself is released once clients unmap their Mappings too.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.isClosed {
		s.mu.Unlock()
		return nil
	}
	s.isClosed = true
	s.closed.Store(true)
	s.objects = make(map[ids.ObjectID]*object)
	s.clients = make(map[ids.ID]map[ids.ObjectID]struct{})
	s.mu.Unlock()

	close(s.done)
	var errs []error
	if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		errs = append(errs, fmt.Errorf("objstore: closing listener: %w", err))
	}
	<-s.acceptDone
	if err := os.Remove(s.socketPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("objstore: removing socket: %w", err))
	}
	if err := unix.Munmap(s.mem); err != nil {
		errs = append(errs, fmt.Errorf("objstore: unmapping arena: %w", err))
	}
	if err := unix.Close(s.memfd); err != nil {
		errs = append(errs, fmt.Errorf("objstore: closing memfd: %w", err))
	}
	s.log.Info("object store closed")
	return errors.Join(errs...)
}

// pin adds one pin of client on o. Requires s.mu.
func (s *Store) pin(o *object, client ids.ID) {
	o.pins[client]++
	o.npins++
	set := s.clients[client]
	if set == nil {
		set = make(map[ids.ObjectID]struct{})
		s.clients[client] = set
	}
	set[o.id] = struct{}{}
}

// unpin drops one pin of client on o and reports whether it held one.
// Requires s.mu.
func (s *Store) unpin(o *object, client ids.ID) bool {
	n := o.pins[client]
	if n == 0 {
		return false
	}
	if n == 1 {
		delete(o.pins, client)
	} else {
		o.pins[client] = n - 1
	}
	o.npins--
	s.untrackIfIdle(o, client)
	return true
}

// untrackIfIdle removes o from client's set when client neither pins it nor
// is its unsealed creator. Requires s.mu.
func (s *Store) untrackIfIdle(o *object, client ids.ID) {
	if o.pins[client] > 0 || (!o.sealed && o.creator == client) {
		return
	}
	if set := s.clients[client]; set != nil {
		delete(set, o.id)
		if len(set) == 0 {
			delete(s.clients, client)
		}
	}
}

// reclaimIfUnused reclaims o if it was freed, is sealed, and nobody pins it.
// Unsealed objects are only reclaimed by Abort or their creator's
// ReleaseClient, since the creator may still be writing. Requires s.mu.
func (s *Store) reclaimIfUnused(o *object) {
	if o.freed && o.sealed && o.npins == 0 {
		s.reclaim(o)
	}
}

// reclaim removes o from the store and returns its region to the allocator.
// Requires s.mu.
func (s *Store) reclaim(o *object) {
	delete(s.objects, o.id)
	for c := range o.pins {
		s.dropFromClient(c, o.id)
	}
	s.dropFromClient(o.creator, o.id)
	if o.allocated {
		s.alloc.free(o.offset)
	}
	s.freedTotal++
}

func (s *Store) dropFromClient(client ids.ID, id ids.ObjectID) {
	if set := s.clients[client]; set != nil {
		delete(set, id)
		if len(set) == 0 {
			delete(s.clients, client)
		}
	}
}

func (o *object) entry() Entry {
	return Entry{
		ID:       o.id,
		Found:    true,
		Offset:   o.offset,
		DataSize: o.size,
		Metadata: o.metadata,
		Pins:     o.npins,
		Sealed:   o.sealed,
		Freed:    o.freed,
		Client:   o.creator,
		Seq:      o.seq,
	}
}

// subslice returns mem[offset:offset+size] with its capacity clipped, or nil
// if the range is out of bounds.
func subslice(mem []byte, offset, size int64) []byte {
	n := int64(len(mem))
	if offset < 0 || size < 0 || offset > n || size > n-offset {
		return nil
	}
	return mem[offset : offset+size : offset+size]
}
