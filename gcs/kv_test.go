package gcs

import (
	"slices"
	"testing"

	"github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/codes"
)

func TestKV(t *testing.T) {
	_, c := startServer(t, Options{})
	ctx := ctxT(t)

	put := func(ns, key, val string, overwrite bool) bool {
		t.Helper()
		r, err := c.KVPut(ctx, &gorayv1.KVPutRequest{Ns: ns, Key: key, Value: []byte(val), Overwrite: overwrite})
		mustOK(t, err)
		return r.GetAdded()
	}
	get := func(ns, key string) (string, bool) {
		t.Helper()
		r, err := c.KVGet(ctx, &gorayv1.KVGetRequest{Ns: ns, Key: key})
		mustOK(t, err)
		return string(r.GetValue()), r.GetFound()
	}
	keys := func(ns, prefix string) []string {
		t.Helper()
		r, err := c.KVKeys(ctx, &gorayv1.KVKeysRequest{Ns: ns, Prefix: prefix})
		mustOK(t, err)
		return r.GetKeys()
	}
	del := func(ns, key string, prefix bool) int64 {
		t.Helper()
		r, err := c.KVDel(ctx, &gorayv1.KVDelRequest{Ns: ns, Key: key, ByPrefix: prefix})
		mustOK(t, err)
		return r.GetDeleted()
	}

	putTests := []struct {
		name      string
		ns, key   string
		val       string
		overwrite bool
		wantAdded bool
		wantVal   string
	}{
		{"new key", "fn", "a/1", "v1", false, true, "v1"},
		{"no overwrite keeps", "fn", "a/1", "v2", false, false, "v1"},
		{"overwrite replaces", "fn", "a/1", "v3", true, false, "v3"},
		{"overwrite of new key adds", "fn", "a/2", "x", true, true, "x"},
		{"other namespace is separate", "other", "a/1", "o", false, true, "o"},
		{"empty namespace", "", "a/1", "e", false, true, "e"},
		{"empty value", "fn", "b", "", false, true, ""},
	}
	for _, tc := range putTests {
		t.Run("put "+tc.name, func(t *testing.T) {
			if added := put(tc.ns, tc.key, tc.val, tc.overwrite); added != tc.wantAdded {
				t.Fatalf("added = %v, want %v", added, tc.wantAdded)
			}
			if v, ok := get(tc.ns, tc.key); !ok || v != tc.wantVal {
				t.Fatalf("get = %q, %v; want %q", v, ok, tc.wantVal)
			}
		})
	}
	if _, ok := get("fn", "missing"); ok {
		t.Fatal("missing key found")
	}
	put("fn", "a/10", "z", false)

	keyTests := []struct {
		ns, prefix string
		want       []string
	}{
		{"fn", "", []string{"a/1", "a/10", "a/2", "b"}},
		{"fn", "a/1", []string{"a/1", "a/10"}},
		{"fn", "zzz", []string{}},
		{"other", "", []string{"a/1"}},
		{"nope", "", []string{}},
	}
	for _, tc := range keyTests {
		if got := keys(tc.ns, tc.prefix); !slices.Equal(got, tc.want) {
			t.Fatalf("KVKeys(%q, %q) = %q, want %q", tc.ns, tc.prefix, got, tc.want)
		}
	}

	if n := del("fn", "a/1", false); n != 1 {
		t.Fatalf("del a/1 = %d, want 1", n)
	}
	if n := del("fn", "a/1", false); n != 0 {
		t.Fatalf("del a/1 again = %d, want 0", n)
	}
	if n := del("fn", "a/", true); n != 2 {
		t.Fatalf("del prefix a/ = %d, want 2 (a/10, a/2)", n)
	}
	if got := keys("fn", ""); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("keys after deletes = %q", got)
	}
	if v, ok := get("other", "a/1"); !ok || v != "o" {
		t.Fatal("delete leaked into another namespace")
	}
	if n := del("fn", "", true); n != 1 {
		t.Fatalf("del whole namespace = %d, want 1", n)
	}
	if added := put("fn", "b", "again", false); !added {
		t.Fatal("put after delete: added = false")
	}

	_, err := c.KVPut(ctx, &gorayv1.KVPutRequest{Ns: "fn"})
	wantCode(t, err, codes.InvalidArgument, "key")
	_, err = c.KVGet(ctx, &gorayv1.KVGetRequest{Ns: "fn"})
	wantCode(t, err, codes.InvalidArgument, "key")
	_, err = c.KVDel(ctx, &gorayv1.KVDelRequest{Ns: "fn"})
	wantCode(t, err, codes.InvalidArgument, "key")
}
