// Package dataplane is the object data plane between raylets.
//
// It moves object bytes between nodes over plain TCP:
// the serving raylet writes straight from its arena into the socket and the
// pulling raylet reads straight from the socket into its arena, so no byte
// is copied in user space (gRPC would copy every chunk into and out of a
// message). Control (which object, where) stays on gRPC.
//
// A connection carries requests one after another:
//
//	request:  magic u32 | object id | offset i64 | length i64 (-1: to the end)
//	response: status u8 | data size i64 | metadata length u32 | metadata |
//	          the requested bytes (status ok), or message length u32 | message
//
// Integers are big-endian.
package dataplane

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/connlimit"
	"github.com/goray-dev/goray/internal/ids"
)

// Magic starts every request.
const Magic uint32 = 0x67726431 // "grd1"

// Response status codes.
const (
	// StatusOK: the bytes follow.
	StatusOK byte = 0
	// StatusNotFound: the serving node does not have the object.
	StatusNotFound byte = 1
	// StatusBadRange: the requested range is not in the object.
	StatusBadRange byte = 2
)

// Error is a refusal from the serving raylet.
type Error struct {
	// Status is the refusal's status code.
	Status byte
	// Msg says why, naming the object.
	Msg string
}

// Error returns the refusal's message.
func (e *Error) Error() string { return e.Msg }

// RequestSize is the size of one request on the wire.
const RequestSize = 4 + ids.ObjectIDSize + 16

// Bounds on what a response header may announce; a peer announcing more is
// broken or hostile, and the reader refuses before allocating anything.
const (
	// MaxObjectSize bounds an object's data size (128 TiB: far above
	// any object store, whose memory config.Validate bounds).
	MaxObjectSize = 1 << 47
	// MaxMetadataLen bounds an object's metadata (a format byte in
	// practice).
	MaxMetadataLen = 1 << 20
	// MaxRefusalLen bounds a refusal's message.
	MaxRefusalLen = 1 << 16
)

// Request is one parsed request: [Off, Off+Length) of object OID,
// Length -1 meaning to the end.
type Request struct {
	OID         ids.ObjectID
	Off, Length int64
}

// ParseRequest parses one request of exactly RequestSize bytes and
// checks its magic. The offset and length are checked by Range once
// the object's size is known.
func ParseRequest(b []byte) (Request, error) {
	if len(b) != RequestSize {
		return Request{}, fmt.Errorf("data request of %d bytes, want %d", len(b), RequestSize)
	}
	if m := binary.BigEndian.Uint32(b[:4]); m != Magic {
		return Request{}, fmt.Errorf("bad request magic %#x, want %#x", m, Magic)
	}
	var req Request
	copy(req.OID[:], b[4:4+ids.ObjectIDSize])
	req.Off = int64(binary.BigEndian.Uint64(b[4+ids.ObjectIDSize:]))
	req.Length = int64(binary.BigEndian.Uint64(b[12+ids.ObjectIDSize:]))
	return req, nil
}

// Range checks the requested range against an object of size bytes
// and returns the range to send: the offset and the length clamped to the
// object's end (a length of -1 means to the end). It refuses a negative
// offset, an offset past the end, a length below -1 and a range whose end
// does not fit in an int64 (offset 1, length 2^63-1 once overflowed the
// old check and crashed the node). The arithmetic cannot overflow.
func Range(off, length, size int64) (int64, int64, error) {
	switch {
	case size < 0:
		return 0, 0, fmt.Errorf("object size %d is negative", size)
	case off < 0:
		return 0, 0, fmt.Errorf("offset %d is negative", off)
	case off > size:
		return 0, 0, fmt.Errorf("offset %d is outside the object of %d bytes", off, size)
	case length < -1:
		return 0, 0, fmt.Errorf("length %d is negative (-1 reads to the end)", length)
	case length > math.MaxInt64-off:
		return 0, 0, fmt.Errorf("offset %d + length %d overflows", off, length)
	case length == -1 || length > size-off:
		return off, size - off, nil
	}
	return off, length, nil
}

// Reader reads byte ranges of objects from another node's data plane.
type Reader struct {
	conn net.Conn
	br   *bufio.Reader
	stop func() bool
}

// Dial connects to a data plane with creds (nil: none); the connection
// closes when ctx ends.
func Dial(ctx context.Context, addr string, creds *auth.Credentials) (*Reader, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 20)
		_ = tc.SetWriteBuffer(4 << 20)
	}
	raw := c
	if c, err = creds.ClientConn(ctx, raw); err != nil {
		_ = raw.Close()
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	return &Reader{conn: c, br: bufio.NewReaderSize(c, 64<<10), stop: stop}, nil
}

// Close closes the connection.
func (rr *Reader) Close() error {
	rr.stop()
	return rr.conn.Close()
}

// Request asks for [off, off+length) of oid and reads the response header:
// the object's size and metadata. The bytes follow; read them with
// ReadInto.
func (rr *Reader) Request(oid ids.ObjectID, off, length int64) (size int64, meta []byte, err error) {
	var req [4 + ids.ObjectIDSize + 16]byte
	binary.BigEndian.PutUint32(req[:4], Magic)
	copy(req[4:], oid[:])
	binary.BigEndian.PutUint64(req[4+ids.ObjectIDSize:], uint64(off))
	binary.BigEndian.PutUint64(req[12+ids.ObjectIDSize:], uint64(length))
	if _, err := rr.conn.Write(req[:]); err != nil {
		return 0, nil, err
	}
	return ReadResponse(rr.br, off)
}

