package collective

// Recursive doubling (small all-reduces), the group's settings and the
// choice of algorithm and chunk size.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"

	"github.com/goray-dev/goray/sdk/transport"
)

// groupSettings are rank 0's chunk_size, algorithm and
// recursive_doubling_max, sent in the roster so that every rank of a group
// cuts the same chunks and picks the same algorithm.
type groupSettings struct {
	chunk int64
	algo  string
	rdMax int64
}

// roster is rank 0's roster with this instance's settings.
func (t *Transport) roster(epoch string, addrs, nonces []string) ctrlMsg {
	cfg := t.config()
	return ctrlMsg{Type: ctrlRoster, Epoch: epoch, Addrs: addrs, Nonces: nonces,
		Chunk: cfg.ChunkSize, Algo: cfg.Algorithm, RDMax: cfg.RecursiveDoublingMax}
}

func settingsOf(roster ctrlMsg) groupSettings {
	return groupSettings{chunk: roster.Chunk, algo: roster.Algo, rdMax: roster.RDMax}
}

// validate checks settings received from rank 0.
func (s groupSettings) validate() error {
	c := Config{Timeout: 1, ChunkSize: s.chunk, Algorithm: s.algo, RecursiveDoublingMax: s.rdMax,
		KVNamespace: DefaultKVNamespace, SegmentPrefix: DefaultSegmentPrefix}
	return c.Validate()
}

// useDoubling reports whether an all-reduce of size bytes runs with
// recursive doubling: never when the group's algorithm is the ring or the
// tensor is larger than MaxChunkSize (each exchange needs a scratch copy of
// the tensor), always when it is recursive doubling, else (auto) up to
// rdMax bytes. A group of one rank has nothing to do.
func (s groupSettings) useDoubling(world int, size int64) bool {
	switch {
	case world < 2 || s.algo == AlgorithmRing || size > MaxChunkSize:
		return false
	case s.algo == AlgorithmRecursiveDoubling:
		return true
	}
	return size <= s.rdMax
}

// minAutoChunk is the smallest chunk chunkSize picks on its own (a chunk
// costs a frame header, a hand-off between the goroutines and, over TCP,
// a system call or two).
const minAutoChunk = 64 << 10

// chunkSize is the pipeline chunk of a plan whose largest step moves unit
// bytes: a quarter of the step (so that even a single step is pipelined,
// and every link of the ring is busy from early on), at least
// minAutoChunk and at most the group's chunk_size, in whole elements.
// Every rank computes the same from the same header.
func (s groupSettings) chunkSize(unit, es int64) int64 {
	cs := min(s.chunk, max(minAutoChunk, (unit+3)/4))
	return max(es, cs/es*es)
}

// partners are the ranks rank r exchanges with in recursive doubling over
// world ranks. With p the largest power of two ≤ world, ranks p..world-1
// first fold their tensor into rank r-p and get the result back from it;
// ranks 0..p-1 exchange with r XOR 2^k at step k.
func partners(world, r int) []int {
	if world < 2 || r < 0 || r >= world {
		return nil
	}
	p := 1 << (bits.Len(uint(world)) - 1)
	if r >= p {
		return []int{r - p}
	}
	var out []int
	if r+p < world {
		out = append(out, r+p)
	}
	for k := 1; k < p; k <<= 1 {
		out = append(out, r^k)
	}
	return out
}

