package onesided

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// ErrNotLocal is returned by Locate when the source agent is not in this
// agent's shared-memory domain (or same_node_shm is off): its memory must
// be read with PostRead.
var ErrNotLocal = errors.New("source agent is not in this shared-memory domain")

// pipelineDepth is how many requests a stream keeps in flight on one
// connection.
const pipelineDepth = 2

// RegionRef names a byte range of a registered region of a remote agent.
type RegionRef struct {
	Registration   uint64
	Offset, Length int64
}

// Read is one range to read and where it goes: the local buffer Dst
// (len(Dst) == Region.Length), or, when Dst is nil, the file DstFile (a
// shared-memory segment) at DstOffset. A file destination is written by
// the kernel (pwrite, copy_file_range) within a shared-memory domain, so
// it is never mapped; over TCP it is mapped for the transfer. The file
// must stay open until the request is done.
type Read struct {
	Region    RegionRef
	Dst       []byte
	DstFile   *os.File
	DstOffset int64
}

// ReadDesc describes a read request: ranges of one agent's registered
// memory, read under the access key of one extraction.
type ReadDesc struct {
	// ObjectID is for messages only.
	ObjectID string
	// Agent is the source agent's name.
	Agent string
	// Incarnation, when set, is the source agent's incarnation the ranges
	// belong to; another incarnation fails with transport.ErrBadMetadata.
	Incarnation string
	// MinVersion is the agent metadata version the ranges need; an older
	// cached copy is refreshed from the KV first.
	MinVersion uint64
	// Key is the extraction's access key.
	Key uint64
	// Reads are the ranges; with none, PostRead only checks that the
	// extraction is alive.
	Reads []Read
}

// Path is how a transfer moves bytes.
type Path string

// Paths of a transfer.
const (
	// PathSHM maps the source's segment and copies (same shared-memory
	// domain).
	PathSHM Path = "shm"
	// PathTCP reads from the source agent's read server.
	PathTCP Path = "tcp"
)

// XferState is the state of a transfer request.
type XferState int32

// States of a transfer request.
const (
	// XferPending: posted, not finished.
	XferPending XferState = iota
	// XferDone: every byte was read.
	XferDone
	// XferFailed: the transfer failed (see Xfer.Err), including a deadline.
	XferFailed
	// XferAborted: Abort was called, or the context was cancelled or the
	// object aborted.
	XferAborted
)

// String names the state.
func (s XferState) String() string {
	switch s {
	case XferPending:
		return "pending"
	case XferDone:
		return "done"
	case XferFailed:
		return "failed"
	case XferAborted:
		return "aborted"
	}
	return "XferState(" + strconv.Itoa(int(s)) + ")"
}

// Xfer is a posted read request (NIXL's transfer request handle). It runs
// in the background until every byte is in its destination buffers, it
// fails, or it is aborted.
type Xfer struct {
	a      *Agent
	desc   ReadDesc
	path   Path
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	state  atomic.Int32
	bytes  atomic.Int64
	posted time.Time

	// set before done is closed
	err      error
	finished time.Time
}

// State returns the request's state (NIXL's getXferStatus).
func (x *Xfer) State() XferState { return XferState(x.state.Load()) }

// Done is closed when the request has finished; no buffer is written
// after that.
func (x *Xfer) Done() <-chan struct{} { return x.done }

// Err returns why the request failed or was aborted; nil while it is
// pending or when it is done.
func (x *Xfer) Err() error {
	select {
	case <-x.done:
		return x.err
	default:
		return nil
	}
}

// Wait waits until the request has finished and returns its error, or
// returns transport.ContextError(ctx) when ctx ends first (the request then
// keeps running: Abort it and wait for Done before reusing its buffers).
func (x *Xfer) Wait(ctx context.Context) error {
	select {
	case <-x.done:
		return x.err
	case <-ctx.Done():
		select {
		case <-x.done:
			return x.err
		default:
		}
		return transport.ContextError(ctx)
	}
}

// Abort stops the request: it ends with an error matching
// transport.ErrAborted that carries reason, promptly (connections in use
// are closed). Aborting a finished request does nothing.
func (x *Xfer) Abort(reason string) {
	if reason == "" {
		reason = "no reason given"
	}
	x.cancel(fmt.Errorf("%w: %s", transport.ErrAborted, reason))
}

