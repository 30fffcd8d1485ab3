package logfiles

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
