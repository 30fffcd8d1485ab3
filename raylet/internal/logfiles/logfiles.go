// Package logfiles lists and reads the log files of a node's session
// (its logs/ directory) for `goray logs`, confined to that directory: a
// name is a plain file name (no separator, no "..", not absolute), and
// symbolic links and anything but regular files are refused, so no name
// reaches outside it. Reading is bounded: files are read in chunks of at
// most ChunkSize bytes, and finding the last lines reads at most
// MaxTailBytes.
package logfiles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ChunkSize is the most a Reader returns at once.
const ChunkSize = 64 << 10

// MaxTailBytes bounds how far back from the end Tail looks for lines.
const MaxTailBytes = 64 << 20

// PollInterval is how often Follow looks for appended bytes.
const PollInterval = 200 * time.Millisecond

// ErrBadName says a requested name is not a plain file name of the log
// directory.
var ErrBadName = errors.New("not a log file name")

// ErrNotLog says the name is in the log directory but is no regular file
// (a symbolic link, a directory, a socket).
var ErrNotLog = errors.New("not a regular log file")

// Info describes one log file.
type Info struct {
	Name    string
	Size    int64
	ModTime time.Time
}

// Dir is a log directory.
type Dir string

// CheckName checks that name is a plain file name of the directory.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrBadName)
	case len(name) > 255:
		return fmt.Errorf("%w: %d bytes long", ErrBadName, len(name))
	case filepath.IsAbs(name):
		return fmt.Errorf("%w: %q is an absolute path", ErrBadName, name)
	case strings.ContainsAny(name, "/\\\x00"):
		return fmt.Errorf("%w: %q has a path separator", ErrBadName, name)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q", ErrBadName, name)
	}
	return nil
}

// List returns the regular files of d, sorted by name.
func (d Dir) List() ([]Info, error) {
	ents, err := os.ReadDir(string(d))
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, Info{Name: e.Name(), Size: fi.Size(), ModTime: fi.ModTime()})
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Open opens the log file name of d for reading; a name outside d, a
// symbolic link or anything but a regular file is refused.
func (d Dir) Open(name string) (*os.File, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	path := filepath.Join(string(d), name)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%w: %s is a symbolic link", ErrNotLog, name)
	case errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("log file %s: %w", name, os.ErrNotExist)
	case err != nil:
		return nil, fmt.Errorf("log file %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is a %s", ErrNotLog, name, fi.Mode().Type())
	}
	return f, nil
}

// TailOffset returns the offset of the start of f's last n lines (0 when
// it has fewer, or n <= 0), looking back at most MaxTailBytes from size.
// A last line without newline counts as a line.
func TailOffset(f io.ReaderAt, size int64, n int64) (int64, error) {
	if n <= 0 || size == 0 {
		return 0, nil
	}
	buf := make([]byte, ChunkSize)
	end := size
	limit := max(0, size-MaxTailBytes)
	lines := int64(0)
	first := true
	for end > limit {
		start := max(limit, end-int64(len(buf)))
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' {
				continue
			}
			if first && start+int64(i) == size-1 {
				continue // the last line's own newline
			}
			lines++
			if lines == n {
				return start + int64(i) + 1, nil
			}
		}
		first = false
		end = start
	}
	return limit, nil
}

// Stream sends f's bytes from offset in chunks of at most ChunkSize to
// send; with follow it then waits for appended bytes (polling every
// PollInterval) until ctx ends, starting again from 0 when the file is
// truncated. It returns nil at the end of the file (without follow) or
// when ctx ends.
func Stream(ctx context.Context, f *os.File, offset int64, follow bool, send func([]byte) error) error {
	buf := make([]byte, ChunkSize)
	var tick *time.Ticker
	for {
		if ctx.Err() != nil {
			return nil
		}
		n, err := f.ReadAt(buf, offset)
		if n > 0 {
			if err := send(buf[:n]); err != nil {
				return err
			}
			offset += int64(n)
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if !follow {
			return nil
		}
		if tick == nil {
			tick = time.NewTicker(PollInterval)
			defer tick.Stop()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if fi, err := f.Stat(); err == nil && fi.Size() < offset {
			offset = 0 // truncated
		}
	}
}
