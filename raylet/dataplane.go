package raylet

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

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
			if err := r.serveDataConn(c); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				r.log.Debug("object data connection ended", "peer", c.RemoteAddr(), "error", err)
			}
		}()
	}
}

func (r *Raylet) serveDataConn(c net.Conn) error {
	br := bufio.NewReader(c)
	var req [4 + ids.ObjectIDSize + 16]byte
	for {
		if _, err := io.ReadFull(br, req[:]); err != nil {
			return err
		}
		if m := binary.BigEndian.Uint32(req[:4]); m != dataMagic {
			return fmt.Errorf("bad request magic %#x", m)
		}
		var oid ids.ObjectID
		copy(oid[:], req[4:4+ids.ObjectIDSize])
		off := int64(binary.BigEndian.Uint64(req[4+ids.ObjectIDSize:]))
		length := int64(binary.BigEndian.Uint64(req[12+ids.ObjectIDSize:]))
		if err := r.serveRange(c, oid, off, length); err != nil {
			return err
		}
	}
}

// serveRange answers one request, the object pinned while it is written.
func (r *Raylet) serveRange(c net.Conn, oid ids.ObjectID, off, length int64) error {
	refuse := func(status byte, format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
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
	if off < 0 || off > e.DataSize {
		return refuse(dataBadRange, "object %s has %d bytes; offset %d is outside", oid, e.DataSize, off)
	}
	if length < 0 || off+length > e.DataSize {
		length = e.DataSize - off
	}
	hdr := make([]byte, 1+8+4+len(e.Metadata))
	hdr[0] = dataOK
	binary.BigEndian.PutUint64(hdr[1:], uint64(e.DataSize))
	binary.BigEndian.PutUint32(hdr[9:], uint32(len(e.Metadata)))
	copy(hdr[13:], e.Metadata)
	data := r.cfg.Store.Data(e.Offset, e.DataSize)
	bufs := net.Buffers{hdr, data[off : off+length]}
	_, err := bufs.WriteTo(c)
	return err
}

// rangeReader reads byte ranges of objects from another node's data plane.
type rangeReader struct {
	conn net.Conn
	br   *bufio.Reader
	stop func() bool
}

// dialData connects to a data plane; the connection closes when ctx ends.
func dialData(ctx context.Context, addr string) (*rangeReader, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 20)
		_ = tc.SetWriteBuffer(4 << 20)
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
	var hdr [13]byte
	if _, err := io.ReadFull(rr.br, hdr[:]); err != nil {
		return 0, nil, err
	}
	size = int64(binary.BigEndian.Uint64(hdr[1:]))
	n := binary.BigEndian.Uint32(hdr[9:])
	if hdr[0] != dataOK {
		var ml [4]byte
		if _, err := io.ReadFull(rr.br, ml[:]); err != nil {
			return 0, nil, err
		}
		msg := make([]byte, min(binary.BigEndian.Uint32(ml[:]), 1<<16))
		if _, err := io.ReadFull(rr.br, msg); err != nil {
			return 0, nil, err
		}
		return 0, nil, &dataError{status: hdr[0], msg: string(msg)}
	}
	if n > 1<<20 {
		return 0, nil, fmt.Errorf("object metadata of %d bytes", n)
	}
	meta = make([]byte, n)
	if _, err := io.ReadFull(rr.br, meta); err != nil {
		return 0, nil, err
	}
	return size, meta, nil
}

// readInto reads exactly len(dst) bytes of the current response.
func (rr *rangeReader) readInto(dst []byte) error {
	_, err := io.ReadFull(rr.br, dst)
	return err
}
