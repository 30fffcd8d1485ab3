package plugin

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/connlimit"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
)

// TestListenBoundsUnauthenticated: a connection to a Listen listener that
// never completes AuthenticateServer is closed at the (lowered) deadline;
// one that completes it is kept.
func TestListenBoundsUnauthenticated(t *testing.T) {
	leaktest.Goroutines(t)
	defer connlimit.SetDefaultDeadline(2 * time.Second)()
	creds, err := clusterCreds()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := Listen(ctx, "tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var served []net.Conn
	defer func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range served {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			served = append(served, c)
			mu.Unlock()
			wg.Go(func() { _, _ = AuthenticateServer(c) })
		}
	})

	good, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if _, err := creds.ClientConn(ctx, good); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	// The idle peer reads the server's hello, then says nothing.
	_ = idle.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.Copy(io.Discard, idle); err != nil {
		t.Fatalf("the idle connection was not closed: %v", err)
	}
	l := ln.(*connlimit.Listener)
	waitfor.Cond(t, time.Minute, "no unauthenticated connection held", func() bool { return l.Pending() == 0 })
	if l.Expired() != 1 {
		t.Fatalf("%d connections closed at the deadline, want 1 (the idle one)", l.Expired())
	}
}
