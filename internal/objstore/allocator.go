package objstore

// Alignment is the alignment, in bytes, of every region the store hands out.
// Allocated sizes are rounded up to a multiple of it.
const Alignment = 64

// alignUp rounds n (>= 0, not near MaxInt64) up to a multiple of Alignment.
func alignUp(n int64) int64 { return (n + Alignment - 1) &^ (Alignment - 1) }

// allocator hands out Alignment-aligned regions of [0, capacity) using best
// fit: the smallest free block that is large enough (lowest offset among
// equals), split from its start. Freed regions are coalesced with free
// neighbours immediately, so free blocks are never adjacent.
//
// Free blocks are indexed three ways: by start offset and by end offset (maps,
// for O(1) neighbour lookup on free) and by (size, offset) in a treap (for
// O(log n) best-fit search). Every operation is O(log n) expected.
//
// The allocator is not safe for concurrent use; the Store serialises access.
type allocator struct {
	capacity int64           // usable bytes, a multiple of Alignment
	used     int64           // bytes in allocated blocks (aligned sizes)
	freeAt   map[int64]int64 // free block start -> size
	freeEnd  map[int64]int64 // free block end -> start
	inUse    map[int64]int64 // allocated block start -> aligned size
	bySize   treap           // free blocks ordered by (size, offset)
}

// newAllocator returns an allocator for capacity bytes rounded down to a
// multiple of Alignment.
func newAllocator(capacity int64) *allocator {
	a := &allocator{
		capacity: max(capacity, 0) &^ (Alignment - 1),
		freeAt:   make(map[int64]int64),
		freeEnd:  make(map[int64]int64),
		inUse:    make(map[int64]int64),
		bySize:   treap{seed: 0x9E3779B97F4A7C15},
	}
	if a.capacity > 0 {
		a.addFree(0, a.capacity)
	}
	return a
}

// alloc reserves a region of at least n bytes (n > 0) and returns its offset.
// ok is false when no free block is large enough (the arena is full or too
// fragmented) or n is not positive.
func (a *allocator) alloc(n int64) (off int64, ok bool) {
	if n <= 0 || n > a.capacity {
		return 0, false
	}
	size := alignUp(n)
	blk := a.bySize.lowerBound(size)
	if blk == nil {
		return 0, false
	}
	off, bsize := blk.off, blk.size
	a.removeFree(off, bsize)
	if rest := bsize - size; rest > 0 {
		a.addFree(off+size, rest)
	}
	a.inUse[off] = size
	a.used += size
	return off, true
}

// free returns the region starting at off to the free pool, merging it with
// adjacent free blocks. It reports false if off is not an allocated region.
func (a *allocator) free(off int64) bool {
	size, ok := a.inUse[off]
	if !ok {
		return false
	}
	delete(a.inUse, off)
	a.used -= size
	start, end := off, off+size
	if nsize, ok := a.freeAt[end]; ok { // right neighbour
		a.removeFree(end, nsize)
		end += nsize
	}
	if pstart, ok := a.freeEnd[start]; ok { // left neighbour
		a.removeFree(pstart, start-pstart)
		start = pstart
	}
	a.addFree(start, end-start)
	return true
}

// sizeOf returns the aligned size of the allocated region at off, or 0.
func (a *allocator) sizeOf(off int64) int64 { return a.inUse[off] }

// largestFree returns the size of the largest free block (0 if none).
func (a *allocator) largestFree() int64 {
	if n := a.bySize.max(); n != nil {
		return n.size
	}
	return 0
}

// freeBlocks returns the number of free blocks (a fragmentation measure).
func (a *allocator) freeBlocks() int { return len(a.freeAt) }

func (a *allocator) addFree(off, size int64) {
	a.freeAt[off] = size
	a.freeEnd[off+size] = off
	a.bySize.insert(size, off)
}

func (a *allocator) removeFree(off, size int64) {
	delete(a.freeAt, off)
	delete(a.freeEnd, off+size)
	a.bySize.remove(size, off)
}

// treap is a randomised balanced binary search tree of free blocks keyed by
// (size, offset) with a max-heap on priority.
type treap struct {
	root *tnode
	n    int
	seed uint64 // xorshift state for priorities
}

type tnode struct {
	size, off   int64
	prio        uint64
	left, right *tnode
}

// keyLess orders by size, then offset.
func keyLess(s1, o1, s2, o2 int64) bool { return s1 < s2 || (s1 == s2 && o1 < o2) }

func (t *treap) nextPrio() uint64 {
	x := t.seed
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	t.seed = x
	return x
}

// split divides n into keys < (size, off) and keys >= (size, off).
func split(n *tnode, size, off int64) (l, r *tnode) {
	if n == nil {
		return nil, nil
	}
	if keyLess(n.size, n.off, size, off) {
		n.right, r = split(n.right, size, off)
		return n, r
	}
	l, n.left = split(n.left, size, off)
	return l, n
}

// merge joins l and r where every key of l is below every key of r.
func merge(l, r *tnode) *tnode {
	switch {
	case l == nil:
		return r
	case r == nil:
		return l
	case l.prio > r.prio:
		l.right = merge(l.right, r)
		return l
	default:
		r.left = merge(l, r.left)
		return r
	}
}

func (t *treap) insert(size, off int64) {
	nd := &tnode{size: size, off: off, prio: t.nextPrio()}
	l, r := split(t.root, size, off)
	t.root = merge(merge(l, nd), r)
	t.n++
}

// remove deletes the node (size, off); it must be present.
func (t *treap) remove(size, off int64) {
	// Walk down to the node and splice it out by merging its children.
	link := &t.root
	for n := *link; n != nil; n = *link {
		switch {
		case n.size == size && n.off == off:
			*link = merge(n.left, n.right)
			t.n--
			return
		case keyLess(size, off, n.size, n.off):
			link = &n.left
		default:
			link = &n.right
		}
	}
}

// lowerBound returns the node with the smallest key whose size is >= size.
func (t *treap) lowerBound(size int64) *tnode {
	var best *tnode
	for n := t.root; n != nil; {
		if n.size >= size {
			best, n = n, n.left
		} else {
			n = n.right
		}
	}
	return best
}

func (t *treap) max() *tnode {
	n := t.root
	for n != nil && n.right != nil {
		n = n.right
	}
	return n
}
