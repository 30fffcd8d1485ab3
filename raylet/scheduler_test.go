package raylet

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/resources"
)

// fakeBinder is a worker pool with idle workers per job; it records the
// workers it was asked to start.
type fakeBinder struct {
	idle    map[*job][]*worker
	started map[*job]int
	unbound []*lease
}

func (b *fakeBinder) bindIdle(rd *dispatchRound) {
	if l := rd.ended; l != nil && !rd.disconnect {
		b.idle[l.worker.job] = append(b.idle[l.worker.job], l.worker)
	}
	for _, p := range rd.cands {
		ws := b.idle[p.job]
		if len(ws) == 0 {
			rd.addNeed(p.job, p.spec)
			continue
		}
		w := ws[len(ws)-1]
		b.idle[p.job] = ws[:len(ws)-1]
		p.cand.worker, p.cand.addr, p.cand.pid = w, w.addr, w.pid
	}
	for _, n := range rd.need {
		if d := n.n - len(b.idle[n.job]) - b.started[n.job]; d > 0 {
			b.started[n.job] += d
		}
	}
}

func (b *fakeBinder) unbind(ls []*lease) { b.unbound = append(b.unbound, ls...) }

func testJob() *job {
	j := &job{id: ids.New()}
	j.ready.Store(true)
	return j
}

func pending(j *job, res resources.Set) *pendingLease {
	return &pendingLease{job: j, res: res, queued: time.Now(), ready: make(chan struct{})}
}

func isAnswered(p *pendingLease) bool {
	select {
	case <-p.ready:
		return true
	default:
		return false
	}
}

// TestSchedulerDispatch: requests are granted to idle workers of their job
// while resources last, the rest wait (and get workers started), and a
// returned lease lets the next one in.
func TestSchedulerDispatch(t *testing.T) {
	withIdle, without := testJob(), testJob()
	b := &fakeBinder{
		idle:    map[*job][]*worker{withIdle: {{id: ids.New(), job: withIdle}, {id: ids.New(), job: withIdle}}},
		started: map[*job]int{},
	}
	s := newScheduler(ids.New(), cpus(2), hclog.NewNullLogger(), b)
	tests := []struct {
		name    string
		job     *job
		res     float64
		granted bool
		started int // workers started for the job so far
	}{
		{"an idle worker and resources: granted", withIdle, 1, true, 0},
		{"another idle worker: granted", withIdle, 1, true, 0},
		{"the CPU is taken: waits, no worker started", without, 1, false, 0},
	}
	var ps []*pendingLease
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pending(tt.job, cpus(tt.res))
			ps = append(ps, p)
			if d, err := s.request(p, emptySnapshot, 0); err != nil || d.Spill != nil || d.Unschedulable != "" {
				t.Fatalf("request: %+v, %v", d, err)
			}
			if got := isAnswered(p) && p.lease != nil; got != tt.granted {
				t.Fatalf("granted = %v, want %v", got, tt.granted)
			}
			if got := b.started[tt.job]; got != tt.started {
				t.Fatalf("started %d workers, want %d", got, tt.started)
			}
		})
	}
	// The first lease returns: the third request could run but its job
	// has no idle worker, so one is started; once it is idle, it is
	// granted.
	if !s.endLease(ps[0].lease) {
		t.Fatal("endLease of a granted lease: false")
	}
	s.dispatch()
	if isAnswered(ps[2]) || b.started[without] != 1 {
		t.Fatalf("after the return: answered %v, started %d; want waiting for 1 started worker", isAnswered(ps[2]), b.started[without])
	}
	b.idle[without] = []*worker{{id: ids.New(), job: without}}
	s.dispatch()
	if !isAnswered(ps[2]) || ps[2].lease == nil || ps[2].lease.worker.job != without {
		t.Fatal("the waiting request was not granted its job's idle worker")
	}
	if s.endLease(ps[0].lease) {
		t.Fatal("a lease ended twice")
	}
	if got := s.availableResources(); !got.Fits(cpus(0)) || got.Fits(cpus(1)) {
		t.Fatalf("available = %v, want 0 CPU (two leases of 1 of 2)", got)
	}
}

// TestSchedulerCancelAndClose: a cancelled request fails, a cancellation
// that overtakes its request makes the request fail on arrival, and close
// fails the rest.
func TestSchedulerCancelAndClose(t *testing.T) {
	j := testJob()
	s := newScheduler(ids.New(), cpus(1), hclog.NewNullLogger(), &fakeBinder{idle: map[*job][]*worker{}, started: map[*job]int{}})
	p := pending(j, cpus(1))
	p.requestID = "a"
	if _, err := s.request(p, emptySnapshot, 0); err != nil {
		t.Fatal(err)
	}
	if waiting, granted := s.cancel("a"); waiting != 1 || len(granted) != 0 {
		t.Fatalf("cancel: waiting %d, granted %d; want 1, 0", waiting, len(granted))
	}
	var lc *LeaseCancelledError
	if !isAnswered(p) || !errors.As(p.err, &lc) {
		t.Fatalf("cancelled request: answered %v, err %v", isAnswered(p), p.err)
	}
	s.cancel("b") // before its request
	early := pending(j, cpus(1))
	early.requestID = "b"
	if _, err := s.request(early, emptySnapshot, 0); !errors.As(err, &lc) {
		t.Fatalf("request after its cancellation: %v, want LeaseCancelledError", err)
	}
	last := pending(j, cpus(1))
	if _, err := s.request(last, emptySnapshot, 0); err != nil {
		t.Fatal(err)
	}
	s.close()
	if !isAnswered(last) || !errors.Is(last.err, ErrShuttingDown) {
		t.Fatalf("close: answered %v, err %v", isAnswered(last), last.err)
	}
	if _, err := s.request(pending(j, cpus(1)), emptySnapshot, 0); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("request after close: %v", err)
	}
}
