package onesided

// The read protocol, spoken over TCP between a reader and a source agent's
// read server. All integers are big-endian.
//
// Handshake, once per connection:
//
//	reader -> server: "GROS" | version u16 (1) | name length u16 | agent name | incarnation u64
//	server -> reader: "GROS" | status u8 | 0 u8 | message length u16 | message
//
// The server refuses a reader that names another agent or incarnation (a
// port reused by a restarted agent), so a stale descriptor never reads the
// wrong memory.
//
// Then any number of requests, answered in order (a reader pipelines
// several on one connection):
//
//	request  (40 bytes): op u8 | 0 [7] | key u64 | registration u64 | offset u64 | length u64
//	response (16 bytes): status u8 | 0 [7] | n u64, then n bytes
//
// op 1 (read) returns the length bytes at offset of the registration,
// which must belong to the live extraction named by key and contain the
// range. op 2 (check) only validates key (and the registration, if not 0)
// and returns no bytes. With a status other than OK the n bytes are an
// error message (at most 4 KiB) and no data follows.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/goray-dev/goray/sdk/plugin"
)

const (
	wireMagic      = "GROS"
	wireVersion    = 1
	reqSize        = 40
	respSize       = 16
	maxWireMessage = 4 << 10
	// handshakeTimeout bounds a handshake on the server side.
	handshakeTimeout = 10 * time.Second
)

// Operations of a request.
const (
	opRead  = 1
	opCheck = 2
)

// Status is the read server's answer to a request or handshake.
type Status uint8

// Statuses of the read protocol.
const (
	// StatusOK: the data follows.
	StatusOK Status = 0
	// StatusUnknownObject: the key names no live extraction.
	StatusUnknownObject Status = 1
	// StatusUnknownRegistration: the registration does not exist or is not
	// part of the extraction.
	StatusUnknownRegistration Status = 2
	// StatusOutOfBounds: the range is outside the registration.
	StatusOutOfBounds Status = 3
	// StatusBadRequest: malformed request or handshake.
	StatusBadRequest Status = 4
	// StatusWrongAgent: the handshake named another agent or incarnation.
	StatusWrongAgent Status = 5
	// StatusClosing: the agent is shutting down.
	StatusClosing Status = 6
)

// String names the status.
func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusUnknownObject:
		return "unknown object"
	case StatusUnknownRegistration:
		return "unknown registration"
	case StatusOutOfBounds:
		return "out of bounds"
	case StatusBadRequest:
		return "bad request"
	case StatusWrongAgent:
		return "wrong agent"
	case StatusClosing:
		return "closing"
	}
	return fmt.Sprintf("status %d", uint8(s))
}

type request struct {
	op          byte
	key, reg    uint64
	off, length int64
}

func (r *request) encode(b *[reqSize]byte) {
	*b = [reqSize]byte{}
	b[0] = r.op
	binary.BigEndian.PutUint64(b[8:], r.key)
	binary.BigEndian.PutUint64(b[16:], r.reg)
	binary.BigEndian.PutUint64(b[24:], uint64(r.off))
	binary.BigEndian.PutUint64(b[32:], uint64(r.length))
}

func decodeRequest(b *[reqSize]byte) request {
	return request{
		op:     b[0],
		key:    binary.BigEndian.Uint64(b[8:]),
		reg:    binary.BigEndian.Uint64(b[16:]),
		off:    int64(binary.BigEndian.Uint64(b[24:])),
		length: int64(binary.BigEndian.Uint64(b[32:])),
	}
}

func encodeResponse(b *[respSize]byte, st Status, n int64) {
	*b = [respSize]byte{}
	b[0] = byte(st)
	binary.BigEndian.PutUint64(b[8:], uint64(n))
}

// writeHello sends the reader's side of the handshake.
func writeHello(w io.Writer, name string, inc uint64) error {
	b := make([]byte, 0, 16+len(name))
	b = append(b, wireMagic...)
	b = binary.BigEndian.AppendUint16(b, wireVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint64(b, inc)
	_, err := w.Write(b)
	return err
}

// readHello reads the reader's side of the handshake.
func readHello(r io.Reader) (name string, inc uint64, err error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", 0, err
	}
	if string(h[:4]) != wireMagic {
		return "", 0, fmt.Errorf("not a onesided reader (magic %q)", h[:4])
	}
	if v := binary.BigEndian.Uint16(h[4:]); v != wireVersion {
		return "", 0, fmt.Errorf("protocol version %d, want %d", v, wireVersion)
	}
	n := binary.BigEndian.Uint16(h[6:])
	if n == 0 || n > maxNameLen {
		return "", 0, fmt.Errorf("agent name of %d bytes", n)
	}
	b := make([]byte, int(n)+8)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", 0, err
	}
	return string(b[:n]), binary.BigEndian.Uint64(b[n:]), nil
}

