package tcptemplate

// The data path: the transport's own TCP connections. Nothing here goes
// through gRPC.
//
// One connection carries one transfer:
//
//	destination                                source
//	  Receive: dial transportData.Addr  ──────▶ accept, read request
//	  request{object, nonce, token}     ──────▶ known object? queue the peer
//	                                            Send(token) picks the peer
//	                                    ◀────── reply{} (or reply{error})
//	                                    ◀────── tensor bytes, in order
//	  read into destination segments
//	  ack byte                          ──────▶ Send returns
//
// Frames are a 4-byte big-endian length and a JSON document; the tensor
// bytes follow the reply raw, each tensor's Buffer.Length bytes, so the
// receiver reads them straight into shared memory.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/transport"
)

const (
	// wireVersion versions the transport data, the communicator data and
	// the data connection's protocol together.
	wireVersion = 1
	// maxFrame bounds a frame and the transport data accepted.
	maxFrame = 1 << 20
	// requestTimeout bounds how long a new connection may take to say
	// what it wants.
	requestTimeout = 10 * time.Second
	// refuseTimeout bounds writing a refusal to a waiting destination.
	refuseTimeout = time.Second
	// ackByte is what a destination sends once it has every byte.
	ackByte = 0x06
)

// Refusal kinds in reply.Kind.
const (
	kindBadMetadata = "bad_metadata"
	kindAborted     = "aborted"
)

// transportData is ExtractMetadataResponse.TransportData: everything a
// destination needs to fetch the object.
type transportData struct {
	V      int    `json:"v"`
	Object string `json:"object"`
	// Addr is the source's data listener.
	Addr string `json:"addr"`
	// Nonce names the extraction, so stale transport data (the object was
	// collected and extracted again) is refused.
	Nonce   string                 `json:"nonce"`
	Tensors []transport.TensorMeta `json:"tensors"`
}

func (d transportData) marshal() ([]byte, error) { return json.Marshal(d) }

// decodeStrict decodes one JSON document that must match v exactly.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// parseTransportData checks transport data for object id. Every error
// matches transport.ErrBadMetadata.
func parseTransportData(id string, data []byte) (*transportData, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: no transport data (a two-sided receive needs the source's ExtractMetadata result)", transport.ErrBadMetadata)
	}
	if len(data) > maxFrame {
		return nil, fmt.Errorf("%w: transport data of %d bytes is too large", transport.ErrBadMetadata, len(data))
	}
	var d transportData
	if err := decodeStrict(data, &d); err != nil {
		return nil, fmt.Errorf("%w: transport data does not parse: %v", transport.ErrBadMetadata, err)
	}
	switch {
	case d.V != wireVersion:
		return nil, fmt.Errorf("%w: transport data version %d, want %d", transport.ErrBadMetadata, d.V, wireVersion)
	case d.Object != id:
		return nil, fmt.Errorf("%w: transport data is for object %.40q", transport.ErrBadMetadata, d.Object)
	case d.Addr == "" || d.Nonce == "":
		return nil, fmt.Errorf("%w: transport data lacks the source address or nonce", transport.ErrBadMetadata)
	}
	for i, m := range d.Tensors {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("transport data tensor %d: %w", i, err)
		}
	}
	return &d, nil
}

// link is CommunicatorMetadataResponse.Data: who talks to whom.
type link struct {
	V           int    `json:"v"`
	Object      string `json:"object"`
	Source      string `json:"source,omitempty"`
	Destination string `json:"destination,omitempty"`
	// Token pairs a Send with its Receive.
	Token string `json:"token"`
}

func (l link) marshal() ([]byte, error) { return json.Marshal(l) }

// parseLink returns the pairing token of communicator data; empty data
// means the empty token (a Send and a Receive without communicator data
// pair with each other).
func parseLink(id string, data []byte) (string, error) {
	if len(data) == 0 {
		return "", nil
	}
	if len(data) > maxFrame {
		return "", fmt.Errorf("%w: communicator data of %d bytes is too large", transport.ErrBadMetadata, len(data))
	}
	var l link
	if err := decodeStrict(data, &l); err != nil {
		return "", fmt.Errorf("%w: communicator data does not parse: %v", transport.ErrBadMetadata, err)
	}
	if l.V != wireVersion || l.Object != id {
		return "", fmt.Errorf("%w: communicator data (version %d) is for object %.40q", transport.ErrBadMetadata, l.V, l.Object)
	}
	return l.Token, nil
}

// request is what a destination sends after connecting.
type request struct {
	V      int    `json:"v"`
	Object string `json:"object"`
	Nonce  string `json:"nonce"`
	Token  string `json:"token,omitempty"`
}

// reply is the source's answer: empty when the bytes follow, else a
// refusal.
type reply struct {
	Kind  string `json:"kind,omitempty"`
	Error string `json:"error,omitempty"`
}

