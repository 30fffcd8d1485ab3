// Package shmem manages the named shared-memory segments that carry tensor
// bytes between the processes of one node.
//
// A segment is a file in /dev/shm (tmpfs) mapped with MAP_SHARED, so every
// process that maps it sees the same pages: handing a tensor to another
// process means handing it the segment's name, an offset and a length, never
// the bytes. Names carry a prefix (Prefix, "goray-t-") so that what crashed
// processes left behind can be found (List) and removed (CleanupPrefix).
//
// Segment names are never reused: NewName draws 128 random bits.
package shmem

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Dir is where segments live.
const Dir = "/dev/shm"

// Prefix starts the name of every goray tensor segment.
const Prefix = "goray-t-"

// MaxNameLen is the longest segment name accepted.
const MaxNameLen = 200

// Errors returned by this package; match them with errors.Is.
var (
	// ErrNotFound means the segment does not exist (never created or unlinked).
	ErrNotFound = errors.New("shared-memory segment not found")
	// ErrExists means Create found a segment of that name already.
	ErrExists = errors.New("shared-memory segment already exists")
	// ErrBadName means the name is empty, too long or contains a slash.
	ErrBadName = errors.New("invalid shared-memory segment name")
	// ErrOutOfRange means a byte range does not fit in its segment.
	ErrOutOfRange = errors.New("byte range outside shared-memory segment")
)

// Error describes a failed operation on a named segment.
type Error struct {
	Op      string // "create", "open", "unlink", "map", ...
	Segment string
	Err     error
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("shmem: %s %q: %v", e.Op, e.Segment, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func opErr(op, name string, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		err = fmt.Errorf("%w: %v", ErrNotFound, err)
	case errors.Is(err, os.ErrExist):
		err = fmt.Errorf("%w: %v", ErrExists, err)
	}
	return &Error{Op: op, Segment: name, Err: err}
}

// ValidName reports whether name can name a segment.
func ValidName(name string) error {
	if name == "" || len(name) > MaxNameLen || strings.ContainsRune(name, '/') ||
		name == "." || name == ".." || strings.ContainsRune(name, 0) {
		return &Error{Op: "name", Segment: name, Err: ErrBadName}
	}
	return nil
}

// Path returns the file system path of a segment.
func Path(name string) string { return filepath.Join(Dir, name) }

// NewName returns prefix followed by 32 random hex digits.
func NewName(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("shmem: crypto/rand failed: " + err.Error())
	}
	return prefix + hex.EncodeToString(b[:])
}

// Segment is a mapped shared-memory segment. Close unmaps it; the segment
// itself lives until it is unlinked and the last mapping is gone.
type Segment struct {
	name string
	data []byte
	size int64
	ino  uint64
}

