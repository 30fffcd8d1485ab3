// Package connlimit bounds what peers that have not proved they belong to
// the cluster can hold of a process: every goray TCP listener (gRPC
// servers, the object data plane, plugins' data listeners, the dashboard)
// is wrapped with Wrap.
//
// Each accepted TCP connection counts as unauthenticated until the server
// marks it (Authenticated, once the peer has shown the cluster token: a
// gRPC call passed the token check, a raw handshake succeeded, an HTTP
// request passed the check). An unauthenticated connection
//
//   - is closed when it is still unmarked Deadline after it was accepted;
//   - counts against a cap per peer (its IP address; an IPv6 /64 counts as
//     one peer) and a cap for the whole listener: a connection accepted
//     over either cap is closed at once, and the refusals are logged at
//     most once per LogInterval.
//
// A marked connection no longer counts against either cap and stays open
// for as long as its server keeps it. Unix socket connections (the node's
// own processes, inside its 0700 session directory) are passed through
// unwrapped and uncounted; marking them does nothing.
package connlimit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults of Options. The caps are per listener, so a flood of one
// listener does not refuse new connections to another; the deadline is
// far above what a cluster process needs between connecting and its first
// call (milliseconds), and far below gRPC's 120 s connection timeout.
const (
	DefaultDeadline = 10 * time.Second
	DefaultPerPeer  = 128
	DefaultTotal    = 1024
	// LogInterval spaces the log lines about refused connections.
	LogInterval = time.Minute
)

// defaultDeadline is the deadline used when Options.Deadline is 0:
// DefaultDeadline, lowered by tests (SetDefaultDeadline) so that they need
// not wait for it.
var defaultDeadline atomic.Int64

func init() { defaultDeadline.Store(int64(DefaultDeadline)) }

// SetDefaultDeadline sets the deadline of listeners wrapped afterwards with
// Options.Deadline 0 and returns a function that restores the previous one.
// It is for tests, which lower it so that they need not wait 10 s.
func SetDefaultDeadline(d time.Duration) (restore func()) {
	old := defaultDeadline.Swap(int64(d))
	return func() { defaultDeadline.Store(old) }
}

// processFDLimit is fdLimit, replaced by tests.
var processFDLimit = fdLimit

// Options configure a wrapped listener. The zero value means the defaults.
type Options struct {
	// Name says which listener it is in log lines ("raylet gRPC").
	Name string
	// Deadline is how long a connection may stay unauthenticated (0:
	// DefaultDeadline, or what SetDefaultDeadline set; negative: no
	// deadline, the caps only, for servers that never mark their
	// connections and bound them with their own timeouts).
	Deadline time.Duration
	// PerPeer and Total cap the unauthenticated connections of one peer
	// and of the listener (0: DefaultPerPeer; DefaultTotal, or an eighth
	// of the process's descriptor limit when that is less, at least
	// PerPeer).
	PerPeer, Total int
	// Logger receives the refusal lines (nil: none).
	Logger hclog.Logger
}

// Listener is a net.Listener whose unauthenticated connections are
// bounded (see the package comment). Close closes the listener only: the
// connections belong to the server that accepted them.
type Listener struct {
	net.Listener
	opts Options

	mu      sync.Mutex
	pending int            // unauthenticated connections
	perPeer map[string]int // unauthenticated connections per peer

	refused atomic.Int64 // connections refused since the last log line
	expired atomic.Int64 // connections closed at their deadline, ever
	lastLog atomic.Int64 // unix nanoseconds of the last refusal line
}

// Wrap returns lis with its unauthenticated connections bounded by opts.
func Wrap(lis net.Listener, opts Options) *Listener {
	if opts.Deadline == 0 {
		opts.Deadline = time.Duration(defaultDeadline.Load())
	}
	if opts.PerPeer <= 0 {
		opts.PerPeer = DefaultPerPeer
	}
	if opts.Total <= 0 {
		opts.Total = DefaultTotal
		if n := processFDLimit() / 8; n > 0 && n < opts.Total {
			opts.Total = max(n, opts.PerPeer)
		}
	}
	if opts.Name == "" {
		opts.Name = lis.Addr().String()
	}
	return &Listener{Listener: lis, opts: opts, perPeer: map[string]int{}}
}