func writeHelloReply(w io.Writer, st Status, msg string) error {
	if len(msg) > maxWireMessage {
		msg = msg[:maxWireMessage]
	}
	b := make([]byte, 0, 8+len(msg))
	b = append(b, wireMagic...)
	b = append(b, byte(st), 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
	b = append(b, msg...)
	_, err := w.Write(b)
	return err
}

// errWrongAgent is the handshake refusal of a server that is not the
// agent (or incarnation) the reader wanted.
var errWrongAgent = errors.New("the read server is another agent or incarnation")

func readHelloReply(r io.Reader) error {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return err
	}
	if string(h[:4]) != wireMagic {
		return fmt.Errorf("not a onesided read server (magic %q)", h[:4])
	}
	msg := make([]byte, binary.BigEndian.Uint16(h[6:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return err
	}
	switch st := Status(h[4]); st {
	case StatusOK:
		return nil
	case StatusWrongAgent:
		return fmt.Errorf("%w: %s", errWrongAgent, msg)
	default:
		return fmt.Errorf("handshake refused: %s: %s", st, msg)
	}
}

// ---------------------------------------------------------------- server

// acceptLoop accepts readers until the listener is closed.
func (a *Agent) acceptLoop(ln net.Listener) {
	defer a.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			a.mu.Lock()
			closed := a.closed
			if !closed {
				a.acceptErr = err
			}
			a.mu.Unlock()
			if !closed {
				a.log.Error("read server stopped accepting", "error", err)
			}
			return
		}
		if !a.trackConn(nc) {
			_ = nc.Close()
			return
		}
		if !a.spawn(func() { a.serveConn(nc) }) {
			a.dropConn(nc)
			return
		}
	}
}

// serveConn serves one reader's connection.
func (a *Agent) serveConn(nc net.Conn) {
	defer a.dropConn(nc)
	// Only the cluster's processes may read registered memory.
	ac, err := plugin.AuthenticateServer(nc)
	if err != nil { // logged there, once per peer per minute
		return
	}
	nc = ac // closing the tracked connection closes this one too
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	name, inc, err := readHello(nc)
	if err != nil {
		_ = writeHelloReply(nc, StatusBadRequest, err.Error())
		return
	}
	if name != a.name || inc != a.inc {
		_ = writeHelloReply(nc, StatusWrongAgent, fmt.Sprintf("this is agent %s incarnation %016x, not %s incarnation %016x", a.name, a.inc, name, inc))
		return
	}
	if err := writeHelloReply(nc, StatusOK, ""); err != nil {
		return
	}
	_ = nc.SetDeadline(time.Time{})
	var rb [reqSize]byte
	var hb [respSize]byte
	for {
		if _, err := io.ReadFull(nc, rb[:]); err != nil {
			return
		}
		req := decodeRequest(&rb)
		reg, st, msg := a.lookupRequest(req)
		if st != StatusOK {
			encodeResponse(&hb, st, int64(len(msg)))
			bufs := net.Buffers{hb[:], []byte(msg)}
			if _, err := bufs.WriteTo(nc); err != nil {
				return
			}
			continue
		}
		if err := a.beforeServe(req); err != nil {
			if reg != nil {
				reg.release()
			}
			return
		}
		var data []byte
		if reg != nil {
			data = reg.data[req.off : req.off+req.length]
		}
		encodeResponse(&hb, StatusOK, int64(len(data)))
		bufs := net.Buffers{hb[:], data}
		_, err := bufs.WriteTo(nc)
		if reg != nil {
			reg.release()
		}
		if err != nil {
			return
		}
		if req.op == opRead {
			a.readsServed.Add(1)
			a.bytesServed.Add(int64(len(data)))
		}
	}
}

