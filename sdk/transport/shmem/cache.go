package shmem

import (
	"container/list"
	"fmt"
	"sync"
)

// DefaultIdle is how many unreferenced mappings the Default cache keeps.
const DefaultIdle = 16

// Default is the process-wide mapping cache used by transport.Tensor.Bytes.
var Default = NewCache(DefaultIdle)

// Cache shares mappings of segments inside one process: every byte range of
// a segment acquired through it is served from a single mapping, which is
// reference-counted. A mapping nobody references stays mapped (up to the
// cache's idle limit, least recently used first out) so acquiring the same
// segment again costs no mmap.
//
// Every Acquire checks that the segment still exists and is the same file:
// acquiring a segment that was unlinked fails with ErrNotFound even when
// this process still has it mapped. Acquire and Release also unmap idle
// mappings of segments that were unlinked meanwhile.
type Cache struct {
	mu      sync.Mutex
	maxIdle int
	entries map[string]*entry   // current mapping per name
	stale   map[string][]*entry // replaced mappings still referenced
	idle    *list.List          // of *entry with refs == 0, front = most recent
}

type entry struct {
	seg  *Segment
	refs int
	elem *list.Element // in idle when refs == 0
}

// NewCache returns a cache keeping at most maxIdle unreferenced mappings.
func NewCache(maxIdle int) *Cache {
	if maxIdle < 0 {
		maxIdle = 0
	}
	return &Cache{
		maxIdle: maxIdle,
		entries: make(map[string]*entry),
		stale:   make(map[string][]*entry),
		idle:    list.New(),
	}
}

// Acquire maps the byte range [offset, offset+length) of a segment and takes
// one reference to the segment's mapping. Release(name) drops it. A
// zero-length range returns an empty slice without touching the segment and
// takes no reference.
func (c *Cache) Acquire(name string, offset, length int64) ([]byte, error) {
	if length == 0 && offset >= 0 {
		return []byte{}, nil
	}
	size, ino, err := stat(name)
	if err != nil {
		c.mu.Lock()
		c.sweepLocked()
		c.mu.Unlock()
		return nil, err
	}
	if offset < 0 || length < 0 || offset > size || length > size-offset {
		return nil, &Error{Op: "map", Segment: name,
			Err: fmt.Errorf("%w: [%d, %d+%d) of %d bytes", ErrOutOfRange, offset, offset, length, size)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweepLocked()
	e := c.entries[name]
	if e != nil && (e.seg.ino != ino || e.seg.size != size) {
		c.retireLocked(name, e)
		e = nil
	}
	if e == nil {
		seg, err := Open(name)
		if err != nil {
			return nil, err
		}
		if seg.size < offset+length {
			_ = seg.Close()
			return nil, &Error{Op: "map", Segment: name,
				Err: fmt.Errorf("%w: segment shrank to %d bytes", ErrOutOfRange, seg.size)}
		}
		e = &entry{seg: seg}
		c.entries[name] = e
	}
	if e.refs == 0 && e.elem != nil {
		c.idle.Remove(e.elem)
		e.elem = nil
	}
	e.refs++
	return e.seg.data[offset : offset+length : offset+length], nil
}

// retireLocked takes a replaced mapping out of entries.
func (c *Cache) retireLocked(name string, e *entry) {
	delete(c.entries, name)
	if e.refs == 0 {
		if e.elem != nil {
			c.idle.Remove(e.elem)
			e.elem = nil
		}
		_ = e.seg.Close()
		return
	}
	c.stale[name] = append(c.stale[name], e)
}

// Release drops one reference taken by Acquire of the named segment. The
// bytes returned by that Acquire must not be used afterwards.
func (c *Cache) Release(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[name]; e != nil && e.refs > 0 {
		e.refs--
		if e.refs == 0 {
			e.elem = c.idle.PushFront(e)
			c.trimLocked()
			c.sweepLocked()
		}
		return
	}
	if st := c.stale[name]; len(st) > 0 {
		e := st[len(st)-1]
		e.refs--
		if e.refs == 0 {
			_ = e.seg.Close()
			st = st[:len(st)-1]
		}
		if len(st) == 0 {
			delete(c.stale, name)
		} else {
			c.stale[name] = st
		}
	}
}

func (c *Cache) trimLocked() {
	for c.idle.Len() > c.maxIdle {
		e := c.idle.Remove(c.idle.Back()).(*entry)
		e.elem = nil
		delete(c.entries, e.seg.name)
		_ = e.seg.Close()
	}
}

// sweepLocked unmaps idle mappings whose segment was unlinked or replaced,
// so a cached mapping never keeps a collected segment's memory alive for
// long.
func (c *Cache) sweepLocked() {
	for el := c.idle.Front(); el != nil; {
		next := el.Next()
		e := el.Value.(*entry)
		if _, ino, err := stat(e.seg.name); err != nil || ino != e.seg.ino {
			c.idle.Remove(el)
			e.elem = nil
			delete(c.entries, e.seg.name)
			_ = e.seg.Close()
		}
		el = next
	}
}

// Forget unmaps the named segment's mapping if nobody references it. A
// transport calls it after unlinking a segment so the memory is returned as
// soon as the other processes let go too.
func (c *Cache) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[name]; e != nil && e.refs == 0 {
		if e.elem != nil {
			c.idle.Remove(e.elem)
			e.elem = nil
		}
		delete(c.entries, name)
		_ = e.seg.Close()
	}
}

// Purge unmaps every unreferenced mapping.
func (c *Cache) Purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.idle.Len() > 0 {
		e := c.idle.Remove(c.idle.Back()).(*entry)
		e.elem = nil
		delete(c.entries, e.seg.name)
		_ = e.seg.Close()
	}
}

// Stats reports how many mappings the cache holds and how many of them are
// referenced.
func (c *Cache) Stats() (mapped, referenced int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		mapped++
		if e.refs > 0 {
			referenced++
		}
	}
	for _, st := range c.stale {
		mapped += len(st)
		referenced += len(st)
	}
	return mapped, referenced
}
