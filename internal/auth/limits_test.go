package auth

import (
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/connlimit"
	"github.com/goray-dev/goray/internal/connlimit/connlimittest"
	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
)

// startLimitedServer serves the echo service with creds' options on a
// loopback TCP listener wrapped by connlimit (with opts), as goray's
// servers are.
func startLimitedServer(t *testing.T, creds *Credentials, opts connlimit.Options) (*connlimit.Listener, string) {
	t.Helper()
	s := grpc.NewServer(creds.ServerOptions()...)
	s.RegisterService(&echoDesc, &echoServer{})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.Wrap(inner, opts)
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Serve(l) })
	t.Cleanup(func() {
		s.Stop()
		wg.Wait()
	})
	return l, inner.Addr().String()
}

// serverCloses waits (a minute at most) until the server closes c.
func serverCloses(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server kept an unauthenticated connection open for a minute")
	}
}

// TestGRPCClosesUnauthenticated: a server built with ServerOptions on a
// connlimit listener closes, at the deadline, a connection that sent
// nothing and one whose calls were all refused; it keeps a connection
// whose call passed the token check (with TLS and without).
func TestGRPCClosesUnauthenticated(t *testing.T) {
	p := newPKI(t)
	const token = "limits-token"
	for _, tc := range []struct {
		name          string
		server, right *Credentials
		wrong         *Credentials
	}{
		{"plain", mustNew(t, token, nil), mustNew(t, token, nil), mustNew(t, "wrong", nil)},
		{"tls", mustNew(t, token, p.n1), mustNew(t, token, p.n2), mustNew(t, "wrong", p.n2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaktest.Goroutines(t)
			// Long enough for a loaded machine to send a call's
			// headers after connecting, short enough to wait for.
			const deadline = 2 * time.Second
			l, addr := startLimitedServer(t, tc.server, connlimit.Options{Deadline: deadline})
			ctx := callCtx(t)

			good := dial(t, addr, tc.right.DialOptions(addr)...)
			if got, err := unary(ctx, good, "hi"); err != nil || !strings.HasPrefix(got, "hi|") {
				t.Fatalf("authenticated call: %q, %v", got, err)
			}
			bad := dial(t, addr, tc.wrong.DialOptions(addr)...)
			if _, err := unary(ctx, bad, "hi"); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("call with a wrong token: %v, want Unauthenticated", err)
			}
			idle, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer idle.Close()
			serverCloses(t, idle)
			waitfor.Cond(t, time.Minute, "the refused client's connection closed", func() bool { return l.Expired() == 2 })
			if l.Pending() != 0 {
				t.Fatalf("%d unauthenticated connections still held", l.Pending())
			}
			// The authenticated connection outlived both deadlines: the
			// next call goes over it, with no new connection.
			if got, err := unary(ctx, good, "again"); err != nil || !strings.HasPrefix(got, "again|") {
				t.Fatalf("authenticated call after the deadline: %q, %v", got, err)
			}
			if l.Expired() != 2 {
				t.Fatalf("%d connections closed at the deadline, want 2 (the idle one and the refused client's)", l.Expired())
			}
		})
	}
}

// TestGRPCRefusesHugeHeaders: a call whose headers are far over
// MaxServerHeaderList is reset by the transport without the server
// holding them (its allocations stay a fraction of their size), and the
// server goes on serving; a real client is refused before sending them.
func TestGRPCRefusesHugeHeaders(t *testing.T) {
	leaktest.Goroutines(t)
	creds := mustNew(t, "headers-token", nil)
	_, addr := startLimitedServer(t, creds, connlimit.Options{})
	ctx := callCtx(t)

	const size = 8 << 20
	block := connlimittest.EncodeHeaders("/"+echoService+"/Unary", size)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, err := connlimittest.HugeHeaders(ctx, c, block)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if out != connlimittest.Reset {
		t.Fatalf("a call with %d bytes of headers was %s, want reset by the transport", size, out)
	}
	// The client's writes allocate little (the block is encoded
	// beforehand); a server that decoded the headers would allocate at
	// least their size.
	t.Logf("%d bytes allocated while refusing %d bytes of headers", after.TotalAlloc-before.TotalAlloc, size)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/4 {
		t.Fatalf("%d bytes allocated while refusing %d bytes of headers", alloc, size)
	}

	cc := dial(t, addr, creds.DialOptions(addr)...)
	big := metadata.AppendToOutgoingContext(ctx, "x-big", strings.Repeat("y", 2*MaxServerHeaderList))
	if _, err := unary(big, cc, "hi"); err == nil {
		t.Fatal("a real client sent a call with headers over the server's limit")
	}
	if got, err := unary(ctx, cc, "hi"); err != nil || !strings.HasPrefix(got, "hi|") {
		t.Fatalf("call after the refused one: %q, %v", got, err)
	}
}

// TestGRPCUnixNotLimited: a unix socket connection served through a
// connlimit listener is neither counted nor closed, and marking it in
// the token check does nothing.
func TestGRPCUnixNotLimited(t *testing.T) {
	leaktest.Goroutines(t)
	creds := mustNew(t, "unix-token", nil)
	s := grpc.NewServer(creds.ServerOptions()...)
	s.RegisterService(&echoDesc, &echoServer{})
	sock := shortDir(t) + "/s.sock"
	inner, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.Wrap(inner, connlimit.Options{PerPeer: 1, Total: 1, Deadline: time.Millisecond})
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Serve(l) })
	defer func() { s.Stop(); wg.Wait() }()
	ctx := callCtx(t)
	for i := range 3 {
		cc := dial(t, "unix://"+sock, creds.DialOptions(sock)...)
		if _, err := unary(ctx, cc, "hi"); err != nil {
			t.Fatalf("call %d over the unix socket: %v", i, err)
		}
	}
	if l.Pending() != 0 || l.Expired() != 0 {
		t.Fatalf("pending %d, expired %d over a unix socket", l.Pending(), l.Expired())
	}
}
