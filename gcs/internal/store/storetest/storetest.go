// Package storetest is the conformance suite every GCS storage backend
// (store.Store) passes: package store runs it on memory and bolt,
// gcs/redisstore on Redis, with and without TLS.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/gcs/internal/store"
)

// Ctx is a context for one test's store calls, ended with the test.
func Ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Must fails the test on err.
func Must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Conformance runs the checks every backend passes on a store open
// returns: reads of missing keys and tables, overwrites, deletes, empty
// values, separate tables, concurrent writers, batches across tables,
// health, a cancelled context, Close, and a description without secrets.
func Conformance(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	s := open(t)
	defer s.Close()
	ctx := Ctx(t)
	if _, err := s.Get(ctx, "nodes", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a missing key = %v, want store.ErrNotFound", err)
	}
	if got, err := s.GetAll(ctx, "nodes"); err != nil || len(got) != 0 {
		t.Fatalf("GetAll of an empty table = %v, %v", got, err)
	}
	Must(t, s.Put(ctx, "nodes", map[string][]byte{"a": []byte("1"), "b": {}, "c": []byte("3")}))
	Must(t, s.Put(ctx, "jobs", map[string][]byte{"a": []byte("job")}))
	Must(t, s.Put(ctx, "nodes", map[string][]byte{"a": []byte("one")}))
	if v, err := s.Get(ctx, "nodes", "a"); err != nil || string(v) != "one" {
		t.Fatalf("Get after overwrite = %q, %v", v, err)
	}
	Must(t, s.Delete(ctx, "nodes", "c", "missing"))
	all, err := s.GetAll(ctx, "nodes")
	Must(t, err)
	if _, hasB := all["b"]; len(all) != 2 || string(all["a"]) != "one" || !hasB {
		t.Fatalf("GetAll = %q, want a and the empty b", all)
	}
	if v, err := s.Get(ctx, "nodes", "b"); err != nil || len(v) != 0 {
		t.Fatalf("Get of an empty value = %q, %v", v, err)
	}
	if v, err := s.Get(ctx, "jobs", "a"); err != nil || string(v) != "job" {
		t.Fatalf("tables are not separate: %q, %v", v, err)
	}
	if err := s.Put(ctx, "", map[string][]byte{"k": nil}); err == nil {
		t.Fatal("Put into an empty table name succeeded")
	}
	// Concurrent writers all land.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Put(ctx, "kv", map[string][]byte{fmt.Sprint(i): []byte("x")}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if all, _ := s.GetAll(ctx, "kv"); len(all) != 20 {
		t.Fatalf("%d of 20 concurrent puts landed", len(all))
	}
	// A batch across tables, with a delete, lands whole.
	Must(t, s.Apply(ctx, []store.Write{
		{Table: "nodes", Key: "a", Value: []byte("A")},
		{Table: "jobs", Key: "j2", Value: []byte("job2")},
		{Table: "nodes", Key: "b", Delete: true},
	}))
	if v, _ := s.Get(ctx, "nodes", "a"); string(v) != "A" {
		t.Fatalf("after Apply nodes/a = %q", v)
	}
	if _, err := s.Get(ctx, "nodes", "b"); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `key "b"`) {
		t.Fatalf("after Apply's delete Get = %v; want store.ErrNotFound naming the key", err)
	}
	if v, _ := s.Get(ctx, "jobs", "j2"); string(v) != "job2" {
		t.Fatalf("after Apply jobs/j2 = %q", v)
	}
	if err := s.Apply(ctx, []store.Write{{Key: "x"}}); err == nil {
		t.Fatal("Apply of a change without a table succeeded")
	}
	Must(t, s.Health(ctx))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Put(cancelled, "kv", map[string][]byte{"late": nil}); err == nil {
		t.Error("Put with a cancelled context succeeded")
	}
	Must(t, s.Close())
	if err := s.Put(ctx, "kv", map[string][]byte{"x": nil}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Put after Close = %v, want store.ErrClosed", err)
	}
	if strings.Contains(s.Describe(), "pw") {
		t.Fatalf("Describe shows a password: %q", s.Describe())
	}
}
