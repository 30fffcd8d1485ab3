package storage_test

import (
	"errors"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/goray-dev/goray/sdk/storage"
)

// FuzzValidKey checks arbitrary strings as keys and List prefixes. Beyond
// not crashing: a key ValidKey accepts is a clean relative path of at most
// MaxKeyLen bytes of UTF-8 without control characters, with no "..", "."
// or empty element and no leading or trailing '/', so a backend that maps
// it below a directory stays inside it; every valid key is a valid prefix;
// a prefix ValidPrefix accepts has no leading '/' and no ".." element; and
// refusals match ErrBadKey.
//
// The seed corpus is in testdata/fuzz/FuzzValidKey.
func FuzzValidKey(f *testing.F) {
	for _, k := range []string{"a/b/c.spill", "session_x/node-ab12/000017.spill", "../etc/passwd", "a/../../b", "/abs", "a//b", "a/./b", "ünï/ключ", "a\x00b", "a/"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if err := storage.ValidKey(key); err != nil {
			if !errors.Is(err, storage.ErrBadKey) {
				t.Fatalf("ValidKey(%q) = %v, want ErrBadKey", key, err)
			}
		} else {
			if key == "" || len(key) > storage.MaxKeyLen || !utf8.ValidString(key) {
				t.Fatalf("ValidKey accepted %q (%d bytes)", key, len(key))
			}
			if strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("ValidKey accepted %q with a control character", key)
			}
			if strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
				t.Fatalf("ValidKey accepted %q with a leading or trailing '/'", key)
			}
			for _, e := range strings.Split(key, "/") {
				if e == "" || e == "." || e == ".." {
					t.Fatalf("ValidKey accepted %q with the element %q", key, e)
				}
			}
			if path.Clean(key) != key || !filepath.IsLocal(key) {
				t.Fatalf("ValidKey accepted %q, which is not a clean local path", key)
			}
			if j := filepath.Join("/spill", key); !strings.HasPrefix(j, "/spill/") {
				t.Fatalf("ValidKey accepted %q, which escapes its directory as %q", key, j)
			}
			if err := storage.ValidPrefix(key); err != nil {
				t.Fatalf("valid key %q is not a valid prefix: %v", key, err)
			}
		}
		if err := storage.ValidPrefix(key); err != nil {
			if !errors.Is(err, storage.ErrBadKey) {
				t.Fatalf("ValidPrefix(%q) = %v, want ErrBadKey", key, err)
			}
			return
		}
		if strings.HasPrefix(key, "/") || !utf8.ValidString(key) || len(key) > storage.MaxKeyLen {
			t.Fatalf("ValidPrefix accepted %q", key)
		}
		for _, e := range strings.Split(key, "/") {
			if e == ".." {
				t.Fatalf("ValidPrefix accepted %q with a '..' element", key)
			}
		}
	})
}
