package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/gcs/internal/store/storetest"
)

func ctxT(t *testing.T) context.Context { return storetest.Ctx(t) }

// backends opens each backend for a test.
var backends = []struct {
	name string
	open func(t *testing.T) store.Store
}{
	{"memory", func(t *testing.T) store.Store { return store.NewMemory() }},
	{"bolt", func(t *testing.T) store.Store {
		b, err := store.OpenBolt(filepath.Join(t.TempDir(), "gcs.db"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
}

// TestConformance runs the same checks against every backend of this
// package (gcs/redisstore runs them on Redis).
func TestConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { storetest.Conformance(t, b.open) })
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	storetest.Must(t, err)
}

// TestBoltSurvivesReopen: what was acknowledged is there after the file is
// opened again, and a second opener of a held file gets an error naming it.
func TestBoltSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "gcs.db")
	b, err := store.OpenBolt(path)
	must(t, err)
	must(t, b.Put(ctxT(t), "actors", map[string][]byte{"x": []byte("state")}))
	_, err = store.OpenBolt(path)
	var oe *store.OpenError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "lock") {
		t.Fatalf("second open = %v; want an store.OpenError naming %s and its lock", err, path)
	}
	must(t, b.Close())
	b, err = store.OpenBolt(path)
	must(t, err)
	defer b.Close()
	if v, err := b.Get(ctxT(t), "actors", "x"); err != nil || string(v) != "state" {
		t.Fatalf("after reopen Get = %q, %v", v, err)
	}
}

// TestBoltRefusesGarbage: a file that is not a bbolt store is an error
// naming it.
func TestBoltRefusesGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gcs.db")
	must(t, writeFile(path, strings.Repeat("not a database ", 500)))
	_, err := store.OpenBolt(path)
	var oe *store.OpenError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), path) {
		t.Fatalf("OpenBolt of garbage = %v; want an store.OpenError naming the path", err)
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }

// TestRedisNotLinked: a program that does not import gcs/redisstore (this
// test's) opens no Redis store: an *OpenError naming the address wraps
// ErrNoRedis.
func TestRedisNotLinked(t *testing.T) {
	_, err := store.OpenRedis(ctxT(t), store.RedisOptions{Address: "10.0.0.5:6379"})
	var oe *store.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, store.ErrNoRedis) || !strings.Contains(err.Error(), "10.0.0.5:6379") || !strings.Contains(err.Error(), "goray start") {
		t.Fatalf("OpenRedis without the backend = %v; want an OpenError wrapping ErrNoRedis", err)
	}
}
