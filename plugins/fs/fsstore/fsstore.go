package fsstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/storage"
)

// TempPrefix starts the name of every temporary file: a write in progress,
// or one that a crash interrupted. Keys with a path element that starts
// with it are rejected.
const TempPrefix = ".goray-tmp-"

// copyBuffer is the size of the buffer a write copies through.
const copyBuffer = 1 << 20

// Store is the local-disk storage. Create it with New and configure it
// (Configure, or Open) before use. Methods may be called concurrently.
type Store struct {
	mu    sync.RWMutex
	root  string // absolute, cleaned; empty until configured
	fsync bool
	log   hclog.Logger
}

// New returns an unconfigured Store.
func New() *Store { return &Store{log: hclog.NewNullLogger()} }

// Open returns a Store configured for dir (created if missing), as
// Configure would with `directory = dir` and `fsync = fsync`.
func Open(ctx context.Context, dir string, fsync bool) (*Store, error) {
	s := New()
	if err := s.Configure(ctx, Config{Directory: dir, FSync: fsync}); err != nil {
		return nil, err
	}
	return s, nil
}

// SetLogger implements plugin.LoggerSetter.
func (s *Store) SetLogger(l hclog.Logger) {
	s.mu.Lock()
	s.log = l
	s.mu.Unlock()
}

// Config is the plugin's `config { ... }` block.
type Config struct {
	// Directory is the absolute path of the directory objects are spilled
	// to; it is created if missing.
	Directory string `hcl:"directory,required" doc:"Absolute path of the directory objects are spilled to; created if missing."`
	// FSync flushes every object (and its directory entry) to disk before
	// Write returns.
	FSync bool `hcl:"fsync" default:"true" doc:"Flush every object (and its directory entry) to disk before Write returns."`
}

// ConfigSpec implements plugin.Configurable: Config is the config block.
func (s *Store) ConfigSpec() plugin.ConfigSpec { return plugin.TypedConfig(s.Configure) }

// Configure creates the directory if needed, checks that it can write
// there, and removes the temporary files of writes that a crash (of this or
// an earlier plugin process) interrupted.
func (s *Store) Configure(ctx context.Context, c Config) error {
	dir, sync := c.Directory, c.FSync
	if dir == "" {
		return errors.New(`directory: the directory to spill objects to is required, e.g. directory = "/var/lib/goray/spill"`)
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("directory: %q is not an absolute path (the plugin's working directory is not the config file's)", dir)
	}
	root := filepath.Clean(dir)
	if st, err := os.Stat(root); err == nil && !st.IsDir() {
		return fmt.Errorf("directory: %s is not a directory", root)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("directory: creating %s: %w", root, classify(err))
	}
	st, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("directory: %w", classify(err))
	}
	if !st.IsDir() {
		return fmt.Errorf("directory: %s is not a directory", root)
	}
	// Can we write there? (Without creating a file: access(2) reports a
	// read-only file system, and missing permissions for non-root users.)
	if err := unix.Access(root, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("directory: cannot write in %s: %w", root, classify(err))
	}
	removed, err := removeStale(ctx, root)
	s.mu.Lock()
	s.root, s.fsync = root, sync
	log := s.log
	s.mu.Unlock()
	if err != nil {
		log.Warn("removing stale temporary files", "directory", root, "error", err)
	}
	if len(removed) > 0 {
		log.Info("removed temporary files of interrupted writes", "directory", root, "count", len(removed))
	}
	log.Debug("configured", "directory", root, "fsync", sync)
	return nil
}

// removeStale removes the temporary files under root that no live write
// holds: a write keeps an exclusive flock on its file until it is renamed,
// and the kernel drops the lock when the writer dies, even by kill -9.
func removeStale(ctx context.Context, root string) ([]string, error) {
	var removed []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), TempPrefix) {
			return nil
		}
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil // gone meanwhile
		}
		defer f.Close()
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			return nil // a live write holds it
		}
		if err := os.Remove(p); err == nil {
			removed = append(removed, p)
		}
		return nil
	})
	return removed, err
}

