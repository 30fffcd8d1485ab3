package objstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ErrOutOfRange is returned by Mapping.Slice for a range outside the arena.
var ErrOutOfRange = errors.New("range outside the object store arena")

// Mapping is a client's view of the store's arena: the whole memfd mapped
// MAP_SHARED read/write. Objects are addressed by the (offset, size) the
// store returns from Create and Get. Methods are safe for concurrent use,
// but slices must not be used after Close.
type Mapping struct {
	mem      []byte // never reassigned
	capacity int64
	closed   atomic.Bool
}

// Map connects to the store's socket, receives the arena fd and its
// capacity, maps the arena and closes the fd. It honours ctx while
// connecting and waiting for the store.
func Map(ctx context.Context, socketPath string) (*Mapping, error) {
	fd, capacity, err := receiveArena(ctx, socketPath)
	if err != nil {
		return nil, fmt.Errorf("objstore: map %s: %w", socketPath, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("objstore: map %s: fstat arena: %w", socketPath, err)
	}
	if st.Size < capacity {
		return nil, fmt.Errorf("objstore: map %s: arena is %d bytes, header says %d", socketPath, st.Size, capacity)
	}
	mem, err := unix.Mmap(fd, 0, int(capacity), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("objstore: map %s: mmap %d bytes: %w", socketPath, capacity, err)
	}
	return &Mapping{mem: mem, capacity: capacity}, nil
}

// receiveArena dials the socket and reads the header and the fd.
func receiveArena(ctx context.Context, socketPath string) (fd int, capacity int64, err error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		return -1, 0, err
	}
	uc := c.(*net.UnixConn)
	defer uc.Close()
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	hdr := make([]byte, headerSize)
	oob := make([]byte, unix.CmsgSpace(4*4)) // room for a few fds; we expect one
	n, oobn, flags, _, err := uc.ReadMsgUnix(hdr, oob)
	fds := parseRights(oob[:oobn])
	closeAll := func() {
		for _, f := range fds {
			_ = unix.Close(f)
		}
	}
	if err == nil && n < headerSize {
		var m int
		m, err = io.ReadFull(uc, hdr[n:])
		n += m
	}
	if err != nil {
		closeAll()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return -1, 0, ctxErr
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return -1, 0, fmt.Errorf("store closed the connection after %d header bytes", n)
		}
		return -1, 0, err
	}
	if flags&unix.MSG_CTRUNC != 0 || len(fds) != 1 {
		closeAll()
		return -1, 0, fmt.Errorf("expected 1 arena fd, got %d (truncated: %t)", len(fds), flags&unix.MSG_CTRUNC != 0)
	}
	capacity = int64(binary.BigEndian.Uint64(hdr))
	if capacity <= 0 {
		closeAll()
		return -1, 0, fmt.Errorf("invalid arena capacity %d", capacity)
	}
	return fds[0], capacity, nil
}

// parseRights returns the fds in SCM_RIGHTS messages of oob.
func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// Data returns the arena bytes [offset, offset+size), or nil if the range is
// outside the arena or the mapping is closed. Use Slice to get an error.
func (m *Mapping) Data(offset, size int64) []byte {
	b, _ := m.Slice(offset, size)
	return b
}

// Slice returns the arena bytes [offset, offset+size). Errors: ErrClosed,
// ErrOutOfRange.
func (m *Mapping) Slice(offset, size int64) ([]byte, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	b := subslice(m.mem, offset, size)
	if b == nil {
		return nil, fmt.Errorf("objstore: [%d, %d+%d) of a %d-byte arena: %w", offset, offset, size, m.capacity, ErrOutOfRange)
	}
	return b, nil
}

// Capacity returns the arena size in bytes.
func (m *Mapping) Capacity() int64 { return m.capacity }

// Close unmaps the arena. Later calls return nil.
func (m *Mapping) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	if err := unix.Munmap(m.mem); err != nil {
		return fmt.Errorf("objstore: unmapping arena: %w", err)
	}
	return nil
}
