// Package workdir packs a job's working directory into one archive and
// unpacks it on every node, as Ray's runtime_env working_dir does.
//
// An archive is a gzip-compressed tar of the directory's regular files,
// directories and symbolic links that stay inside it, in path order, with
// times, owners and every mode bit but the permissions cleared, so the
// same tree always packs to the same bytes: nodes cache archives, and the
// directories unpacked from them, by the archive's sha256. Unpacking takes
// nothing it would not pack: no absolute or ".." names, no link leading
// out, no device or other special file, and no more than the limits.
package workdir

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Default limits of a working directory.
const (
	// DefaultMaxBytes bounds the content of a working directory's files
	// together: it travels to every node that runs the job's workers.
	DefaultMaxBytes = 100 << 20
	// DefaultMaxEntries bounds its files, directories and links together.
	DefaultMaxEntries = 100_000
)

// Limits bound what Pack takes and Extract writes. Zero fields take the
// defaults.
type Limits struct {
	// MaxBytes bounds the files' content together, in bytes.
	MaxBytes int64
	// MaxEntries bounds the files, directories and links together.
	MaxEntries int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	return l
}

// TooLargeError is a working directory over its limits.
type TooLargeError struct {
	// Dir is the directory (or archive) and At the entry at which the limit
	// was passed.
	Dir, At string
	// What was exceeded: "bytes" or "entries"; Limit is that limit.
	What  string
	Limit int64
}

// Error names the directory, the entry and the limit.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("working dir %s: more than %d %s (at %s); leave out what the workers do not need (excludes) or ship large data as objects", e.Dir, e.Limit, e.What, e.At)
}

// EntryError is an entry of a working directory (or archive) that cannot
// be packed or unpacked.
type EntryError struct {
	// Dir is the directory or archive, Path the entry in it.
	Dir, Path string
	// Problem says what is wrong with it.
	Problem string
}

// Error names the entry and the problem.
func (e *EntryError) Error() string {
	return fmt.Sprintf("working dir %s: %s: %s", e.Dir, e.Path, e.Problem)
}

// Packed describes an archive Pack wrote.
type Packed struct {
	// SHA256 is the archive's sha256 (hexadecimal); Size its bytes.
	SHA256 string
	Size   int64
	// Files and Bytes count the regular files and their content.
	Files int
	Bytes int64
}

// Pack writes the archive of the directory root to w, leaving out the
// entries that match one of excludes: a pattern of path.Match matched
// against an entry's path relative to root (with "/") and against its
// base name, so "*.log" leaves out every log file and "data/raw" one
// directory with all it holds.
func Pack(root string, excludes []string, lim Limits, w io.Writer) (Packed, error) {
	lim = lim.withDefaults()
	for _, p := range excludes {
		if _, err := path.Match(p, ""); err != nil {
			return Packed{}, fmt.Errorf("working dir %s: exclude pattern %q: %w", root, p, err)
		}
	}
	st, err := os.Stat(root)
	if err != nil {
		return Packed{}, fmt.Errorf("working dir: %w", err)
	}
	if !st.IsDir() {
		return Packed{}, fmt.Errorf("working dir %s: not a directory", root)
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(w, h)}
	zw, _ := gzip.NewWriterLevel(cw, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	var out Packed
	entries := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("working dir %s: %w", root, err)
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if excluded(rel, excludes) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		entries++
		if entries > lim.MaxEntries {
			return &TooLargeError{Dir: root, At: rel, What: "entries", Limit: int64(lim.MaxEntries)}
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("working dir %s: %w", root, err)
		}
		hdr := &tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch mode := info.Mode(); {
		case mode.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case mode.IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
			if out.Bytes+info.Size() > lim.MaxBytes {
				return &TooLargeError{Dir: root, At: rel, What: "bytes", Limit: lim.MaxBytes}
			}
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("working dir %s: %w", root, err)
			}
			if !linkInside(rel, target) {
				return &EntryError{Dir: root, Path: rel, Problem: fmt.Sprintf("a symbolic link to %s, outside the directory; copy what it points to into the directory", target)}
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		default:
			return &EntryError{Dir: root, Path: rel, Problem: fmt.Sprintf("a %s, not a file, directory or link", mode.Type())}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("working dir %s: %w", root, err)
		}
		defer f.Close()
		n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
		if err != nil {
			return fmt.Errorf("working dir %s: reading %s: %w", root, rel, err)
		}
		if n != hdr.Size {
			return &EntryError{Dir: root, Path: rel, Problem: "it shrank while it was packed"}
		}
		out.Files++
		out.Bytes += n
		return nil
	})
	if err != nil {
		return Packed{}, err
	}
	if err := tw.Close(); err != nil {
		return Packed{}, err
	}
	if err := zw.Close(); err != nil {
		return Packed{}, err
	}
	out.SHA256, out.Size = hex.EncodeToString(h.Sum(nil)), cw.n
	return out, nil
}