// Path returns how the request moves bytes.
func (x *Xfer) Path() Path { return x.path }

// Bytes returns how many bytes have been read so far.
func (x *Xfer) Bytes() int64 { return x.bytes.Load() }

// Duration returns how long the request took (so far, while pending).
func (x *Xfer) Duration() time.Duration {
	select {
	case <-x.done:
		return x.finished.Sub(x.posted)
	default:
		return time.Since(x.posted)
	}
}

func (x *Xfer) finish(err error) {
	if err != nil && x.ctx.Err() != nil {
		err = transport.ContextError(x.ctx)
	}
	st := XferDone
	switch {
	case err == nil:
		x.a.xDone.Add(1)
	case errors.Is(err, transport.ErrAborted) || errors.Is(err, context.Canceled):
		st = XferAborted
		x.a.xAborted.Add(1)
	default:
		st = XferFailed
		x.a.xFailed.Add(1)
	}
	if err != nil && x.desc.ObjectID != "" && !errors.Is(err, transport.ErrAborted) {
		x.a.log.Debug("read failed", "object", x.desc.ObjectID, "peer", x.desc.Agent, "path", x.path, "error", err)
	}
	x.err = err
	x.finished = time.Now()
	x.state.Store(int32(st))
	close(x.done)
	x.cancel(nil)
}

// validateDesc checks a descriptor's shape (not what it names); withDst
// requires a destination of the right length for every read.
func validateDesc(d *ReadDesc, withDst bool) error {
	if err := validName(d.Agent); err != nil {
		return badMeta(nil, "%v", err)
	}
	if d.Key == 0 {
		return badMeta(nil, "zero access key")
	}
	for i, r := range d.Reads {
		switch {
		case r.Region.Length < 0 || r.Region.Offset < 0:
			return badMeta(ErrOutOfBounds, "read %d: negative range", i)
		case withDst && r.Dst == nil && r.DstFile == nil:
			return fmt.Errorf("read %d: no destination: %w", i, transport.ErrBadMetadata)
		case withDst && r.Dst != nil && int64(len(r.Dst)) != r.Region.Length:
			return fmt.Errorf("read %d: destination of %d bytes for %d: %w", i, len(r.Dst), r.Region.Length, transport.ErrBadMetadata)
		case withDst && r.Dst == nil && r.DstOffset < 0:
			return fmt.Errorf("read %d: negative destination offset: %w", i, transport.ErrBadMetadata)
		case r.Region.Registration == 0:
			return badMeta(ErrUnknownRegistration, "read %d: registration 0", i)
		}
	}
	return nil
}

// resolve returns metadata of the source agent good enough for desc,
// refreshing the cache once if it is missing or stale. refreshed reports a
// refresh.
func (a *Agent) resolve(ctx context.Context, d *ReadDesc) (m *AgentMetadata, refreshed bool, err error) {
	if d.Agent == a.name {
		if d.Incarnation != "" && d.Incarnation != a.incHex {
			return nil, false, badMeta(ErrUnknownAgent, "agent %s restarted (incarnation %s, transport data of %s): the object is lost", a.name, a.incHex, d.Incarnation)
		}
		// Regions are checked against the live tables when reading.
		return &AgentMetadata{Name: a.name, Incarnation: a.incHex, Endpoint: a.addr, ShmDomain: a.domain}, false, nil
	}
	m = a.cachedPeer(d.Agent)
	if m == nil || stale(m, d) {
		if m, err = a.refreshPeer(ctx, d.Agent); err != nil {
			return nil, true, err
		}
		refreshed = true
	}
	return m, refreshed, checkAgainst(m, d)
}

// stale reports whether cached metadata may not cover desc.
func stale(m *AgentMetadata, d *ReadDesc) bool {
	if m.Version < d.MinVersion || (d.Incarnation != "" && m.Incarnation != d.Incarnation) {
		return true
	}
	for _, r := range d.Reads {
		if _, ok := m.region(r.Region.Registration); !ok {
			return true
		}
	}
	return false
}

