package logrotate

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
)

func TestNames(t *testing.T) {
	tests := []struct {
		name, log string
		backup    bool
		base      string
	}{
		{"node-2026-12-07T03-30-00.000-size.log", "node.log", true, "node.log"},
		{"node-2026-12-07T03-30-00.000-size_3.log", "node.log", true, "node.log"},
		{"worker-ab12-2026-12-07T03-30-00.000-size.out", "worker-ab12.out", true, "worker-ab12.out"},
		{"worker-ab12-2026-12-07T03-30-00.000-size.out", "worker-ab12.err", false, "worker-ab12.out"},
		{"worker-ab12-2026-12-07T03-30-00.000-size.out", "worker-ab.out", false, "worker-ab12.out"},
		{"node.log", "node.log", false, "node.log"},
		{"node-2026-12-07.log", "node.log", false, "node-2026-12-07.log"},
		{"node-2026-12-07T03-30-00.000-bogus.log", "node.log", false, "node-2026-12-07T03-30-00.000-bogus.log"},
		{"gcs-2026-12-07T03-30-00.000-size", "gcs", true, "gcs"},
	}
	for _, tt := range tests {
		if _, got := backupKey(tt.name, tt.log); got != tt.backup {
			t.Errorf("backupKey(%q, %q) ok = %v, want %v", tt.name, tt.log, got, tt.backup)
		}
		if got := logOf(tt.name); got != tt.base {
			t.Errorf("logOf(%q) = %q, want %q", tt.name, got, tt.base)
		}
	}
}

func TestLimits(t *testing.T) {
	for _, tt := range []struct {
		in       Limits
		mib, bak int
	}{
		{Limits{}, 512, 5},
		{Limits{MaxFileSize: 3<<20 + 5, MaxFiles: 2}, 3, 2},
		{Limits{MaxFileSize: 10, MaxFiles: -1}, 1, 5},
	} {
		if mib, bak := tt.in.resolved(); mib != tt.mib || bak != tt.bak {
			t.Errorf("%+v: %d MiB, %d files; want %d, %d", tt.in, mib, bak, tt.mib, tt.bak)
		}
	}
}

// dirSize returns the total size of dir's files.
func dirSize(t *testing.T, dir string) (int64, int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n, len(ents)
}

func line(i int) string { return fmt.Sprintf("line %07d %s\n", i, strings.Repeat("x", 100)) }

