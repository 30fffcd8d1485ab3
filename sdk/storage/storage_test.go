package storage_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/goray-dev/goray/sdk/storage"
)

func TestValidKey(t *testing.T) {
	good := []string{"a", "a/b", "session_2026-01-02_03-04-05_123/node-ab12/000017.spill", "x.y", "a/.hidden", "a..b/c", "ünï/ключ", "sp ace", strings.Repeat("k", storage.MaxKeyLen)}
	for _, k := range good {
		if err := storage.ValidKey(k); err != nil {
			t.Errorf("ValidKey(%q): %v", k, err)
		}
	}
	bad := map[string]string{
		"":                                       "empty",
		"/abs":                                   "starts with '/'",
		"a/":                                     "ends with '/'",
		"a//b":                                   "empty path element",
		"..":                                     "'..'",
		"a/../b":                                 "'..'",
		"./a":                                    "'.'",
		"a\x00b":                                 "NUL",
		"a\nb":                                   "control character",
		"\xff":                                   "UTF-8",
		strings.Repeat("k", storage.MaxKeyLen+1): "more than 1024",
	}
	for k, why := range bad {
		err := storage.ValidKey(k)
		if !errors.Is(err, storage.ErrBadKey) || !strings.Contains(err.Error(), why) {
			t.Errorf("ValidKey(%q) = %v, want ErrBadKey saying %q", k, err, why)
		}
		if k != "" && len(k) < 100 && err != nil && !strings.Contains(err.Error(), `"`) {
			t.Errorf("ValidKey(%q): %v does not quote the key", k, err)
		}
	}
}

func TestValidPrefix(t *testing.T) {
	for _, p := range []string{"", "a", "a/", "a/b/", "a/b", "a/.", "sess/node-"} {
		if err := storage.ValidPrefix(p); err != nil {
			t.Errorf("ValidPrefix(%q): %v", p, err)
		}
	}
	for _, p := range []string{"/", "/a", "..", "a/../", "a//", "a\x00"} {
		if err := storage.ValidPrefix(p); !errors.Is(err, storage.ErrBadKey) {
			t.Errorf("ValidPrefix(%q) = %v, want ErrBadKey", p, err)
		}
	}
}

func TestCheckRange(t *testing.T) {
	tests := []struct {
		off, length, size, want int64
		ok                      bool
	}{
		{0, storage.ToEnd, 10, 10, true},
		{3, storage.ToEnd, 10, 7, true},
		{10, storage.ToEnd, 10, 0, true},
		{10, 0, 10, 0, true},
		{0, 0, 0, 0, true},
		{2, 8, 10, 8, true},
		{2, 9, 10, 0, false},
		{11, 0, 10, 0, false},
		{11, storage.ToEnd, 10, 0, false},
		{-1, 1, 10, 0, false},
		{0, -2, 10, 0, false},
		{1 << 40, 1, 1<<40 + 1, 1, true},
	}
	for _, tc := range tests {
		n, err := storage.CheckRange(tc.off, tc.length, tc.size)
		if tc.ok && (err != nil || n != tc.want) {
			t.Errorf("CheckRange(%d, %d, %d) = %d, %v; want %d", tc.off, tc.length, tc.size, n, err, tc.want)
		}
		if !tc.ok && !errors.Is(err, storage.ErrInvalidRange) {
			t.Errorf("CheckRange(%d, %d, %d) = %d, %v; want ErrInvalidRange", tc.off, tc.length, tc.size, n, err)
		}
	}
}

func TestExactReader(t *testing.T) {
	data := []byte("0123456789")
	read := func(r io.Reader, size int64) ([]byte, error) {
		return io.ReadAll(storage.ExactReader(r, size))
	}
	if b, err := read(bytes.NewReader(data), 10); err != nil || !bytes.Equal(b, data) {
		t.Errorf("exact: %q %v", b, err)
	}
	if b, err := read(iotest.OneByteReader(bytes.NewReader(data)), 10); err != nil || !bytes.Equal(b, data) {
		t.Errorf("one byte at a time: %q %v", b, err)
	}
	if b, err := read(nil, 0); err != nil || len(b) != 0 {
		t.Errorf("nil body, size 0: %q %v", b, err)
	}
	for _, tc := range []struct {
		r    io.Reader
		size int64
		why  string
	}{
		{bytes.NewReader(data), 11, "ended after 10 of 11"},
		{bytes.NewReader(data), 9, "more than 9"},
		{bytes.NewReader(data), 0, "more than 0"},
		{nil, 1, "ended after 0 of 1"},
		{bytes.NewReader(data), -1, "negative"},
	} {
		_, err := read(tc.r, tc.size)
		if !errors.Is(err, storage.ErrSizeMismatch) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("size %d: %v, want ErrSizeMismatch saying %q", tc.size, err, tc.why)
		}
	}
	// A consumer that reads exactly size bytes never gets them all from a
	// body that is too long: the last read fails instead.
	buf := make([]byte, 9)
	if _, err := io.ReadFull(storage.ExactReader(bytes.NewReader(data), 9), buf); !errors.Is(err, storage.ErrSizeMismatch) {
		t.Errorf("ReadFull of 9 of a 10-byte body announced as 9: %v, want ErrSizeMismatch", err)
	}
	// The body's own errors pass through, also one right after the last
	// byte.
	boom := errors.New("boom")
	if _, err := read(iotest.ErrReader(boom), 3); !errors.Is(err, boom) {
		t.Errorf("failing body: %v", err)
	}
	if _, err := io.ReadFull(storage.ExactReader(io.MultiReader(bytes.NewReader(data), iotest.ErrReader(boom)), 10), make([]byte, 10)); !errors.Is(err, boom) {
		t.Errorf("body failing after its last byte: %v, want boom", err)
	}
}

func TestStorageError(t *testing.T) {
	err := storage.Errorf(storage.OpRead, "a/b", "%w: gone", storage.ErrNotFound)
	if err.Error() != `storage read of "a/b": object not found: gone` {
		t.Errorf("Error() = %q", err)
	}
	var se *storage.StorageError
	if !errors.As(err, &se) || se.Op != storage.OpRead || se.Key != "a/b" || !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("%v: not a StorageError for read of a/b matching ErrNotFound", err)
	}
	if got := (&storage.StorageError{Op: storage.OpList, Err: io.EOF}).Error(); got != "storage list: EOF" {
		t.Errorf("without a key: %q", got)
	}
}
