// Package binaries is the raylet's cache of checked job binaries.
//
// A raylet runs only job binaries whose sha256 it has checked itself: a
// job names its binary's sha256 (JobInfo.binary_sha256), and Cache.Path
// finds a local file with that content, hashing it once and re-checking
// the file's identity (inode, size, times) before every worker start, so a
// file replaced since it was hashed is hashed again, never run unchecked.
// A binary the node does not have is copied from the running driver's
// /proc/<pid>/exe or fetched from the driver's node (FetchBinary) into the
// cache directory.
package binaries

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// PeerFunc returns a client for the raylet of another node.
type PeerFunc func(node ids.ID) (gorayv1.RayletClient, error)

// Cache finds, checks and fetches job binaries by sha256. mu guards the
// checks in flight and done (one per sha256); no lock is held while a
// file is hashed or fetched.
type Cache struct {
	dir    string
	nodeID ids.ID
	log    hclog.Logger
	peer   PeerFunc

	// inUse tells which working dirs registered jobs use (SetInUse).
	inUse func(sum string) bool

	mu      sync.Mutex
	fetches map[string]*binaryFetch
}

// New returns a cache of binaries in dir for node nodeID; peer reaches
// other nodes' raylets to fetch binaries of their drivers.
func New(dir string, nodeID ids.ID, log hclog.Logger, peer PeerFunc) *Cache {
	return &Cache{dir: dir, nodeID: nodeID, log: log, peer: peer, fetches: map[string]*binaryFetch{}}
}

// Dir is the cache directory.
func (c *Cache) Dir() string { return c.dir }

// binaryFetch is one check (or fetch) of a job binary by sha256.
type binaryFetch struct {
	done chan struct{}
	path string
	id   fileID // the file as it was when hashed
	err  error
}

// fileID tells whether a file changed since it was hashed: rewriting or
// replacing it changes its inode, size or times.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

func fileIDOf(st *unix.Stat_t) fileID {
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// statID returns the identity of the file at path.
func statID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, err
	}
	return fileIDOf(&st), nil
}

// hashFile returns the sha256 of the regular file at path and its
// identity, from one open file; a file written while it is hashed is an
// error.
func hashFile(path string) (string, fileID, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fileID{}, err
	}
	defer f.Close()
	var before, after unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &before); err != nil {
		return "", fileID{}, err
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", fileID{}, fmt.Errorf("%s is not a regular file", path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fileID{}, err
	}
	if err := unix.Fstat(int(f.Fd()), &after); err != nil {
		return "", fileID{}, err
	}
	if fileIDOf(&before) != fileIDOf(&after) {
		return "", fileID{}, fmt.Errorf("%s changed while it was hashed", path)
	}
	return hex.EncodeToString(h.Sum(nil)), fileIDOf(&after), nil
}

// HashError reports a job whose binary this node cannot find with
// the sha256 the job names, so none of its workers is started.
type HashError struct {
	// Job is the job's id.
	Job ids.ID
	// Path is the binary the job names; Want its sha256 per the job, Got
	// what the file has ("" when it could not be read).
	Path, Want, Got string
	// Err says why no copy with the right content was found.
	Err error
}

// Error names the job, the binary and both hashes.
func (e *HashError) Error() string {
	got := "cannot be read"
	if e.Got != "" {
		got = "has sha256 " + e.Got
	}
	msg := fmt.Sprintf("job %s: its binary %s %s, but the job names sha256 %s; not running it", e.Job.Short(), e.Path, got, e.Want)
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return msg
}

// Unwrap returns the cause.
func (e *HashError) Unwrap() error { return e.Err }

// Path returns a local path of the job's binary whose content has the
// job's sha256, checked by this raylet: the driver's own path when this
// node can read the same file, else a copy in the node's binary cache
// (from the running driver's /proc/<pid>/exe when the driver is here, else
// fetched from the driver's node). Each sha256 is checked once and cached;
// later calls only make sure the file did not change since.
func (c *Cache) Path(ctx context.Context, info *gorayv1.JobInfo) (string, error) {
	sum := info.GetBinarySha256()
	if !digest.ValidSHA256(sum) {
		return "", fmt.Errorf("invalid binary_sha256 %q: a job must name its binary's sha256 (64 lowercase hexadecimal digits); this raylet runs no binary it has not checked", sum)
	}
	for attempt := 0; ; attempt++ {
		f := c.once(sum, func() (string, fileID, error) { return c.fetch(info) })
		if err := f.wait(ctx); err != nil {
			return "", err
		}
		if id, err := statID(f.path); err == nil && id == f.id {
			return f.path, nil
		}
		// Replaced, rewritten or removed since it was checked: check again.
		c.forget(sum, f)
		if attempt > 0 {
			return "", fmt.Errorf("job binary %s (sha256 %s) keeps changing while it is checked", f.path, sum[:12])
		}
		c.log.Info("job binary changed since it was checked; checking again", "path", f.path, "sha256", sum[:12])
	}
}