// TempFiles lists the temporary files under dir, for tests: after every
// write has returned, and after Configure, there should be none.
func TempFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() && strings.HasPrefix(d.Name(), TempPrefix) {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// Health implements plugin.HealthChecker: a configured store is healthy.
// A vanished directory does not fail the check: calls report
// storage.ErrUnavailable, and a restarted plugin would recreate the
// directory at Configure, which is what the store avoids.
func (s *Store) Health(context.Context) error {
	if s.Location() == "" {
		return fmt.Errorf("%w: the fs storage is not configured", storage.ErrUnavailable)
	}
	return nil
}

// Location returns the configured directory (empty before Configure).
func (s *Store) Location() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.root
}

// Info implements storage.Storage.
func (s *Store) Info(context.Context, *storage.InfoRequest) (*storage.InfoResponse, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return &storage.InfoResponse{Name: "fs", Location: s.root}, nil
}

// rootDir returns the configured directory once it checked that it is
// still a directory: a spill directory that vanished (removed, unmounted)
// makes the store unavailable rather than empty, and is never recreated
// behind the operator's back.
func (s *Store) rootDir() (string, error) {
	s.mu.RLock()
	root := s.root
	s.mu.RUnlock()
	if root == "" {
		return "", fmt.Errorf("%w: the fs storage is not configured", storage.ErrUnavailable)
	}
	st, err := os.Stat(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return "", fmt.Errorf("%w: the spill directory %s is gone", storage.ErrUnavailable, root)
		}
		return "", classify(err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%w: the spill directory %s is not a directory any more", storage.ErrUnavailable, root)
	}
	return root, nil
}

func (s *Store) settings() (fsync bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.fsync
}

// checkKey applies storage.ValidKey and the fs store's own rule: no path
// element may look like a temporary file.
func checkKey(key string) error {
	if err := storage.ValidKey(key); err != nil {
		return err
	}
	for e := range strings.SplitSeq(key, "/") {
		if strings.HasPrefix(e, TempPrefix) {
			return fmt.Errorf("%w %q: path elements starting with %q are reserved for temporary files", storage.ErrBadKey, key, TempPrefix)
		}
	}
	return nil
}

// classify adds the storage error kind that matches an OS error.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, storage.ErrSizeMismatch), errors.Is(err, storage.ErrBadKey),
		errors.Is(err, storage.ErrUnavailable), errors.Is(err, storage.ErrPermission),
		errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrInvalidRange):
		return err
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return fmt.Errorf("%w: %w", storage.ErrPermission, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EIO),
		errors.Is(err, syscall.ENOMEM), errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return fmt.Errorf("%w: %w", storage.ErrUnavailable, err)
	}
	return err
}

// ---------------------------------------------------------------- write

// Write implements storage.Storage: the bytes go to a temporary file next
// to the object's path, which is flushed (with fsync) and renamed over the
// path only once every byte arrived and the context is still live.
func (s *Store) Write(ctx context.Context, req *storage.WriteRequest) (*storage.WriteResponse, error) {
	if req == nil {
		req = &storage.WriteRequest{}
	}
	url, err := s.write(ctx, req)
	if err != nil {
		return nil, &storage.StorageError{Op: storage.OpWrite, Key: req.Key, Err: classify(err)}
	}
	return &storage.WriteResponse{URL: url}, nil
}

