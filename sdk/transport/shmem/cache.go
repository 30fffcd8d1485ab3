package shmem

import (
	"container/list"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultIdle is how many unreferenced mappings the Default cache keeps.
const DefaultIdle = 16

// sweepEvery is how often a cache holding idle mappings checks whether
// their segments were unlinked, so that an idle process does not keep a
// collected segment's memory.
const sweepEvery = time.Second

// Default is the process-wide mapping cache used by transport.Tensor.Bytes.
var Default = NewCache(DefaultIdle)

// Cache shares mappings of segments inside one process: every byte range of
// a segment acquired through it is served from a single mapping, which is
// reference-counted. Mappings are kept by file, not by name, so a segment
// that comes back from a Pool under a new name is served from the mapping
// the process already has. A mapping nobody references stays mapped (up to
// the cache's idle limit, least recently used first out) so acquiring the
// same segment again costs no mmap and no page faults.
//
// While a segment is referenced, the cache holds a shared flock(2) on it:
// a Pool does not hand a segment out again while any process reads it.
//
// Every Acquire checks that the segment still exists under that name and
// is the same file: acquiring a segment that was unlinked (or returned to
// a pool) fails with ErrNotFound even when this process still has it
// mapped. Idle mappings of segments that were unlinked are unmapped on the
// next Acquire or Release, and within about a second otherwise.
type Cache struct {
	mu      sync.Mutex
	maxIdle int
	files   map[uint64]*entry   // by inode
	names   map[string][]*entry // referenced under this name, most recent last
	idle    *list.List          // of *entry with refs == 0, front = most recent
	sweeper *time.Timer         // armed while idle is not empty
}

type entry struct {
	seg  *Segment
	f    *os.File       // open while mapped: the lock, and fstat for unlinks
	refs int            // Acquires not Released
	by   map[string]int // references per name
	last string         // the name it was last acquired under
	elem *list.Element  // in idle when refs == 0
}

// NewCache returns a cache keeping at most maxIdle unreferenced mappings.
func NewCache(maxIdle int) *Cache {
	if maxIdle < 0 {
		maxIdle = 0
	}
	return &Cache{
		maxIdle: maxIdle,
		files:   make(map[uint64]*entry),
		names:   make(map[string][]*entry),
		idle:    list.New(),
	}
}

// Acquire maps the byte range [offset, offset+length) of a segment and takes
// one reference to the segment's mapping. Release(name) drops it. A
// zero-length range returns an empty slice without touching the segment and
// takes no reference.
func (c *Cache) Acquire(name string, offset, length int64) ([]byte, error) {
	b, _, err := c.AcquireMapping(name, offset, length)
	return b, err
}

// AcquireMapping is Acquire that also reports whether it made a new
// mapping (false: the bytes come from a mapping the process had, whose
// page tables are already filled). A transport that pins memory, for
// example with madvise(MADV_POPULATE_READ), need do so only for a new one.
func (c *Cache) AcquireMapping(name string, offset, length int64) (b []byte, mapped bool, err error) {
	if length == 0 && offset >= 0 {
		return []byte{}, false, nil
	}
	size, ino, err := stat(name)
	if err != nil {
		c.mu.Lock()
		c.sweepLocked()
		c.mu.Unlock()
		return nil, false, err
	}
	if err := checkRange(name, offset, length, size); err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweepLocked()
	e := c.files[ino]
	if e != nil && e.seg.size != size {
		c.dropLocked(e) // resized: map it again
		e = nil
	}
	if e == nil {
		if e, err = c.openLocked(name); err != nil {
			return nil, false, err
		}
		mapped = true
		if err := checkRange(name, offset, length, e.seg.size); err != nil {
			return nil, false, err
		}
	}
	if e.refs == 0 {
		// The shared lock first, then check the name: a Pool hands the
		// file out only under its exclusive lock and renames it first, so
		// once the lock is held the file cannot change hands, and the
		// name still naming it means it is the segment asked for.
		if err := unix.Flock(int(e.f.Fd()), unix.LOCK_SH); err != nil {
			return nil, false, opErr("lock", name, err)
		}
		if _, now, err := stat(name); err != nil || now != e.seg.ino {
			_ = unix.Flock(int(e.f.Fd()), unix.LOCK_UN)
			if err == nil {
				err = fmt.Errorf("%w: the name was given to another segment", ErrNotFound)
			}
			return nil, false, opErr("map", name, err)
		}
		if e.elem != nil {
			c.idle.Remove(e.elem)
			e.elem = nil
		}
	}
	e.refs++
	if e.by[name] == 0 {
		c.names[name] = append(c.names[name], e)
	}
	e.by[name]++
	e.last = name
	return e.seg.data[offset : offset+length : offset+length], mapped, nil
}

func checkRange(name string, offset, length, size int64) error {
	if offset < 0 || length < 0 || offset > size || length > size-offset {
		return &Error{Op: "map", Segment: name,
			Err: fmt.Errorf("%w: [%d, %d+%d) of %d bytes", ErrOutOfRange, offset, offset, length, size)}
	}
	return nil
}

// openLocked opens and maps a segment the cache has no mapping of, keeping
// its descriptor.
func (c *Cache) openLocked(name string) (*entry, error) {
	f, err := os.OpenFile(Path(name), os.O_RDWR, 0)
	if err != nil {
		return nil, opErr("open", name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, opErr("open", name, err)
	}
	seg, err := mapFile(f, name, fi.Size())
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if old := c.files[seg.ino]; old != nil {
		c.dropLocked(old) // resized between the stat and the open
	}
	e := &entry{seg: seg, f: f, by: make(map[string]int), last: name}
	c.files[seg.ino] = e
	return e, nil
}

// dropLocked forgets e: unmapped now if unreferenced, else when its last
// reference is released.
func (c *Cache) dropLocked(e *entry) {
	if c.files[e.seg.ino] == e {
		delete(c.files, e.seg.ino)
	}
	if e.refs == 0 {
		c.closeLocked(e)
	}
}

func (c *Cache) closeLocked(e *entry) {
	if e.elem != nil {
		c.idle.Remove(e.elem)
		e.elem = nil
	}
	if c.files[e.seg.ino] == e {
		delete(c.files, e.seg.ino)
	}
	_ = e.seg.Close()
	_ = e.f.Close()
}

// Release drops one reference taken by Acquire of the named segment. The
// bytes returned by that Acquire must not be used afterwards.
func (c *Cache) Release(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	es := c.names[name]
	if len(es) == 0 {
		return
	}
	e := es[len(es)-1]
	e.by[name]--
	if e.by[name] == 0 {
		delete(e.by, name)
		if es = es[:len(es)-1]; len(es) == 0 {
			delete(c.names, name)
		} else {
			c.names[name] = es
		}
	}
	e.refs--
	if e.refs > 0 {
		return
	}
	_ = unix.Flock(int(e.f.Fd()), unix.LOCK_UN)
	if c.files[e.seg.ino] != e {
		c.closeLocked(e) // replaced meanwhile
		return
	}
	e.elem = c.idle.PushFront(e)
	c.trimLocked()
	c.sweepLocked()
}

func (c *Cache) trimLocked() {
	for c.idle.Len() > c.maxIdle {
		c.closeLocked(c.idle.Back().Value.(*entry))
	}
}

// sweepLocked unmaps idle mappings whose segment was unlinked, so a cached
// mapping never keeps a collected segment's memory alive for long, and
// arms the sweeper while idle mappings remain.
func (c *Cache) sweepLocked() {
	for el := c.idle.Front(); el != nil; {
		next := el.Next()
		e := el.Value.(*entry)
		var st unix.Stat_t
		if err := unix.Fstat(int(e.f.Fd()), &st); err != nil || st.Nlink == 0 {
			c.closeLocked(e)
		}
		el = next
	}
	if c.idle.Len() > 0 && c.sweeper == nil {
		c.sweeper = time.AfterFunc(sweepEvery, c.sweep)
	}
}

func (c *Cache) sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweeper = nil
	c.sweepLocked()
}

// Forget unmaps the mapping of the segment last acquired under name if
// nobody references it. A transport calls it after unlinking a segment so
// the memory is returned as soon as the other processes let go too.
func (c *Cache) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for el := c.idle.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*entry); e.last == name {
			c.closeLocked(e)
			return
		}
	}
}

// Purge unmaps every unreferenced mapping.
func (c *Cache) Purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.idle.Len() > 0 {
		c.closeLocked(c.idle.Back().Value.(*entry))
	}
}

// Stats reports how many mappings the cache holds and how many of them are
// referenced.
func (c *Cache) Stats() (mapped, referenced int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[*entry]bool{}
	for _, e := range c.files {
		seen[e] = true
	}
	for _, es := range c.names {
		for _, e := range es {
			seen[e] = true
		}
	}
	for e := range seen {
		mapped++
		if e.refs > 0 {
			referenced++
		}
	}
	return mapped, referenced
}