// Accept returns the next connection within the caps; connections over a
// cap are closed and not returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c.LocalAddr().Network() == "unix" {
			return c, nil
		}
		peer := PeerKey(c.RemoteAddr())
		l.mu.Lock()
		over := ""
		switch {
		case l.perPeer[peer] >= l.opts.PerPeer:
			over = fmt.Sprintf("%d from this peer", l.opts.PerPeer)
		case l.pending >= l.opts.Total:
			over = fmt.Sprintf("%d in all", l.opts.Total)
		default:
			l.perPeer[peer]++
			l.pending++
		}
		l.mu.Unlock()
		if over != "" {
			_ = c.Close()
			l.noteRefused(peer, over)
			continue
		}
		cc := &Conn{Conn: c, l: l, peer: peer}
		if l.opts.Deadline > 0 {
			cc.timer = time.AfterFunc(l.opts.Deadline, cc.expire)
		}
		return cc, nil
	}
}

// Pending returns the number of unauthenticated connections the listener
// holds.
func (l *Listener) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending
}

// Expired returns how many connections were closed at their deadline.
func (l *Listener) Expired() int64 { return l.expired.Load() }

func (l *Listener) release(peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending--
	if l.perPeer[peer]--; l.perPeer[peer] <= 0 {
		delete(l.perPeer, peer)
	}
}

// noteRefused counts a refused connection and logs the refusals at most
// once per LogInterval, with how many there were since the last line.
func (l *Listener) noteRefused(peer, over string) {
	n := l.refused.Add(1)
	if l.opts.Logger == nil {
		return
	}
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if last != 0 && now-last < int64(LogInterval) {
		return
	}
	if !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	n = l.refused.Swap(0)
	l.opts.Logger.Warn("refused connections: too many unauthenticated connections held (next line at most a minute later)",
		"listener", l.opts.Name, "cap", over, "last_peer", peer, "refused", n)
}

// Connection states.
const (
	statePending int32 = iota
	stateAuthenticated
	stateClosed
)

// Conn is a connection accepted by a Listener.
type Conn struct {
	net.Conn
	l     *Listener
	peer  string
	timer *time.Timer // nil without a deadline
	state atomic.Int32
}

// Authenticated marks c as authenticated: it no longer counts against its
// listener's caps and is not closed at the deadline. It reports whether
// this call marked it (false: marked or closed before).
func (c *Conn) Authenticated() bool {
	if !c.state.CompareAndSwap(statePending, stateAuthenticated) {
		return false
	}
	c.stop()
	return true
}

// Close closes the connection, releasing its place if it still held one.
func (c *Conn) Close() error {
	if c.state.Swap(stateClosed) == statePending {
		c.stop()
	}
	return c.Conn.Close()
}

// stop stops the deadline and gives back the connection's place.
func (c *Conn) stop() {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.l.release(c.peer)
}

// expire closes c at its deadline if it is still unauthenticated.
func (c *Conn) expire() {
	if !c.state.CompareAndSwap(statePending, stateClosed) {
		return
	}
	c.l.release(c.peer)
	c.l.expired.Add(1)
	if l := c.l.opts.Logger; l != nil {
		l.Debug("closed a connection that did not authenticate in time", "listener", c.l.opts.Name, "peer", c.RemoteAddr().String(), "deadline", c.l.opts.Deadline)
	}
	_ = c.Conn.Close()
}

// Authenticated marks the connection c as authenticated (see
// Conn.Authenticated), looking through TLS connections and other wrappers
// that expose the connection they wrap with NetConn. It reports whether c
// was a Conn still unmarked; on any other connection (a unix socket's, a
// listener's that is not wrapped) it does nothing.
func Authenticated(c net.Conn) bool {
	for i := 0; c != nil && i < 8; i++ {
		switch v := c.(type) {
		case *Conn:
			return v.Authenticated()
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return false
		}
	}
	return false
}

// PeerKey is the key a connection from addr is counted under: its IP
// address, or its /64 prefix for IPv6 (one host is commonly given a whole
// /64, so counting each address would not bound it).
func PeerKey(addr net.Addr) string {
	var ip net.IP
	switch a := addr.(type) {
	case *net.TCPAddr:
		ip = a.IP
	default:
		h, _, err := net.SplitHostPort(addr.String())
		if err != nil {
			return addr.String()
		}
		ip = net.ParseIP(h)
		if ip == nil {
			return h
		}
	}
	if ip.To4() != nil {
		return ip.To4().String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// connKey is the context key under which ConnContext keeps the connection.
type connKey struct{}

// ConnContext returns ctx carrying c; it is the signature of
// http.Server.ConnContext, so that MarkHandler finds a request's
// connection.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// MarkHandler marks the connection of every request it serves as
// authenticated before passing it to next: mount it behind the token
// check, on a server whose ConnContext is ConnContext.
func MarkHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
			Authenticated(c)
		}
		next.ServeHTTP(w, r)
	})
}