// checkAgainst checks desc against the source agent's metadata.
func checkAgainst(m *AgentMetadata, d *ReadDesc) error {
	if d.Incarnation != "" && m.Incarnation != d.Incarnation {
		return badMeta(ErrUnknownAgent, "agent %s restarted (incarnation %s, transport data of %s): the object is lost", m.Name, m.Incarnation, d.Incarnation)
	}
	if m.Version < d.MinVersion {
		return badMeta(nil, "metadata of agent %s has version %d, the transport data needs %d", m.Name, m.Version, d.MinVersion)
	}
	for i, r := range d.Reads {
		reg, ok := m.region(r.Region.Registration)
		if !ok {
			return badMeta(ErrUnknownRegistration, "agent %s has no registration %d (metadata version %d): the object was collected", m.Name, r.Region.Registration, m.Version)
		}
		if r.Region.Offset > reg.Size || r.Region.Length > reg.Size-r.Region.Offset {
			return badMeta(ErrOutOfBounds, "read %d: [%d, %d+%d) outside registration %d of %d bytes", i, r.Region.Offset, r.Region.Offset, r.Region.Length, reg.ID, reg.Size)
		}
	}
	return nil
}

// retryable reports errors after which fresh metadata may help.
func retryable(err error) bool {
	return errors.Is(err, ErrUnknownRegistration) || errors.Is(err, ErrUnknownObject) || errors.Is(err, ErrSourceUnreachable)
}

// withRefresh runs f with m; if it fails in a way fresh metadata may fix
// and no refresh happened yet, it refreshes once and, if the metadata
// changed and still covers desc, runs f again.
func (a *Agent) withRefresh(ctx context.Context, d *ReadDesc, m *AgentMetadata, refreshed bool, f func(*AgentMetadata) error) error {
	err := f(m)
	if err == nil || refreshed || ctx.Err() != nil || d.Agent == a.name || !retryable(err) {
		return err
	}
	m2, rerr := a.refreshPeer(ctx, d.Agent)
	if rerr != nil {
		return rerr
	}
	if cerr := checkAgainst(m2, d); cerr != nil {
		return cerr
	}
	if m2.Version == m.Version && m2.Endpoint == m.Endpoint && m2.Incarnation == m.Incarnation {
		return err
	}
	return f(m2)
}

// local reports whether reads from the agent m describes go through shared
// memory (same domain, same_node_shm on).
func (a *Agent) local(m *AgentMetadata) bool {
	return a.cfg.SameNodeSHM && m.ShmDomain == a.domain
}

// PostRead posts a read of remote registered memory into desc's
// destination buffers and returns at once with the pending request
// (NIXL's createXferReq + postXferReq). Descriptors that are malformed or
// name memory the source agent does not have fail here, with errors
// matching transport.ErrBadMetadata. ctx bounds the whole transfer: when
// it ends the request ends (aborted, or failed with ErrTimeout on a
// deadline). The buffers must stay valid until the request is done.
func (a *Agent) PostRead(ctx context.Context, desc ReadDesc) (*Xfer, error) {
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if err := validateDesc(&desc, true); err != nil {
		return nil, err
	}
	m, refreshed, err := a.resolve(ctx, &desc)
	if err != nil {
		return nil, err
	}
	x := &Xfer{a: a, desc: desc, path: PathTCP, done: make(chan struct{}), posted: time.Now()}
	if a.local(m) {
		x.path = PathSHM
	}
	x.ctx, x.cancel = context.WithCancelCause(ctx)
	if !a.spawn(func() {
		x.finish(a.withRefresh(x.ctx, &x.desc, m, refreshed, x.attempt))
	}) {
		x.cancel(nil)
		return nil, ErrClosed
	}
	a.posted.Add(1)
	return x, nil
}

// attempt moves the bytes once, with metadata m.
func (x *Xfer) attempt(m *AgentMetadata) error {
	a := x.a
	if !a.local(m) {
		return x.readTCP(m)
	}
	if m.Name == a.name {
		return x.copyLocal()
	}
	return x.copyDomain(m)
}

