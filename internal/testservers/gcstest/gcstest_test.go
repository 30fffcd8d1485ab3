package gcstest_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/gcstest"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/plugin"
)

// TestStart checks that Start serves a working GCS on loopback and that the
// test's cleanup stops it.
func TestStart(t *testing.T) {
	var addr string
	t.Run("serve", func(t *testing.T) {
		addr = gcstest.Start(t)
		if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
			t.Fatalf("address %q (%v), want one on 127.0.0.1", addr, err)
		}
		kv, closeKV, err := plugin.DialKV(addr, "gcstest")
		if err != nil {
			t.Fatal(err)
		}
		defer closeKV()
		ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
		defer cancel()
		if err := kv.Put(ctx, "k", []byte("v")); err != nil {
			t.Fatalf("KV Put: %v", err)
		}
		if v, err := kv.Get(ctx, "k"); err != nil || string(v) != "v" {
			t.Fatalf("KV Get: %q, %v; want \"v\"", v, err)
		}
	})
	if addr == "" {
		t.FailNow()
	}
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after the test that started it ended", addr)
	}
}
