package collective

// Groups: rendezvous, the control connections and failure handling.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
)

// KV keys (inside the configured namespace):
//
//	g/<group>/r/<rank>    record of a rank of the group's current incarnation
//	a/<actor>/<group>     actorEntry: the actor's rank in a formed group
//
// Names are path-escaped, so a group or actor name cannot forge keys.
func recordKey(group string, rank int) string {
	return fmt.Sprintf("g/%s/r/%d", url.PathEscape(group), rank)
}

func actorPrefix(actor string) string { return "a/" + url.PathEscape(actor) + "/" }

func actorKey(actor, group string) string { return actorPrefix(actor) + url.PathEscape(group) }

// kvTimeout bounds the KV calls made while cleaning up.
const kvTimeout = 2 * time.Second

// noticeGrace is how long a collective whose connection broke waits for the
// control connections to say why (a peer's abort, rank 0 relaying a death)
// before it blames the neighbour on that connection.
const noticeGrace = 2 * time.Second

// Failure kinds (failure.kind), besides the transport error kinds.
const (
	kindRankFailed   = "rank_failed"
	kindBadMetadata  = "bad_metadata"
	kindNotSupported = "not_supported"
	kindTimeout      = "timeout"
	kindCanceled     = "canceled"
	kindLeft         = "left"      // the rank destroyed its member
	kindDestroyed    = "destroyed" // this rank's own member was destroyed
)

// failure is why a group broke.
type failure struct {
	rank int    // the rank that failed
	kind string // see the kinds above
	msg  string
	// local is set when this rank failed; err is then the error its
	// failing call returned.
	local bool
	err   error
}

