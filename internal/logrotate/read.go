package logrotate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Bounds of reading a log.
const (
	// ChunkSize is the most Read sends at once.
	ChunkSize = 64 << 10
	// MaxTailBytes bounds how far back from the end Read looks for the
	// last lines, across the log's files.
	MaxTailBytes = 64 << 20
	// PollInterval is how often a followed log is looked at for appended
	// bytes and for a rotation.
	PollInterval = 200 * time.Millisecond
)

// OpenFunc opens a file of a log for reading (os.Open, or one that
// refuses what it must not read).
type OpenFunc func(path string) (*os.File, error)

// ReadOptions say what Read sends.
type ReadOptions struct {
	// Tail sends only the last Tail lines (looking back at most
	// MaxTailBytes across the files); 0 sends everything.
	Tail int64
	// Follow then sends what is appended, across rotations, until ctx
	// ends: whole lines (an unterminated line once it ends, is longer
	// than ChunkSize, or the follow ends); after a gap (rotated copies
	// removed before it read them) it resumes at the next whole line.
	Follow bool
	// Open opens the files (nil: os.Open).
	Open OpenFunc
	// Poll is how often a followed log is looked at (0: PollInterval).
	Poll time.Duration
	// Until, when closed, ends following: what the log holds then is
	// sent, and Read returns nil (for a writer known to be done).
	Until <-chan struct{}
}

// Read sends the log at path to send in chunks of at most ChunkSize, in
// order across its files: its rotated copies (Files) and then path, from
// where its last opts.Tail lines start. With opts.Follow it then waits for
// appended bytes until ctx ends and, when the log is rotated meanwhile,
// reads the rest of the rotated file and goes on with the new one. It
// returns nil at the end (without Follow) or when ctx ends, the error of
// opening path when that fails (before sending anything), or send's
// error. A rotated copy read by its own name is read alone.
func Read(ctx context.Context, path string, opts ReadOptions, send func([]byte) error) error {
	open := opts.Open
	if open == nil {
		open = os.Open
	}
	cur, err := open(path)
	if err != nil {
		return err
	}
	files := []*os.File{cur}
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	if logOf(filepath.Base(path)) == filepath.Base(path) {
		names, _ := Files(path)
		var older []*os.File
		for _, n := range names {
			if n == path {
				continue
			}
			if f, err := open(n); err == nil {
				older = append(older, f)
			}
		}
		files = append(older, cur)
	}
	i, offset, err := tailStart(files, opts.Tail)
	if err != nil {
		return err
	}
	for ; i < len(files)-1; i++ {
		if _, err := sendFrom(ctx, files[i], offset, send); err != nil {
			return err
		}
		offset = 0
	}
	if !opts.Follow {
		_, err := sendFrom(ctx, cur, offset, send)
		return err
	}
	r := &follower{path: path, open: open, send: send, poll: opts.Poll, until: opts.Until}
	if r.poll <= 0 {
		r.poll = PollInterval
	}
	err = r.run(ctx, cur, offset)
	files = append(files, r.opened...)
	return err
}

// sendFrom sends f from offset to its end; it returns the offset reached.
func sendFrom(ctx context.Context, f *os.File, offset int64, send func([]byte) error) (int64, error) {
	buf := make([]byte, ChunkSize)
	for ctx.Err() == nil {
		n, err := f.ReadAt(buf, offset)
		if n > 0 {
			if err := send(buf[:n]); err != nil {
				return offset, err
			}
			offset += int64(n)
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return offset, err
		}
		return offset, nil
	}
	return offset, nil
}

// tailStart returns the file and offset where the last n lines of files
// (oldest first) start: 0, 0 for n <= 0 or fewer lines.
func tailStart(files []*os.File, n int64) (int, int64, error) {
	if n <= 0 {
		return 0, 0, nil
	}
	budget := int64(MaxTailBytes)
	for i := len(files) - 1; i >= 0; i-- {
		fi, err := files[i].Stat()
		if err != nil {
			return 0, 0, err
		}
		if i < len(files)-1 && !endsLine(files[i], fi.Size()) {
			// A line cut by the rotation: its end in the newer file was
			// counted as a line already.
			n++
		}
		off, found, err := tailOffset(files[i], fi.Size(), n, budget)
		if err != nil {
			return 0, 0, err
		}
		if found >= n || off > 0 {
			return i, off, nil // enough lines, or the budget ran out here
		}
		n -= found
		budget -= fi.Size()
		if budget <= 0 {
			return i, 0, nil
		}
	}
	return 0, 0, nil
}

// endsLine reports whether f (of size bytes) ends with a newline.
func endsLine(f io.ReaderAt, size int64) bool {
	var b [1]byte
	if size == 0 {
		return true
	}
	_, err := f.ReadAt(b[:], size-1)
	return err == nil && b[0] == '\n'
}

// TailOffset returns the offset of the start of f's last n lines (0 when
// it has fewer, or n <= 0), looking back at most MaxTailBytes from size.
// A last line without newline counts as a line.
func TailOffset(f io.ReaderAt, size, n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	off, _, err := tailOffset(f, size, n, MaxTailBytes)
	return off, err
}

