package collective

// The collectives: plans on the ring and the pipelined engine that runs
// them.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// xfer is one step of a plan on one ring connection: a byte range of the
// plan's buffer, sent to the next rank or received from the previous one.
type xfer struct {
	off, n int64
	// reduce (receives): combine the bytes into the buffer instead of
	// copying them.
	reduce bool
	// dep (sends): the receive whose chunk j must be complete before chunk
	// j of this send goes out; -1 for none. Both ranges have the same
	// length, so they are chunked alike.
	dep int
}

// plan is what one rank does in one collective.
type plan struct {
	hdr          opHeader
	buf          []byte
	es           int64 // element size: chunks are whole elements
	sends, recvs []xfer
	reduce       reduceFunc
	// unit is the size of the plan's largest step, from which the chunk
	// size follows (the same on every rank).
	unit int64
	// doubling: run by recursive doubling (execDoubling), not on the ring;
	// local: in memory among ranks this instance hosts (execLocal).
	doubling, local bool
}

// part returns the byte range of part i of count elements split over n
// ranks (transport.ReduceScatterCount).
func part(count int64, n, i int, es int64) (off, size int64) {
	i = ((i % n) + n) % n
	c, start := transport.ReduceScatterCount(count, n, i)
	return start * es, c * es
}

// ringSteps appends the steps of a ring reduce-scatter (rs) and/or
// all-gather (ag) over parts of the buffer to p. partOf(i) is part i's byte
// range. After the reduce-scatter rank r holds part r reduced; the
// all-gather then passes every part around. Send step t always forwards
// the range received at step t-1, chunk by chunk.
func (p *plan) ringSteps(n, r int, partOf func(i int) (int64, int64), rs, ag bool) {
	step := func(sendPart, recvPart int, reduce bool) {
		dep := len(p.recvs) - 1
		so, sn := partOf(sendPart)
		ro, rn := partOf(recvPart)
		p.sends = append(p.sends, xfer{off: so, n: sn, dep: dep})
		p.recvs = append(p.recvs, xfer{off: ro, n: rn, reduce: reduce, dep: -1})
	}
	if rs {
		for s := 0; s < n-1; s++ {
			step(r-1-s, r-2-s, true)
		}
	}
	if ag {
		for s := 0; s < n-1; s++ {
			step(r-s, r-1-s, false)
		}
	}
}

// chunks returns how many chunks an n-byte range takes (at least one, so an
// empty step still sends a frame: that is what makes Barrier wait).
func chunks(n, cs int64) int {
	if n <= 0 {
		return 1
	}
	return int((n + cs - 1) / cs)
}

// ---------------------------------------------------------------- calls

