package shmem

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EnvPool names the environment variable through which a node hands its
// segment pool's directory to the processes it starts (workers and
// plugins). DefaultPool reads it.
const EnvPool = "GORAY_SHM_POOL"

// PoolPrefix starts the name of every pool directory in Dir:
// "goray-pool-<pid>-<random>", pid being the process that made it, so
// that RemoveDeadPools can tell the pools of processes that died.
const PoolPrefix = "goray-pool-"

// MinPooled is the smallest segment a pool keeps: below it, creating a
// segment costs less than finding one.
const MinPooled = 64 << 10

// MaxPoolEntries bounds the segments one pool holds; Put unlinks beyond it.
const MaxPoolEntries = 1024

// ErrNoPool means the operation needs a pool and the process has none.
var ErrNoPool = errors.New("no shared-memory segment pool")

// ClassSize returns the size of the segment that holds n bytes when it
// may come from a pool: n rounded up to one of four sizes per power of two
// (2^k, 1.25·2^k, 1.5·2^k, 1.75·2^k), at least MinPooled, so that at most a
// fifth of a segment is unused and freed segments of nearby sizes are
// interchangeable. A size below 1 returns MinPooled.
func ClassSize(n int64) int64 {
	if n <= MinPooled {
		return MinPooled
	}
	k := 63 - bits.LeadingZeros64(uint64(n-1)) // 2^k < n <= 2^(k+1)
	step := int64(1) << (k - 2)                // a quarter of 2^k
	return (n + step - 1) / step * step
}

// Pool keeps freed segments of one node for reuse. Creating a segment and
// giving its pages to the kernel again cost far more than the transfer
// itself (tens of milliseconds for 64 MiB: the kernel allocates and zeroes
// every page, then frees them at unlink); a segment taken from the pool
// has its pages already, and a process that mapped it before maps it at no
// cost (Cache keeps mappings by file).
//
// The pool is a directory in Dir (tmpfs) shared by every process of the
// node: Put moves a freed segment into it with rename(2), Get moves one
// out under a fresh name. Entries are named "<size>-<unix nanoseconds>-<random>",
// with "-z" at the end once a Scrubber zeroed them.
// A segment is never handed out while some process still reads it: a
// process holds a shared flock(2) on every segment it maps through a Cache
// while it references it, and Get takes a segment only when it gets the
// exclusive lock at once. A process that dies releases its locks with its
// descriptors, so a kill -9 cannot pin a segment for good.
//
// A Pool's methods are safe for concurrent use by any number of processes.
type Pool struct {
	dir string
}

// NewPool makes a new, empty pool directory in Dir for this process.
// Remove it with Remove when the node stops; RemoveDeadPools removes it
// if the process dies first (given the directory: a node records it in
// its session, host/node).
func NewPool() (*Pool, error) {
	name := fmt.Sprintf("%s%d-%s", PoolPrefix, os.Getpid(), NewName("")[:16])
	dir := filepath.Join(Dir, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, &Error{Op: "create pool", Segment: name, Err: err}
	}
	return &Pool{dir: dir}, nil
}

// OpenPool returns the pool in dir (made by NewPool in another process).
func OpenPool(dir string) (*Pool, error) {
	if !strings.HasPrefix(filepath.Base(dir), PoolPrefix) || filepath.Dir(dir) != Dir {
		return nil, &Error{Op: "open pool", Segment: dir, Err: fmt.Errorf("%w: not a pool directory (%s*)", ErrBadName, filepath.Join(Dir, PoolPrefix))}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, opErr("open pool", dir, err)
	}
	if !fi.IsDir() {
		return nil, &Error{Op: "open pool", Segment: dir, Err: fmt.Errorf("%w: not a directory", ErrBadName)}
	}
	return &Pool{dir: dir}, nil
}

// Dir returns the pool's directory (what EnvPool carries).
func (p *Pool) Dir() string { return p.dir }

var (
	defaultPoolMu   sync.Mutex
	defaultPool     *Pool
	defaultPoolRead bool
)

