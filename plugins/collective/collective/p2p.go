package collective

// The Transport duties: point-to-point transfers of an object's tensors.
//
//	destination                                  source instance
//	  Receive: dial transportData.Addr   ──────▶ accept, read fetch hello
//	  hello{fetch, object, nonce, token} ──────▶ known object? queue the peer
//	                                             Send(token) picks the peer
//	                                     ◀────── reply{} (or a refusal)
//	                                     ◀────── tensor bytes, in order
//	  read them into shared memory
//	  ack byte                           ──────▶ Send returns
//
// With a common group in the communicator data, both ends also check that
// their instance hosts the rank named there, and fail with ErrRankFailed
// as soon as the group breaks (the other rank died).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"

	"github.com/goray-dev/goray/sdk/transport"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// object is what the source keeps for an extracted object.
type object struct {
	nonce   string
	tensors []transport.Tensor // pinned
	metas   []transport.TensorMeta
	segs    []string
	// peers are destinations waiting for a Send; arrived is closed (and
	// replaced) whenever one joins.
	peers   []*peer
	arrived chan struct{}
}

// segRef counts the objects referencing a segment and whether it is owned.
type segRef struct {
	refs  int
	owned bool
}

// peer is a destination connected to this source, waiting for its Send.
type peer struct {
	conn  net.Conn
	token string
	taken bool       // under Transport.mu
	ack   chan error // the outcome of reading the ack byte
}

func fail(objectID, op string, err error) error {
	return &transport.TransferError{ObjectID: objectID, Op: op, Err: err}
}

// ExtractMetadata implements transport.Transport: it validates and pins
// the tensors and returns the transport data naming this instance.
func (t *Transport) ExtractMetadata(ctx context.Context, req *transport.ExtractMetadataRequest) (*transport.ExtractMetadataResponse, error) {
	if req == nil {
		req = &transport.ExtractMetadataRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpExtractMetadata, err)
	}
	if ctx.Err() != nil {
		return nil, fail(id, transport.OpExtractMetadata, transport.ContextError(ctx))
	}
	addr, err := t.listen()
	if err != nil {
		return nil, fail(id, transport.OpExtractMetadata, err)
	}
	metas := make([]transport.TensorMeta, len(req.Tensors))
	for i, tn := range req.Tensors {
		if err := checkTensor(fmt.Sprintf("tensor %d", i), tn); err != nil {
			return nil, fail(id, transport.OpExtractMetadata, err)
		}
		metas[i] = tn.Meta()
	}
	tensors := slices.Clone(req.Tensors)
	var pins mappings
	for i, tn := range tensors {
		if _, err := pins.bytes(ctx, fmt.Sprintf("tensor %d", i), tn); err != nil {
			pins.release()
			return nil, fail(id, transport.OpExtractMetadata, err)
		}
	}
	td := transportData{V: wireVersion, Object: id, Addr: addr, Nonce: randomHex(16), Tensors: metas}
	data, err := jsonBytes(td)
	if err != nil {
		pins.release()
		return nil, fail(id, transport.OpExtractMetadata, err)
	}
	t.mu.Lock()
	if t.closed || t.objects[id] != nil {
		t.mu.Unlock()
		pins.release()
		if t.closed {
			return nil, fail(id, transport.OpExtractMetadata, ErrClosed)
		}
		return nil, fail(id, transport.OpExtractMetadata, fmt.Errorf("%w: object already extracted", transport.ErrBadMetadata))
	}
	obj := &object{nonce: td.Nonce, tensors: tensors, metas: metas, arrived: make(chan struct{})}
	for _, tn := range tensors {
		if s := tn.Buffer.Segment; tn.Buffer.Length > 0 && !slices.Contains(obj.segs, s) {
			obj.segs = append(obj.segs, s)
		}
	}
	for _, s := range obj.segs {
		r := t.segs[s]
		if r == nil {
			r = &segRef{}
			t.segs[s] = r
		}
		r.refs++
		r.owned = r.owned || req.TransferOwnership
	}
	t.objects[id] = obj
	t.mu.Unlock()
	return &transport.ExtractMetadataResponse{Tensors: metas, TransportData: data}, nil
}

