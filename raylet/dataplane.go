package raylet

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
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
)

// The object data plane moves object bytes between nodes over plain TCP:
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
const dataMagic uint32 = 0x67726431 // "grd1"

// Response status codes.
const (
	dataOK       byte = 0
	dataNotFound byte = 1
	dataBadRange byte = 2
)

// dataError is a refusal from the serving raylet.
type dataError struct {
	status byte
	msg    string
}

func (e *dataError) Error() string { return e.msg }

// ServeData serves the object data plane on lis until it is closed.
func (r *Raylet) ServeData(lis net.Listener) {
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		r.connMu.Lock()
		if r.dataConns == nil {
			r.dataConns = map[net.Conn]struct{}{}
		}
		r.dataConns[c] = struct{}{}
		r.connMu.Unlock()
		go func() {
			defer func() {
				r.connMu.Lock()
				delete(r.dataConns, c)
				r.connMu.Unlock()
				_ = c.Close()
			}()
			ac, err := r.cfg.Auth.ServerConn(c)
			if err != nil {
				r.log.Debug("object data connection refused", "peer", c.RemoteAddr(), "error", err)
				return
			}
			if err := r.serveDataConn(ac); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				r.log.Debug("object data connection ended", "peer", c.RemoteAddr(), "error", err)
			}
		}()
	}
}

// dataRequestSize is the size of one request on the wire.
const dataRequestSize = 4 + ids.ObjectIDSize + 16

// Bounds on what a response header may announce; a peer announcing more is
// broken or hostile, and the reader refuses before allocating anything.
const (
	// maxObjectSize bounds an object's data size (128 TiB: far above
	// any object store, whose memory config.Validate bounds).
	maxObjectSize = 1 << 47
	// maxMetadataLen bounds an object's metadata (a format byte in
	// practice).
	maxMetadataLen = 1 << 20
	// maxRefusalLen bounds a refusal's message.
	maxRefusalLen = 1 << 16
)

// dataRequest is one parsed request: [off, off+length) of object oid,
// length -1 meaning to the end.
type dataRequest struct {
	oid         ids.ObjectID
	off, length int64
}

// parseDataRequest parses one request of exactly dataRequestSize bytes and
// checks its magic. The offset and length are checked by dataRange once
// the object's size is known.
func parseDataRequest(b []byte) (dataRequest, error) {
	if len(b) != dataRequestSize {
		return dataRequest{}, fmt.Errorf("data request of %d bytes, want %d", len(b), dataRequestSize)
	}
	if m := binary.BigEndian.Uint32(b[:4]); m != dataMagic {
		return dataRequest{}, fmt.Errorf("bad request magic %#x, want %#x", m, dataMagic)
	}
	var req dataRequest
	copy(req.oid[:], b[4:4+ids.ObjectIDSize])
	req.off = int64(binary.BigEndian.Uint64(b[4+ids.ObjectIDSize:]))
	req.length = int64(binary.BigEndian.Uint64(b[12+ids.ObjectIDSize:]))
	return req, nil
}

// dataRange checks the requested range against an object of size bytes
// and returns the range to send: the offset and the length clamped to the
// object's end (a length of -1 means to the end). It refuses a negative
// offset, an offset past the end, a length below -1 and a range whose end
// does not fit in an int64 (offset 1, length 2^63-1 once overflowed the
// old check and crashed the node). The arithmetic cannot overflow.
func dataRange(off, length, size int64) (int64, int64, error) {
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

// serveDataConn answers requests on c until it fails or ends. A panic
// while serving is logged with its stack and ends only this connection.
func (r *Raylet) serveDataConn(c net.Conn) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("panic serving an object data connection; closing it", "peer", c.RemoteAddr(),
				"panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic serving object data: %v", p)
		}
	}()
	br := bufio.NewReader(c)
	var b [dataRequestSize]byte
	for {
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return err
		}
		req, err := parseDataRequest(b[:])
		if err != nil {
			return err // the stream is out of step: drop the connection
		}
		if err := r.serveRange(c, req.oid, req.off, req.length); err != nil {
			return err
		}
	}
}

