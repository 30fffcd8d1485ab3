package collective

// All-reduce among ranks that one instance hosts entirely (every rank of
// the group on one node): the ranks' calls meet in memory and reduce
// straight from each other's tensors.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/goray-dev/goray/sdk/transport"
)

// localKey names a group incarnation.
type localKey struct{ group, epoch string }

// localGroup is where the members of a group hosted entirely by this
// instance meet, one localOp per collective.
type localGroup struct {
	key  localKey
	n    int
	refs int // members using it; guarded by Transport.mu

	mu  sync.Mutex
	ops map[uint64]*localOp
}

// localOp is one all-reduce of a localGroup: every rank posts its header
// and tensor, and once all have (arrived), rank r reduces part r from all
// the tensors into its own (reduced), then copies the other parts from
// their owners (done). Once all have arrived nobody leaves before
// everyone is done, so no rank returns (and lets its caller change or free
// its tensor) while another still reads it; the work between the barriers
// never blocks.
type localOp struct {
	hdrs    []opHeader
	bufs    [][]byte
	arrived int
	all     chan struct{}
	reduced sync.WaitGroup
	done    sync.WaitGroup
	left    int // ranks past the last barrier; the last deletes the op
}

// acquireLocal returns the localGroup of (group, epoch), creating it.
func (t *Transport) acquireLocal(k localKey, n int) *localGroup {
	t.mu.Lock()
	defer t.mu.Unlock()
	lg := t.locals[k]
	if lg == nil {
		lg = &localGroup{key: k, n: n, ops: map[uint64]*localOp{}}
		t.locals[k] = lg
	}
	lg.refs++
	return lg
}

// releaseLocal drops a member's use of lg.
func (t *Transport) releaseLocal(lg *localGroup) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if lg.refs--; lg.refs == 0 && t.locals[lg.key] == lg {
		delete(t.locals, lg.key)
	}
}

// useLocal reports whether a group formed with roster is hosted entirely
// by this instance with in-process links on: its all-reduces then meet in
// memory (execLocal).
func (t *Transport) useLocal(roster ctrlMsg) bool {
	for _, a := range roster.Addrs {
		if !t.inProcess(a) {
			return false
		}
	}
	return len(roster.Addrs) > 1
}

// execLocal runs an all-reduce plan of a member whose group this
// instance hosts entirely. Part p is reduced in the ring's order, x_p op
// (x_{p-1} op (… op x_{p+1})), up to the operands' order within each op
// (a op b and b op a give the same bits), so the result equals the ring's.
// The op headers still go round the ring, so a rank that called another
// collective (on the ring) makes everyone fail with ErrBadMetadata.
func (m *member) execLocal(ctx context.Context, p *plan) error {
	m.mu.Lock()
	lg, next, prev, set := m.local, m.next, m.prev, m.set
	m.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		m.failLocal(call(p.hdr.Op, p.hdr.Seq), transport.ContextError(ctx))
	})
	hdrs := make(chan error, 2)
	go func() { hdrs <- m.sendHeader(ctx, p, next) }()
	go func() { hdrs <- m.recvHeader(ctx, p, prev) }()
	err := m.meet(ctx, lg, p, set)
	err = errors.Join(err, <-hdrs, <-hdrs)
	return m.outcome(err, !stop())
}

// meet posts the plan in lg's op and, once every rank has, does this
// rank's share.
func (m *member) meet(ctx context.Context, lg *localGroup, p *plan, set groupSettings) error {
	seq, n := p.hdr.Seq, lg.n
	lg.mu.Lock()
	op := lg.ops[seq]
	if op == nil {
		op = &localOp{hdrs: make([]opHeader, n), bufs: make([][]byte, n), all: make(chan struct{})}
		op.reduced.Add(n)
		op.done.Add(n)
		lg.ops[seq] = op
	}
	op.hdrs[m.rank], op.bufs[m.rank] = p.hdr, p.buf
	if op.arrived++; op.arrived == n {
		close(op.all)
	}
	lg.mu.Unlock()

	select {
	case <-op.all:
	case <-m.broken:
	case <-ctx.Done():
	}
	lg.mu.Lock()
	if op.arrived < n { // not everyone came: withdraw the tensor
		op.bufs[m.rank] = nil
		if op.arrived--; op.arrived == 0 {
			delete(lg.ops, seq)
		}
		lg.mu.Unlock()
		if err := m.causeErr(); err != nil {
			return err
		}
		return m.failLocal(call(p.hdr.Op, seq), transport.ContextError(ctx))
	}
	lg.mu.Unlock()

	var err error
	for q, h := range op.hdrs {
		if !h.equal(p.hdr) {
			err = fmt.Errorf("%w: rank %d called %s, this rank (%d) called %s", transport.ErrBadMetadata, q, h, m.rank, p.hdr)
			break
		}
	}
	if err == nil {
		m.reducePart(op, p, set)
	}
	op.reduced.Done()
	op.reduced.Wait()
	if err == nil {
		count := p.hdr.Count
		for q := range n {
			if q != m.rank {
				off, size := part(count, n, q, p.es)
				copy(p.buf[off:off+size], op.bufs[q][off:off+size])
			}
		}
	}
	op.done.Done()
	op.done.Wait()
	lg.mu.Lock()
	if op.left++; op.left == n {
		delete(lg.ops, seq)
	}
	lg.mu.Unlock()
	if err != nil {
		return m.failLocal(call(p.hdr.Op, seq), err)
	}
	return nil
}

// localChunk is the chunk reducePart accumulates in: it stays in the
// core's cache while every rank's bytes of it are added.
const localChunk = 256 << 10

// reducePart reduces part m.rank of every rank's tensor into this rank's,
// a cache-sized chunk at a time.
func (m *member) reducePart(op *localOp, p *plan, set groupSettings) {
	n, r := len(op.bufs), m.rank
	off, size := part(p.hdr.Count, n, r, p.es)
	own := p.buf[off : off+size]
	src := func(k int, lo, hi int64) []byte { return op.bufs[(r+k)%n][off+lo : off+hi] }
	if n == 2 {
		p.reduce(own, src(1, 0, size)) // x_r op x_{r+1}, as the ring
		return
	}
	cs := max(p.es, min(set.chunk, localChunk)/p.es*p.es)
	if int64(len(m.scratch)) < cs {
		m.scratch = make([]byte, cs)
	}
	for lo := int64(0); lo < size; lo += cs {
		hi := min(size, lo+cs)
		acc := m.scratch[:hi-lo]
		copy(acc, src(1, lo, hi))
		for k := 2; k < n; k++ {
			p.reduce(acc, src(k, lo, hi))
		}
		p.reduce(own[lo:hi], acc)
	}
}