// copyLocal copies from this agent's own registrations (already mapped).
func (x *Xfer) copyLocal() error {
	a := x.a
	regs, err := a.acquireLocal(x.desc.Key, x.desc.Reads)
	if err != nil {
		return err
	}
	defer func() {
		for _, r := range regs {
			r.release()
		}
	}()
	srcs := make([]copySrc, len(x.desc.Reads))
	for i, rd := range x.desc.Reads {
		srcs[i] = copySrc{mem: regs[i].data[rd.Region.Offset : rd.Region.Offset+rd.Region.Length]}
	}
	return x.copyAll(srcs)
}

// acquireLocal checks reads under key against this agent's tables and
// takes an in-flight reference on each read's registration.
func (a *Agent) acquireLocal(key uint64, reads []Read) ([]*registration, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	obj := a.byKey[key]
	if obj == nil {
		return nil, badMeta(ErrUnknownObject, "key %016x names no live object of agent %s (collected?)", key, a.name)
	}
	regs := make([]*registration, 0, len(reads))
	fail := func(err error) ([]*registration, error) {
		for _, r := range regs {
			r.release()
		}
		return nil, err
	}
	for i, rd := range reads {
		r := a.regs[rd.Region.Registration]
		if r == nil || !obj.uses(r) {
			return fail(badMeta(ErrUnknownRegistration, "read %d: registration %d is not registered for object %s", i, rd.Region.Registration, obj.id))
		}
		if rd.Region.Offset > r.size || rd.Region.Length > r.size-rd.Region.Offset {
			return fail(badMeta(ErrOutOfBounds, "read %d: [%d, %d+%d) outside registration %d of %d bytes", i, rd.Region.Offset, rd.Region.Offset, rd.Region.Length, r.id, r.size))
		}
		if !r.acquire() {
			return fail(badMeta(ErrUnknownRegistration, "read %d: registration %d was deregistered", i, r.id))
		}
		regs = append(regs, r)
	}
	return regs, nil
}

// copyDomain copies from the segments of another agent of this domain,
// after the agent confirmed over TCP that the extraction is alive. The
// source segments are read through file descriptors (pread,
// copy_file_range), never mapped.
func (x *Xfer) copyDomain(m *AgentMetadata) error {
	a := x.a
	if err := a.checkRemote(x.ctx, m, &x.desc); err != nil {
		return err
	}
	srcs := make([]copySrc, len(x.desc.Reads))
	defer func() {
		for _, s := range srcs {
			if s.file != nil {
				_ = s.file.Close()
			}
		}
	}()
	for i, rd := range x.desc.Reads {
		f, err := openRegion(m, rd.Region)
		if err != nil {
			return err
		}
		srcs[i] = copySrc{file: f, off: rd.Region.Offset}
	}
	return x.copyAll(srcs)
}