// failureKind classifies a local error for the notice sent to the peers.
func failureKind(err error) string {
	switch {
	case errors.Is(err, transport.ErrBadMetadata):
		return kindBadMetadata
	case errors.Is(err, transport.ErrNotSupported):
		return kindNotSupported
	case errors.Is(err, transport.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return kindTimeout
	case errors.Is(err, context.Canceled):
		return kindCanceled
	}
	return kindRankFailed
}

// rankError is a peer's failure as this rank reports it.
type rankError struct {
	group string
	f     failure
	self  int
}

func (e *rankError) Error() string {
	switch {
	case e.f.kind == kindDestroyed:
		return fmt.Sprintf("group %q rank %d was destroyed here: %s", e.group, e.self, e.f.msg)
	case e.f.rank == e.self:
		return fmt.Sprintf("group %q is broken: this rank (%d) failed earlier: %s; destroy and re-create the group", e.group, e.self, e.f.msg)
	case e.f.kind == kindLeft:
		return fmt.Sprintf("group %q: rank %d left the group: %s", e.group, e.f.rank, e.f.msg)
	}
	return fmt.Sprintf("group %q: rank %d failed: %s", e.group, e.f.rank, e.f.msg)
}

func (e *rankError) Unwrap() []error {
	if e.f.kind == kindDestroyed {
		return []error{transport.ErrGroupNotFound}
	}
	errs := []error{transport.ErrRankFailed}
	switch e.f.kind {
	case kindBadMetadata:
		errs = append(errs, transport.ErrBadMetadata)
	case kindNotSupported:
		errs = append(errs, transport.ErrNotSupported)
	}
	return errs
}

type memberKey struct {
	group string
	rank  int
}

// member is one rank of a group hosted on this instance.
type member struct {
	t       *Transport
	log     hclog.Logger
	group   string
	rank    int
	world   int
	members []string
	nonce   string // this incarnation of the rank

	// Rendezvous inboxes, filled by the acceptor while joining.
	joins  chan *inbound // rank 0: control connections of ranks 1..n-1
	rings  chan *inbound // the ring connection from the previous rank
	peerIn chan *inbound // recursive-doubling links from lower partners

	// stopJoin cancels the rendezvous (DestroyGroup or Close during
	// CreateGroup); joinDone is closed when CreateGroup returns.
	stopJoin context.CancelCauseFunc
	joinDone chan struct{}

	ops     chan struct{} // one collective at a time
	seq     uint64        // collectives started; guarded by ops
	scratch []byte        // reduce buffer; guarded by ops

	wg sync.WaitGroup // control readers and notifiers

	mu      sync.Mutex
	joining bool // rendezvous inboxes open
	closed  bool
	epoch   string
	addrs   []string         // data address per rank
	next    net.Conn         // ring: to rank+1
	prev    net.Conn         // ring: from rank-1
	peers   map[int]net.Conn // recursive-doubling links by partner rank
	set     groupSettings    // rank 0's settings, from the roster
	local   *localGroup      // set when this instance hosts every rank
	ctrl    []*ctrlConn
	cause   *failure
	broken  chan struct{} // closed when cause is set
}

// inbound is a connection the acceptor routed to a member.
type inbound struct {
	c net.Conn
	h *hello
}

// ctrlConn is a control connection; writes are serialized.
type ctrlConn struct {
	rank int // the rank at the other end
	c    net.Conn
	wmu  sync.Mutex
}

func (cc *ctrlConn) send(m ctrlMsg, timeout time.Duration) error {
	cc.wmu.Lock()
	defer cc.wmu.Unlock()
	_ = cc.c.SetWriteDeadline(time.Now().Add(timeout))
	err := writeFrame(cc.c, m)
	_ = cc.c.SetWriteDeadline(time.Time{})
	return err
}

// member returns the hosted member of (group, rank).
func (t *Transport) member(group string, rank int) (*member, error) {
	if err := transport.ValidGroup(group, rank, 0); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	m := t.members[memberKey{group, rank}]
	if m == nil {
		return nil, fmt.Errorf("%w: this instance hosts no rank %d of group %q", transport.ErrGroupNotFound, rank, group)
	}
	return m, nil
}

// collErr wraps err as the CollectiveError of a call.
func collErr(group string, rank int, op string, err error) error {
	var ce *transport.CollectiveError
	if errors.As(err, &ce) {
		return err
	}
	failed := -1
	var re *rankError
	if errors.As(err, &re) && re.f.kind != kindDestroyed {
		failed = re.f.rank
	}
	return &transport.CollectiveError{Group: group, Rank: rank, Op: op, FailedRank: failed, Err: err}
}

// ---------------------------------------------------------------- create

// CreateGroup implements transport.Collective.
func (t *Transport) CreateGroup(ctx context.Context, req *transport.CreateGroupRequest) (*transport.CreateGroupResponse, error) {
	if req == nil {
		req = &transport.CreateGroupRequest{}
	}
	fail := func(err error) (*transport.CreateGroupResponse, error) {
		return nil, collErr(req.Group, req.Rank, transport.OpCreateGroup, err)
	}
	if err := req.Validate(); err != nil {
		return fail(err)
	}
	addr, err := t.listen()
	if err != nil {
		return fail(err)
	}
	kv, err := t.store()
	if err != nil {
		return fail(err)
	}
	cfg := t.config()
	timeout := req.Timeout
	if timeout == 0 {
		timeout = cfg.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx, stopJoin := context.WithCancelCause(ctx)
	defer stopJoin(nil)

	m := &member{
		t: t, group: req.Group, rank: req.Rank, world: req.WorldSize, members: slices.Clone(req.Members),
		nonce: randomHex(16), joins: make(chan *inbound, req.WorldSize), rings: make(chan *inbound, 4),
		peerIn:   make(chan *inbound, len(partners(req.WorldSize, req.Rank))+4),
		stopJoin: stopJoin, joinDone: make(chan struct{}),
		ops: make(chan struct{}, 1), joining: true, broken: make(chan struct{}),
	}
	defer close(m.joinDone)
	t.mu.Lock()
	m.log = t.log.With("group", req.Group, "rank", req.Rank)
	switch {
	case t.closed:
		t.mu.Unlock()
		return fail(ErrClosed)
	case t.members[memberKey{m.group, m.rank}] != nil:
		t.mu.Unlock()
		return fail(fmt.Errorf("%w: rank %d of group %q is already hosted here", transport.ErrGroupExists, m.rank, m.group))
	}
	t.members[memberKey{m.group, m.rank}] = m
	t.mu.Unlock()

	epoch, err := m.rendezvous(ctx, kv, addr)
	if err != nil {
		m.log.Debug("rendezvous failed", "error", err)
		t.removeMember(m, failure{rank: m.rank, kind: kindDestroyed, msg: "CreateGroup failed"})
		return fail(err)
	}
	m.log.Debug("group formed", "epoch", epoch, "world", m.world)
	return &transport.CreateGroupResponse{Epoch: epoch}, nil
}

// rendezvous joins the group: see the package documentation.
func (m *member) rendezvous(ctx context.Context, kv plugin.KV, addr string) (string, error) {
	rec, err := jsonBytes(record{V: wireVersion, Nonce: m.nonce, Addr: addr, World: m.world, Members: m.members})
	if err != nil {
		return "", err
	}
	if err := kv.Put(ctx, recordKey(m.group, m.rank), rec); err != nil {
		return "", fmt.Errorf("publishing the rank's record: %w", ioError(ctx, err))
	}
	var roster ctrlMsg
	if m.world == 1 {
		roster = m.t.roster(randomHex(16), []string{addr}, []string{m.nonce})
	} else if m.rank == 0 {
		if roster, err = m.gather(ctx, addr); err != nil {
			return "", err
		}
	} else {
		if roster, err = m.join(ctx, kv, addr); err != nil {
			return "", err
		}
	}
	m.mu.Lock()
	m.epoch, m.addrs = roster.Epoch, roster.Addrs
	m.set = settingsOf(roster)
	if m.t.useLocal(roster) {
		m.local = m.t.acquireLocal(localKey{m.group, roster.Epoch}, m.world)
	}
	m.mu.Unlock()
	if m.world > 1 {
		if err := m.connectRing(ctx, roster); err != nil {
			m.abortJoin(err)
			return "", err
		}
		if err := m.connectPeers(ctx, roster); err != nil {
			m.abortJoin(err)
			return "", err
		}
		if err := m.readyGo(ctx); err != nil {
			m.abortJoin(err)
			return "", err
		}
	}
	m.mu.Lock()
	m.joining = false
	m.drainLocked()
	ctrl := m.ctrl
	m.mu.Unlock()
	for _, cc := range ctrl {
		m.wg.Add(1)
		go m.readControl(cc)
	}
	if len(m.members) > 0 {
		entry, err := jsonBytes(actorEntry{V: wireVersion, Rank: m.rank, Epoch: roster.Epoch})
		if err == nil {
			err = kv.Put(ctx, actorKey(m.members[m.rank], m.group), entry)
		}
		if err != nil {
			return "", fmt.Errorf("publishing the actor's rank: %w", ioError(ctx, err))
		}
	}
	return roster.Epoch, nil
}

// gather is rank 0's side of the rendezvous: wait for the control
// connections of ranks 1..n-1, check that they agree with it, draw the epoch
// and send everyone the roster.
func (m *member) gather(ctx context.Context, addr string) (ctrlMsg, error) {
	joined := make([]*ctrlConn, m.world)
	nonces := make([]string, m.world)
	addrs := make([]string, m.world)
	nonces[0], addrs[0] = m.nonce, addr
	fail := func(err error) (ctrlMsg, error) {
		m.setCtrl(joined)
		m.abortJoin(err)
		return ctrlMsg{}, err
	}
	for n := 1; n < m.world; {
		var in *inbound
		select {
		case in = <-m.joins:
		case <-ctx.Done():
			var missing []int
			for r := 1; r < m.world; r++ {
				if joined[r] == nil {
					missing = append(missing, r)
				}
			}
			return fail(fmt.Errorf("waiting for ranks %v to join: %w", missing, transport.ContextError(ctx)))
		}
		h := in.h
		switch {
		case h.World != m.world || !slices.Equal(h.Members, m.members):
			err := fmt.Errorf("%w: rank %d joined with world size %d and members %q; rank 0 has world size %d and members %q",
				transport.ErrBadMetadata, h.From, h.World, h.Members, m.world, m.members)
			m.t.refuse(in.c, reply{Kind: replyBad, Error: err.Error()})
			return fail(err)
		case h.From < 1 || h.From >= m.world || joined[h.From] != nil:
			m.t.refuse(in.c, reply{Kind: replyBad, Error: fmt.Sprintf("rank %d of group %q already joined (or is not a rank of it)", h.From, m.group)})
			continue
		}
		if err := exchange(ctx, in.c, reply{}, nil); err != nil {
			m.t.closeConn(in.c)
			return fail(fmt.Errorf("accepting rank %d: %w", h.From, err))
		}
		joined[h.From] = &ctrlConn{rank: h.From, c: in.c}
		nonces[h.From], addrs[h.From] = h.FromNonce, h.Addr
		n++
	}
	roster := m.t.roster(randomHex(16), addrs, nonces)
	for _, cc := range joined[1:] {
		if err := exchange(ctx, cc.c, roster, nil); err != nil {
			return fail(fmt.Errorf("sending the roster to rank %d: %w", cc.rank, err))
		}
	}
	m.setCtrl(joined)
	return roster, nil
}

func (m *member) setCtrl(cs []*ctrlConn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, cc := range cs {
		if cc != nil {
			m.ctrl = append(m.ctrl, cc)
		}
	}
}

// join is the side of ranks 1..n-1: find rank 0 through its record,
// connect, and wait for the roster.
func (m *member) join(ctx context.Context, kv plugin.KV, addr string) (ctrlMsg, error) {
	backoff := 5 * time.Millisecond
	var last error
	for {
		c, err := m.tryJoin(ctx, kv, addr)
		if err == nil {
			cc := &ctrlConn{rank: 0, c: c}
			m.setCtrl([]*ctrlConn{cc})
			var roster ctrlMsg
			if err := exchange(ctx, c, nil, &roster); err != nil {
				return ctrlMsg{}, fmt.Errorf("waiting for rank 0's roster: %w", err)
			}
			switch {
			case roster.Type == ctrlAbort:
				return ctrlMsg{}, m.noticeError(roster)
			case roster.Type != ctrlRoster || len(roster.Addrs) != m.world || len(roster.Nonces) != m.world || roster.Nonces[m.rank] != m.nonce:
				return ctrlMsg{}, fmt.Errorf("rank 0 sent a malformed roster (%s)", roster.Type)
			}
			if err := settingsOf(roster).validate(); err != nil {
				return ctrlMsg{}, fmt.Errorf("rank 0 sent a malformed roster: %w", err)
			}
			return roster, nil
		}
		var ref *errRefused
		if errors.As(err, &ref) && ref.r.Kind == replyBad {
			return ctrlMsg{}, fmt.Errorf("%w: rank 0 refused this rank: %s", transport.ErrBadMetadata, ref.r.Error)
		}
		if ctx.Err() != nil {
			return ctrlMsg{}, fmt.Errorf("joining rank 0 (last attempt: %v): %w", last, transport.ContextError(ctx))
		}
		last = err
		if err := sleepCtx(ctx, backoff); err != nil {
			return ctrlMsg{}, fmt.Errorf("joining rank 0 (last attempt: %v): %w", last, err)
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// tryJoin makes one attempt to connect to rank 0.
func (m *member) tryJoin(ctx context.Context, kv plugin.KV, addr string) (net.Conn, error) {
	raw, err := kv.Get(ctx, recordKey(m.group, 0))
	if err != nil {
		if errors.Is(err, plugin.ErrKeyNotFound) {
			return nil, errors.New("rank 0 has not published its record yet")
		}
		return nil, fmt.Errorf("reading rank 0's record: %w", err)
	}
	var rec record
	if err := decodeStrict(raw, &rec); err != nil || rec.V != wireVersion {
		return nil, fmt.Errorf("rank 0's record does not parse (version %d): %v", rec.V, err)
	}
	c, err := m.t.dial(ctx, rec.Addr, fmt.Sprintf("group %q rank %d control to rank 0", m.group, m.rank))
	if err != nil {
		return nil, fmt.Errorf("connecting to rank 0 at %s: %w", rec.Addr, err)
	}
	var r reply
	err = exchange(ctx, c, hello{V: wireVersion, Type: helloJoin, Group: m.group, From: m.rank, To: 0, ToNonce: rec.Nonce,
		World: m.world, Members: m.members, FromNonce: m.nonce, Addr: addr}, &r)
	if err == nil {
		err = r.err()
	}
	if err != nil {
		m.t.closeConn(c)
		return nil, err
	}
	return c, nil
}

// connectRing connects to the next rank and accepts the previous one.
func (m *member) connectRing(ctx context.Context, roster ctrlMsg) error {
	nextRank := (m.rank + 1) % m.world
	prevRank := (m.rank - 1 + m.world) % m.world
	type dialed struct {
		c   net.Conn
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make(chan dialed, 1)
	go func() {
		c, err := m.dialRank(ctx, roster, helloRing, nextRank, fmt.Sprintf("group %q ring %d→%d", m.group, m.rank, nextRank))
		out <- dialed{c, err}
	}()
	var prev net.Conn
	var err error
	for prev == nil && err == nil {
		select {
		case in := <-m.rings:
			if in.h.From != prevRank || in.h.Epoch != roster.Epoch {
				m.t.refuse(in.c, reply{Kind: replyStale, Error: fmt.Sprintf("rank %d of group %q expects rank %d of epoch %s", m.rank, m.group, prevRank, roster.Epoch)})
				continue
			}
			if err = exchange(ctx, in.c, reply{}, nil); err != nil {
				m.t.closeConn(in.c)
				err = fmt.Errorf("accepting rank %d: %w", prevRank, err)
				break
			}
			prev = in.c
		case <-ctx.Done():
			err = fmt.Errorf("waiting for rank %d to connect: %w", prevRank, transport.ContextError(ctx))
		}
	}
	if err != nil {
		cancel()
	}
	d := <-out
	m.mu.Lock()
	m.next, m.prev = d.c, prev
	m.mu.Unlock()
	if err != nil {
		return err
	}
	return d.err
}

// dialRank connects to rank q of the roster's incarnation for a
// connection of type typ (ring or peer) and waits for it to accept.
func (m *member) dialRank(ctx context.Context, roster ctrlMsg, typ string, q int, what string) (net.Conn, error) {
	c, err := m.t.dial(ctx, roster.Addrs[q], what)
	if err == nil {
		var r reply
		err = exchange(ctx, c, hello{V: wireVersion, Type: typ, Group: m.group, From: m.rank, To: q,
			ToNonce: roster.Nonces[q], Epoch: roster.Epoch}, &r)
		if err == nil {
			err = r.err()
		}
		if err != nil {
			m.t.closeConn(c)
			c = nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to rank %d at %s: %w", q, roster.Addrs[q], err)
	}
	return c, nil
}

// readyGo makes CreateGroup return on every rank only once every ring
// connection is up: ranks report to rank 0, which then releases them.
func (m *member) readyGo(ctx context.Context) error {
	m.mu.Lock()
	ctrl := slices.Clone(m.ctrl)
	m.mu.Unlock()
	if m.rank != 0 {
		var msg ctrlMsg
		if err := exchange(ctx, ctrl[0].c, ctrlMsg{Type: ctrlReady}, &msg); err != nil {
			return fmt.Errorf("waiting for rank 0 to release the group: %w", err)
		}
		if msg.Type != ctrlGo {
			return m.noticeError(msg)
		}
		return nil
	}
	for _, cc := range ctrl {
		var msg ctrlMsg
		if err := exchange(ctx, cc.c, nil, &msg); err != nil {
			return fmt.Errorf("waiting for rank %d to connect its ring: %w", cc.rank, err)
		}
		if msg.Type != ctrlReady {
			return m.noticeError(msg)
		}
	}
	for _, cc := range ctrl {
		if err := exchange(ctx, cc.c, ctrlMsg{Type: ctrlGo}, nil); err != nil {
			return fmt.Errorf("releasing rank %d: %w", cc.rank, err)
		}
	}
	return nil
}

// noticeError is the error of a rank that learns from a control message
// that the rendezvous failed elsewhere.
func (m *member) noticeError(msg ctrlMsg) error {
	if msg.Type != ctrlAbort {
		return fmt.Errorf("unexpected control message %q during the rendezvous", msg.Type)
	}
	return &rankError{group: m.group, self: m.rank, f: failure{rank: msg.Rank, kind: msg.Kind, msg: msg.Msg}}
}

// abortJoin tells the ranks this rank is connected to that its rendezvous
// failed, so they fail at once instead of at their deadline.
func (m *member) abortJoin(err error) {
	m.mu.Lock()
	ctrl := slices.Clone(m.ctrl)
	m.mu.Unlock()
	f := failure{rank: m.rank, kind: failureKind(err), msg: "CreateGroup failed: " + err.Error()}
	var re *rankError
	if errors.As(err, &re) {
		f = re.f // relay what this rank was told
	}
	for _, cc := range ctrl {
		if cc.rank == f.rank {
			continue
		}
		_ = cc.send(ctrlMsg{Type: ctrlAbort, Rank: f.rank, Kind: f.kind, Msg: f.msg}, refuseTimeout)
	}
}

// drainLocked closes connections left in the rendezvous inboxes.
func (m *member) drainLocked() {
	for {
		select {
		case in := <-m.joins:
			m.t.refuse(in.c, reply{Kind: replyStale, Error: fmt.Sprintf("group %q is not joining", m.group)})
		case in := <-m.rings:
			m.t.refuse(in.c, reply{Kind: replyStale, Error: fmt.Sprintf("group %q is not joining", m.group)})
		case in := <-m.peerIn:
			m.t.refuse(in.c, reply{Kind: replyStale, Error: fmt.Sprintf("group %q is not joining", m.group)})
		default:
			return
		}
	}
}

// routeGroup hands a join or ring connection to the member it names, or
// refuses it.
func (t *Transport) routeGroup(c net.Conn, h *hello) {
	to := h.To
	if h.Type == helloJoin {
		to = 0
	}
	t.mu.Lock()
	m := t.members[memberKey{h.Group, to}]
	t.mu.Unlock()
	if m == nil || m.nonce != h.ToNonce {
		t.refuse(c, reply{Kind: replyStale, Error: fmt.Sprintf("this instance hosts no rank %d of group %q with that nonce", to, h.Group)})
		return
	}
	inbox := m.rings
	switch h.Type {
	case helloJoin:
		inbox = m.joins
	case helloPeer:
		inbox = m.peerIn
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.joining {
		t.refuse(c, reply{Kind: replyStale, Error: fmt.Sprintf("rank %d of group %q is not joining", to, h.Group)})
		return
	}
	select {
	case inbox <- &inbound{c: c, h: h}:
	default:
		t.refuse(c, reply{Kind: replyStale, Error: "too many pending connections"})
	}
}

// ---------------------------------------------------------------- failures

// readControl reads a control connection until it closes, turning notices
// and the loss of the connection into group failures.
func (m *member) readControl(cc *ctrlConn) {
	defer m.wg.Done()
	for {
		var msg ctrlMsg
		err := readFrame(cc.c, &msg)
		if err != nil {
			m.mu.Lock()
			closed := m.closed
			m.mu.Unlock()
			if !closed {
				m.fail(failure{rank: cc.rank, kind: kindRankFailed, msg: fmt.Sprintf("lost the control connection to rank %d: %v", cc.rank, err)}, cc.rank)
			}
			return
		}
		switch msg.Type {
		case ctrlAbort:
			m.fail(failure{rank: msg.Rank, kind: msg.Kind, msg: msg.Msg}, cc.rank)
		case ctrlLeave:
			m.fail(failure{rank: msg.Rank, kind: kindLeft, msg: msg.Msg}, cc.rank)
		default:
			m.log.Warn("unexpected control message", "type", msg.Type, "from", cc.rank)
		}
	}
}

// failure returns why the group broke, or nil.
func (m *member) failure() *failure {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cause
}

// causeErr is the error calls on a broken group return.
func (m *member) causeErr() error {
	f := m.failure()
	if f == nil {
		return nil
	}
	return &rankError{group: m.group, self: m.rank, f: *f}
}

// fail breaks the group with f (the first failure wins): it closes the ring
// connections (except when a rank merely left, so that a collective it
// completed can still complete here) and passes the notice on: rank 0 to
// every rank but the one it came from, other ranks to rank 0 when they
// found the failure themselves (from < 0).
func (m *member) fail(f failure, from int) {
	m.mu.Lock()
	if m.cause != nil {
		m.mu.Unlock()
		return
	}
	m.cause = &f
	close(m.broken)
	var ring []net.Conn
	if f.kind != kindLeft {
		ring = m.linksLocked()
	}
	var notify []*ctrlConn
	if f.kind != kindDestroyed && (m.rank == 0 || from < 0) {
		for _, cc := range m.ctrl {
			if cc.rank != from && cc.rank != f.rank {
				notify = append(notify, cc)
			}
		}
	}
	closed := m.closed
	// Added under the lock, so removeMember (which breaks the group, then
	// waits) never waits while a notifier is being added.
	m.wg.Add(len(notify))
	m.mu.Unlock()
	if !closed {
		m.log.Info("group broken", "failed_rank", f.rank, "kind", f.kind, "reason", f.msg)
	}
	for _, c := range ring {
		m.t.closeConn(c) // unblocks the running collective; peers see it too
	}
	typ := ctrlAbort
	if f.kind == kindLeft {
		typ = ctrlLeave
	}
	msg := ctrlMsg{Type: typ, Rank: f.rank, Kind: f.kind, Msg: f.msg}
	for _, cc := range notify {
		go func() {
			defer m.wg.Done()
			_ = cc.send(msg, refuseTimeout)
		}()
	}
}

// failLocal breaks the group because call what ("all_reduce #3") of this
// rank failed with err, and returns err.
func (m *member) failLocal(what string, err error) error {
	m.fail(failure{rank: m.rank, kind: failureKind(err), msg: fmt.Sprintf("%s failed: %v", what, err), local: true, err: err}, -1)
	return err
}

// call names a collective call in messages.
func call(op string, seq uint64) string { return fmt.Sprintf("%s #%d", op, seq) }

// ---------------------------------------------------------------- destroy

// DestroyGroup implements transport.Collective.
func (t *Transport) DestroyGroup(ctx context.Context, req *transport.DestroyGroupRequest) (*transport.DestroyGroupResponse, error) {
	if req == nil {
		req = &transport.DestroyGroupRequest{}
	}
	m, err := t.member(req.Group, req.Rank)
	if err == nil {
		err = m.stopJoining(ctx)
	}
	if err != nil {
		return nil, collErr(req.Group, req.Rank, transport.OpDestroyGroup, err)
	}
	t.removeMember(m, failure{rank: m.rank, kind: kindDestroyed, msg: "DestroyGroup was called"})
	return &transport.DestroyGroupResponse{}, nil
}

// errDestroyedJoining ends a rendezvous whose member is destroyed.
var errDestroyedJoining = fmt.Errorf("%w: the rank was destroyed while joining", transport.ErrGroupNotFound)

// stopJoining cancels a rendezvous in progress and waits for CreateGroup to
// return (it then cleans up by itself).
func (m *member) stopJoining(ctx context.Context) error {
	m.mu.Lock()
	joining := m.joining
	m.mu.Unlock()
	if joining {
		m.stopJoin(errDestroyedJoining)
	}
	select {
	case <-m.joinDone:
		return nil
	case <-ctx.Done():
		return transport.ContextError(ctx)
	}
}

// removeMember destroys a member: its peers are told it left, pending
// calls fail, its connections close, its KV entries go.
func (t *Transport) removeMember(m *member, why failure) {
	t.mu.Lock()
	if t.members[memberKey{m.group, m.rank}] == m {
		delete(t.members, memberKey{m.group, m.rank})
	}
	kv := t.kv
	t.mu.Unlock()

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.joining = false
	m.drainLocked()
	formed := m.cause == nil && m.epoch != "" && len(m.ctrl) > 0
	ctrl := slices.Clone(m.ctrl)
	m.mu.Unlock()

	if formed {
		// Orderly leave: tell the others (rank 0 relays), without breaking
		// a collective they can still complete.
		for _, cc := range ctrl {
			_ = cc.send(ctrlMsg{Type: ctrlLeave, Rank: m.rank, Kind: kindLeft, Msg: why.msg}, refuseTimeout)
		}
	}
	m.fail(why, m.rank) // pending calls fail with ErrGroupNotFound
	// Wait for the running collective to notice (its connections are now
	// unblocked), so nothing uses them once they are closed.
	m.ops <- struct{}{}
	m.mu.Lock()
	conns := m.linksLocked()
	for _, cc := range m.ctrl {
		conns = append(conns, cc.c)
	}
	m.mu.Unlock()
	for _, c := range conns {
		t.closeConn(c)
	}
	m.wg.Wait()
	m.mu.Lock()
	local := m.local
	m.local = nil
	m.mu.Unlock()
	if local != nil {
		t.releaseLocal(local)
	}
	<-m.ops
	if kv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), kvTimeout)
		defer cancel()
		if err := kv.Delete(ctx, recordKey(m.group, m.rank)); err != nil {
			m.log.Warn("deleting the rank's record", "error", err)
		}
		if len(m.members) > 0 {
			if err := kv.Delete(ctx, actorKey(m.members[m.rank], m.group)); err != nil {
				m.log.Warn("deleting the actor entry", "error", err)
			}
		}
	}
	m.log.Debug("member destroyed", "reason", why.msg)
}

// ---------------------------------------------------------------- lookups

// commonGroup finds a group both actors are members of (the first by
// name), with their ranks and its epoch; ok is false when there is none.
func commonGroup(ctx context.Context, kv plugin.KV, src, dst string) (group string, srcRank, dstRank int, epoch string, ok bool, err error) {
	if src == "" || dst == "" || src == dst {
		return "", 0, 0, "", false, nil
	}
	sk, err := kv.Keys(ctx, actorPrefix(src))
	if err != nil {
		return "", 0, 0, "", false, err
	}
	dk, err := kv.Keys(ctx, actorPrefix(dst))
	if err != nil {
		return "", 0, 0, "", false, err
	}
	dgroups := map[string]bool{}
	for _, k := range dk {
		dgroups[strings.TrimPrefix(k, actorPrefix(dst))] = true
	}
	for _, k := range sk {
		esc := strings.TrimPrefix(k, actorPrefix(src))
		if !dgroups[esc] {
			continue
		}
		g, err := url.PathUnescape(esc)
		if err != nil {
			continue
		}
		se, err1 := readActorEntry(ctx, kv, src, g)
		de, err2 := readActorEntry(ctx, kv, dst, g)
		if err1 != nil || err2 != nil || se.Epoch != de.Epoch {
			continue // stale or being re-created
		}
		return g, se.Rank, de.Rank, se.Epoch, true, nil
	}
	return "", 0, 0, "", false, nil
}

func readActorEntry(ctx context.Context, kv plugin.KV, actor, group string) (actorEntry, error) {
	var e actorEntry
	raw, err := kv.Get(ctx, actorKey(actor, group))
	if err != nil {
		return e, err
	}
	if err := decodeStrict(raw, &e); err != nil || e.V != wireVersion {
		return e, fmt.Errorf("actor entry does not parse: %v", err)
	}
	return e, nil
}