func unpin(tensors []transport.Tensor) {
	for _, tn := range tensors {
		tn.Release()
	}
}

// CommunicatorMetadata implements transport.Transport: a fresh pairing
// token, plus the group and ranks when both actors are members of a
// common group. Without a KV store it names no group.
func (t *Transport) CommunicatorMetadata(ctx context.Context, req *transport.CommunicatorMetadataRequest) (*transport.CommunicatorMetadataResponse, error) {
	if req == nil {
		req = &transport.CommunicatorMetadataRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpCommunicatorMetadata, err)
	}
	d := commData{V: wireVersion, Object: id, Token: randomHex(16)}
	if kv, err := t.store(); err == nil {
		g, s, r, epoch, ok, err := commonGroup(ctx, kv, req.Source, req.Destination)
		if err != nil {
			return nil, fail(id, transport.OpCommunicatorMetadata, fmt.Errorf("looking up the actors' groups: %w", ioError(ctx, err)))
		}
		if ok {
			d.Group, d.Src, d.Dst, d.Epoch = g, s, r, epoch
		}
	}
	data, err := jsonBytes(d)
	if err != nil {
		return nil, fail(id, transport.OpCommunicatorMetadata, err)
	}
	return &transport.CommunicatorMetadataResponse{Data: data}, nil
}

// groupFor returns the hosted member a transfer's communicator data names
// for this end (rank), or nil when it names no group.
func (t *Transport) groupFor(cd *commData, rank int) (*member, error) {
	if cd.Group == "" {
		return nil, nil
	}
	m, err := t.member(cd.Group, rank)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	epoch, joining := m.epoch, m.joining
	m.mu.Unlock()
	if joining || epoch != cd.Epoch {
		return nil, fmt.Errorf("%w: rank %d of group %q here is of another incarnation (epoch %s, transfer names %s)",
			transport.ErrGroupNotFound, rank, cd.Group, epoch, cd.Epoch)
	}
	if m.world <= max(cd.Src, cd.Dst) {
		return nil, fmt.Errorf("%w: group %q has %d ranks, transfer names ranks %d and %d", transport.ErrBadMetadata, cd.Group, m.world, cd.Src, cd.Dst)
	}
	if err := m.causeErr(); err != nil {
		return nil, err
	}
	return m, nil
}

// watchGroup derives a context that ends with the group's failure as its
// cause (transport.ContextError then returns the ErrRankFailed error).
func watchGroup(ctx context.Context, m *member) (context.Context, func()) {
	if m == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-m.broken:
			cancel(m.causeErr())
		case <-done:
		}
	}()
	return ctx, func() { close(done); cancel(nil) }
}

