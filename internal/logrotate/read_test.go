package logrotate

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
)

func TestTailOffset(t *testing.T) {
	for _, c := range []struct {
		content string
		n       int64
		want    string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc\n", 3, "a\nb\nc\n"},
		{"a\nb\nc\n", 10, "a\nb\nc\n"},
		{"a\nb\nc", 1, "c"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\nc\n", 0, "a\nb\nc\n"},
		{"", 3, ""},
		{"\n\n", 1, "\n"},
	} {
		r := strings.NewReader(c.content)
		off, err := TailOffset(r, int64(len(c.content)), c.n)
		if err != nil || c.content[off:] != c.want {
			t.Errorf("TailOffset(%q, %d) = %d (%q), %v; want %q", c.content, c.n, off, c.content[off:], err, c.want)
		}
	}
	// A file longer than a chunk: the lines are found across chunks.
	var b strings.Builder
	for range 20000 {
		b.WriteString("0123456789\n")
	}
	s := b.String()
	off, err := TailOffset(strings.NewReader(s), int64(len(s)), 15000)
	if err != nil || int64(len(s))-off != 15000*11 {
		t.Errorf("TailOffset across chunks: %d, %v", off, err)
	}
}

// TestReadFollow: Read sends the file in bounded chunks, then what is
// appended, until its context ends.
func TestReadFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.log")
	big := bytes.Repeat([]byte("y"), 3*ChunkSize+5)
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan []byte, 100)
	done := make(chan error, 1)
	go func() {
		done <- Read(ctx, path, ReadOptions{Follow: true}, func(b []byte) error {
			if len(b) > ChunkSize {
				t.Errorf("chunk of %d bytes", len(b))
			}
			got <- append([]byte(nil), b...)
			return nil
		})
	}()
	var all []byte
	deadline := time.After(waitfor.Generous)
	for len(all) < len(big) {
		select {
		case b := <-got:
			all = append(all, b...)
		case <-deadline:
			t.Fatalf("got %d of %d bytes", len(all), len(big))
		}
	}
	app, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.WriteString("late\n"); err != nil {
		t.Fatal(err)
	}
	app.Close()
	select {
	case b := <-got:
		if string(b) != "late\n" {
			t.Errorf("appended %q, want late", b)
		}
	case <-deadline:
		t.Fatal("the appended line never came")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Read after cancel: %v", err)
		}
	case <-time.After(waitfor.Generous):
		t.Fatal("Read did not end with its context")
	}
}

// startFollow follows path with Read (files opened by open, polled every
// millisecond) until until is closed; got collects what it sends and done
// receives Read's result.
func startFollow(path string, open OpenFunc) (got *syncBuffer, until chan struct{}, done chan error) {
	got, until, done = &syncBuffer{}, make(chan struct{}), make(chan error, 1)
	go func() {
		done <- Read(context.Background(), path, ReadOptions{Follow: true, Open: open, Poll: time.Millisecond, Until: until},
			func(b []byte) error { _, err := got.Write(b); return err })
	}()
	return got, until, done
}

// rotatedName is the name of w.log's copy rotated in dir at second sec.
func rotatedName(dir string, sec int) string {
	return filepath.Join(dir, fmt.Sprintf("w-2026-12-07T00-00-%02d.000-size.log", sec))
}

// TestReadFollowGap: a follow that misses a rotated copy (removed before it
// read it) sends no half line on either side of the gap, and a line split
// by a rotation it saw whole comes out whole.
func TestReadFollowGap(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.log")
	backup := func(sec int) string { return rotatedName(dir, sec) }
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(name, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(path, "a1\na2\nhal")
	lost := backup(3)
	open := func(name string) (*os.File, error) {
		if name == lost {
			return nil, os.ErrNotExist // removed before the follow read it
		}
		return os.Open(name)
	}
	got, until, done := startFollow(path, open)
	waitfor.Cond(t, waitfor.Generous, "the first lines", func() bool { return got.String() == "a1\na2\n" })

	// A rotation the follow sees whole: the line "half-b1" is split
	// between the two files.
	if err := os.Rename(path, backup(1)); err != nil {
		t.Fatal(err)
	}
	write(path, "f-b1\nb2\n")
	waitfor.Cond(t, waitfor.Generous, "the line split by the rotation", func() bool { return got.String() == "a1\na2\nhalf-b1\nb2\n" })

	// Two rotations, the first copy lost: "c1" starts in the file the
	// follow has open and ends in the lost copy, and the next file starts
	// with the rest of a line whose start was lost.
	app, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.WriteString("c"); err != nil {
		t.Fatal(err)
	}
	app.Close()
	if err := os.Rename(path, backup(2)); err != nil {
		t.Fatal(err)
	}
	write(lost, "1\nc2\nc3")
	write(path, "-tail\nd1\nd2\npart")
	close(until)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := "a1\na2\nhalf-b1\nb2\nd1\nd2\npart"; got.String() != want {
		t.Errorf("followed %q, want %q", got.String(), want)
	}
}

// TestReadFollowGapEmptyNewFile: after a gap, the follow may open the new
// file before its writer wrote to it; the end of the line whose start was
// lost, written then, is still not sent as a line of its own. (The follow
// looked for the newline in the file once, when it opened it, and found
// none in the empty file: TestReadFollowGap failed so under load.)
func TestReadFollowGapEmptyNewFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.log")
	backup := func(sec int) string { return rotatedName(dir, sec) }
	if err := os.WriteFile(path, []byte("a1\nhal"), 0o600); err != nil {
		t.Fatal(err)
	}
	lost := backup(2)
	var opens atomic.Int32
	reopened := make(chan struct{})
	open := func(name string) (*os.File, error) {
		switch {
		case name == lost:
			return nil, os.ErrNotExist // removed before the follow read it
		case name == path && opens.Add(1) == 2:
			defer close(reopened)
		}
		return os.Open(name)
	}
	got, until, done := startFollow(path, open)
	waitfor.Cond(t, waitfor.Generous, "the first line", func() bool { return got.String() == "a1\n" })

	if err := os.Rename(path, backup(1)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lost, []byte("f-a2\nlost\nhal"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reopened:
	case <-time.After(waitfor.Generous):
		t.Fatal("the follow never opened the new file")
	}
	app, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.WriteString("f-tail\nd1\n"); err != nil {
		t.Fatal(err)
	}
	app.Close()
	waitfor.Cond(t, waitfor.Generous, "the line after the half", func() bool { return strings.Contains(got.String(), "d1\n") })
	close(until)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := "a1\nd1\n"; got.String() != want {
		t.Errorf("followed %q, want %q", got.String(), want)
	}
}
