// Package statedir is for a provider that must keep state on the machine
// it runs on — the launch request ids it served, the instances it
// started, the errors not yet polled — so that the provider restarted
// after a crash, or `goray down` running next to the head's provider on
// the same machine, sees what the other did. (A provider whose cloud
// holds that state, in tags, needs none of it.)
//
// Open makes the directory (0700) with a lock file in it. Every change
// reads the state, changes it and writes it back under Dir.Lock, which
// serialises the goroutines sharing the Dir and, with flock(2), every
// other process that opened the directory; Update does all of that.
// WriteFile and WriteJSON write a file atomically (a temporary file,
// fsynced, renamed into place, the directory fsynced), so a crash leaves
// the old content or the new, never a part; ReadJSON reads it back, and
// ReadSubdirs reads one file of every subdirectory (state kept per
// cluster, dir/<cluster>/state.json).
//
//	d, err := statedir.Open(cfg.StateDir)
//	...
//	err = statedir.Update(ctx, d, loadState, (*state).save, func(st *state) error {
//		st.Requests[req.RequestID] = ...
//		return nil
//	})
//
// It works on Unix systems, where flock(2) is.
package statedir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"
)

// LockFile is the name of the lock file Open creates in the directory.
const LockFile = ".lock"

// lockPollInterval is how often Lock tries a lock another process holds
// again (flock(2) cannot wait for a context).
const lockPollInterval = 10 * time.Millisecond

// Dir is a state directory opened with its lock file. Its methods may be
// called concurrently.
type Dir struct {
	path string
	lock *os.File
	// sem serialises the holders of the lock within this process: a flock
	// belongs to the open file, which every goroutine shares.
	sem *semaphore.Weighted
}

// Open creates the directory path (0700, with its parents) if it is
// missing, and opens (creating it 0600) its lock file. The caller checks
// that path is what its config allows (absolute, short enough); Close
// releases the lock file.
func Open(path string) (*Dir, error) {
	path = filepath.Clean(path)
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(path, LockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	return &Dir{path: path, lock: f, sem: semaphore.NewWeighted(1)}, nil
}

// Path returns the directory, cleaned.
func (d *Dir) Path() string { return d.path }

// Lock takes the directory's lock, waiting while another goroutine of
// this Dir or another process (another Dir, in this process or not) holds
// it, and returns the function that releases it (calling it again does
// nothing). When ctx ends first, the error matches ctx.Err().
func (d *Dir) Lock(ctx context.Context) (unlock func(), err error) {
	if err := d.sem.Acquire(ctx, 1); err != nil {
		return nil, fmt.Errorf("waiting for the lock of %s: %w", d.lock.Name(), err)
	}
	if err := flock(ctx, d.lock); err != nil {
		d.sem.Release(1)
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = unix.Flock(int(d.lock.Fd()), unix.LOCK_UN)
			d.sem.Release(1)
		})
	}, nil
}

// flock takes the exclusive flock of f, giving up when ctx ends.
func flock(ctx context.Context, f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the lock of %s: %w", f.Name(), ctx.Err())
		case <-time.After(lockPollInterval):
		}
	}
}

// Close closes the lock file (which releases a lock still held). The
// directory and its files stay.
func (d *Dir) Close() error { return d.lock.Close() }

// Update runs fn on the state under the directory's lock: it takes the
// lock (see Lock), reads the state with load(d.Path()), runs fn on it and
// writes it back with save — also when fn fails, so that what fn recorded
// before it failed is kept — and releases the lock. The error joins fn's
// and save's.
func Update[S any](ctx context.Context, d *Dir, load func(dir string) (S, error), save func(S) error, fn func(S) error) error {
	unlock, err := d.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := load(d.path)
	if err != nil {
		return err
	}
	err = fn(st)
	if serr := save(st); serr != nil {
		err = errors.Join(err, serr)
	}
	return err
}

// WriteFile writes data to path atomically: to a temporary file beside
// it (mode perm), fsynced and renamed into place, then the directory is
// fsynced. The directory is created (0700) if it is missing. On failure
// path is unchanged and no temporary file is left.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// WriteJSON writes v as indented JSON (and a newline) to path with
// WriteFile.
func WriteJSON(path string, v any, perm fs.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteFile(path, append(b, '\n'), perm)
}

// ReadJSON decodes the JSON file at path into v. A missing file is an
// error matching fs.ErrNotExist; one that is not valid JSON for v is a
// *CorruptError.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &CorruptError{Path: path, Err: err}
	}
	return nil
}

// ReadSubdirs decodes the JSON file name in every subdirectory of dir
// that has one — the layout of state kept per cluster, dir/<cluster>/name
// — and returns them by subdirectory. Subdirectories without the file are
// passed over; a file that does not decode is a *CorruptError.
func ReadSubdirs[T any](dir, name string) (map[string]*T, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]*T{}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		v := new(T)
		err := ReadJSON(filepath.Join(dir, e.Name(), name), v)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[e.Name()] = v
	}
	return out, nil
}

// CorruptError is ReadJSON's error for a file that does not decode.
type CorruptError struct {
	// Path is the file.
	Path string
	// Err is the decoder's error.
	Err error
}

// Error implements error: "the state file <path> is corrupt: <cause>".
func (e *CorruptError) Error() string {
	return fmt.Sprintf("the state file %s is corrupt: %v", e.Path, e.Err)
}

// Unwrap returns the decoder's error.
func (e *CorruptError) Unwrap() error { return e.Err }