// Send implements transport.Transport (source): it waits for the
// destination with the same token, pushes the bytes and returns once the
// destination acknowledged them.
func (t *Transport) Send(ctx context.Context, req *transport.SendRequest) (*transport.SendResponse, error) {
	if req == nil {
		req = &transport.SendRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	td, err := parseTransportData(id, req.TransportData)
	if err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	cd, err := parseCommData(id, req.CommunicatorData)
	if err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	t.mu.Lock()
	obj := t.objects[id]
	t.mu.Unlock()
	if obj == nil || obj.nonce != td.Nonce {
		return nil, fail(id, transport.OpSend, fmt.Errorf("%w: object unknown here or already garbage-collected", transport.ErrBadMetadata))
	}
	if err := sameMetas(req.Tensors, obj.metas); err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	m, err := t.groupFor(cd, cd.Src)
	if err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	ctx, done, err := t.aborts.Begin(ctx, id)
	if err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	defer done()
	ctx, unwatch := watchGroup(ctx, m)
	defer unwatch()
	p, err := t.awaitPeer(ctx, id, obj, cd.Token)
	if err == nil {
		err = t.push(ctx, obj, p)
	}
	if err != nil {
		return nil, fail(id, transport.OpSend, err)
	}
	return &transport.SendResponse{}, nil
}

// Receive implements transport.Transport (destination): it fetches the
// object from the source instance into req.Targets or into segments it
// allocates for the caller (listed in Allocated).
func (t *Transport) Receive(ctx context.Context, req *transport.ReceiveRequest) (*transport.ReceiveResponse, error) {
	if req == nil {
		req = &transport.ReceiveRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	td, err := parseTransportData(id, req.TransportData)
	if err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	cd, err := parseCommData(id, req.CommunicatorData)
	if err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	if err := sameMetas(req.Tensors, td.Tensors); err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	if req.Targets != nil {
		if err := checkTargets(td.Tensors, req.Targets); err != nil {
			return nil, fail(id, transport.OpReceive, err)
		}
	}
	m, err := t.groupFor(cd, cd.Dst)
	if err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	if m != nil {
		m.mu.Lock()
		srcAddr := m.addrs[cd.Src]
		m.mu.Unlock()
		if srcAddr != td.Addr {
			return nil, fail(id, transport.OpReceive, fmt.Errorf("%w: the object was extracted at %s, but rank %d of group %q is hosted at %s",
				transport.ErrBadMetadata, td.Addr, cd.Src, cd.Group, srcAddr))
		}
	}
	ctx, done, err := t.aborts.Begin(ctx, id)
	if err != nil {
		return nil, fail(id, transport.OpReceive, err)
	}
	defer done()
	ctx, unwatch := watchGroup(ctx, m)
	defer unwatch()

	out, allocated, err := t.destinations(td.Tensors, req.Targets)
	if err == nil {
		err = t.fetch(ctx, td, cd.Token, out)
		if err == nil && ctx.Err() != nil {
			err = transport.ContextError(ctx) // the caller gave up as the bytes arrived
		}
	}
	if err != nil {
		for _, s := range allocated {
			shmem.Default.Forget(s)
			_ = shmem.Unlink(s)
		}
		return nil, fail(id, transport.OpReceive, err)
	}
	return &transport.ReceiveResponse{Tensors: out, Allocated: allocated}, nil
}

// destinations returns the tensors a receive writes into: the targets, or
// fresh segments that become the caller's.
func (t *Transport) destinations(metas []transport.TensorMeta, targets []transport.Tensor) ([]transport.Tensor, []string, error) {
	out := make([]transport.Tensor, len(metas))
	if targets != nil {
		for i := range targets {
			out[i] = targets[i]
			out[i].Shape = slices.Clone(metas[i].Shape)
		}
		return out, nil, nil
	}
	prefix := t.config().SegmentPrefix
	var allocated []string
	for i, m := range metas {
		if m.ByteSize() == 0 {
			out[i] = transport.Tensor{DType: m.DType, Shape: slices.Clone(m.Shape), Device: transport.CPU}
			continue
		}
		tn, err := transport.NewTensorIn(prefix, m.DType, m.Shape...)
		if err != nil {
			for _, s := range allocated {
				_ = shmem.Unlink(s)
			}
			return nil, nil, err
		}
		out[i] = tn
		allocated = append(allocated, tn.Buffer.Segment)
	}
	return out, allocated, nil
}

// GarbageCollect implements transport.Transport: unpin, unlink owned
// segments no other object uses, turn waiting destinations away.
func (t *Transport) GarbageCollect(_ context.Context, req *transport.GarbageCollectRequest) (*transport.GarbageCollectResponse, error) {
	if req == nil {
		req = &transport.GarbageCollectRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpGarbageCollect, err)
	}
	t.aborts.Forget(id)
	t.mu.Lock()
	obj := t.objects[id]
	if obj == nil {
		t.mu.Unlock()
		return &transport.GarbageCollectResponse{}, nil
	}
	delete(t.objects, id)
	close(obj.arrived)
	peers := obj.takePeers()
	var unlink []string
	for _, s := range obj.segs {
		r := t.segs[s]
		if r.refs--; r.refs > 0 {
			continue
		}
		delete(t.segs, s)
		if r.owned {
			unlink = append(unlink, s)
		}
	}
	t.mu.Unlock()
	for _, p := range peers {
		t.refuse(p.conn, reply{Kind: replyBad, Error: "the object was garbage-collected at the source"})
	}
	unpin(obj.tensors)
	var errs []error
	for _, s := range unlink {
		shmem.Default.Forget(s)
		if err := shmem.Unlink(s); err != nil && !errors.Is(err, shmem.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fail(id, transport.OpGarbageCollect, err)
	}
	return &transport.GarbageCollectResponse{}, nil
}

// Abort implements transport.Transport: pending and later Send/Receive
// calls of the object fail with ErrAborted until it is collected, and
// destinations waiting here are told.
func (t *Transport) Abort(_ context.Context, req *transport.AbortRequest) (*transport.AbortResponse, error) {
	if req == nil {
		req = &transport.AbortRequest{}
	}
	id := req.ObjectID
	if err := transport.ValidObjectID(id); err != nil {
		return nil, fail(id, transport.OpAbort, err)
	}
	reason := req.Reason
	if reason == "" {
		reason = "no reason given"
	}
	t.aborts.Abort(id, reason)
	t.mu.Lock()
	var peers []*peer
	if obj := t.objects[id]; obj != nil {
		peers = obj.takePeers()
	}
	t.mu.Unlock()
	for _, p := range peers {
		t.refuse(p.conn, reply{Kind: replyAborted, Error: reason})
	}
	return &transport.AbortResponse{}, nil
}

// ---------------------------------------------------------------- checks

func sameMetas(req, have []transport.TensorMeta) error {
	if req == nil {
		return nil
	}
	if len(req) != len(have) {
		return fmt.Errorf("%w: request lists %d tensors, object has %d", transport.ErrBadMetadata, len(req), len(have))
	}
	for i := range req {
		if !req[i].Equal(have[i]) {
			return fmt.Errorf("%w: tensor %d is %s, request says %s", transport.ErrBadMetadata, i, have[i], req[i])
		}
	}
	return nil
}

func checkTargets(metas []transport.TensorMeta, targets []transport.Tensor) error {
	if len(targets) != len(metas) {
		return fmt.Errorf("%w: %d targets for %d tensors", transport.ErrBadMetadata, len(targets), len(metas))
	}
	for i, tg := range targets {
		if err := checkTensor(fmt.Sprintf("target %d", i), tg); err != nil {
			return err
		}
		if !tg.Meta().Equal(metas[i]) {
			return fmt.Errorf("%w: target %d is %s, tensor is %s", transport.ErrBadMetadata, i, tg.Meta(), metas[i])
		}
		if tg.Buffer.Length == 0 {
			continue
		}
		size, err := shmem.Stat(tg.Buffer.Segment)
		if err != nil {
			return fmt.Errorf("%w: target %d: %v", transport.ErrBadMetadata, i, err)
		}
		if tg.Buffer.Offset > size || tg.Buffer.Length > size-tg.Buffer.Offset {
			return fmt.Errorf("%w: target %d: bytes [%d, %d) outside segment %s of %d bytes", transport.ErrBadMetadata,
				i, tg.Buffer.Offset, tg.Buffer.Offset+tg.Buffer.Length, tg.Buffer.Segment, size)
		}
	}
	return nil
}

// ---------------------------------------------------------------- data path

// takePeers empties the object's queue; call with Transport.mu held.
func (o *object) takePeers() []*peer {
	peers := o.peers
	o.peers = nil
	for _, p := range peers {
		p.taken = true
	}
	return peers
}

// handleFetch queues a destination on its object, then waits for its ack
// byte (which also notices a destination that hangs up while waiting).
func (t *Transport) handleFetch(c net.Conn, h *hello) {
	p := &peer{conn: c, token: h.Token, ack: make(chan error, 1)}
	var refusal *reply
	t.mu.Lock()
	obj := t.objects[h.Object]
	switch {
	case t.aborts.Aborted(h.Object) != nil:
		refusal = &reply{Kind: replyAborted, Error: t.aborts.Aborted(h.Object).Error()}
	case obj == nil || obj.nonce != h.Nonce:
		refusal = &reply{Kind: replyBad, Error: "object unknown at the source or already garbage-collected"}
	default:
		obj.peers = append(obj.peers, p)
		close(obj.arrived)
		obj.arrived = make(chan struct{})
	}
	t.mu.Unlock()
	if refusal != nil {
		t.refuse(c, *refusal)
		return
	}
	var b [1]byte
	_, err := io.ReadFull(c, b[:])
	if err == nil && b[0] != ackByte {
		err = fmt.Errorf("bad acknowledgement byte %#x", b[0])
	}
	t.mu.Lock()
	taken := p.taken
	if !taken {
		p.taken = true
		if i := slices.Index(obj.peers, p); i >= 0 {
			obj.peers = slices.Delete(obj.peers, i, i+1)
		}
	}
	t.mu.Unlock()
	if !taken {
		t.closeConn(c)
		return
	}
	p.ack <- err
}

// awaitPeer waits until a destination with the token is connected for obj
// and takes it.
func (t *Transport) awaitPeer(ctx context.Context, id string, obj *object, token string) (*peer, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, ErrClosed
		}
		if t.objects[id] != obj {
			t.mu.Unlock()
			return nil, fmt.Errorf("%w: object garbage-collected while sending", transport.ErrBadMetadata)
		}
		for i, p := range obj.peers {
			if p.token == token {
				obj.peers = slices.Delete(obj.peers, i, i+1)
				p.taken = true
				t.mu.Unlock()
				return p, nil
			}
		}
		arrived := obj.arrived
		t.mu.Unlock()
		select {
		case <-arrived:
		case <-ctx.Done():
			return nil, transport.ContextError(ctx)
		}
	}
}