// openRegion opens the segment of a region of another agent of this
// domain, checking that it is still the registered file and holds the
// range.
func openRegion(m *AgentMetadata, ref RegionRef) (*os.File, error) {
	reg, ok := m.region(ref.Registration)
	if !ok {
		return nil, badMeta(ErrUnknownRegistration, "agent %s has no registration %d", m.Name, ref.Registration)
	}
	gone := func() (*os.File, error) {
		return nil, badMeta(ErrUnknownRegistration, "registration %d of agent %s: segment %s is gone", reg.ID, m.Name, reg.Segment)
	}
	f, err := os.Open(shmem.Path(reg.Segment))
	if err != nil {
		return gone()
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Ino != reg.Ino {
		_ = f.Close()
		return gone()
	}
	if ref.Offset > st.Size || ref.Length > st.Size-ref.Offset {
		_ = f.Close()
		return nil, badMeta(ErrOutOfBounds, "registration %d of agent %s: [%d, %d+%d) outside %d bytes", reg.ID, m.Name, ref.Offset, ref.Offset, ref.Length, st.Size)
	}
	return f, nil
}

// checkRemote asks the source agent whether the extraction is alive and
// its reads are registered for it.
func (a *Agent) checkRemote(ctx context.Context, m *AgentMetadata, d *ReadDesc) error {
	p, err := a.pool(m)
	if err != nil {
		return err
	}
	c, err := a.getConn(ctx, p)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	reqs := []request{{op: opCheck, key: d.Key}}
	for _, rd := range d.Reads {
		reqs = append(reqs, request{op: opCheck, key: d.Key, reg: rd.Region.Registration, off: rd.Region.Offset, length: rd.Region.Length})
	}
	err = func() error {
		for start := 0; start < len(reqs); start += 64 {
			batch := reqs[start:min(start+64, len(reqs))]
			for _, r := range batch {
				if err := c.send(r); err != nil {
					return err
				}
			}
			for range batch {
				if err := c.recv(nil); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	return a.endConn(ctx, c, stop, err)
}

// endConn returns a connection to its pool after a successful exchange, or
// closes it; it turns network errors into *PeerError.
func (a *Agent) endConn(ctx context.Context, c *conn, stop func() bool, err error) error {
	if !stop() {
		a.dropConn(c.nc)
		if err == nil {
			err = ctx.Err()
		}
		return err
	}
	if err == nil {
		a.putConn(c)
		return nil
	}
	a.dropConn(c.nc)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var re *RemoteError
	if errors.As(err, &re) {
		return err
	}
	a.dropIdle(c.pool)
	return &PeerError{Agent: c.pool.name, Addr: c.pool.addr, Err: err}
}

// tcpChunk is one read request.
type tcpChunk struct {
	reg uint64
	off int64
	dst []byte
}

// readTCP pulls the reads from the source agent's read server: chunks of
// chunk_size, pipelined on up to streams connections.
func (x *Xfer) readTCP(m *AgentMetadata) error {
	a := x.a
	p, err := a.pool(m)
	if err != nil {
		return err
	}
	chunk := x.a.cfg.ChunkSize
	var chunks []tcpChunk
	for _, rd := range x.desc.Reads {
		dst := rd.Dst
		if dst == nil && rd.Region.Length > 0 {
			// A file destination is mapped, pages populated, for the read.
			mp, err := a.mapFile(rd.DstFile, rd.DstOffset, rd.Region.Length, true)
			if err != nil {
				return fmt.Errorf("destination: %w", err)
			}
			defer a.unmap(mp)
			dst = mp.data
		}
		for off := int64(0); off < rd.Region.Length; off += chunk {
			end := min(off+chunk, rd.Region.Length)
			chunks = append(chunks, tcpChunk{reg: rd.Region.Registration, off: rd.Region.Offset + off, dst: dst[off:end]})
		}
	}
	if len(chunks) == 0 {
		return a.checkRemote(x.ctx, m, &x.desc)
	}
	ctx, cancel := context.WithCancelCause(x.ctx)
	defer cancel(nil)
	var next atomic.Int64
	streams := min(a.cfg.Streams, len(chunks))
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := x.stream(ctx, p, chunks, &next); err != nil {
				once.Do(func() { first = err })
				cancel(err)
			}
		}()
	}
	wg.Wait()
	return first
}

// stream runs one connection's share of a TCP read.
func (x *Xfer) stream(ctx context.Context, p *connPool, chunks []tcpChunk, next *atomic.Int64) error {
	a := x.a
	c, err := a.getConn(ctx, p)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	q := make([]tcpChunk, 0, pipelineDepth)
	err = func() error {
		for {
			for len(q) < pipelineDepth {
				i := int(next.Add(1) - 1)
				if i >= len(chunks) {
					break
				}
				ch := chunks[i]
				if err := c.send(request{op: opRead, key: x.desc.Key, reg: ch.reg, off: ch.off, length: int64(len(ch.dst))}); err != nil {
					return err
				}
				q = append(q, ch)
			}
			if len(q) == 0 {
				return nil
			}
			ch := q[0]
			q = q[1:]
			if err := c.recv(ch.dst); err != nil {
				return err
			}
			x.bytes.Add(int64(len(ch.dst)))
			a.bytesRead.Add(int64(len(ch.dst)))
		}
	}()
	return a.endConn(ctx, c, stop, err)
}

// ---------------------------------------------------------------- connection pools

// pool returns the connection pool of the agent m describes.
func (a *Agent) pool(m *AgentMetadata) (*connPool, error) {
	inc, err := strconv.ParseUint(m.Incarnation, 16, 64)
	if err != nil {
		return nil, badMeta(nil, "agent %s: bad incarnation %q", m.Name, m.Incarnation)
	}
	key := m.Name + "|" + m.Incarnation + "|" + m.Endpoint
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	p := a.pools[key]
	if p == nil {
		p = &connPool{name: m.Name, addr: m.Endpoint, inc: inc}
		a.pools[key] = p
	}
	return p, nil
}

// getConn returns an idle connection of the pool or dials a new one.
func (a *Agent) getConn(ctx context.Context, p *connPool) (*conn, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, ErrClosed
	}
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		a.mu.Unlock()
		return c, nil
	}
	a.mu.Unlock()
	return a.dial(ctx, p)
}