// PackFile packs root into a new file in dir (os.TempDir when ""),
// returning the file's path; the caller removes it.
func PackFile(root string, excludes []string, lim Limits, dir string) (string, Packed, error) {
	f, err := os.CreateTemp(dir, "goray-working-dir-*.tar.gz")
	if err != nil {
		return "", Packed{}, fmt.Errorf("working dir %s: %w", root, err)
	}
	p, err := Pack(root, excludes, lim, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", Packed{}, err
	}
	return f.Name(), p, nil
}

// excluded tells whether rel (or its base name) matches a pattern.
func excluded(rel string, excludes []string) bool {
	base := path.Base(rel)
	for _, p := range excludes {
		if ok, _ := path.Match(p, rel); ok {
			return true
		}
		if ok, _ := path.Match(p, base); ok {
			return true
		}
	}
	return false
}

// linkInside tells whether a link at rel to target stays inside the tree.
func linkInside(rel, target string) bool {
	if target == "" || path.IsAbs(target) || filepath.IsAbs(target) {
		return false
	}
	j := path.Join(path.Dir(rel), filepath.ToSlash(target))
	return j != ".." && !strings.HasPrefix(j, "../")
}

// countWriter counts what it writes.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Extract unpacks the archive r (named name in errors) into the directory
// dest, which must not exist: it is written as a temporary sibling and
// renamed into place, so dest is either whole or absent. Entries beyond
// the limits, names leaving dest, links leading out of it and special
// files are errors, and nothing is left behind.
func Extract(r io.Reader, name, dest string, lim Limits) error {
	lim = lim.withDefaults()
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, ".extract-*")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("working dir archive %s: %w", name, err)
	}
	tr := tar.NewReader(zr)
	var bytes int64
	entries := 0
	links := map[string]bool{} // the links written: nothing is written through one
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("working dir archive %s: %w", name, err)
		}
		entries++
		if entries > lim.MaxEntries {
			return &TooLargeError{Dir: name, At: hdr.Name, What: "entries", Limit: int64(lim.MaxEntries)}
		}
		rel := strings.TrimSuffix(hdr.Name, "/")
		if rel == "" || path.IsAbs(rel) || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
			return &EntryError{Dir: name, Path: hdr.Name, Problem: "not a clean path inside the directory"}
		}
		if throughLink(rel, links) {
			return &EntryError{Dir: name, Path: rel, Problem: "inside a link of the archive, or listed twice"}
		}
		target := filepath.Join(tmp, filepath.FromSlash(rel))
		perm := fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
			// Directories keep their permissions, but the runtime can
			// always write and remove what is in them.
			if err := os.Chmod(target, perm|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			bytes += hdr.Size
			if hdr.Size < 0 || bytes > lim.MaxBytes {
				return &TooLargeError{Dir: name, At: rel, What: "bytes", Limit: lim.MaxBytes}
			}
			if err := writeFile(target, perm, tr, hdr.Size); err != nil {
				return fmt.Errorf("working dir archive %s: %s: %w", name, rel, err)
			}
		case tar.TypeSymlink:
			if !linkInside(rel, hdr.Linkname) {
				return &EntryError{Dir: name, Path: rel, Problem: "a link to " + hdr.Linkname + ", outside the directory"}
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return err
			}
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return fmt.Errorf("working dir archive %s: %w", name, err)
			}
			links[rel] = true
		default:
			return &EntryError{Dir: name, Path: rel, Problem: fmt.Sprintf("an entry of tar type %q, not a file, directory or link", hdr.Typeflag)}
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, dest); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			return nil // another extraction won; same content
		}
		return err
	}
	ok = true
	return nil
}

// writeFile writes size bytes of r to a new file at path; parents are made
// as needed (an archive lists a directory before its entries, but need
// not list it at all).
func writeFile(p string, perm fs.FileMode, r io.Reader, size int64) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm|0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(r, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// throughLink tells whether rel, or a directory it is in, is one of links:
// writing there would follow a link the archive made (which may point
// anywhere once links chain).
func throughLink(rel string, links map[string]bool) bool {
	for p := rel; p != "." && p != "/" && p != ""; p = path.Dir(p) {
		if links[p] {
			return true
		}
	}
	return false
}
