// Package logfiles lists and opens the log files of a node's session
// (its logs/ directory) for `goray logs`, confined to that directory: a
// name is a plain file name (no separator, no "..", not absolute), and
// symbolic links and anything but regular files are refused, so no name
// reaches outside it. Reading them, across rotated copies and bounded, is
// internal/logrotate's Read, with Dir.Open to open each file.
package logfiles

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

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