// DefaultPool returns the process's pool: the one set with SetDefaultPool,
// else the one EnvPool names (nil if none, or if it cannot be opened).
// transport.NewTensor takes segments from it and Tensor.Free returns them
// to it.
func DefaultPool() *Pool {
	defaultPoolMu.Lock()
	defer defaultPoolMu.Unlock()
	if !defaultPoolRead {
		defaultPoolRead = true
		if dir := os.Getenv(EnvPool); dir != "" {
			defaultPool, _ = OpenPool(dir)
		}
	}
	return defaultPool
}

// SetDefaultPool sets the process's pool (nil: none) and returns the one
// it replaces. A node running in the process of its driver sets its own.
func SetDefaultPool(p *Pool) *Pool {
	defaultPoolMu.Lock()
	defer defaultPoolMu.Unlock()
	old := defaultPool
	defaultPool, defaultPoolRead = p, true
	return old
}

// poolEntry is a segment in the pool.
type poolEntry struct {
	name   string // in the pool directory
	size   int64
	at     int64 // unix nanoseconds of the Put
	zeroed bool  // a Scrubber zeroed it since its last user
}

// ZeroedSuffix ends the name of a pool entry a Scrubber zeroed (what a
// watcher of the pool directory skips: the Scrubber's own renames).
const ZeroedSuffix = "-z"

func parseEntry(name string) (poolEntry, bool) {
	parts := strings.SplitN(name, "-", 3)
	if len(parts) != 3 {
		return poolEntry{}, false
	}
	size, err1 := strconv.ParseInt(parts[0], 10, 64)
	at, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || size <= 0 {
		return poolEntry{}, false
	}
	return poolEntry{name: name, size: size, at: at, zeroed: strings.HasSuffix(parts[2], ZeroedSuffix)}, true
}

// entries lists the pool's segments, most recently put first.
func (p *Pool) entries() ([]poolEntry, error) {
	f, err := os.Open(p.dir)
	if err != nil {
		return nil, opErr("list pool", p.dir, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, opErr("list pool", p.dir, err)
	}
	out := make([]poolEntry, 0, len(names))
	for _, n := range names {
		if e, ok := parseEntry(n); ok {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b poolEntry) int { return int(b.at - a.at) })
	return out, nil
}

// Get takes a segment of ClassSize(size) bytes out of the pool and names it
// NewName(prefix), preferring one a Scrubber zeroed (zeroed reports
// whether it got one; any other holds what its last user wrote). It
// returns "" when the pool has no free segment of that size (those it has
// are all still mapped by a reader, or being zeroed).
func (p *Pool) Get(prefix string, size int64) (name string, zeroed bool, err error) {
	class := ClassSize(size)
	es, err := p.entries()
	if err != nil {
		return "", false, err
	}
	if err := ValidName(NewName(prefix)); err != nil {
		return "", false, err
	}
	// Zeroed ones first, each kind most recent first (entries' order).
	slices.SortStableFunc(es, func(a, b poolEntry) int {
		switch {
		case a.zeroed == b.zeroed:
			return 0
		case a.zeroed:
			return -1
		}
		return 1
	})
	for _, e := range es {
		if e.size != class {
			continue
		}
		name := NewName(prefix)
		ok, err := p.take(e, name)
		if err != nil {
			return "", false, err
		}
		if ok {
			return name, e.zeroed, nil
		}
	}
	return "", false, nil
}

// take moves entry e out of the pool as name if no process holds it.
func (p *Pool) take(e poolEntry, name string) (bool, error) {
	path := filepath.Join(p.dir, e.name)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, nil // taken or trimmed meanwhile
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil // a reader still maps it
	}
	// Holding the exclusive lock, nobody can start reading it: readers
	// take their shared lock, then check the file still has the name
	// they asked for, which it no longer will.
	if err := os.Rename(path, Path(name)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil // another process took it first
		}
		return false, opErr("take from pool", name, err)
	}
	return true, nil
}