// err turns a refusal into the error the destination's Receive returns.
func (r reply) err() error {
	switch {
	case r.Kind == "" && r.Error == "":
		return nil
	case r.Kind == kindAborted:
		return fmt.Errorf("%w by the source: %s", transport.ErrAborted, r.Error)
	case r.Kind == kindBadMetadata:
		return fmt.Errorf("%w: the source says: %s", transport.ErrBadMetadata, r.Error)
	}
	return fmt.Errorf("the source refused the transfer: %s", r.Error)
}

func writeFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	_, err = w.Write(append(buf, body...))
	return err
}

func readFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return fmt.Errorf("frame of %d bytes is too large", size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	return decodeStrict(body, v)
}

// ---------------------------------------------------------------- connections

// track registers an open data connection so Close can end it; it fails
// (and closes c) once the transport is closed.
func (t *Transport) track(c net.Conn, what string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		_ = c.Close()
		return ErrClosed
	}
	t.conns[c] = what
	return nil
}

// retrack replaces a tracked connection by the authenticated one wrapping
// it (the same one without TLS); nil when the transport closed meanwhile.
func (t *Transport) retrack(raw, c net.Conn) net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	what, ok := t.conns[raw]
	delete(t.conns, raw)
	if !ok || t.closed {
		_ = c.Close()
		return nil
	}
	t.conns[c] = what
	return c
}

// closeConn closes a tracked connection.
func (t *Transport) closeConn(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	_ = c.Close()
}

// cancelOnDone makes blocked reads and writes on c fail as soon as ctx is
// done (deadline, cancel, or Abort through transport.Aborts). The caller
// then reports transport.ContextError(ctx). Call stop when done with c.
func cancelOnDone(ctx context.Context, c net.Conn) (stop func() bool) {
	return context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
}

// ioError explains a failed read or write: the context's reason when it
// ended (that is why the I/O failed), else err.
func ioError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return transport.ContextError(ctx)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// listen starts the data listener if it is not running and returns its
// address.
func (t *Transport) listen() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", ErrClosed
	}
	if t.ln != nil {
		return t.addr, nil
	}
	// plugin.Listen bounds the connections of peers that have not shown
	// the cluster token yet (see handle's AuthenticateServer).
	ln, err := plugin.Listen(context.Background(), "tcp", t.cfg.ListenAddress, t.log)
	if err != nil {
		return "", fmt.Errorf("data listener on listen_address %q: %w", t.cfg.ListenAddress, err)
	}
	t.ln, t.addr = ln, ln.Addr().String()
	t.log.Info("data listener started", "addr", t.addr)
	t.wg.Add(1)
	go t.serve(ln)
	return t.addr, nil
}

// serve accepts destinations until the listener closes.
func (t *Transport) serve(ln net.Listener) {
	defer t.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			t.mu.Lock()
			if !t.closed {
				t.acceptErr = err // Health reports it; the host restarts us
				t.log.Error("data listener failed", "addr", t.addr, "error", err)
			}
			t.mu.Unlock()
			return
		}
		if t.track(c, "from destination "+c.RemoteAddr().String()) != nil {
			continue
		}
		t.wg.Add(1)
		go t.handle(c)
	}
}

// peer is a destination connected to this source, waiting for its Send.
type peer struct {
	conn  net.Conn
	token string
	// taken is set (under Transport.mu) when a Send, GarbageCollect or
	// Abort takes the peer out of its object's queue.
	taken bool
	// ack receives the outcome of reading the destination's ack byte.
	ack chan error
}

// takePeers empties the object's queue. Call with Transport.mu held.
func (o *object) takePeers() []*peer {
	peers := o.peers
	o.peers = nil
	for _, p := range peers {
		p.taken = true
	}
	return peers
}

