package auth

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// refusalStep is one refusal (of peer, at the clock's time plus at), or,
// with lines set, a check of the lines logged since the last check.
type refusalStep struct {
	peer  string
	at    time.Duration
	lines []string // each logged line must contain its string, in order
	check bool
}

func TestRefusalLog(t *testing.T) {
	refuse := func(peer string, at time.Duration) refusalStep { return refusalStep{peer: peer, at: at} }
	want := func(lines ...string) refusalStep { return refusalStep{lines: lines, check: true} }
	tests := []struct {
		name     string
		maxPeers int
		steps    []refusalStep
	}{
		{name: "once per peer per interval", steps: []refusalStep{
			refuse("a", 0), refuse("a", time.Second), refuse("a", 59*time.Second),
			want(`refused (logged once per peer per 1m0s): peer=a`),
			refuse("a", time.Minute), refuse("a", time.Minute+time.Second),
			want(`refused (logged once per peer per 1m0s): peer=a suppressed=2`),
			refuse("a", 3*time.Minute),
			want(`peer=a suppressed=1`),
			refuse("a", 5*time.Minute),
			want(`refused (logged once per peer per 1m0s): peer=a`),
		}},
		{name: "peers apart", steps: []refusalStep{
			refuse("a", 0), refuse("b", 0), refuse("a", 0), refuse("c", time.Second),
			want("peer=a", "peer=b", "peer=c"),
		}},
		{name: "more peers than remembered", maxPeers: 2, steps: []refusalStep{
			refuse("a", 0), refuse("b", time.Second), refuse("c", 2*time.Second), refuse("d", 3*time.Second), refuse("c", 4*time.Second),
			want("peer=a", "peer=b", "refusals from more than 2 peers: one line per 1m0s stands for all of them): peer=c"),
			refuse("a", 61*time.Second), refuse("a", 61*time.Second),
			want("peer=a"),
			refuse("e", 62*time.Second),
			want("peer=e"),
			refuse("f", 62*time.Second), refuse("g", 63*time.Second),
			want("stands for all of them): peer=f suppressed=2"),
			// a's interval ended: a is forgotten to make room for h, and
			// its refusal that was not logged is said.
			refuse("h", 122*time.Second),
			want(`refusals that were not logged: peer=a suppressed=1`, "peer=h"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := &lockedBuffer{}
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			now := start
			r := &RefusalLog{MaxPeers: tt.maxPeers, now: func() time.Time { return now }}
			l := bufLogger(buf)
			seen := 0
			for i, st := range tt.steps {
				if !st.check {
					now = start.Add(st.at)
					r.Log(l, st.peer, "refused")
					continue
				}
				all := strings.Split(strings.TrimSpace(buf.String()), "\n")
				if buf.String() == "" {
					all = nil
				}
				got := all[seen:]
				seen = len(all)
				if len(got) != len(st.lines) {
					t.Fatalf("step %d: %d lines, want %d:\n%s", i, len(got), len(st.lines), strings.Join(got, "\n"))
				}
				for j, w := range st.lines {
					if !strings.Contains(got[j], w) {
						t.Errorf("step %d: line %q lacks %q", i, got[j], w)
					}
				}
			}
		})
	}
}

// TestRefusalLogFlood: many refusals from many peers at once, from many
// goroutines, log at most one line per remembered peer and one for the
// rest.
func TestRefusalLogFlood(t *testing.T) {
	buf := &lockedBuffer{}
	l := bufLogger(buf)
	r := &RefusalLog{MaxPeers: 64}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				r.Log(l, fmt.Sprintf("10.0.%d.%d", g, i%100), "refused")
			}
		})
	}
	wg.Wait()
	if n := strings.Count(buf.String(), "\n"); n > 64+1 {
		t.Errorf("%d lines for 16000 refusals of 800 peers, want at most 65", n)
	}
	var nilLog RefusalLog
	nilLog.Log(nil, "a", "refused") // no logger: nothing, no panic
}

func TestPeerHost(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"127.0.0.1:5000", "127.0.0.1"},
		{"[::1]:80", "::1"},
		{"unix socket", "unix socket"},
		{"", ""},
	} {
		if got := PeerHost(tt.in); got != tt.want {
			t.Errorf("PeerHost(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