// serveRange answers one request, the object pinned while it is written.
func (r *Raylet) serveRange(c net.Conn, oid ids.ObjectID, off, length int64) error {
	refuse := func(status byte, format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		if len(msg) > maxRefusalLen {
			msg = msg[:maxRefusalLen]
		}
		b := make([]byte, 1+8+4+4+len(msg))
		b[0] = status
		binary.BigEndian.PutUint32(b[13:], uint32(len(msg)))
		copy(b[17:], msg)
		_, err := c.Write(b)
		return err
	}
	if r.spill.has(oid) && !r.cfg.Store.Contains(oid) {
		ctx, cancel := context.WithTimeout(context.Background(), pullTimeout)
		err := r.spill.restoreObject(ctx, oid)
		cancel()
		if err != nil {
			return refuse(dataNotFound, "object %s is spilled on node %s and could not be restored: %v", oid, r.cfg.NodeID.Short(), err)
		}
	}
	client := ids.New()
	es := r.cfg.Store.GetEntries([]ids.ObjectID{oid}, client)
	if len(es) != 1 || !es[0].Found || !es[0].Sealed {
		return refuse(dataNotFound, "object %s is not in the store of node %s", oid, r.cfg.NodeID.Short())
	}
	defer r.cfg.Store.Release([]ids.ObjectID{oid}, client)
	e := es[0]
	off, length, err := dataRange(off, length, e.DataSize)
	if err != nil {
		return refuse(dataBadRange, "object %s has %d bytes; bad range: %v", oid, e.DataSize, err)
	}
	hdr := make([]byte, 1+8+4+len(e.Metadata))
	hdr[0] = dataOK
	binary.BigEndian.PutUint64(hdr[1:], uint64(e.DataSize))
	binary.BigEndian.PutUint32(hdr[9:], uint32(len(e.Metadata)))
	copy(hdr[13:], e.Metadata)
	data := r.cfg.Store.Data(e.Offset, e.DataSize)
	bufs := net.Buffers{hdr, data[off : off+length]}
	_, err = bufs.WriteTo(c)
	return err
}

// rangeReader reads byte ranges of objects from another node's data plane.
type rangeReader struct {
	conn net.Conn
	br   *bufio.Reader
	stop func() bool
}

// dialData connects to a data plane with creds (nil: none); the
// connection closes when ctx ends.
func dialData(ctx context.Context, addr string, creds *auth.Credentials) (*rangeReader, error) {
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
	return &rangeReader{conn: c, br: bufio.NewReaderSize(c, 64<<10), stop: stop}, nil
}

func (rr *rangeReader) Close() error {
	rr.stop()
	return rr.conn.Close()
}

// request asks for [off, off+length) of oid and reads the response header:
// the object's size and metadata. The bytes follow; read them with
// readInto.
func (rr *rangeReader) request(oid ids.ObjectID, off, length int64) (size int64, meta []byte, err error) {
	var req [4 + ids.ObjectIDSize + 16]byte
	binary.BigEndian.PutUint32(req[:4], dataMagic)
	copy(req[4:], oid[:])
	binary.BigEndian.PutUint64(req[4+ids.ObjectIDSize:], uint64(off))
	binary.BigEndian.PutUint64(req[12+ids.ObjectIDSize:], uint64(length))
	if _, err := rr.conn.Write(req[:]); err != nil {
		return 0, nil, err
	}
	return readResponse(rr.br, off)
}

// readResponse reads one response header for a request at offset off: the
// object's size and metadata, or the serving raylet's refusal as a
// *dataError. Every field is checked before it is used: the size is within
// [max(off, 0), maxObjectSize], the metadata at most maxMetadataLen bytes
// and a refusal's message at most maxRefusalLen bytes; a response breaking
// these is a protocol error and the connection must be dropped.
func readResponse(br *bufio.Reader, off int64) (size int64, meta []byte, err error) {
	var hdr [13]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return 0, nil, err
	}
	size = int64(binary.BigEndian.Uint64(hdr[1:]))
	n := binary.BigEndian.Uint32(hdr[9:])
	if hdr[0] != dataOK {
		var ml [4]byte
		if _, err := io.ReadFull(br, ml[:]); err != nil {
			return 0, nil, err
		}
		l := binary.BigEndian.Uint32(ml[:])
		if l > maxRefusalLen {
			return 0, nil, fmt.Errorf("object data plane: refusal (status %d) with a message of %d bytes, more than %d", hdr[0], l, maxRefusalLen)
		}
		msg := make([]byte, l)
		if _, err := io.ReadFull(br, msg); err != nil {
			return 0, nil, err
		}
		return 0, nil, &dataError{status: hdr[0], msg: string(msg)}
	}
	if size < 0 || size < off || size > maxObjectSize {
		return 0, nil, fmt.Errorf("object data plane: response announces %d bytes for a read at offset %d (at most %d)", size, off, int64(maxObjectSize))
	}
	if n > maxMetadataLen {
		return 0, nil, fmt.Errorf("object data plane: response announces %d bytes of metadata, more than %d", n, maxMetadataLen)
	}
	meta = make([]byte, n)
	if _, err := io.ReadFull(br, meta); err != nil {
		return 0, nil, err
	}
	return size, meta, nil
}

// readInto reads exactly len(dst) bytes of the current response.
func (rr *rangeReader) readInto(dst []byte) error {
	_, err := io.ReadFull(rr.br, dst)
	return err
}
