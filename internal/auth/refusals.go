package auth

import (
	"container/list"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults of RefusalLog.
const (
	// DefaultRefusalInterval is how often a peer's refusals are logged.
	DefaultRefusalInterval = time.Minute
	// DefaultRefusalPeers bounds the peers a RefusalLog remembers.
	DefaultRefusalPeers = 1024
)

// RefusalLog logs refused callers (a wrong token, a failed handshake, a
// wrong dashboard login) at most once per peer per Interval, so that a
// flood of refusals adds a bounded number of log lines: the first refusal
// of a peer in an interval is logged, the others are counted, and the next
// line logged for that peer says how many were not ("suppressed=N"). It
// remembers at most MaxPeers peers; refusals of further peers, while every
// remembered peer's interval is still running, share one line per
// interval. Every refusal logged in goray goes through one: the gRPC, HTTP
// and raw-connection checks of Credentials, the dashboard's login page
// and sdk/plugin.AuthenticateServer. The zero value is ready to use; it is
// safe for concurrent use.
type RefusalLog struct {
	// Interval is how often a peer's refusals are logged (0:
	// DefaultRefusalInterval).
	Interval time.Duration
	// MaxPeers bounds the peers remembered (0: DefaultRefusalPeers).
	MaxPeers int

	now func() time.Time // time.Now unless a test sets it

	mu    sync.Mutex
	peers map[string]*list.Element // of *refusalPeer, in order
	order list.List                // oldest interval start first
	other refusalPeer              // peers that did not fit
}

// refusalPeer is one peer's current interval.
type refusalPeer struct {
	peer       string
	start      time.Time // when the interval's logged refusal happened
	suppressed uint64    // refusals since then that were not logged
}

// Log logs one refusal of peer on l (at warning level: msg, then args as
// key-value pairs, then peer and the count of refusals not logged since
// the last line), unless peer's refusals were logged less than Interval
// ago, when it only counts it. A nil l logs nothing (and counts nothing).
func (r *RefusalLog) Log(l hclog.Logger, peer, msg string, args ...any) {
	if l == nil {
		return
	}
	lines := r.take(peer)
	for _, ln := range lines {
		a := append([]any{}, args...)
		switch {
		case ln.summary:
			l.Warn("refusals that were not logged", "peer", ln.peer, "suppressed", ln.suppressed,
				"interval", r.interval().String())
			continue
		case ln.peer == "":
			msg := msg + fmt.Sprintf(" (refusals from more than %d peers: one line per %s stands for all of them)", r.maxPeers(), r.interval())
			a = append(a, "peer", peer)
			if ln.suppressed > 0 {
				a = append(a, "suppressed", ln.suppressed)
			}
			l.Warn(msg, a...)
			continue
		}
		a = append(a, "peer", peer)
		if ln.suppressed > 0 {
			a = append(a, "suppressed", ln.suppressed)
		}
		l.Warn(msg+fmt.Sprintf(" (logged once per peer per %s)", r.interval()), a...)
	}
}

// refusalLine is a line Log writes: the refusal itself (of the peer, or
// of the peers that did not fit when peer is ""), or the count of a
// forgotten peer's refusals that were not logged (summary).
type refusalLine struct {
	peer       string
	suppressed uint64
	summary    bool
}

func (r *RefusalLog) interval() time.Duration {
	if r.Interval > 0 {
		return r.Interval
	}
	return DefaultRefusalInterval
}

func (r *RefusalLog) maxPeers() int {
	if r.MaxPeers > 0 {
		return r.MaxPeers
	}
	return DefaultRefusalPeers
}

// take counts a refusal of peer and returns the lines to log for it (none
// when it is only counted).
func (r *RefusalLog) take(peer string) []refusalLine {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.now != nil {
		now = r.now()
	}
	iv := r.interval()
	if r.peers == nil {
		r.peers = map[string]*list.Element{}
	}
	if e, ok := r.peers[peer]; ok {
		p := e.Value.(*refusalPeer)
		if now.Sub(p.start) < iv {
			p.suppressed++
			return nil
		}
		n := p.suppressed
		p.start, p.suppressed = now, 0
		r.order.MoveToBack(e)
		return []refusalLine{{peer: peer, suppressed: n}}
	}
	var lines []refusalLine
	// Forget peers whose interval ended, oldest first, to make room;
	// their uncounted refusals are logged as they go.
	for len(r.peers) >= r.maxPeers() {
		front := r.order.Front()
		p := front.Value.(*refusalPeer)
		if now.Sub(p.start) < iv {
			break
		}
		r.order.Remove(front)
		delete(r.peers, p.peer)
		if p.suppressed > 0 {
			lines = append(lines, refusalLine{peer: p.peer, suppressed: p.suppressed, summary: true})
		}
	}
	if len(r.peers) >= r.maxPeers() {
		o := &r.other
		if !o.start.IsZero() && now.Sub(o.start) < iv {
			o.suppressed++
			return lines
		}
		n := o.suppressed
		o.start, o.suppressed = now, 0
		return append(lines, refusalLine{suppressed: n})
	}
	r.peers[peer] = r.order.PushBack(&refusalPeer{peer: peer, start: now})
	return append(lines, refusalLine{peer: peer})
}

// PeerHost returns the host of a "host:port" address (as
// http.Request.RemoteAddr or net.Addr.String give), or addr itself when it
// has no port: refusals are counted per host, not per connection.
func PeerHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