// putConn keeps a connection for reuse (at most streams per pool).
func (a *Agent) putConn(c *conn) {
	a.mu.Lock()
	if !a.closed && len(c.pool.idle) < a.cfg.Streams {
		if _, open := a.conns[c.nc]; open {
			c.pool.idle = append(c.pool.idle, c)
			a.mu.Unlock()
			return
		}
	}
	a.mu.Unlock()
	a.dropConn(c.nc)
}

// dropIdle closes the idle connections of a pool whose peer failed.
func (a *Agent) dropIdle(p *connPool) {
	a.mu.Lock()
	idle := p.idle
	p.idle = nil
	a.mu.Unlock()
	for _, c := range idle {
		a.dropConn(c.nc)
	}
}

// ---------------------------------------------------------------- zero copy and rendezvous

// Locate returns the source's own buffers for desc's reads (zero copy)
// after checking that the extraction is alive. It fails with ErrNotLocal
// when the source agent is not in this agent's shared-memory domain or
// same_node_shm is off. The buffers stay valid while the object is
// extracted; mappings a caller made stay valid after that.
func (a *Agent) Locate(ctx context.Context, desc ReadDesc) ([]transport.Buffer, error) {
	if err := validateDesc(&desc, false); err != nil {
		return nil, err
	}
	m, refreshed, err := a.resolve(ctx, &desc)
	if err != nil {
		return nil, err
	}
	if !a.local(m) {
		return nil, ErrNotLocal
	}
	out := make([]transport.Buffer, len(desc.Reads))
	if m.Name == a.name {
		regs, err := a.acquireLocal(desc.Key, desc.Reads)
		if err != nil {
			return nil, err
		}
		for i, r := range regs {
			out[i] = transport.Buffer{Segment: r.segment, Offset: desc.Reads[i].Region.Offset, Length: desc.Reads[i].Region.Length}
			r.release()
		}
		return out, nil
	}
	err = a.withRefresh(ctx, &desc, m, refreshed, func(m *AgentMetadata) error {
		if !a.local(m) {
			return ErrNotLocal
		}
		if err := a.checkRemote(ctx, m, &desc); err != nil {
			return err
		}
		for i, rd := range desc.Reads {
			reg, _ := m.region(rd.Region.Registration)
			if si, err := statSegment(reg.Segment); err != nil || si.ino != reg.Ino {
				return badMeta(ErrUnknownRegistration, "registration %d of agent %s: segment %s is gone", reg.ID, m.Name, reg.Segment)
			}
			out[i] = transport.Buffer{Segment: reg.Segment, Offset: rd.Region.Offset, Length: rd.Region.Length}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, transport.ContextError(ctx)
		}
		return nil, err
	}
	return out, nil
}

// WaitExtracted waits until an agent of this node has extracted the object
// and returns its TransportData (from the object's rendezvous file), or
// returns transport.ContextError(ctx).
func (a *Agent) WaitExtracted(ctx context.Context, objectID string) ([]byte, error) {
	if err := transport.ValidObjectID(objectID); err != nil {
		return nil, err
	}
	delay := 500 * time.Microsecond
	const maxPoll = 20 * time.Millisecond
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		data, err := shmem.ReadAll(RendezvousName(objectID), maxTransportData)
		if err == nil {
			return data, nil
		}
		if !errors.Is(err, shmem.ErrNotFound) {
			return nil, err
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-ctx.Done():
			return nil, transport.ContextError(ctx)
		case <-a.ctx.Done():
			return nil, ErrClosed
		case <-timer.C:
		}
		delay = min(2*delay, maxPoll)
	}
}
