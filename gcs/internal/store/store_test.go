package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/redistest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// backends opens each backend for a test.
var backends = []struct {
	name string
	open func(t *testing.T) Store
}{
	{"memory", func(t *testing.T) Store { return NewMemory() }},
	{"bolt", func(t *testing.T) Store {
		b, err := OpenBolt(filepath.Join(t.TempDir(), "gcs.db"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
	{"redis", func(t *testing.T) Store {
		srv := redistest.Start(t)
		r, err := OpenRedis(ctxT(t), RedisOptions{Address: srv.Address, Password: srv.Password})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}},
	{"redis over TLS", func(t *testing.T) Store {
		srv := redistest.Start(t, redistest.WithTLS(redistest.ClientCertRequired))
		r, err := OpenRedis(ctxT(t), RedisOptions{Address: srv.Address, Password: srv.Password, TLS: clientTLS(srv)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}},
}

// TestConformance runs the same checks against every backend.
func TestConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t)
			defer s.Close()
			ctx := ctxT(t)
			if _, err := s.Get(ctx, "nodes", "a"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get of a missing key = %v, want ErrNotFound", err)
			}
			if got, err := s.GetAll(ctx, "nodes"); err != nil || len(got) != 0 {
				t.Fatalf("GetAll of an empty table = %v, %v", got, err)
			}
			must(t, s.Put(ctx, "nodes", map[string][]byte{"a": []byte("1"), "b": {}, "c": []byte("3")}))
			must(t, s.Put(ctx, "jobs", map[string][]byte{"a": []byte("job")}))
			must(t, s.Put(ctx, "nodes", map[string][]byte{"a": []byte("one")}))
			if v, err := s.Get(ctx, "nodes", "a"); err != nil || string(v) != "one" {
				t.Fatalf("Get after overwrite = %q, %v", v, err)
			}
			must(t, s.Delete(ctx, "nodes", "c", "missing"))
			all, err := s.GetAll(ctx, "nodes")
			must(t, err)
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
			must(t, s.Apply(ctx, []Write{
				{Table: "nodes", Key: "a", Value: []byte("A")},
				{Table: "jobs", Key: "j2", Value: []byte("job2")},
				{Table: "nodes", Key: "b", Delete: true},
			}))
			if v, _ := s.Get(ctx, "nodes", "a"); string(v) != "A" {
				t.Fatalf("after Apply nodes/a = %q", v)
			}
			if _, err := s.Get(ctx, "nodes", "b"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `key "b"`) {
				t.Fatalf("after Apply's delete Get = %v; want ErrNotFound naming the key", err)
			}
			if v, _ := s.Get(ctx, "jobs", "j2"); string(v) != "job2" {
				t.Fatalf("after Apply jobs/j2 = %q", v)
			}
			if err := s.Apply(ctx, []Write{{Key: "x"}}); err == nil {
				t.Fatal("Apply of a change without a table succeeded")
			}
			must(t, s.Health(ctx))
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			if err := s.Put(cancelled, "kv", map[string][]byte{"late": nil}); err == nil {
				t.Error("Put with a cancelled context succeeded")
			}
			must(t, s.Close())
			if err := s.Put(ctx, "kv", map[string][]byte{"x": nil}); !errors.Is(err, ErrClosed) {
				t.Fatalf("Put after Close = %v, want ErrClosed", err)
			}
			if strings.Contains(s.Describe(), "pw") {
				t.Fatalf("Describe shows a password: %q", s.Describe())
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestBoltSurvivesReopen: what was acknowledged is there after the file is
// opened again, and a second opener of a held file gets an error naming it.
func TestBoltSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "gcs.db")
	b, err := OpenBolt(path)
	must(t, err)
	must(t, b.Put(ctxT(t), "actors", map[string][]byte{"x": []byte("state")}))
	_, err = OpenBolt(path)
	var oe *OpenError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "lock") {
		t.Fatalf("second open = %v; want an OpenError naming %s and its lock", err, path)
	}
	must(t, b.Close())
	b, err = OpenBolt(path)
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
	_, err := OpenBolt(path)
	var oe *OpenError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), path) {
		t.Fatalf("OpenBolt of garbage = %v; want an OpenError naming the path", err)
	}
}

// TestRedisSurvivesRestart: a write Redis acknowledged is there after
// the server is killed and restarted, and the client works again.
func TestRedisSurvivesRestart(t *testing.T) {
	srv := redistest.Start(t)
	r, err := OpenRedis(ctxT(t), RedisOptions{Address: srv.Address, Password: srv.Password, Prefix: "c1"})
	must(t, err)
	defer r.Close()
	must(t, r.Put(ctxT(t), "nodes", map[string][]byte{"n": []byte("alive")}))
	srv.Kill()
	if err := r.Health(ctxT(t)); err == nil {
		t.Fatal("Health of a killed server succeeded")
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	var v []byte
	for {
		if v, err = r.Get(ctxT(t), "nodes", "n"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	if err != nil || string(v) != "alive" {
		t.Fatalf("after a Redis restart Get = %q, %v", v, err)
	}
	// Another prefix is another cluster's data.
	other, err := OpenRedis(ctxT(t), RedisOptions{Address: srv.Address, Password: srv.Password, Prefix: "c2"})
	must(t, err)
	defer other.Close()
	if _, err := other.Get(ctxT(t), "nodes", "n"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another prefix sees the data: %v", err)
	}
}

// TestRedisOpenErrors: an unreachable server and a wrong password are
// errors naming the address, never the password.
func TestRedisOpenErrors(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct{ name, addr, pw string }{
		{"wrong password", srv.Address, "secret-wrong"},
		{"nothing listening", closedPort(t), "secret-x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenRedis(ctx, RedisOptions{Address: tc.addr, Password: tc.pw})
			var oe *OpenError
			if !errors.As(err, &oe) || !strings.Contains(err.Error(), tc.addr) {
				t.Fatalf("OpenRedis = %v; want an OpenError naming %s", err, tc.addr)
			}
			if strings.Contains(err.Error(), tc.pw) {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }

// closedPort is a loopback address nothing listens on: a port that was
// just free.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