// beforeServe applies the test hooks: a delay per response (the
// GORAY_ONESIDED_TEST_SERVE_DELAY environment variable) and a function
// tests install to freeze or throttle the server.
func (a *Agent) beforeServe(req request) error {
	if a.serveDelay > 0 {
		t := time.NewTimer(a.serveDelay)
		select {
		case <-t.C:
		case <-a.ctx.Done():
			t.Stop()
			return a.ctx.Err()
		}
	}
	if h := a.serveHook.Load(); h != nil {
		return (*h)(a.ctx, req)
	}
	return nil
}

// lookupRequest validates a request. For a read it returns the
// registration with an in-flight reference the caller releases.
func (a *Agent) lookupRequest(req request) (*registration, Status, string) {
	if req.op != opRead && req.op != opCheck {
		return nil, StatusBadRequest, fmt.Sprintf("unknown op %d", req.op)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, StatusClosing, "agent is closing"
	}
	obj := a.byKey[req.key]
	if obj == nil {
		return nil, StatusUnknownObject, fmt.Sprintf("key %016x names no live object (collected, or never extracted here)", req.key)
	}
	if req.op == opCheck && req.reg == 0 {
		return nil, StatusOK, ""
	}
	r := a.regs[req.reg]
	if r == nil || !obj.uses(r) {
		return nil, StatusUnknownRegistration, fmt.Sprintf("registration %d is not registered for object %s", req.reg, obj.id)
	}
	if req.off < 0 || req.length < 0 || req.off > r.size || req.length > r.size-req.off {
		return nil, StatusOutOfBounds, fmt.Sprintf("[%d, %d+%d) outside registration %d of %d bytes", req.off, req.off, req.length, req.reg, r.size)
	}
	if req.op == opCheck {
		return nil, StatusOK, ""
	}
	if !r.acquire() {
		return nil, StatusUnknownRegistration, fmt.Sprintf("registration %d was deregistered", req.reg)
	}
	return r, StatusOK, ""
}

// ---------------------------------------------------------------- client

// conn is a reader's connection to a source agent's read server.
type conn struct {
	nc   net.Conn
	pool *connPool
}

// roundTrip sends one request and, for a read, reads the data into dst
// (len(dst) == req.length).
func (c *conn) send(req request) error {
	var b [reqSize]byte
	req.encode(&b)
	_, err := c.nc.Write(b[:])
	return err
}

// recv reads the response to a request sent earlier, the data going into
// dst.
func (c *conn) recv(dst []byte) error {
	var h [respSize]byte
	if _, err := io.ReadFull(c.nc, h[:]); err != nil {
		return err
	}
	st := Status(h[0])
	n := int64(binary.BigEndian.Uint64(h[8:]))
	if st != StatusOK {
		if n < 0 || n > maxWireMessage {
			return fmt.Errorf("protocol error: error message of %d bytes", n)
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(c.nc, msg); err != nil {
			return err
		}
		return &RemoteError{Agent: c.pool.name, Status: st, Msg: string(msg)}
	}
	if n != int64(len(dst)) {
		return fmt.Errorf("protocol error: %d bytes answered, %d asked", n, len(dst))
	}
	_, err := io.ReadFull(c.nc, dst)
	return err
}

// dial connects and performs the handshake, bounded by ctx and the dial
// timeout.
func (a *Agent) dial(ctx context.Context, p *connPool) (*conn, error) {
	dctx, cancel := context.WithTimeout(ctx, a.cfg.DialTimeout)
	defer cancel()
	d := net.Dialer{KeepAlive: 15 * time.Second}
	nc, err := d.DialContext(dctx, "tcp", p.addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &PeerError{Agent: p.name, Addr: p.addr, Err: err}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 20)
	}
	ac, err := plugin.AuthenticateClient(dctx, nc)
	if err != nil {
		_ = nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &PeerError{Agent: p.name, Addr: p.addr, Err: err}
	}
	nc = ac
	if !a.trackConn(nc) {
		_ = nc.Close()
		return nil, ErrClosed
	}
	stop := context.AfterFunc(dctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	err = writeHello(nc, p.name, p.inc)
	if err == nil {
		err = readHelloReply(nc)
	}
	if !stop() && err == nil {
		err = dctx.Err()
	}
	if err != nil {
		a.dropConn(nc)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, errWrongAgent) {
			return nil, badMeta(ErrUnknownAgent, "agent %s at %s: %v", p.name, p.addr, err)
		}
		return nil, &PeerError{Agent: p.name, Addr: p.addr, Err: err}
	}
	_ = nc.SetDeadline(time.Time{})
	return &conn{nc: nc, pool: p}, nil
}
