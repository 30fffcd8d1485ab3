// Package logrotate is the one writer of goray's log files (docs/logs.md):
// node.log, gcs.log, the plugins' logs, the workers' .out and .err files
// and the job drivers' logs are each written through a Writer, which
// rotates the file once it reaches Limits.MaxFileSize and keeps
// Limits.MaxFiles rotated copies beside it, so that no log can fill a
// disk. Files lists a log's rotated copies and the log itself, oldest
// first, for the readers (`goray logs`, the dashboard).
//
// Rotation is github.com/DeRuina/timberjack's (the maintained fork of
// gopkg.in/natefinch/lumberjack.v2, with the same rotation and a Close
// that stops its background goroutine; see docs/architecture.md). A
// rotated copy of worker-1.out is named
// worker-1-2026-12-07T03-30-00.123456789-size.out: the name without its
// extension, the time of the rotation (UTC, to the nanosecond), "size"
// and the extension.
package logrotate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/DeRuina/timberjack"
)

// Defaults of Limits: Ray's (RAY_ROTATION_MAX_BYTES, 512 MiB, and
// RAY_ROTATION_BACKUP_COUNT, 5).
const (
	DefaultMaxFileSize = 512 << 20
	DefaultMaxFiles    = 5
)

// MinFileSize is the smallest MaxFileSize: sizes count in whole MiB.
const MinFileSize = 1 << 20

// Limits bound one log: a log takes at most MaxFileSize × (MaxFiles + 1)
// bytes of disk.
type Limits struct {
	// MaxFileSize is the size at which a file is rotated, in bytes,
	// rounded down to whole MiB (0: DefaultMaxFileSize; less than
	// MinFileSize: MinFileSize).
	MaxFileSize int64
	// MaxFiles is how many rotated files are kept besides the one being
	// written (0 or less: DefaultMaxFiles).
	MaxFiles int
}

// resolved returns l's size in MiB and count of rotated files, with the
// defaults.
func (l Limits) resolved() (mib, backups int) {
	size := l.MaxFileSize
	switch {
	case size == 0:
		size = DefaultMaxFileSize
	case size < MinFileSize:
		size = MinFileSize
	}
	backups = l.MaxFiles
	if backups <= 0 {
		backups = DefaultMaxFiles
	}
	return int(min(size>>20, 1<<30)), backups
}

// Writer appends to a log file and rotates it. It is safe for concurrent
// use; a Write after Close appends to the file without rotating it (a
// late line of a stopping process is not lost).
type Writer struct {
	l     *timberjack.Logger
	chunk int
}

// Open returns the Writer of the log at path (created on the first write,
// with mode 0600; an existing file is appended to).
func Open(path string, lim Limits) *Writer {
	mib, backups := lim.resolved()
	return &Writer{
		l: &timberjack.Logger{
			Filename:   path,
			MaxSize:    mib,
			MaxBackups: backups,
			FileMode:   0o600,
			// Nanoseconds: timberjack keeps the rotated files of the
			// MaxBackups newest distinct times, so two rotations within
			// one millisecond (its default precision; 1 MiB files under
			// a fast writer) counted once and a file too many stayed.
			BackupTimeFormat: backupTimeFormat,
		},
		chunk: mib << 20,
	}
}

// Write appends p, rotating the file first when p would take it past its
// size. A p longer than a file is written in pieces; an empty p creates
// the file when it does not exist.
func (w *Writer) Write(p []byte) (int, error) {
	if len(p) == 0 {
		_, err := w.l.Write(p)
		return 0, err
	}
	n := 0
	for len(p) > 0 {
		k := min(len(p), w.chunk)
		m, err := w.l.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// Close closes the file and stops the background removal of old files.
func (w *Writer) Close() error { return w.l.Close() }

// Copy copies r into w until r ends, then closes r: the loop a log's
// goroutine runs for a child process's output pipe. It returns the
// first error.
func Copy(w io.Writer, r io.ReadCloser) error {
	_, err := io.Copy(w, r)
	if cerr := r.Close(); err == nil && !errors.Is(cerr, os.ErrClosed) {
		err = cerr
	}
	return err
}

// backupTimeFormat is the time in a rotated file's name.
const backupTimeFormat = "2006-01-02T15-04-05.000000000"

// backupTime matches the part of a rotated file's name between the log's
// name and its extension: the rotation's time (to the nanosecond, or the
// millisecond in files of goray before 2026-12), its reason and a suffix
// that keeps two rotations at the same time apart.
var backupTime = regexp.MustCompile(`^-(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.(?:\d{9}|\d{3}))-(size|time|initial)(?:_(\d+))?$`)

// logOf returns the name of the log whose rotated copy name is, or name
// itself when it is not a rotated copy.
func logOf(name string) string {
	for _, ext := range []string{filepath.Ext(name), ""} {
		stem := strings.TrimSuffix(name, ext)
		// The stem ends with "-<time>-<reason>[_N]"; the time has dashes
		// of its own: the last dash where the pattern matches is its
		// start.
		for i := len(stem) - 1; i >= 0; i-- {
			if stem[i] == '-' && backupTime.MatchString(stem[i:]) {
				return stem[:i] + ext
			}
		}
	}
	return name
}

// backupKey returns the order of a rotated copy of log named name.
func backupKey(name, log string) (string, bool) {
	ext := filepath.Ext(log)
	stem := strings.TrimSuffix(log, ext)
	if !strings.HasPrefix(name, stem) || !strings.HasSuffix(name, ext) || len(name) < len(stem)+len(ext) {
		return "", false
	}
	m := backupTime.FindStringSubmatch(name[len(stem) : len(name)-len(ext)])
	if m == nil {
		return "", false
	}
	n := 0
	if m[3] != "" {
		var err error
		if n, err = strconv.Atoi(m[3]); err != nil {
			return "", false
		}
	}
	ts := m[1]
	if frac := len(ts) - strings.LastIndexByte(ts, '.') - 1; frac < 9 {
		ts += strings.Repeat("0", 9-frac) // milliseconds: the same order
	}
	return fmt.Sprintf("%s/%09d", ts, n), true
}

// Files returns the files of the log at path, oldest first: its rotated
// copies (in the order they were rotated), then path itself when it
// exists. A log with no file has none.
func Files(path string) ([]string, error) {
	dir, log := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type backup struct{ key, name string }
	var bs []backup
	hasLog := false
	for _, e := range ents {
		if e.Name() == log {
			hasLog = true
			continue
		}
		if k, ok := backupKey(e.Name(), log); ok {
			bs = append(bs, backup{k, e.Name()})
		}
	}
	slices.SortFunc(bs, func(a, b backup) int { return strings.Compare(a.key, b.key) })
	out := make([]string, 0, len(bs)+1)
	for _, b := range bs {
		out = append(out, filepath.Join(dir, b.name))
	}
	if hasLog {
		out = append(out, path)
	}
	return out, nil
}
