package redisstore

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/gcs/internal/store"
	"github.com/goray-dev/goray/gcs/internal/store/storetest"
	"github.com/goray-dev/goray/internal/testservers/redistest"
)

func ctxT(t *testing.T) context.Context { return storetest.Ctx(t) }

func must(t *testing.T, err error) {
	t.Helper()
	storetest.Must(t, err)
}

// TestConformance runs store's conformance suite on Redis, with and
// without TLS, and through store.OpenRedis (this package registered).
func TestConformance(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		storetest.Conformance(t, func(t *testing.T) store.Store {
			srv := redistest.Start(t)
			r, err := store.OpenRedis(ctxT(t), store.RedisOptions{Address: srv.Address, Password: srv.Password})
			if err != nil {
				t.Fatal(err)
			}
			return r
		})
	})
	t.Run("redis over TLS", func(t *testing.T) {
		storetest.Conformance(t, func(t *testing.T) store.Store {
			srv := redistest.Start(t, redistest.WithTLS(redistest.ClientCertRequired))
			r, err := OpenRedis(ctxT(t), store.RedisOptions{Address: srv.Address, Password: srv.Password, TLS: clientTLS(srv)})
			if err != nil {
				t.Fatal(err)
			}
			return r
		})
	})
}

// TestRedisSurvivesRestart: a write Redis acknowledged is there after
// the server is killed and restarted, and the client works again.
func TestRedisSurvivesRestart(t *testing.T) {
	srv := redistest.Start(t)
	r, err := OpenRedis(ctxT(t), store.RedisOptions{Address: srv.Address, Password: srv.Password, Prefix: "c1"})
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
	other, err := OpenRedis(ctxT(t), store.RedisOptions{Address: srv.Address, Password: srv.Password, Prefix: "c2"})
	must(t, err)
	defer other.Close()
	if _, err := other.Get(ctxT(t), "nodes", "n"); !errors.Is(err, store.ErrNotFound) {
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
			_, err := OpenRedis(ctx, store.RedisOptions{Address: tc.addr, Password: tc.pw})
			var oe *store.OpenError
			if !errors.As(err, &oe) || !strings.Contains(err.Error(), tc.addr) {
				t.Fatalf("OpenRedis = %v; want an store.OpenError naming %s", err, tc.addr)
			}
			if strings.Contains(err.Error(), tc.pw) {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

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

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
