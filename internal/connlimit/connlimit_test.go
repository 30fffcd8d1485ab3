package connlimit

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/leaktest"
	"github.com/goray-dev/goray/internal/waitfor"
)

// listen wraps a loopback listener with opts; the cleanup closes it.
func listen(t *testing.T, opts Options) *Listener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Wrap(inner, opts)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// dial connects to l from the loopback address from (e.g. "127.0.0.2").
func dial(t *testing.T, l net.Listener, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// accept accepts one connection; the cleanup closes it.
func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedByServer waits until the server side of c is closed (a read
// returns EOF or a reset), with a generous deadline.
func closedByServer(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Fatalf("the server did not close the connection: read error %v", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// acceptAsync accepts one connection in the background.
func acceptAsync(l net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(ch)
			return
		}
		ch <- c
	}()
	return ch
}

func TestDeadlineClosesUnauthenticated(t *testing.T) {
	leaktest.Goroutines(t)
	l := listen(t, Options{Deadline: 50 * time.Millisecond})
	c := dial(t, l, "127.0.0.1")
	accept(t, l)
	closedByServer(t, c)
	if l.Expired() != 1 || l.Pending() != 0 {
		t.Fatalf("expired %d, pending %d; want 1, 0", l.Expired(), l.Pending())
	}
}

func TestAuthenticatedStaysOpen(t *testing.T) {
	leaktest.Goroutines(t)
	l := listen(t, Options{Deadline: 50 * time.Millisecond})
	c := dial(t, l, "127.0.0.1")
	s := accept(t, l)
	if !Authenticated(s) {
		t.Fatal("Authenticated reported the connection was not marked")
	}
	if Authenticated(s) {
		t.Fatal("a second Authenticated reported marking it again")
	}
	if l.Pending() != 0 {
		t.Fatalf("pending %d after marking", l.Pending())
	}
	// The deadline is stopped (Stop reports it no longer pending) without
	// having fired, and the connection still carries data.
	if s.(*Conn).timer.Stop() || l.Expired() != 0 {
		t.Fatalf("the deadline still runs or fired (expired %d)", l.Expired())
	}
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("the marked connection was closed: %v", err)
	}
}

func TestCaps(t *testing.T) {
	for _, tc := range []struct {
		name           string
		perPeer, total int
		held           []string // peers of the connections held
		next           string   // refused while they are held
	}{
		{"per peer", 2, 10, []string{"127.0.0.1", "127.0.0.1"}, "127.0.0.1"},
		{"total", 10, 2, []string{"127.0.0.2", "127.0.0.3"}, "127.0.0.4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaktest.Goroutines(t)
			var logged bytes.Buffer
			var mu sync.Mutex
			log := hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{w: &logged, mu: &mu}})
			l := listen(t, Options{Name: "test", Deadline: -1, PerPeer: tc.perPeer, Total: tc.total, Logger: log})
			var held []net.Conn
			for _, p := range tc.held {
				dial(t, l, p)
				held = append(held, accept(t, l))
			}
			if l.Pending() != len(tc.held) {
				t.Fatalf("pending %d, want %d", l.Pending(), len(tc.held))
			}
			got := acceptAsync(l)
			for range 3 {
				closedByServer(t, dial(t, l, tc.next))
			}
			// Marking one frees its place: the next one is accepted.
			Authenticated(held[0])
			dial(t, l, tc.next)
			c := <-got
			if c == nil {
				t.Fatal("Accept failed")
			}
			t.Cleanup(func() { _ = c.Close() })
			if PeerKey(c.RemoteAddr()) != tc.next {
				t.Fatalf("accepted %s, want a connection from %s", c.RemoteAddr(), tc.next)
			}
			// Closing one frees its place too.
			_ = held[1].Close()
			if l.Pending() != len(tc.held)-1 {
				t.Fatalf("pending %d, want %d", l.Pending(), len(tc.held)-1)
			}
			mu.Lock()
			lines := strings.Count(logged.String(), "refused connections")
			mu.Unlock()
			if lines != 1 {
				t.Fatalf("%d refusal lines for 3 refusals within a minute, want 1:\n%s", lines, logged.String())
			}
		})
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestAuthenticatedThroughTLS(t *testing.T) {
	leaktest.Goroutines(t)
	l := listen(t, Options{Deadline: -1})
	dial(t, l, "127.0.0.1")
	s := accept(t, l)
	if !Authenticated(tls.Server(s, &tls.Config{})) {
		t.Fatal("a connection wrapped in TLS was not marked")
	}
	if l.Pending() != 0 {
		t.Fatalf("pending %d", l.Pending())
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Authenticated(a) {
		t.Fatal("a connection of no Listener reported marked")
	}
}

func TestUnixPassesThrough(t *testing.T) {
	leaktest.Goroutines(t)
	dir := t.TempDir()
	inner, err := net.Listen("unix", dir+"/s")
	if err != nil {
		t.Fatal(err)
	}
	l := Wrap(inner, Options{PerPeer: 1, Total: 1, Deadline: time.Millisecond})
	defer l.Close()
	for range 3 {
		c, err := net.Dial("unix", dir+"/s")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, ok := s.(*Conn); ok {
			t.Fatal("a unix socket connection was wrapped")
		}
	}
	if l.Pending() != 0 {
		t.Fatalf("pending %d", l.Pending())
	}
}

func TestMarkHandler(t *testing.T) {
	leaktest.Goroutines(t)
	l := listen(t, Options{Deadline: -1})
	srv := &http.Server{
		ConnContext: ConnContext,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/private" {
				MarkHandler(http.NotFoundHandler()).ServeHTTP(w, r)
			}
		}),
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	defer func() { _ = srv.Close(); <-done }()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	get := func(path string) {
		t.Helper()
		resp, err := cl.Get("http://" + l.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	get("/public")
	if l.Pending() != 1 {
		t.Fatalf("pending %d after a public request, want 1", l.Pending())
	}
	get("/private")
	waitfor.Cond(t, time.Minute, "the connection marked", func() bool { return l.Pending() == 0 })
}

func TestPeerKey(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 5}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 5}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::1"), Port: 6}, "2001:db8:1:2::/64"},
		{&net.UDPAddr{IP: net.ParseIP("10.0.0.1"), Port: 1}, "10.0.0.1"},
	} {
		if got := PeerKey(tc.addr); got != tc.want {
			t.Errorf("PeerKey(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

func TestDefaultTotalFollowsFDLimit(t *testing.T) {
	defer func(f func() int) { processFDLimit = f }(processFDLimit)
	for _, tc := range []struct {
		limit, perPeer, want int
	}{
		{0, 0, DefaultTotal},       // unknown
		{1 << 20, 0, DefaultTotal}, // plenty
		{4096, 0, 512},             // an eighth of it
		{256, 0, DefaultPerPeer},   // never below the per-peer cap
		{4096, 16, 512},            // the caller's per-peer cap
		{100, 4, 12},               // a tiny limit
	} {
		processFDLimit = func() int { return tc.limit }
		l := Wrap(&net.TCPListener{}, Options{Name: "x", PerPeer: tc.perPeer})
		if l.opts.Total != tc.want {
			t.Errorf("descriptor limit %d, per peer %d: total cap %d, want %d", tc.limit, tc.perPeer, l.opts.Total, tc.want)
		}
	}
}
