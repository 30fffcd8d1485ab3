// Package recvseg keeps, per process, a ledger of the shared-memory
// segments the process owns: those tensor receives allocated for it
// (copies that arrived from another node or process, which it owns until
// ray.ReleaseTensors) and those it created and has not freed or handed to
// a transport. The ledger lives under the node's session, so that whoever
// outlives the process can unlink what it never released: the process
// itself when it closes, its raylet when it dies (even by kill -9), the
// node when it stops.
//
// A ledger is one append-only file per process: Add and Remove each append
// lines ("+name", "-name") with a single write(2), which a process killed
// right after still leaves in the file. Creating a file per segment, as
// the ledger first did, cost a file system create on the path of every new
// tensor (30-50 µs on ext4, where an append costs a few). The file is
// rewritten with only the live segments when it has grown well past them.
package recvseg

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// File is the name of the ledger file in a process's ledger directory.
const File = "segments"

// compactAfter is the fewest lines a ledger has before it is compacted:
// then when it holds more than four lines per live segment.
const compactAfter = 1024

// Root is the directory of every process's ledger under a session.
func Root(sessionDir string) string { return filepath.Join(sessionDir, "tensors") }

// Dir is the ledger of process id under a session.
func Dir(sessionDir string, id ids.ID) string { return filepath.Join(Root(sessionDir), id.String()) }

// ledger is this process's open ledger in one directory.
type ledger struct {
	mu    sync.Mutex
	dir   string
	f     *os.File // nil once closed
	live  map[string]struct{}
	lines int // in the file
}

var (
	ledgersMu sync.Mutex
	ledgers   = map[string]*ledger{}
)

// open returns this process's ledger in dir, creating the directory and
// the file as needed.
func open(dir string) (*ledger, error) {
	ledgersMu.Lock()
	defer ledgersMu.Unlock()
	if l := ledgers[dir]; l != nil {
		return l, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, File), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	l := &ledger{dir: dir, f: f, live: map[string]struct{}{}}
	ledgers[dir] = l
	return l, nil
}

// forget closes this process's ledger in dir, if it has one open.
func forget(dir string) {
	ledgersMu.Lock()
	l := ledgers[dir]
	delete(ledgers, dir)
	ledgersMu.Unlock()
	if l != nil {
		l.mu.Lock()
		if l.f != nil {
			_ = l.f.Close()
			l.f = nil
		}
		l.mu.Unlock()
	}
}

// Add records segments in the ledger dir (created if needed). Names that
// are not valid segment names are refused.
func Add(dir string, segs ...string) error {
	if len(segs) == 0 {
		return nil
	}
	for _, s := range segs {
		if err := shmem.ValidName(s); err != nil {
			return err
		}
	}
	l, err := open(dir)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fs.ErrClosed
	}
	if _, err := l.f.Write(record(nil, '+', segs...)); err != nil {
		return err
	}
	for _, s := range segs {
		l.live[s] = struct{}{}
	}
	l.lines += len(segs)
	return l.compactLocked()
}

// Remove forgets segments (the process released them or handed them to a
// transport). Segments this process did not add are ignored.
func Remove(dir string, segs ...string) {
	ledgersMu.Lock()
	l := ledgers[dir]
	ledgersMu.Unlock()
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	var gone []string
	for _, s := range segs {
		if _, ok := l.live[s]; ok {
			gone = append(gone, s)
		}
	}
	if len(gone) == 0 {
		return
	}
	if _, err := l.f.Write(record(nil, '-', gone...)); err != nil {
		return // the segments stay listed: at worst unlinked once freed already
	}
	for _, s := range gone {
		delete(l.live, s)
	}
	l.lines += len(gone)
	_ = l.compactLocked()
}

// record appends the ledger's lines for segs, each op ('+' or '-') and a
// name.
func record(b []byte, op byte, segs ...string) []byte {
	for _, s := range segs {
		b = append(append(append(b, op), s...), '\n')
	}
	return b
}

// compactLocked rewrites the ledger with only its live segments once it
// has grown well past them (a new file renamed over the old one, so the
// file on disk is always whole). l.mu is held.
func (l *ledger) compactLocked() error {
	if l.lines < compactAfter || l.lines <= 4*len(l.live) {
		return nil
	}
	f, err := writeLedger(l.dir, l.live)
	if err != nil {
		return err
	}
	_ = l.f.Close()
	l.f, l.lines = f, len(l.live)
	return nil
}

// writeLedger replaces the ledger file in dir with one listing segs and
// returns it open for appending.
func writeLedger(dir string, segs map[string]struct{}) (*os.File, error) {
	tmp := filepath.Join(dir, File+".new")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	var b []byte
	for s := range segs {
		b = record(b, '+', s)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, File)); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	return f, nil
}

// read returns the segments the ledger file in dir lists as live. Lines
// that are not a valid segment name after "+" or "-" are skipped (a
// process can only damage its own ledger).
func read(dir string) (map[string]struct{}, error) {
	f, err := os.Open(filepath.Join(dir, File))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	live := map[string]struct{}{}
	r := bufio.NewReader(f)
	for {
		line, long, err := r.ReadLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return live, nil
			}
			return live, err
		}
		for long && err == nil { // no segment name is this long: skip it
			_, long, err = r.ReadLine()
		}
		if len(line) < 2 || len(line) >= 4096 {
			continue
		}
		name := string(line[1:])
		if shmem.ValidName(name) != nil {
			continue
		}
		switch line[0] {
		case '+':
			live[name] = struct{}{}
		case '-':
			delete(live, name)
		}
	}
}

// Sweep unlinks every segment in the ledger dir and removes it; it returns
// the segments it unlinked (segments already gone are not errors). A
// missing ledger is empty. Segments it could not unlink stay listed for
// the next sweep.
func Sweep(dir string) ([]string, error) {
	forget(dir)
	live, err := read(dir)
	if err != nil {
		return nil, err
	}
	// A process built with an SDK older than the append-only file records
	// a segment as an empty file of its name.
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if shmem.ValidName(e.Name()) == nil {
				if live == nil {
					live = map[string]struct{}{}
				}
				live[e.Name()] = struct{}{}
			}
		}
	}
	var unlinked []string
	var first error
	failed := map[string]struct{}{}
	for name := range live {
		switch err := shmem.Unlink(name); {
		case err == nil:
			unlinked = append(unlinked, name)
		case errors.Is(err, shmem.ErrNotFound):
		default:
			if first == nil {
				first = err
			}
			failed[name] = struct{}{}
		}
	}
	if first != nil {
		if f, err := writeLedger(dir, failed); err == nil {
			_ = f.Close()
		}
		return unlinked, first
	}
	return unlinked, os.RemoveAll(dir)
}

// SweepAll sweeps every ledger of a session (the node stops).
func SweepAll(sessionDir string) ([]string, error) {
	root := Root(sessionDir)
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var all []string
	var first error
	for _, e := range entries {
		got, err := Sweep(filepath.Join(root, e.Name()))
		all = append(all, got...)
		if err != nil && first == nil {
			first = err
		}
	}
	return all, first
}
