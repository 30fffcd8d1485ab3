package workdir

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tree writes files (path → content; a trailing "/" makes a directory,
// "-> target" a link) under a new directory.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(p, "/"):
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(c, "-> "):
			if err := os.Symlink(strings.TrimPrefix(c, "-> "), full); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func pack(t *testing.T, root string, excludes []string, lim Limits) ([]byte, Packed) {
	t.Helper()
	var buf bytes.Buffer
	p, err := Pack(root, excludes, lim, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if p.Size != int64(buf.Len()) {
		t.Fatalf("Packed.Size %d, wrote %d", p.Size, buf.Len())
	}
	return buf.Bytes(), p
}

func TestPackExtractRoundTrip(t *testing.T) {
	root := tree(t, map[string]string{
		"main.cfg":        "x=1",
		"data/a.txt":      "alpha",
		"data/deep/b.txt": "beta",
		"empty/":          "",
		"link":            "-> data/a.txt",
		"logs/run.log":    "noise",
		"skip.log":        "noise",
	})
	if err := os.Chmod(filepath.Join(root, "main.cfg"), 0o750); err != nil {
		t.Fatal(err)
	}
	archive, p := pack(t, root, []string{"*.log", "logs"}, Limits{})
	if p.Files != 3 || p.Bytes != int64(len("x=1alphabeta")) {
		t.Errorf("packed %d files, %d bytes; want 3, 12", p.Files, p.Bytes)
	}
	dest := filepath.Join(t.TempDir(), "wd")
	if err := Extract(bytes.NewReader(archive), "test", dest, Limits{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"main.cfg": "x=1", "data/a.txt": "alpha", "data/deep/b.txt": "beta", "link": "alpha"} {
		got, err := os.ReadFile(filepath.Join(dest, p))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", p, got, err, want)
		}
	}
	if st, err := os.Stat(filepath.Join(dest, "main.cfg")); err != nil || st.Mode().Perm() != 0o750 {
		t.Errorf("main.cfg mode: %v, %v; want 0750", st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Join(dest, "empty")); err != nil || !st.IsDir() {
		t.Errorf("empty directory: %v", err)
	}
	for _, gone := range []string{"skip.log", "logs"} {
		if _, err := os.Lstat(filepath.Join(dest, gone)); !os.IsNotExist(err) {
			t.Errorf("%s was excluded but is there: %v", gone, err)
		}
	}
	// A second extraction into the same place keeps the first (same sha,
	// same content) and leaves no temporary directory.
	if err := Extract(bytes.NewReader(archive), "test", dest, Limits{}); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dest), ".extract-*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestPackIsDeterministic(t *testing.T) {
	files := map[string]string{"a": "1", "b/c": "2", "b/d": "3"}
	one, p1 := pack(t, tree(t, files), nil, Limits{})
	root := tree(t, files)
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(root, "b", "c"), old, old); err != nil {
		t.Fatal(err)
	}
	two, p2 := pack(t, root, nil, Limits{})
	if p1.SHA256 != p2.SHA256 || !bytes.Equal(one, two) {
		t.Errorf("same tree, other times and directory: sha256 %s and %s", p1.SHA256, p2.SHA256)
	}
	if err := os.WriteFile(filepath.Join(root, "a"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, p3 := pack(t, root, nil, Limits{}); p3.SHA256 == p1.SHA256 {
		t.Error("a changed file kept the sha256")
	}
}

func TestPackRefuses(t *testing.T) {
	fifo := func(t *testing.T) string {
		root := tree(t, map[string]string{"a": "1"})
		if err := syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644); err != nil {
			t.Fatal(err)
		}
		return root
	}
	for _, tc := range []struct {
		name     string
		root     func(t *testing.T) string
		excludes []string
		lim      Limits
		want     string
	}{
		{"missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") }, nil, Limits{}, "no such file or directory"},
		{"a file", func(t *testing.T) string { return filepath.Join(tree(t, map[string]string{"f": "x"}), "f") }, nil, Limits{}, "not a directory"},
		{"link out", func(t *testing.T) string { return tree(t, map[string]string{"l": "-> ../../etc/passwd"}) }, nil, Limits{}, "l: a symbolic link to ../../etc/passwd, outside the directory"},
		{"absolute link", func(t *testing.T) string { return tree(t, map[string]string{"l": "-> /etc"}) }, nil, Limits{}, "outside the directory"},
		{"fifo", fifo, nil, Limits{}, "pipe: a p---------, not a file"},
		{"bytes", func(t *testing.T) string { return tree(t, map[string]string{"a": "12345", "b": "67890"}) }, nil, Limits{MaxBytes: 8}, "more than 8 bytes (at b)"},
		{"entries", func(t *testing.T) string { return tree(t, map[string]string{"a": "", "b": "", "c": ""}) }, nil, Limits{MaxEntries: 2}, "more than 2 entries (at c)"},
		{"bad pattern", func(t *testing.T) string { return tree(t, map[string]string{"a": ""}) }, []string{"["}, Limits{}, `exclude pattern "["`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tc.root(t)
			_, err := Pack(root, tc.excludes, tc.lim, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Pack: %v; want an error with %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "working dir") {
				t.Errorf("error does not say it is the working dir: %v", err)
			}
		})
	}
	// Excluding the offending entry packs.
	root := tree(t, map[string]string{"l": "-> /etc", "a": "1"})
	if _, err := Pack(root, []string{"l"}, Limits{}, &bytes.Buffer{}); err != nil {
		t.Errorf("Pack excluding the link: %v", err)
	}
}