// tailOffset returns the offset of the start of f's last n lines and how
// many lines it found (fewer than n when it reached the start of the file,
// or limit bytes back from size, with the offset then 0 or size-limit).
func tailOffset(f io.ReaderAt, size, n, limit int64) (int64, int64, error) {
	if size == 0 {
		return 0, 0, nil
	}
	buf := make([]byte, ChunkSize)
	end := size
	stop := max(0, size-limit)
	lines := int64(0)
	first := true
	for end > stop {
		start := max(stop, end-int64(len(buf)))
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, 0, err
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
				return start + int64(i) + 1, lines, nil
			}
		}
		first = false
		end = start
	}
	if stop == 0 {
		lines++ // the first line has no newline before it
	}
	return stop, lines, nil
}

// follower follows a log across its rotations.
type follower struct {
	path   string
	open   OpenFunc
	send   func([]byte) error
	poll   time.Duration
	until  <-chan struct{}
	opened []*os.File // files it opened, closed by Read
	// pending is the unterminated end of what was read, held back until
	// its line ends or the follow does (as Ray's log monitor reads whole
	// lines): a rotation between chunks, not lines, then joins the two
	// halves of a line, and a gap drops a half whose other half was lost
	// instead of sending it as a line.
	pending []byte
	// skipHalf drops what is read up to its first newline: the end of a
	// line whose start was lost in a gap (afterGap). It stays set until
	// that newline is read, which may come later than the gap (a new file
	// the follow opened before its writer wrote to it).
	skipHalf bool
}

// emit sends b's whole lines, with the pending start of the first, and
// keeps the unterminated rest pending (a line longer than ChunkSize is
// sent as it is).
func (r *follower) emit(b []byte) error {
	if r.skipHalf {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil
		}
		b, r.skipHalf = b[i+1:], false
	}
	r.pending = append(r.pending, b...)
	end := bytes.LastIndexByte(r.pending, '\n') + 1
	if len(r.pending)-end > ChunkSize {
		end = len(r.pending)
	}
	if err := r.sendChunks(r.pending[:end]); err != nil {
		return err
	}
	r.pending = append(r.pending[:0], r.pending[end:]...)
	return nil
}

// sendChunks sends b in chunks of at most ChunkSize.
func (r *follower) sendChunks(b []byte) error {
	for len(b) > 0 {
		k := min(len(b), ChunkSize)
		if err := r.send(b[:k]); err != nil {
			return err
		}
		b = b[k:]
	}
	return nil
}

// run sends cur from offset and what is appended to the log until ctx
// ends, then what is pending.
func (r *follower) run(ctx context.Context, cur *os.File, offset int64) error {
	if err := r.follow(ctx, cur, offset); err != nil {
		return err
	}
	return r.sendChunks(r.pending)
}

func (r *follower) follow(ctx context.Context, cur *os.File, offset int64) error {
	tick := time.NewTicker(r.poll)
	defer tick.Stop()
	final := false
	for {
		var err error
		if offset, err = sendFrom(ctx, cur, offset, r.emit); err != nil {
			return err
		}
		if final {
			return nil
		}

		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-r.until:
			final = true // one last look, across a rotation too
		}
		fi, err := cur.Stat()
		if err != nil {
			return err
		}
		if fi.Size() < offset {
			offset = 0 // truncated
		}
		now, err := os.Stat(r.path)
		if err != nil || os.SameFile(now, fi) {
			continue // not rotated (or the new file is not there yet)
		}
		// Rotated: the rest of cur, the files rotated after it, then the
		// new file.
		if _, err := sendFrom(ctx, cur, offset, r.emit); err != nil {
			return err
		}
		names, _ := Files(r.path)
		next := names[max(0, len(names)-1):] // cur was removed: the new file
		gap := true                          // files between cur and next were lost
		for i, n := range names {
			if st, err := os.Stat(n); err == nil && os.SameFile(st, fi) {
				next, gap = names[i+1:], false
				break
			}
		}
		if len(next) == 0 || next[len(next)-1] != r.path {
			continue // the new file is not there yet: look again
		}
		for _, n := range next[:len(next)-1] {
			f, err := r.open(n)
			if err != nil {
				gap = true // removed meanwhile
				continue
			}
			r.afterGap(gap)
			_, err = sendFrom(ctx, f, 0, r.emit)
			gap = false
			_ = f.Close()
			if err != nil {
				return err
			}
		}
		f, err := r.open(r.path)
		if err != nil {
			continue
		}
		r.opened = append(r.opened, f)
		r.afterGap(gap)
		cur, offset = f, 0
	}
}

// afterGap, after a gap (rotated copies removed before the follow read
// them, which a writer faster than the follow's polls causes), drops the
// pending start of a line and has emit drop what comes next up to its
// first newline, so that the end of a line whose start was lost is not
// sent as a line of its own. (A writer copying a pipe rotates between
// chunks, not between lines.) The newline may be in a file the follow
// reads later, or written later to the file it reads now: the new file
// may still be empty when the follow opens it.
func (r *follower) afterGap(gap bool) {
	if !gap {
		return
	}
	r.pending = r.pending[:0]
	r.skipHalf = true
}
