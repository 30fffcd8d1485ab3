package logfiles

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenConfined: only plain names of regular files in the directory
// open; every way out (.., absolute paths, separators, symbolic links in
// or out) is refused with a typed error.
func TestOpenConfined(t *testing.T) {
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(logs, "node.log"), "node\n")
	write(filepath.Join(root, "secret"), "secret\n")
	for name, target := range map[string]string{"out-link": "../secret", "abs-link": filepath.Join(root, "secret"), "in-link": "node.log"} {
		if err := os.Symlink(target, filepath.Join(logs, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(logs, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(logs, "sub", "x.log"), "x\n")
	if err := syscall.Mkfifo(filepath.Join(logs, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := Dir(logs)
	for _, c := range []struct {
		name string
		want error // nil: opens
	}{
		{"node.log", nil},
		{"", ErrBadName},
		{".", ErrBadName},
		{"..", ErrBadName},
		{"../secret", ErrBadName},
		{"sub/../../secret", ErrBadName},
		{"sub/x.log", ErrBadName},
		{filepath.Join(root, "secret"), ErrBadName},
		{"/etc/passwd", ErrBadName},
		{"a\x00b", ErrBadName},
		{strings.Repeat("x", 300), ErrBadName},
		{"out-link", ErrNotLog},
		{"abs-link", ErrNotLog},
		{"in-link", ErrNotLog},
		{"sub", ErrNotLog},
		{"fifo", ErrNotLog},
		{"missing.log", os.ErrNotExist},
	} {
		f, err := d.Open(c.name)
		if f != nil {
			f.Close()
		}
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("Open(%q) = %v, want %v", c.name, err, c.want)
		}
	}
	list, err := d.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "node.log" || list[0].Size != 5 {
		t.Errorf("List = %+v, want node.log alone (links, directories and fifos are not logs)", list)
	}
}

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

// TestStreamFollow: Stream sends the file in bounded chunks, then what is
// appended, until its context ends.
func TestStreamFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.log")
	big := bytes.Repeat([]byte("y"), 3*ChunkSize+5)
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Dir(filepath.Dir(path)).Open("w.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan []byte, 100)
	done := make(chan error, 1)
	go func() {
		done <- Stream(ctx, f, 0, true, func(b []byte) error {
			if len(b) > ChunkSize {
				t.Errorf("chunk of %d bytes", len(b))
			}
			got <- append([]byte(nil), b...)
			return nil
		})
	}()
	var all []byte
	deadline := time.After(10 * time.Second)
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
			t.Errorf("Stream after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stream did not end with its context")
	}
}