// Put moves the named segment into the pool for reuse, or unlinks it when
// it cannot be pooled (its size is not a ClassSize, or the pool has
// MaxPoolEntries). Readers that still map it keep reading what it holds
// until they release it: Get does not hand it out before. It fails with
// ErrNotFound if there is no such segment.
func (p *Pool) Put(name string) error {
	size, err := Stat(name)
	if err != nil {
		return err
	}
	if size < MinPooled || ClassSize(size) != size {
		return Unlink(name)
	}
	es, err := p.entries()
	if err != nil || len(es) >= MaxPoolEntries {
		return Unlink(name)
	}
	entry := fmt.Sprintf("%d-%d-%s", size, time.Now().UnixNano(), NewName("")[:16])
	if err := os.Rename(Path(name), filepath.Join(p.dir, entry)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(p.dir); serr != nil {
				return Unlink(name) // the pool is gone (the node stopped)
			}
		}
		return opErr("put in pool", name, err)
	}
	return nil
}

// Usage returns how many segments the pool holds and their bytes.
func (p *Pool) Usage() (segments int, bytes int64, err error) {
	es, err := p.entries()
	if err != nil {
		return 0, 0, err
	}
	for _, e := range es {
		bytes += e.size
	}
	return len(es), bytes, nil
}

// Trim unlinks the segments put in the pool longer than idle ago, then the
// oldest ones until the pool holds at most maxBytes (a negative maxBytes:
// no bound). Trim(0, 0) empties the pool. It returns what it removed. The
// memory of a segment a process still maps is returned when that process
// lets go of it (Cache unmaps segments that were unlinked).
func (p *Pool) Trim(idle time.Duration, maxBytes int64) (segments int, bytes int64, err error) {
	es, err := p.entries()
	if err != nil {
		return 0, 0, err
	}
	var total int64
	for _, e := range es {
		total += e.size
	}
	cut := time.Now().Add(-idle).UnixNano()
	var errs []error
	// Oldest first.
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		if e.at > cut && (maxBytes < 0 || total <= maxBytes) {
			continue
		}
		if err := os.Remove(filepath.Join(p.dir, e.name)); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, opErr("trim pool", e.name, err))
			}
			continue // taken meanwhile
		}
		total -= e.size
		segments++
		bytes += e.size
	}
	return segments, bytes, errors.Join(errs...)
}

// Remove unlinks every segment in the pool and the pool itself. Processes
// that still map a segment keep it until they unmap it.
func (p *Pool) Remove() error {
	if err := os.RemoveAll(p.dir); err != nil {
		return opErr("remove pool", p.dir, err)
	}
	return nil
}

// RemoveDeadPools removes those of dirs (pool directories, as Pool.Dir
// returns them) whose process is gone, a node killed before it could
// remove its own, and returns the ones it removed. A pool whose process
// still runs, or that is gone already, is left; a directory that is not a
// pool (outside Dir, or not named PoolPrefix<pid>-...) is an error and
// left alone. Callers pass the pools their own records name (goray stop,
// a node starting: those its temp dir's sessions made), never every pool
// in Dir, which may be another user's or another temp dir's.
func RemoveDeadPools(dirs []string) ([]string, error) {
	var removed []string
	var errs []error
	for _, dir := range dirs {
		pid, err := poolPid(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if processAlive(pid) {
			continue
		}
		if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, opErr("remove dead pool", dir, err))
			continue
		}
		removed = append(removed, dir)
	}
	return removed, errors.Join(errs...)
}

// poolPid returns the pid in the name of pool directory dir.
func poolPid(dir string) (int, error) {
	rest, ok := strings.CutPrefix(filepath.Base(dir), PoolPrefix)
	pidStr, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	if !ok || filepath.Clean(dir) != filepath.Join(Dir, filepath.Base(dir)) || err != nil || pid <= 0 {
		return 0, &Error{Op: "remove dead pool", Segment: dir, Err: fmt.Errorf("%w: not a pool directory (%s<pid>-...)", ErrBadName, filepath.Join(Dir, PoolPrefix))}
	}
	return pid, nil
}

// processAlive reports whether pid runs: it exists and is no zombie (a
// node killed with SIGKILL stays one until its parent, often init, reaps
// it, and it holds nothing any more).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name, which may hold spaces and ')'.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z' && b[i+2] != 'X'
	}
	return true
}

// Recycle returns a segment the caller owns to the process's pool
// (DefaultPool), or unlinks it when there is none (dropping Default's idle
// mapping of it): what a transport calls where it would unlink a segment
// it collects.
func Recycle(name string) error {
	if p := DefaultPool(); p != nil {
		return p.Put(name)
	}
	Default.Forget(name)
	return Unlink(name)
}