// handle serves one connection from a destination: it reads the request,
// queues the peer on its object and then waits for the ack byte, which
// also notices a destination that hangs up while waiting.
func (t *Transport) handle(c net.Conn) {
	defer t.wg.Done()
	// First of all, the peer proves it belongs to the cluster (and TLS
	// starts, when the cluster uses it): a listener on the network must
	// never serve a stranger.
	ac, err := plugin.AuthenticateServer(c)
	if err != nil { // logged there, once per peer per minute
		t.closeConn(c)
		return
	}
	if c = t.retrack(c, ac); c == nil {
		return
	}
	var req request
	_ = c.SetReadDeadline(time.Now().Add(requestTimeout))
	if err := readFrame(c, &req); err != nil {
		t.logger().Warn("bad data connection", "from", c.RemoteAddr().String(), "error", err)
		t.closeConn(c)
		return
	}
	_ = c.SetReadDeadline(time.Time{})

	p := &peer{conn: c, token: req.Token, ack: make(chan error, 1)}
	var refusal *reply
	t.mu.Lock()
	obj := t.objects[req.Object]
	switch {
	case req.V != wireVersion:
		refusal = &reply{Kind: kindBadMetadata, Error: fmt.Sprintf("protocol version %d, want %d", req.V, wireVersion)}
	case t.aborts.Aborted(req.Object) != nil:
		refusal = &reply{Kind: kindAborted, Error: t.aborts.Aborted(req.Object).Error()}
	case obj == nil || obj.nonce != req.Nonce:
		refusal = &reply{Kind: kindBadMetadata, Error: "object unknown at the source or already garbage-collected"}
	default:
		obj.peers = append(obj.peers, p)
		close(obj.arrived) // wake Sends waiting for a destination
		obj.arrived = make(chan struct{})
	}
	t.mu.Unlock()
	if refusal != nil {
		t.refuse(c, *refusal)
		return
	}

	var b [1]byte
	_, err = io.ReadFull(c, b[:])
	if err == nil && b[0] != ackByte {
		err = fmt.Errorf("bad acknowledgement byte %#x", b[0])
	}
	t.mu.Lock()
	taken := p.taken
	if !taken { // the destination left before any Send picked it
		p.taken = true
		obj.peers = removePeer(obj.peers, p)
	}
	t.mu.Unlock()
	if !taken {
		t.closeConn(c)
		return
	}
	p.ack <- err // buffered: whoever took the peer may or may not read it
}

func removePeer(peers []*peer, p *peer) []*peer {
	for i, q := range peers {
		if q == p {
			return append(peers[:i], peers[i+1:]...)
		}
	}
	return peers
}

// refuse tells a waiting destination why it gets nothing, and hangs up.
func (t *Transport) refuse(c net.Conn, r reply) {
	_ = c.SetWriteDeadline(time.Now().Add(refuseTimeout))
	_ = writeFrame(c, r)
	t.closeConn(c)
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
				obj.peers = append(obj.peers[:i], obj.peers[i+1:]...)
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
		return ioError(ctx, "writing to the destination", err)
	}
	for i, tn := range obj.tensors {
		if tn.Buffer.Length == 0 {
			continue
		}
		// A reference of our own for the write, so a concurrent
		// GarbageCollect cannot unmap the bytes under us. The pin taken at
		// extraction keeps this mapping cached: no mmap here.
		b, err := tn.Bytes(ctx)
		if err != nil {
			return fmt.Errorf("tensor %d: %w", i, err)
		}
		_, err = p.conn.Write(b)
		tn.Release()
		if err != nil {
			return ioError(ctx, fmt.Sprintf("writing tensor %d to the destination", i), err)
		}
	}
	select {
	case err := <-p.ack:
		if err != nil {
			return ioError(ctx, "waiting for the destination's acknowledgement", err)
		}
		return nil
	case <-ctx.Done():
		return transport.ContextError(ctx)
	}
}

// fetch connects to the source, asks for the object and reads its bytes
// into out.
func (t *Transport) fetch(ctx context.Context, td *transportData, token string, out []transport.Tensor) error {
	t.mu.Lock()
	timeout := t.cfg.DialTimeout
	t.mu.Unlock()
	d := net.Dialer{Timeout: timeout}
	raw, err := d.DialContext(ctx, "tcp", td.Addr)
	if err != nil {
		return ioError(ctx, "connecting to the source's data listener "+td.Addr, err)
	}
	c, err := plugin.AuthenticateClient(ctx, raw)
	if err != nil {
		_ = raw.Close()
		return ioError(ctx, "authenticating to the source's data listener "+td.Addr, err)
	}
	if err := t.track(c, "to source "+td.Addr); err != nil {
		return err
	}
	defer t.closeConn(c)
	stop := cancelOnDone(ctx, c)
	defer stop()

	if err := writeFrame(c, request{V: wireVersion, Object: td.Object, Nonce: td.Nonce, Token: token}); err != nil {
		return ioError(ctx, "sending the request to the source", err)
	}
	// Blocks until the source's Send picks this destination (or refuses).
	var r reply
	if err := readFrame(c, &r); err != nil {
		return ioError(ctx, "waiting for the source", err)
	}
	if err := r.err(); err != nil {
		return err
	}
	for i, tn := range out {
		if tn.Buffer.Length == 0 {
			continue
		}
		b, err := tn.Bytes(ctx)
		if err != nil {
			return fmt.Errorf("tensor %d: %w", i, err)
		}
		_, err = io.ReadFull(c, b) // straight into shared memory
		tn.Release()
		if err != nil {
			return ioError(ctx, fmt.Sprintf("reading tensor %d from the source", i), err)
		}
	}
	if _, err := c.Write([]byte{ackByte}); err != nil {
		return ioError(ctx, "acknowledging to the source", err)
	}
	return nil
}