// AllReduce implements transport.Collective.
func (t *Transport) AllReduce(ctx context.Context, req *transport.AllReduceRequest) (*transport.AllReduceResponse, error) {
	if req == nil {
		req = &transport.AllReduceRequest{}
	}
	err := t.collective(ctx, req.Group, req.Rank, transport.OpAllReduce, func(m *member, seq uint64, maps *mappings) (*plan, error) {
		tn := req.Tensor
		if err := checkTensor("tensor", tn); err != nil {
			return nil, err
		}
		red, err := reducer(tn.DType, req.Op)
		if err != nil {
			return nil, err
		}
		buf, err := maps.bytes(ctx, "tensor", tn)
		if err != nil {
			return nil, err
		}
		es := int64(tn.DType.ElementSize())
		count := tn.ByteSize() / es
		p := &plan{buf: buf, es: es, reduce: red, hdr: opHeader{Seq: seq, Op: transport.OpAllReduce,
			DType: string(tn.DType), Count: count, Shape: tn.Shape, Reduce: string(req.Op.OrSum())}}
		set, local := m.settings()
		if set.useDoubling(m.world, int64(len(buf))) {
			p.doubling, p.hdr.Algo = true, AlgorithmRecursiveDoubling
			return p, nil
		}
		p.local = local && set.algo == AlgorithmAuto
		_, p.unit = part(count, m.world, 0, es)
		p.ringSteps(m.world, m.rank, func(i int) (int64, int64) { return part(count, m.world, i, es) }, true, true)
		return p, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &transport.AllReduceResponse{}, nil
}

// Broadcast implements transport.Collective: a pipelined chain along the
// ring from the root.
func (t *Transport) Broadcast(ctx context.Context, req *transport.BroadcastRequest) (*transport.BroadcastResponse, error) {
	if req == nil {
		req = &transport.BroadcastRequest{}
	}
	err := t.collective(ctx, req.Group, req.Rank, transport.OpBroadcast, func(m *member, seq uint64, maps *mappings) (*plan, error) {
		tn := req.Tensor
		if err := checkTensor("tensor", tn); err != nil {
			return nil, err
		}
		if req.Root < 0 || req.Root >= m.world {
			return nil, fmt.Errorf("%w: root %d outside [0, %d)", transport.ErrBadMetadata, req.Root, m.world)
		}
		buf, err := maps.bytes(ctx, "tensor", tn)
		if err != nil {
			return nil, err
		}
		es := int64(tn.DType.ElementSize())
		p := &plan{buf: buf, es: es, unit: int64(len(buf)), hdr: opHeader{Seq: seq, Op: transport.OpBroadcast,
			DType: string(tn.DType), Count: tn.ByteSize() / es, Shape: tn.Shape, Root: req.Root}}
		d := (m.rank - req.Root + m.world) % m.world
		n := int64(len(buf))
		if d != 0 {
			p.recvs = append(p.recvs, xfer{off: 0, n: n, dep: -1})
		}
		if d != m.world-1 {
			p.sends = append(p.sends, xfer{off: 0, n: n, dep: len(p.recvs) - 1})
		}
		return p, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &transport.BroadcastResponse{}, nil
}

// AllGather implements transport.Collective: the ring all-gather, in place
// in Output.
func (t *Transport) AllGather(ctx context.Context, req *transport.AllGatherRequest) (*transport.AllGatherResponse, error) {
	if req == nil {
		req = &transport.AllGatherRequest{}
	}
	err := t.collective(ctx, req.Group, req.Rank, transport.OpAllGather, func(m *member, seq uint64, maps *mappings) (*plan, error) {
		in, out := req.Input, req.Output
		if err := checkTensor("input", in); err != nil {
			return nil, err
		}
		if err := checkTensor("output", out); err != nil {
			return nil, err
		}
		if out.DType != in.DType || out.ByteSize() != int64(m.world)*in.ByteSize() {
			return nil, fmt.Errorf("%w: output %s must be %s with %d times the %d elements of input %s", transport.ErrBadMetadata,
				out.Meta(), in.DType, m.world, in.ByteSize()/int64(in.DType.ElementSize()), in.Meta())
		}
		blk := in.Buffer.Length
		// In place (as NCCL allows): the input is this rank's block of the
		// output. Any other overlap is refused.
		inPlace := in.Buffer.Segment == out.Buffer.Segment && in.Buffer.Offset == out.Buffer.Offset+int64(m.rank)*blk
		if !inPlace && overlap(in, out) {
			return nil, fmt.Errorf("%w: input and output overlap (in place, the input must be block %d of the output)", transport.ErrBadMetadata, m.rank)
		}
		src, err := maps.bytes(ctx, "input", in)
		if err != nil {
			return nil, err
		}
		buf, err := maps.bytes(ctx, "output", out)
		if err != nil {
			return nil, err
		}
		es := int64(in.DType.ElementSize())
		if !inPlace {
			copy(buf[int64(m.rank)*blk:], src)
		}
		p := &plan{buf: buf, es: es, unit: blk, hdr: opHeader{Seq: seq, Op: transport.OpAllGather,
			DType: string(in.DType), Count: blk / es, Shape: in.Shape}}
		p.ringSteps(m.world, m.rank, func(i int) (int64, int64) {
			i = ((i % m.world) + m.world) % m.world
			return int64(i) * blk, blk
		}, false, true)
		return p, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &transport.AllGatherResponse{}, nil
}

// ReduceScatter implements transport.Collective: the ring reduce-scatter
// on a private copy of Input, whose part Rank is then copied to Output.
func (t *Transport) ReduceScatter(ctx context.Context, req *transport.ReduceScatterRequest) (*transport.ReduceScatterResponse, error) {
	if req == nil {
		req = &transport.ReduceScatterRequest{}
	}
	var out []byte
	var outOff, outLen int64
	err := t.collective(ctx, req.Group, req.Rank, transport.OpReduceScatter, func(m *member, seq uint64, maps *mappings) (*plan, error) {
		in, o := req.Input, req.Output
		if err := checkTensor("input", in); err != nil {
			return nil, err
		}
		if err := checkTensor("output", o); err != nil {
			return nil, err
		}
		es := int64(in.DType.ElementSize())
		count := in.ByteSize() / es
		want, _ := transport.ReduceScatterCount(count, m.world, m.rank)
		if o.DType != in.DType || o.ByteSize() != want*es {
			return nil, fmt.Errorf("%w: output %s must be %s with %d elements (part %d of %d elements over %d ranks)", transport.ErrBadMetadata,
				o.Meta(), in.DType, want, m.rank, count, m.world)
		}
		red, err := reducer(in.DType, req.Op)
		if err != nil {
			return nil, err
		}
		src, err := maps.bytes(ctx, "input", in)
		if err != nil {
			return nil, err
		}
		if out, err = maps.bytes(ctx, "output", o); err != nil {
			return nil, err
		}
		buf := slices.Clone(src)
		p := &plan{buf: buf, es: es, reduce: red, hdr: opHeader{Seq: seq, Op: transport.OpReduceScatter,
			DType: string(in.DType), Count: count, Shape: in.Shape, Reduce: string(req.Op.OrSum())}}
		_, p.unit = part(count, m.world, 0, es)
		p.ringSteps(m.world, m.rank, func(i int) (int64, int64) { return part(count, m.world, i, es) }, true, false)
		outOff, outLen = part(count, m.world, m.rank, es)
		return p, nil
	}, func(p *plan) {
		copy(out, p.buf[outOff:outOff+outLen])
	})
	if err != nil {
		return nil, err
	}
	return &transport.ReduceScatterResponse{}, nil
}

// Barrier implements transport.Collective: an all-gather of nothing, whose
// n-1 empty steps each wait for the previous rank, so a rank leaves only
// once every rank has entered.
func (t *Transport) Barrier(ctx context.Context, req *transport.BarrierRequest) (*transport.BarrierResponse, error) {
	if req == nil {
		req = &transport.BarrierRequest{}
	}
	err := t.collective(ctx, req.Group, req.Rank, transport.OpBarrier, func(m *member, seq uint64, _ *mappings) (*plan, error) {
		p := &plan{es: 1, hdr: opHeader{Seq: seq, Op: transport.OpBarrier}}
		p.ringSteps(m.world, m.rank, func(int) (int64, int64) { return 0, 0 }, false, true)
		return p, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &transport.BarrierResponse{}, nil
}

// checkTensor validates a tensor argument; errors match ErrBadMetadata or
// ErrNotSupported.
func checkTensor(what string, tn transport.Tensor) error {
	if err := tn.Validate(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !tn.Meta().IsCPU() {
		return fmt.Errorf("%s is on device %q: %w (the collective transport handles cpu tensors)", what, tn.Device, transport.ErrNotSupported)
	}
	return nil
}

// overlap reports whether two tensors share bytes.
func overlap(a, b transport.Tensor) bool {
	if a.Buffer.Length == 0 || b.Buffer.Length == 0 || a.Buffer.Segment != b.Buffer.Segment {
		return false
	}
	return a.Buffer.Offset < b.Buffer.Offset+b.Buffer.Length && b.Buffer.Offset < a.Buffer.Offset+a.Buffer.Length
}

// mappings holds the tensor mappings of one call until it ends.
type mappings struct{ held []transport.Tensor }

func (ms *mappings) bytes(ctx context.Context, what string, tn transport.Tensor) ([]byte, error) {
	b, err := tn.Bytes(ctx)
	if err != nil {
		if errors.Is(err, shmem.ErrNotFound) || errors.Is(err, shmem.ErrOutOfRange) || errors.Is(err, shmem.ErrBadName) {
			err = fmt.Errorf("%w: %s: %v", transport.ErrBadMetadata, what, err)
		}
		return nil, err
	}
	if tn.Buffer.Length > 0 {
		ms.held = append(ms.held, tn)
	}
	return b, nil
}

func (ms *mappings) release() {
	for _, tn := range ms.held {
		tn.Release()
	}
	ms.held = nil
}

// ---------------------------------------------------------------- engine

// collective runs one call: it finds the member, takes its turn, builds
// the plan (prepare) and runs it, then finish (if any) on success. Any
// failure of a call on a hosted member breaks the group (see package doc).
func (t *Transport) collective(ctx context.Context, group string, rank int, op string,
	prepare func(m *member, seq uint64, maps *mappings) (*plan, error), finish func(*plan)) error {
	m, err := t.member(group, rank)
	if err != nil {
		return collErr(group, rank, op, err)
	}
	if err := m.run(ctx, op, prepare, finish); err != nil {
		return collErr(group, rank, op, err)
	}
	return nil
}

func (m *member) run(ctx context.Context, op string, prepare func(*member, uint64, *mappings) (*plan, error), finish func(*plan)) error {
	select {
	case m.ops <- struct{}{}:
	case <-m.broken:
		select {
		case m.ops <- struct{}{}: // nothing of this rank runs: refused below
		default:
			return m.causeErr() // this rank's running collective ends the links (endTurn)
		}
	case <-ctx.Done():
		return m.failLocal(op, fmt.Errorf("waiting for this rank's previous collective: %w", transport.ContextError(ctx)))
	}
	defer m.endTurn()
	if err := m.causeErr(); err != nil {
		return err
	}
	seq := m.seq
	m.seq++
	opCtx, cancel := context.WithTimeout(ctx, m.t.config().Timeout)
	defer cancel()

	var maps mappings
	defer maps.release()
	p, err := prepare(m, seq, &maps)
	if err != nil {
		return m.failLocal(call(op, seq), err)
	}
	if m.world > 1 {
		exec := m.exec
		switch {
		case p.doubling:
			exec = m.execDoubling
		case p.local:
			exec = m.execLocal
		}
		if err := exec(opCtx, p); err != nil {
			return err
		}
	}
	if finish != nil {
		finish(p)
	}
	return nil
}

// endTurn ends this rank's turn (run). A rank that left the group does
// not break the links (a collective it completed before it left may still
// be completing here), but no new collective can complete without it: so
// once this rank's collective has ended, or been refused, after a rank
// left, its links are closed, and a partner that started a new collective
// fails now instead of waiting for it until the timeout.
func (m *member) endTurn() {
	if f := m.failure(); f != nil && f.kind == kindLeft {
		m.closeRing()
	}
	<-m.ops
}

// exec runs a plan on the ring: a sender goroutine writes the header and
// the send steps to the next rank while this goroutine reads the previous
// rank's header and receive steps. Send chunk j of a step waits until
// receive chunk j of the step it depends on is complete; receives never
// wait for sends.
func (m *member) exec(ctx context.Context, p *plan) error {
	m.mu.Lock()
	next, prev, set := m.next, m.prev, m.set
	m.mu.Unlock()
	cs := set.chunkSize(p.unit, p.es)
	if p.reduce != nil && int64(len(m.scratch)) < cs {
		m.scratch = make([]byte, cs)
	}
	// The deadline or cancellation of the call breaks the group; that
	// closes the ring connections, which unblocks both goroutines.
	stop := context.AfterFunc(ctx, func() {
		m.failLocal(call(p.hdr.Op, p.hdr.Seq), transport.ContextError(ctx))
	})
	base := make([]int, len(p.recvs)+1) // chunks received before recv i
	for i, x := range p.recvs {
		base[i+1] = base[i] + chunks(x.n, cs)
	}
	progress := make(chan struct{}, base[len(p.recvs)])
	quit := make(chan struct{})
	sent := make(chan error, 1)
	go func() { sent <- m.sendSteps(ctx, p, next, cs, base, progress, quit) }()
	rerr := m.recvSteps(ctx, p, prev, cs, progress)
	if rerr != nil {
		close(quit)
	}
	serr := <-sent
	return m.outcome(errors.Join(rerr, serr), !stop())
}

// outcome is the result of a collective whose steps returned err and
// whose context's deadline or cancellation fired (or not).
func (m *member) outcome(err error, fired bool) error {
	if err == nil && !fired {
		return nil
	}
	// The group is broken now (by whoever failed first); report this
	// rank's own failure if it was the first, else the peer's.
	if f := m.failure(); f != nil && f.local && f.rank == m.rank && f.err != nil {
		return f.err
	}
	if err := m.causeErr(); err != nil {
		return err
	}
	return err // not reached: a failed step breaks the group
}

// settings returns the group's settings and whether this instance hosts
// every rank.
func (m *member) settings() (groupSettings, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.set, m.local != nil
}

// sendSteps writes the header and the plan's sends to the next rank.
func (m *member) sendSteps(ctx context.Context, p *plan, c net.Conn, cs int64, base []int, progress <-chan struct{}, quit <-chan struct{}) error {
	next := (m.rank + 1) % m.world
	if err := m.sendHeader(ctx, p, c); err != nil {
		return err
	}
	var hdr [dataHeaderLen]byte
	done := 0 // receive chunks known complete
	broken := m.broken
	for i, x := range p.sends {
		k := chunks(x.n, cs)
		for j := range k {
			if x.dep >= 0 {
				for need := base[x.dep] + j + 1; done < need; {
					select {
					case <-progress:
						done++
					case <-quit:
						return errors.New("receive failed")
					case <-broken:
						if f := m.failure(); f.kind == kindLeft {
							// A rank that left after completing its part:
							// this collective can still complete; if it
							// cannot, the receive fails (quit).
							broken = nil
							break
						}
						return m.causeErr()
					}
				}
			}
			off := x.off + int64(j)*cs
			n := min(cs, x.n-int64(j)*cs)
			if x.n == 0 {
				off, n = x.off, 0
			}
			putDataHeader(hdr[:], i, n)
			bufs := net.Buffers{hdr[:], p.buf[off : off+n]}
			if _, err := bufs.WriteTo(c); err != nil {
				return m.linkFailed(ctx, next, "sending to", err)
			}
		}
	}
	return nil
}

// sendHeader writes the plan's op header to the next rank.
func (m *member) sendHeader(ctx context.Context, p *plan, c net.Conn) error {
	if err := writeFrame(c, p.hdr); err != nil {
		return m.linkFailed(ctx, (m.rank+1)%m.world, "sending to", err)
	}
	return nil
}

// recvHeader reads the previous rank's op header and checks that it
// called the same collective as this rank.
func (m *member) recvHeader(ctx context.Context, p *plan, c net.Conn) error {
	prev := (m.rank - 1 + m.world) % m.world
	var h opHeader
	if err := readFrame(c, &h); err != nil {
		return m.linkFailed(ctx, prev, "receiving from", err)
	}
	if !h.equal(p.hdr) {
		err := fmt.Errorf("%w: rank %d called %s, this rank (%d) called %s", transport.ErrBadMetadata, prev, h, m.rank, p.hdr)
		return m.failLocal(call(p.hdr.Op, p.hdr.Seq), err)
	}
	return nil
}

// recvSteps reads the header and the plan's receives from the previous
// rank, reducing into or copying to the buffer, and reports each chunk.
func (m *member) recvSteps(ctx context.Context, p *plan, c net.Conn, cs int64, progress chan<- struct{}) error {
	prev := (m.rank - 1 + m.world) % m.world
	if err := m.recvHeader(ctx, p, c); err != nil {
		return err
	}
	var hdr [dataHeaderLen]byte
	for i, x := range p.recvs {
		k := chunks(x.n, cs)
		for j := range k {
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return m.linkFailed(ctx, prev, "receiving from", err)
			}
			off := x.off + int64(j)*cs
			n := min(cs, x.n-int64(j)*cs)
			if x.n == 0 {
				off, n = x.off, 0
			}
			step, got := parseDataHeader(hdr[:])
			if step != i || got != n {
				err := fmt.Errorf("protocol error: rank %d sent step %d chunk of %d bytes, expected step %d chunk of %d", prev, step, got, i, n)
				return m.failLocal(call(p.hdr.Op, p.hdr.Seq), err)
			}
			dst := p.buf[off : off+n]
			if x.reduce {
				if err := readReduce(c, dst, p.es, m.scratch, p.reduce); err != nil {
					return m.linkFailed(ctx, prev, "receiving from", err)
				}
			} else if _, err := io.ReadFull(c, dst); err != nil {
				return m.linkFailed(ctx, prev, "receiving from", err)
			}
			progress <- struct{}{}
		}
	}
	return nil
}

// funcReader is a connection whose reader can work on the writer's bytes
// in place (memConn).
type funcReader interface {
	readFunc(max int, fn func([]byte) int) (int, error)
}

// readReduce reads len(dst) bytes from c and reduces them into dst: in
// place from the writer's memory when c is in-process, else through
// scratch (at least one element long, a whole number of elements).
func readReduce(c io.Reader, dst []byte, es int64, scratch []byte, red reduceFunc) error {
	if fr, ok := c.(funcReader); ok {
		for len(dst) > 0 {
			whole := 0
			if _, err := fr.readFunc(len(dst), func(b []byte) int {
				whole = len(b) / int(es) * int(es)
				if whole > 0 {
					red(dst[:whole], b[:whole])
				}
				return whole
			}); err != nil {
				return err
			}
			if whole == 0 {
				break // a partial element: finish through scratch
			}
			dst = dst[whole:]
		}
	}
	for len(dst) > 0 {
		n := min(len(dst), len(scratch)/int(es)*int(es))
		if _, err := io.ReadFull(c, scratch[:n]); err != nil {
			return err
		}
		red(dst[:n], scratch[:n])
		dst = dst[n:]
	}
	return nil
}

// linkFailed explains a failed read or write on the ring connection to
// peer. If the call's context ended, that is the reason (and the group is
// already broken). Otherwise the control connections usually say why
// within moments (a peer's notice relayed by rank 0, rank 0 noticing a
// death); failing that, the neighbour is blamed and the group broken.
// Either way this rank's ring connections are done for: they are closed,
// which also unblocks the collective's other goroutine.
func (m *member) linkFailed(ctx context.Context, peer int, dir string, err error) error {
	defer m.closeRing()
	if ctx.Err() != nil {
		return transport.ContextError(ctx)
	}
	tm := time.NewTimer(noticeGrace)
	defer tm.Stop()
	select {
	case <-m.broken:
	case <-ctx.Done():
		return transport.ContextError(ctx)
	case <-tm.C:
		m.fail(failure{rank: peer, kind: kindRankFailed, msg: fmt.Sprintf("%s rank %d failed: %v", dir, peer, err)}, -1)
	}
	return m.causeErr()
}

// closeRing closes the ring connections and the recursive-doubling links.
func (m *member) closeRing() {
	m.mu.Lock()
	links := m.linksLocked()
	m.mu.Unlock()
	for _, c := range links {
		m.t.closeConn(c)
	}
}

// linksLocked returns the member's data connections: the ring's and the
// recursive-doubling links. m.mu is held.
func (m *member) linksLocked() []net.Conn {
	links := []net.Conn{m.next, m.prev}
	for _, c := range m.peers {
		links = append(links, c)
	}
	return links
}