// push writes the object's bytes to a destination and waits for its ack.
func (t *Transport) push(ctx context.Context, obj *object, p *peer) error {
	defer t.closeConn(p.conn)
	stop := cancelOnDone(ctx, p.conn)
	defer stop()
	if err := writeFrame(p.conn, reply{}); err != nil {
		return ioError(ctx, fmt.Errorf("writing to the destination: %w", err))
	}
	for i, tn := range obj.tensors {
		if tn.Buffer.Length == 0 {
			continue
		}
		b, err := tn.Bytes(ctx) // the extraction's pin keeps this mapping cached
		if err != nil {
			return fmt.Errorf("tensor %d: %w", i, err)
		}
		_, err = p.conn.Write(b)
		tn.Release()
		if err != nil {
			return ioError(ctx, fmt.Errorf("writing tensor %d to the destination: %w", i, err))
		}
	}
	select {
	case err := <-p.ack:
		if err != nil {
			return ioError(ctx, fmt.Errorf("waiting for the destination's acknowledgement: %w", err))
		}
		return nil
	case <-ctx.Done():
		return transport.ContextError(ctx)
	}
}

// fetch connects to the source, asks for the object and reads its bytes
// into out.
func (t *Transport) fetch(ctx context.Context, td *transportData, token string, out []transport.Tensor) error {
	c, err := t.dial(ctx, td.Addr, "fetch from "+td.Addr)
	if err != nil {
		return ioError(ctx, fmt.Errorf("connecting to the source's data listener %s: %w", td.Addr, err))
	}
	defer t.closeConn(c)
	stop := cancelOnDone(ctx, c)
	defer stop()
	if err := writeFrame(c, hello{V: wireVersion, Type: helloFetch, Object: td.Object, Nonce: td.Nonce, Token: token}); err != nil {
		return ioError(ctx, fmt.Errorf("sending the request to the source: %w", err))
	}
	var r reply
	if err := readFrame(c, &r); err != nil {
		return ioError(ctx, fmt.Errorf("waiting for the source: %w", err))
	}
	switch r.Kind {
	case "":
	case replyAborted:
		return fmt.Errorf("%w by the source: %s", transport.ErrAborted, r.Error)
	case replyBad:
		return fmt.Errorf("%w: the source says: %s", transport.ErrBadMetadata, r.Error)
	default:
		return fmt.Errorf("the source refused the transfer: %s", r.Error)
	}
	for i, tn := range out {
		if tn.Buffer.Length == 0 {
			continue
		}
		b, err := tn.Bytes(ctx)
		if err != nil {
			return fmt.Errorf("tensor %d: %w", i, err)
		}
		_, err = io.ReadFull(c, b)
		tn.Release()
		if err != nil {
			return ioError(ctx, fmt.Errorf("reading tensor %d from the source: %w", i, err))
		}
	}
	if _, err := c.Write([]byte{ackByte}); err != nil {
		return ioError(ctx, fmt.Errorf("acknowledging to the source: %w", err))
	}
	return nil
}