// connectPeers connects the member's recursive-doubling links: it dials
// its higher partners and accepts its lower ones. Groups whose algorithm
// is the ring have none.
func (m *member) connectPeers(ctx context.Context, roster ctrlMsg) error {
	if settingsOf(roster).algo == AlgorithmRing {
		return nil
	}
	type dialed struct {
		rank int
		c    net.Conn
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	want := map[int]bool{} // lower partners still to accept
	var higher []int
	for _, q := range partners(m.world, m.rank) {
		if q > m.rank {
			higher = append(higher, q)
		} else {
			want[q] = true
		}
	}
	out := make(chan dialed, len(higher))
	for _, q := range higher {
		go func() {
			c, err := m.dialRank(ctx, roster, helloPeer, q, fmt.Sprintf("group %q link %d↔%d", m.group, m.rank, q))
			out <- dialed{q, c, err}
		}()
	}
	peers := map[int]net.Conn{}
	var err error
	for len(want) > 0 && err == nil {
		select {
		case in := <-m.peerIn:
			if !want[in.h.From] || in.h.Epoch != roster.Epoch {
				m.t.refuse(in.c, reply{Kind: replyStale, Error: fmt.Sprintf("rank %d of group %q expects no link from rank %d of epoch %s", m.rank, m.group, in.h.From, in.h.Epoch)})
				continue
			}
			if err = exchange(ctx, in.c, reply{}, nil); err != nil {
				m.t.closeConn(in.c)
				err = fmt.Errorf("accepting rank %d: %w", in.h.From, err)
				break
			}
			peers[in.h.From] = in.c
			delete(want, in.h.From)
		case <-ctx.Done():
			err = fmt.Errorf("waiting for ranks %v to connect: %w", keys(want), transport.ContextError(ctx))
		}
	}
	if err != nil {
		cancel()
	}
	for range higher {
		d := <-out
		if d.c != nil {
			peers[d.rank] = d.c
		}
		if err == nil {
			err = d.err
		}
	}
	m.mu.Lock()
	m.peers = peers
	m.mu.Unlock()
	return err
}

func keys(set map[int]bool) []int {
	var out []int
	for k := range set {
		out = append(out, k)
	}
	return out
}

// execDoubling runs an all-reduce plan by recursive doubling (see
// partners): at every step both partners send each other their whole
// tensor and reduce the other's into theirs, so after log2(p) steps every
// rank holds the result; the folded ranks get it back from their partner.
// Reductions commute (a op b and b op a give the same bits), so every
// rank ends with the same bits; floating-point sums may differ from the
// ring's in the last bits, as the association order differs.
func (m *member) execDoubling(ctx context.Context, p *plan) error {
	m.mu.Lock()
	peers, next, prev := m.peers, m.next, m.prev
	m.mu.Unlock()
	if int64(len(m.scratch)) < int64(len(p.buf)) {
		m.scratch = make([]byte, len(p.buf))
	}
	hdr, err := encodeFrame(p.hdr)
	if err != nil {
		return m.failLocal(call(p.hdr.Op, p.hdr.Seq), err)
	}
	d := doubling{m: m, ctx: ctx, p: p, peers: peers, hdr: hdr, scratch: m.scratch[:len(p.buf)]}
	stop := context.AfterFunc(ctx, func() {
		m.failLocal(call(p.hdr.Op, p.hdr.Seq), transport.ContextError(ctx))
	})
	// Every collective starts with the op headers on the ring, so a rank
	// that called another collective (which runs on the ring) sees the
	// mismatch; here they go alongside the exchanges.
	hdrs := make(chan error, 2)
	go func() { hdrs <- m.sendHeader(ctx, p, next) }()
	go func() { hdrs <- m.recvHeader(ctx, p, prev) }()
	err = d.run()
	err = errors.Join(err, <-hdrs, <-hdrs)
	return m.outcome(err, !stop())
}

// doubling is one recursive-doubling all-reduce.
type doubling struct {
	m       *member
	ctx     context.Context
	p       *plan
	peers   map[int]net.Conn
	hdr     []byte // the encoded op header, sent first in every message
	scratch []byte
}

func (d *doubling) run() error {
	m, buf := d.m, d.p.buf
	pw := 1 << (bits.Len(uint(m.world)) - 1)
	r := m.rank
	last := bits.Len(uint(pw)) // the step of the result sent back: after the log2(pw) exchanges
	if r >= pw {               // folded: give the tensor, get the result
		if err := d.send(r-pw, 0, buf); err != nil {
			return err
		}
		return d.recv(r-pw, last, buf)
	}
	step := 0
	if r+pw < m.world {
		if err := d.recv(r+pw, step, d.scratch); err != nil {
			return err
		}
		d.p.reduce(buf, d.scratch)
	}
	for k := 1; k < pw; k <<= 1 {
		step++
		sent := make(chan error, 1)
		go func() { sent <- d.send(r^k, step, buf) }()
		rerr := d.recv(r^k, step, d.scratch)
		serr := <-sent // buf is not written while it is being sent
		if err := errors.Join(rerr, serr); err != nil {
			return err
		}
		d.p.reduce(buf, d.scratch)
	}
	if r+pw < m.world {
		return d.send(r+pw, last, buf)
	}
	return nil
}

// link returns the connection to partner q.
func (d *doubling) link(q int) (net.Conn, error) {
	if c := d.peers[q]; c != nil {
		return c, nil
	}
	err := fmt.Errorf("no recursive-doubling link to rank %d (the group was formed with algorithm = ring)", q)
	return nil, d.m.failLocal(call(d.p.hdr.Op, d.p.hdr.Seq), err)
}

// send writes the op header and b as step's data frame to partner q.
func (d *doubling) send(q, step int, b []byte) error {
	c, err := d.link(q)
	if err != nil {
		return err
	}
	var dh [dataHeaderLen]byte
	putDataHeader(dh[:], step, int64(len(b)))
	bufs := net.Buffers{d.hdr, dh[:], b}
	if _, err := bufs.WriteTo(c); err != nil {
		return d.m.linkFailed(d.ctx, q, "sending to", err)
	}
	return nil
}

// recv reads partner q's op header, checks it against this rank's, and
// reads step's data frame into dst. A rank reduces only data whose sender
// called the same collective, and sends its result on only after that
// check: so no rank completes unless every rank's call matched (each
// checked its partners), and a rank that called another collective (on
// the ring) is caught by the ring's op headers.
func (d *doubling) recv(q, step int, dst []byte) error {
	c, err := d.link(q)
	if err != nil {
		return err
	}
	m, p := d.m, d.p
	var h opHeader
	if err := readFrame(c, &h); err != nil {
		return m.linkFailed(d.ctx, q, "receiving from", err)
	}
	if !h.equal(p.hdr) {
		err := fmt.Errorf("%w: rank %d called %s, this rank (%d) called %s", transport.ErrBadMetadata, q, h, m.rank, p.hdr)
		return m.failLocal(call(p.hdr.Op, p.hdr.Seq), err)
	}
	var dh [dataHeaderLen]byte
	if _, err := io.ReadFull(c, dh[:]); err != nil {
		return m.linkFailed(d.ctx, q, "receiving from", err)
	}
	if s, n := parseDataHeader(dh[:]); s != step || n != int64(len(dst)) {
		err := fmt.Errorf("protocol error: rank %d sent step %d of %d bytes, expected step %d of %d", q, s, n, step, len(dst))
		return m.failLocal(call(p.hdr.Op, p.hdr.Seq), err)
	}
	if _, err := io.ReadFull(c, dst); err != nil {
		return m.linkFailed(d.ctx, q, "receiving from", err)
	}
	return nil
}
