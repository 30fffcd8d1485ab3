package onesided

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// mapping is a mapping of a byte range of a segment, made for one TCP
// transfer with its pages populated up front (MAP_POPULATE): setting up
// every page table entry in one call costs a fraction of faulting the
// pages in one by one while the socket data is copied in.
type mapping struct {
	whole []byte // page-aligned, what munmap takes
	data  []byte // the range asked for
}

// mapFile maps [off, off+length) of a file (a segment); write maps it
// writable. A zero length maps nothing.
func (a *Agent) mapFile(f *os.File, off, length int64, write bool) (*mapping, error) {
	if length == 0 {
		return &mapping{data: []byte{}}, nil
	}
	prot := unix.PROT_READ
	if write {
		prot |= unix.PROT_WRITE
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, &shmem.Error{Op: "map", Segment: f.Name(), Err: err}
	}
	if off < 0 || length < 0 || off > st.Size || length > st.Size-off {
		return nil, &shmem.Error{Op: "map", Segment: f.Name(),
			Err: fmt.Errorf("%w: [%d, %d+%d) of %d bytes", shmem.ErrOutOfRange, off, off, length, st.Size)}
	}
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	n := off + length - start
	if int64(int(n)) != n {
		return nil, &shmem.Error{Op: "map", Segment: f.Name(), Err: fmt.Errorf("range of %d bytes too large", n)}
	}
	whole, err := unix.Mmap(int(f.Fd()), start, int(n), prot, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, &shmem.Error{Op: "map", Segment: f.Name(), Err: err}
	}
	a.mappings.Add(1)
	return &mapping{whole: whole, data: whole[off-start : off-start+length : off-start+length]}, nil
}

// openSegment opens a segment for writing and checks that it holds
// [off, off+length).
func openSegment(name string, off, length int64) (*os.File, error) {
	if err := shmem.ValidName(name); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(shmem.Path(name), os.O_RDWR, 0)
	if err != nil {
		return nil, &shmem.Error{Op: "open", Segment: name, Err: fmt.Errorf("%w: %v", shmem.ErrNotFound, err)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		_ = f.Close()
		return nil, &shmem.Error{Op: "open", Segment: name, Err: err}
	}
	if off < 0 || length < 0 || off > st.Size || length > st.Size-off {
		_ = f.Close()
		return nil, &shmem.Error{Op: "open", Segment: name,
			Err: fmt.Errorf("%w: [%d, %d+%d) of %d bytes", shmem.ErrOutOfRange, off, off, length, st.Size)}
	}
	return f, nil
}

// unmap releases the mapping; its bytes must not be used afterwards.
func (a *Agent) unmap(m *mapping) {
	if m == nil || m.whole == nil {
		return
	}
	_ = unix.Munmap(m.whole)
	m.whole, m.data = nil, nil
	a.mappings.Add(-1)
}