// entry is one entry of a hand-made archive.
type entry struct {
	name, link, body string
	typ              byte
	size             int64 // when not len(body)
}

func handArchive(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		size := int64(len(e.body))
		if e.size != 0 {
			size = e.size
		}
		if e.typ != tar.TypeReg {
			size = 0
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Size: size, Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func TestExtractRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		lim     Limits
		want    string
	}{
		{"dot dot", []entry{{name: "../evil", typ: tar.TypeReg, body: "x"}}, Limits{}, "not a clean path"},
		{"absolute", []entry{{name: "/tmp/evil", typ: tar.TypeReg, body: "x"}}, Limits{}, "not a clean path"},
		{"unclean", []entry{{name: "a/../../evil", typ: tar.TypeReg, body: "x"}}, Limits{}, "not a clean path"},
		{"link out", []entry{{name: "l", link: "../../outside", typ: tar.TypeSymlink}}, Limits{}, "outside the directory"},
		{"through a link", []entry{{name: "d", link: ".", typ: tar.TypeSymlink}, {name: "d/x", typ: tar.TypeReg, body: "x"}}, Limits{}, "inside a link"},
		{"dir over a link", []entry{{name: "d", link: ".", typ: tar.TypeSymlink}, {name: "d/", typ: tar.TypeDir}}, Limits{}, "inside a link"},
		{"device", []entry{{name: "dev", typ: tar.TypeChar}}, Limits{}, "not a file, directory or link"},
		{"hard link", []entry{{name: "h", link: "/etc/passwd", typ: tar.TypeLink}}, Limits{}, "not a file, directory or link"},
		{"twice", []entry{{name: "a", typ: tar.TypeReg, body: "1"}, {name: "a", typ: tar.TypeReg, body: "2"}}, Limits{}, "file exists"},
		{"bytes", []entry{{name: "a", typ: tar.TypeReg, body: "12345"}, {name: "b", typ: tar.TypeReg, body: "6789"}}, Limits{MaxBytes: 8}, "more than 8 bytes (at b)"},
		{"entries", []entry{{name: "a/", typ: tar.TypeDir}, {name: "b/", typ: tar.TypeDir}}, Limits{MaxEntries: 1}, "more than 1 entries (at b/)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dest := filepath.Join(parent, "wd")
			err := Extract(bytes.NewReader(handArchive(t, tc.entries)), "bad.tar.gz", dest, tc.lim)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Extract: %v; want an error with %q", err, tc.want)
			}
			left, _ := os.ReadDir(parent)
			if len(left) != 0 {
				t.Errorf("left behind after the error: %v", left)
			}
		})
	}
	// Not an archive at all.
	err := Extract(strings.NewReader("plain text"), "junk", filepath.Join(t.TempDir(), "wd"), Limits{})
	if err == nil || !strings.Contains(err.Error(), "working dir archive junk") {
		t.Errorf("Extract of junk: %v", err)
	}
	var tl *TooLargeError
	err = Extract(bytes.NewReader(handArchive(t, []entry{{name: "a", typ: tar.TypeReg, body: "123456789"}})), "big", filepath.Join(t.TempDir(), "wd"), Limits{MaxBytes: 4})
	if !errors.As(err, &tl) || tl.What != "bytes" {
		t.Errorf("Extract over MaxBytes: %v, want a *TooLargeError", err)
	}
}