// Create creates a segment of size bytes (zero-filled) and maps it. It fails
// with ErrExists if the name is taken.
func Create(name string, size int64) (*Segment, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, &Error{Op: "create", Segment: name, Err: fmt.Errorf("negative size %d", size)}
	}
	f, err := os.OpenFile(Path(name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, opErr("create", name, err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		_ = os.Remove(Path(name))
		return nil, opErr("create", name, err)
	}
	s, err := mapFile(f, name, size)
	if err != nil {
		_ = os.Remove(Path(name))
		return nil, err
	}
	return s, nil
}

// Open maps an existing segment.
func Open(name string) (*Segment, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(Path(name), os.O_RDWR, 0)
	if err != nil {
		return nil, opErr("open", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, opErr("open", name, err)
	}
	return mapFile(f, name, fi.Size())
}

func mapFile(f *os.File, name string, size int64) (*Segment, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, opErr("map", name, err)
	}
	s := &Segment{name: name, size: size, ino: st.Ino}
	if size == 0 {
		return s, nil
	}
	if int64(int(size)) != size {
		return nil, &Error{Op: "map", Segment: name, Err: fmt.Errorf("size %d too large", size)}
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, opErr("map", name, err)
	}
	s.data = data
	return s, nil
}

// Name returns the segment's name.
func (s *Segment) Name() string { return s.name }

// Size returns the segment's size in bytes.
func (s *Segment) Size() int64 { return s.size }

// Inode returns the number of the segment's file: two names of one
// segment (a segment back from a Pool) have the same.
func (s *Segment) Inode() uint64 { return s.ino }

// Bytes returns the mapped bytes. They are valid until Close; writes are seen
// by every process that maps the segment.
func (s *Segment) Bytes() []byte { return s.data }

// Close unmaps the segment. The slice returned by Bytes must not be used
// afterwards. Close is idempotent.
func (s *Segment) Close() error {
	if s.data == nil {
		return nil
	}
	data := s.data
	s.data = nil
	if err := unix.Munmap(data); err != nil {
		return opErr("unmap", s.name, err)
	}
	return nil
}

// Unlink removes the segment's name; existing mappings stay valid.
func (s *Segment) Unlink() error { return Unlink(s.name) }

// Unlink removes a segment by name. It fails with ErrNotFound if there is none.
func Unlink(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := os.Remove(Path(name)); err != nil {
		return opErr("unlink", name, err)
	}
	return nil
}

// Stat returns the size of a segment, or ErrNotFound.
func Stat(name string) (int64, error) {
	size, _, err := stat(name)
	return size, err
}

func stat(name string) (int64, uint64, error) {
	if err := ValidName(name); err != nil {
		return 0, 0, err
	}
	var st unix.Stat_t
	if err := unix.Stat(Path(name), &st); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			err = os.ErrNotExist
		}
		return 0, 0, opErr("stat", name, err)
	}
	return st.Size, st.Ino, nil
}

// Exists reports whether a segment exists.
func Exists(name string) bool {
	_, err := Stat(name)
	return err == nil
}

// List returns the names of the segments starting with prefix, sorted.
func List(prefix string) ([]string, error) {
	entries, err := os.ReadDir(Dir)
	if err != nil {
		return nil, &Error{Op: "list", Segment: prefix + "*", Err: err}
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// CleanupPrefix unlinks every segment whose name starts with prefix and
// returns the names it removed: for a test, or a plugin, with a prefix of
// its own that no other process uses (other nodes on the same machine
// share Prefix). An empty prefix is refused so a mistake cannot empty
// /dev/shm.
func CleanupPrefix(prefix string) ([]string, error) {
	if prefix == "" {
		return nil, &Error{Op: "cleanup", Segment: "", Err: fmt.Errorf("%w: empty prefix", ErrBadName)}
	}
	names, err := List(prefix)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, n := range names {
		err := Unlink(n)
		switch {
		case err == nil:
			removed = append(removed, n)
		case errors.Is(err, ErrNotFound):
			// removed concurrently
		default:
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// Publish atomically creates a segment holding data: other processes see
// either no segment or the whole of it, never a partial write. It fails
// with ErrExists if the name is taken. Transports use it for small
// rendezvous records.
func Publish(name string, data []byte) error {
	if err := ValidName(name); err != nil {
		return err
	}
	tmp := NewName(name + ".tmp-") // same prefix: CleanupPrefix removes leftovers
	f, err := os.OpenFile(Path(tmp), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return opErr("publish", name, err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Link(Path(tmp), Path(name))
	}
	_ = os.Remove(Path(tmp))
	if werr != nil {
		return opErr("publish", name, werr)
	}
	return nil
}

// ReadAll returns the contents of a segment (meant for small ones written
// by Publish). max bounds the size read; a bigger segment is an error.
func ReadAll(name string, max int64) ([]byte, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	f, err := os.Open(Path(name))
	if err != nil {
		return nil, opErr("read", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, opErr("read", name, err)
	}
	if fi.Size() > max {
		return nil, &Error{Op: "read", Segment: name, Err: fmt.Errorf("%w: %d bytes, limit %d", ErrOutOfRange, fi.Size(), max)}
	}
	buf := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, opErr("read", name, err)
	}
	return buf, nil
}