// TestWriterRotates: 8 MiB of lines through a Writer of 1 MiB files and 2
// rotated copies: the directory keeps 3 files of at most 1 MiB, Files
// lists them oldest first, and Read returns the last lines, across
// files, in order.
func TestWriterRotates(t *testing.T) {
	leaktest.Goroutines(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "worker-1.out")
	w := Open(path, Limits{MaxFileSize: 1 << 20, MaxFiles: 2})
	if _, err := w.Write(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("an empty write did not create the file: %v", err)
	}
	var all bytes.Buffer
	total := 0
	for i := 0; all.Len() < 8<<20; i++ {
		all.WriteString(line(i))
		total = i + 1
	}
	for b := all.Bytes(); len(b) > 0; {
		k := min(len(b), 10000) // writes not aligned on lines
		if _, err := w.Write(b[:k]); err != nil {
			t.Fatal(err)
		}
		b = b[k:]
	}
	waitfor.Cond(t, time.Minute, "old files removed", func() bool {
		_, n := dirSize(t, dir)
		return n <= 3
	})
	if size, n := dirSize(t, dir); size > 3<<20 || n != 3 {
		t.Errorf("%d files of %d bytes, want 3 of at most 3 MiB", n, size)
	}
	files, err := Files(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 || files[2] != path {
		t.Fatalf("Files = %q", files)
	}
	var kept bytes.Buffer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(f); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode())
		}
		kept.Write(b)
	}
	if !bytes.HasSuffix(all.Bytes(), kept.Bytes()) {
		t.Fatal("the files, oldest first, are not the end of what was written")
	}
	// The last lines span the current file and the rotated one before it.
	cur, _ := os.ReadFile(path)
	n := int64(bytes.Count(cur, []byte("\n")) + 100)
	var got bytes.Buffer
	if err := Read(context.Background(), path, ReadOptions{Tail: n}, func(b []byte) error { got.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := total - int(n); i < total; i++ {
		want.WriteString(line(i))
	}
	if got.String() != want.String() {
		t.Errorf("tail %d: got %d bytes starting %q, want %d bytes starting %q", n, got.Len(), got.String()[:40], want.Len(), want.String()[:40])
	}
	// Everything kept, without a tail.
	got.Reset()
	if err := Read(context.Background(), path, ReadOptions{}, func(b []byte) error { got.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), kept.Bytes()) {
		t.Errorf("read %d bytes, want the %d kept", got.Len(), kept.Len())
	}
	// A rotated copy read by its name is read alone.
	got.Reset()
	if err := Read(context.Background(), files[0], ReadOptions{}, func(b []byte) error { got.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(files[0]); !bytes.Equal(got.Bytes(), b) {
		t.Error("reading a rotated copy by name did not return it alone")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Read(context.Background(), filepath.Join(dir, "none.log"), ReadOptions{}, func([]byte) error { return nil }); !os.IsNotExist(err) {
		t.Errorf("reading a missing log: %v, want not exist", err)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReadFollowsRotation: a followed log goes on across rotations, with
// every line once, in order.
func TestReadFollowsRotation(t *testing.T) {
	leaktest.Goroutines(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "node.log")
	w := Open(path, Limits{MaxFileSize: 1 << 20, MaxFiles: 3})
	defer w.Close()
	if _, err := w.Write([]byte(line(0))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- Read(ctx, path, ReadOptions{Follow: true, Poll: time.Millisecond}, func(b []byte) error { _, err := got.Write(b); return err })
	}()
	waitfor.Cond(t, time.Minute, "the first line read", func() bool { return got.String() == line(0) })
	// About 2.5 MiB in small steps: two rotations while following. Each
	// step waits for the reader, so it never falls more than a step
	// behind (the files it needs are still there).
	var want strings.Builder
	want.WriteString(line(0))
	for i := 1; want.Len() < 5<<19; {
		var step strings.Builder
		for ; step.Len() < 64<<10; i++ {
			step.WriteString(line(i))
		}
		if _, err := w.Write([]byte(step.String())); err != nil {
			t.Fatal(err)
		}
		want.WriteString(step.String())
		waitfor.Cond(t, time.Minute, "the step read", func() bool { return len(got.String()) == want.Len() })
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("followed %d bytes, want %d, in order", len(got.String()), want.Len())
	}
	if files, _ := Files(path); len(files) < 3 {
		t.Errorf("%d files: the log did not rotate twice", len(files))
	}
}

// TestWriterRotatesFast: 64 writes of a whole file each rotate 63 times
// as fast as the disk goes, many within one millisecond; after each, the
// directory keeps only MaxFiles rotated copies besides the log, and Files
// lists them in the order they were written. Before, rotated names
// carried milliseconds and timberjack keeps the copies of the MaxFiles
// newest distinct times: copies rotated within one millisecond counted
// once and stayed.
func TestWriterRotatesFast(t *testing.T) {
	leaktest.Goroutines(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "fast.log")
	w := Open(path, Limits{MaxFileSize: 1 << 20, MaxFiles: 2})
	t.Cleanup(func() { _ = w.Close() }) // also when the test fails
	chunk := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 1<<20) }
	for i := range 64 {
		if _, err := w.Write(chunk(i)); err != nil {
			t.Fatal(err)
		}
		// After every rotation: the last two may have come within one
		// millisecond.
		waitfor.Cond(t, waitfor.Generous, fmt.Sprintf("rotated copies past MaxFiles removed after write %d", i+1), func() bool {
			_, n := dirSize(t, dir)
			return n <= 3
		})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := Files(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("Files = %q, want 3", files)
	}
	for k, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if want := chunk(61 + k); !bytes.Equal(b, want) {
			t.Errorf("file %d of 3 (%s) holds %d bytes of %q, want chunk %d", k+1, filepath.Base(f), len(b), b[:1], 61+k)
		}
	}
}