// once returns the check (or fetch) of key, starting do for it unless
// one is under way or done. A failed one is forgotten when it ends, so
// that a later call tries again.
func (c *Cache) once(key string, do func() (string, fileID, error)) *binaryFetch {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.fetches[key]; f != nil {
		return f
	}
	f := &binaryFetch{done: make(chan struct{})}
	c.fetches[key] = f
	go func() {
		f.path, f.id, f.err = do()
		if f.err != nil {
			c.forget(key, f) // let a later job try again
		}
		close(f.done)
	}()
	return f
}

// forget drops f, so that the next call for key checks again.
func (c *Cache) forget(key string, f *binaryFetch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fetches[key] == f {
		delete(c.fetches, key)
	}
}

// wait returns once f is done (its error) or ctx ends (ctx's).
func (f *binaryFetch) wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fetch finds or makes a local file with the job's sha256.
func (c *Cache) fetch(info *gorayv1.JobInfo) (string, fileID, error) {
	sum := info.GetBinarySha256()
	jobID, _ := ids.FromBytes(info.GetJobId())
	// The driver's path, when the same file is visible here (one machine).
	got, id, err := hashFile(info.GetBinaryPath())
	if err == nil && got == sum {
		return info.GetBinaryPath(), id, nil
	}
	hashErr := &HashError{Job: jobID, Path: info.GetBinaryPath(), Want: sum, Got: got, Err: err}
	if hashErr.Got != "" {
		hashErr.Err = nil
	}
	cached := filepath.Join(c.dir, sum)
	if got, id, err := hashFile(cached); err == nil {
		if got == sum {
			return cached, id, nil
		}
		c.log.Warn("cached job binary is corrupt; fetching it again", "path", cached, "sha256", got)
		_ = os.Remove(cached)
	}
	if string(info.GetDriverNodeId()) == string(c.nodeID[:]) {
		// The driver runs here: its executable, even if its file was
		// replaced or removed since it started.
		if info.GetDriverPid() <= 0 {
			return "", fileID{}, hashErr
		}
		exe := fmt.Sprintf("/proc/%d/exe", info.GetDriverPid())
		src, err := os.Open(exe)
		if err != nil {
			return "", fileID{}, hashErr
		}
		defer src.Close()
		if _, err := c.Install(sum, src); err != nil {
			hashErr.Err = fmt.Errorf("the driver's running executable %s: %w", exe, err)
			return "", fileID{}, hashErr
		}
		c.log.Info("job binary copied from the running driver", "sha256", sum[:12], "from", exe)
	} else {
		if err := c.fetchRemote(info); err != nil {
			return "", fileID{}, err
		}
	}
	id, err = statID(cached)
	if err != nil {
		return "", fileID{}, err
	}
	return cached, id, nil
}

// fetchRemote streams the job's binary from the driver's node into
// the cache.
func (c *Cache) fetchRemote(info *gorayv1.JobInfo) error {
	return c.fetchFrom(info.GetDriverNodeId(), info.GetBinarySha256(), "binary")
}

// fetchFrom streams the file with sha256 sum (what it is, for messages)
// from the raylet of node (the driver's) into the cache.
func (c *Cache) fetchFrom(node []byte, sum, what string) error {
	driverNode, err := ids.FromBytes(node)
	if err != nil {
		return fmt.Errorf("no driver node to fetch %s %s from", what, sum[:12])
	}
	cli, err := c.peer(driverNode)
	if err != nil {
		return fmt.Errorf("fetching %s %s: %w", what, sum[:12], err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	st, err := cli.FetchBinary(ctx, &gorayv1.FetchBinaryRequest{Sha256: sum})
	if err != nil {
		return fmt.Errorf("fetching %s %s from node %s: %w", what, sum[:12], driverNode.Short(), err)
	}
	n, err := c.Install(sum, &chunkReader{recv: st.Recv})
	if err != nil {
		return fmt.Errorf("fetching %s %s from node %s: %w", what, sum[:12], driverNode.Short(), err)
	}
	c.log.Info("job "+what+" fetched", "sha256", sum[:12], "from", driverNode, "bytes", n, "took", time.Since(start))
	return nil
}

// chunkReader reads a FetchBinary stream.
type chunkReader struct {
	recv func() (*gorayv1.BinaryChunk, error)
	buf  []byte
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		m, err := c.recv()
		if err != nil {
			return 0, err // io.EOF at the end
		}
		c.buf = m.GetData()
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// Install writes src into the binary cache (a 0700 directory) as
// <sha256>, mode 0700, if its content has that sha256.
func (c *Cache) Install(sum string, src io.Reader) (int64, error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(c.dir, ".fetch-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), src)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return n, fmt.Errorf("the copy has sha256 %s, want %s", got, sum)
	}
	if err := os.Chmod(tmp.Name(), 0o700); err != nil {
		return n, err
	}
	return n, os.Rename(tmp.Name(), filepath.Join(c.dir, sum))
}