func (s *Store) write(ctx context.Context, req *storage.WriteRequest) (string, error) {
	if err := checkKey(req.Key); err != nil {
		return "", err
	}
	if req.Size < 0 {
		return "", fmt.Errorf("%w: size %d is negative; the exact size must be known", storage.ErrSizeMismatch, req.Size)
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	root, err := s.rootDir()
	if err != nil {
		return "", err
	}
	final := filepath.Join(root, filepath.FromSlash(req.Key))
	fsync := s.settings()
	f, err := createTemp(root, path.Dir(req.Key), fsync)
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	committed := false
	defer func() {
		if !committed {
			_ = os.Remove(tmp) // before Close, so that no one else takes it for stale
		}
		f.Close()
	}()
	buf := make([]byte, copyBuffer)
	if _, err := io.CopyBuffer(onlyWriter{f}, storage.ContextReader(ctx, storage.ExactReader(req.Body, req.Size)), buf); err != nil {
		return "", err
	}
	if fsync {
		if err := f.Sync(); err != nil {
			return "", fmt.Errorf("flushing %s: %w", tmp, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		if st, serr := os.Lstat(final); serr == nil && st.IsDir() {
			return "", fmt.Errorf("%w %q: the path is a directory holding other keys", storage.ErrBadKey, req.Key)
		}
		return "", fmt.Errorf("renaming the finished object into place: %w", err)
	}
	committed = true
	if fsync {
		if err := syncDir(filepath.Dir(final)); err != nil {
			return "", fmt.Errorf("flushing the directory of %s: %w", final, err)
		}
	}
	return (&url.URL{Scheme: "file", Path: final}).String(), nil
}

// createTemp creates a locked temporary file in the key's directory
// (relative slash path dir below root), creating the directories below
// root as needed (and, with fsync, flushing the entries of new ones).
func createTemp(root, dir string, fsync bool) (*os.File, error) {
	var lastErr error
	// A concurrent Delete may remove a directory it just emptied between
	// our mkdir and our create: try again.
	for range 10 {
		if err := mkdirBelow(root, dir, fsync); err != nil {
			lastErr = err
			if errors.Is(err, fs.ErrNotExist) {
				continue // a parent was removed after we made it
			}
			return nil, err
		}
		f, err := os.CreateTemp(filepath.Join(root, filepath.FromSlash(dir)), TempPrefix+"*")
		if err != nil {
			lastErr = err
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			_ = os.Remove(f.Name())
			return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		// Configure in another process may have taken the new, not yet
		// locked file for stale and removed it: make sure it is still ours.
		if st, err := os.Stat(f.Name()); err != nil || !sameFile(f, st) {
			f.Close()
			lastErr = fmt.Errorf("temporary file %s vanished", f.Name())
			continue
		}
		return f, nil
	}
	if errors.Is(lastErr, fs.ErrNotExist) {
		if _, err := os.Stat(root); err != nil {
			return nil, fmt.Errorf("%w: the spill directory %s is gone", storage.ErrUnavailable, root)
		}
	}
	return nil, lastErr
}

func sameFile(f *os.File, st fs.FileInfo) bool {
	fst, err := f.Stat()
	return err == nil && os.SameFile(fst, st)
}

// mkdirBelow creates the directories of the relative slash path dir below
// root, which must exist (it is never recreated here). With fsync it
// flushes the parent of every directory it creates.
func mkdirBelow(root, dir string, fsync bool) error {
	if dir == "." {
		return nil
	}
	p := root
	for e := range strings.SplitSeq(dir, "/") {
		parent := p
		p = filepath.Join(p, e)
		err := os.Mkdir(p, 0o700)
		if err == nil && fsync {
			if err := syncDir(parent); err != nil {
				return fmt.Errorf("flushing %s: %w", parent, err)
			}
		}
		if err == nil || errors.Is(err, fs.ErrExist) {
			if st, serr := os.Stat(p); serr == nil && !st.IsDir() {
				rel, _ := filepath.Rel(root, p)
				return fmt.Errorf("%w: %q is an object, so it cannot also be a directory of keys", storage.ErrBadKey, filepath.ToSlash(rel))
			}
			continue
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			if _, rerr := os.Stat(root); rerr != nil {
				return fmt.Errorf("%w: the spill directory %s is gone", storage.ErrUnavailable, root)
			}
		}
		return err
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// onlyWriter hides *os.File's ReadFrom, so that the copy goes through the
// context-checking reader chunk by chunk.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

// ---------------------------------------------------------------- read

// Read implements storage.Storage. An object replaced while it is being
// read keeps being read whole: the open file is the old one.
func (s *Store) Read(ctx context.Context, req *storage.ReadRequest) (*storage.ReadResponse, error) {
	if req == nil {
		req = &storage.ReadRequest{}
	}
	r, err := s.read(ctx, req)
	if err != nil {
		return nil, &storage.StorageError{Op: storage.OpRead, Key: req.Key, Err: classify(err)}
	}
	return r, nil
}

func (s *Store) read(ctx context.Context, req *storage.ReadRequest) (*storage.ReadResponse, error) {
	if err := checkKey(req.Key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	root, err := s.rootDir()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(root, filepath.FromSlash(req.Key)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			if _, err := s.rootDir(); err != nil {
				return nil, err
			}
			return nil, storage.ErrNotFound
		}
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, storage.ErrNotFound // a directory of other keys
	}
	n, err := storage.CheckRange(req.Offset, req.Length, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	return &storage.ReadResponse{Size: n, Body: &fileBody{
		ctx: ctx, f: f, r: io.NewSectionReader(f, req.Offset, n),
	}}, nil
}

// fileBody is a Read's Body.
type fileBody struct {
	ctx  context.Context
	f    *os.File
	r    *io.SectionReader
	once sync.Once
}

func (b *fileBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	return b.r.Read(p)
}

func (b *fileBody) Close() error {
	var err error
	b.once.Do(func() { err = b.f.Close() })
	return err
}

// ---------------------------------------------------------------- delete, list

// Delete implements storage.Storage. It also removes the directories it
// empties (below the spill directory).
func (s *Store) Delete(ctx context.Context, req *storage.DeleteRequest) (*storage.DeleteResponse, error) {
	if req == nil {
		req = &storage.DeleteRequest{}
	}
	for _, k := range req.Keys {
		if err := checkKey(k); err != nil {
			return nil, &storage.StorageError{Op: storage.OpDelete, Key: k, Err: err}
		}
	}
	if len(req.Keys) == 0 {
		return &storage.DeleteResponse{}, nil
	}
	root, err := s.rootDir()
	if err != nil {
		return nil, &storage.StorageError{Op: storage.OpDelete, Err: err}
	}
	for _, k := range req.Keys {
		if err := ctx.Err(); err != nil {
			return nil, &storage.StorageError{Op: storage.OpDelete, Key: k, Err: err}
		}
		p := filepath.Join(root, filepath.FromSlash(k))
		st, err := os.Lstat(p)
		if err != nil || st.IsDir() {
			continue // missing, or a directory of other keys: not an object
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, &storage.StorageError{Op: storage.OpDelete, Key: k, Err: classify(err)}
		}
		pruneDirs(root, filepath.Dir(p))
	}
	return &storage.DeleteResponse{}, nil
}

// pruneDirs removes dir and its parents below root while they are empty.
func pruneDirs(root, dir string) {
	for dir != root && strings.HasPrefix(dir, root+string(filepath.Separator)) {
		if os.Remove(dir) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

// List implements storage.Storage. Temporary files are not listed.
func (s *Store) List(ctx context.Context, req *storage.ListRequest) (*storage.ListResponse, error) {
	if req == nil {
		req = &storage.ListRequest{}
	}
	out, err := s.list(ctx, req.Prefix)
	if err != nil {
		return nil, &storage.StorageError{Op: storage.OpList, Key: req.Prefix, Err: classify(err)}
	}
	return &storage.ListResponse{Objects: out}, nil
}

func (s *Store) list(ctx context.Context, prefix string) ([]storage.ObjectInfo, error) {
	if err := storage.ValidPrefix(prefix); err != nil {
		return nil, err
	}
	root, err := s.rootDir()
	if err != nil {
		return nil, err
	}
	// Walk only the deepest directory the prefix names in full.
	start := root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = filepath.Join(root, filepath.FromSlash(prefix[:i]))
	}
	var out []storage.ObjectInfo
	err = filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return nil // removed meanwhile, or the prefix runs through an object
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			// Skip directories that hold no key with the prefix.
			if dk := key + "/"; key != "." && !strings.HasPrefix(dk, prefix) && !strings.HasPrefix(prefix, dk) {
				return fs.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(d.Name(), TempPrefix) || !d.Type().IsRegular() || !strings.HasPrefix(key, prefix) {
			return nil
		}
		if checkKey(key) != nil {
			return nil // a file someone put there by hand that no key can name
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		out = append(out, storage.ObjectInfo{Key: key, Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b storage.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