// ReadResponse reads one response header for a request at offset off: the
// object's size and metadata, or the serving raylet's refusal as a
// *Error. Every field is checked before it is used: the size is within
// [max(off, 0), MaxObjectSize], the metadata at most MaxMetadataLen bytes
// and a refusal's message at most MaxRefusalLen bytes; a response breaking
// these is a protocol error and the connection must be dropped.
func ReadResponse(br *bufio.Reader, off int64) (size int64, meta []byte, err error) {
	var hdr [13]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return 0, nil, err
	}
	size = int64(binary.BigEndian.Uint64(hdr[1:]))
	n := binary.BigEndian.Uint32(hdr[9:])
	if hdr[0] != StatusOK {
		var ml [4]byte
		if _, err := io.ReadFull(br, ml[:]); err != nil {
			return 0, nil, err
		}
		l := binary.BigEndian.Uint32(ml[:])
		if l > MaxRefusalLen {
			return 0, nil, fmt.Errorf("object data plane: refusal (status %d) with a message of %d bytes, more than %d", hdr[0], l, MaxRefusalLen)
		}
		msg := make([]byte, l)
		if _, err := io.ReadFull(br, msg); err != nil {
			return 0, nil, err
		}
		return 0, nil, &Error{Status: hdr[0], Msg: string(msg)}
	}
	if size < 0 || size < off || size > MaxObjectSize {
		return 0, nil, fmt.Errorf("object data plane: response announces %d bytes for a read at offset %d (at most %d)", size, off, int64(MaxObjectSize))
	}
	if n > MaxMetadataLen {
		return 0, nil, fmt.Errorf("object data plane: response announces %d bytes of metadata, more than %d", n, MaxMetadataLen)
	}
	meta = make([]byte, n)
	if _, err := io.ReadFull(br, meta); err != nil {
		return 0, nil, err
	}
	return size, meta, nil
}

// ReadInto reads exactly len(dst) bytes of the current response.
func (rr *Reader) ReadInto(dst []byte) error {
	_, err := io.ReadFull(rr.br, dst)
	return err
}

// Conn is the reader's connection (for tests that write raw requests).
func (rr *Reader) Conn() net.Conn { return rr.conn }

// Buffered is the buffered reader of the connection's responses.
func (rr *Reader) Buffered() *bufio.Reader { return rr.br }

// Source is what a Server serves: the objects of the node's store.
type Source interface {
	// Open pins the sealed object oid and returns its bytes, its metadata
	// and the function that drops the pin. An error (naming the object and
	// the node) is sent to the client as StatusNotFound.
	Open(oid ids.ObjectID) (data, meta []byte, release func(), err error)
}

// Server serves a node's objects to other nodes. mu guards conns.
type Server struct {
	src  Source
	auth *auth.Credentials
	log  hclog.Logger

	mu    sync.Mutex
	conns map[net.Conn]struct{}

	sent atomic.Int64 // object bytes served (SentBytes)
}

// SentBytes returns the object bytes the server has sent to clients.
func (s *Server) SentBytes() int64 { return s.sent.Load() }

// NewServer returns a server of src's objects that requires creds of its
// clients (nil: none).
func NewServer(src Source, creds *auth.Credentials, log hclog.Logger) *Server {
	return &Server{src: src, auth: creds, log: log, conns: map[net.Conn]struct{}{}}
}

// Serve serves the object data plane on lis until it is closed.
func (s *Server) Serve(lis net.Listener) {
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		go func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				_ = c.Close()
			}()
			ac, err := s.auth.ServerConn(c)
			if err != nil {
				s.log.Debug("object data connection refused", "peer", c.RemoteAddr(), "error", err)
				return
			}
			// The peer showed the token: its connection no longer counts
			// against the listener's bounds on unauthenticated ones
			// (internal/connlimit; the node wraps the listener).
			connlimit.Authenticated(c)
			if err := s.serveConn(ac); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Debug("object data connection ended", "peer", c.RemoteAddr(), "error", err)
			}
		}()
	}
}

// Close closes the connections being served.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
}

// serveConn answers requests on c until it fails or ends. A panic while
// serving is logged with its stack and ends only this connection.
func (s *Server) serveConn(c net.Conn) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic serving an object data connection; closing it", "peer", c.RemoteAddr(),
				"panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic serving object data: %v", p)
		}
	}()
	br := bufio.NewReader(c)
	var b [RequestSize]byte
	for {
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return err
		}
		req, err := ParseRequest(b[:])
		if err != nil {
			return err // the stream is out of step: drop the connection
		}
		if err := s.serveRange(c, req.OID, req.Off, req.Length); err != nil {
			return err
		}
	}
}

// serveRange answers one request, the object pinned while it is written.
func (s *Server) serveRange(c net.Conn, oid ids.ObjectID, off, length int64) error {
	refuse := func(status byte, format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		if len(msg) > MaxRefusalLen {
			msg = msg[:MaxRefusalLen]
		}
		b := make([]byte, 1+8+4+4+len(msg))
		b[0] = status
		binary.BigEndian.PutUint32(b[13:], uint32(len(msg)))
		copy(b[17:], msg)
		_, err := c.Write(b)
		return err
	}
	data, meta, release, err := s.src.Open(oid)
	if err != nil {
		return refuse(StatusNotFound, "%s", err.Error())
	}
	defer release()
	size := int64(len(data))
	off, length, err = Range(off, length, size)
	if err != nil {
		return refuse(StatusBadRange, "object %s has %d bytes; bad range: %v", oid, size, err)
	}
	hdr := make([]byte, 1+8+4+len(meta))
	hdr[0] = StatusOK
	binary.BigEndian.PutUint64(hdr[1:], uint64(size))
	binary.BigEndian.PutUint32(hdr[9:], uint32(len(meta)))
	copy(hdr[13:], meta)
	bufs := net.Buffers{hdr, data[off : off+length]}
	_, err = bufs.WriteTo(c)
	if err == nil {
		s.sent.Add(length)
	}
	return err
}
