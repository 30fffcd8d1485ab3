package raylet

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/waitfor"
)

// fakeBinaries is a job table whose binaries cannot be found.
type fakeBinaries struct{ err error }

func (f fakeBinaries) binaryPath(context.Context, *gorayv1.JobInfo) (string, error) {
	return "", f.err
}

func (f fakeBinaries) workingDir(context.Context, *gorayv1.JobInfo) (string, error) {
	return "", nil
}

func (f fakeBinaries) leaseDir(context.Context, string, ids.ID) (string, error) {
	return "", f.err
}

// deaths records the pool's death events.
type deaths chan workerDeath

func (d deaths) workerDied(ev workerDeath) { d <- ev }

// testPool is a worker pool (MaxIdle 1, IdleTimeout 1m) with no processes;
// addIdle adds idle workers by hand.
func testPool(t *testing.T, bins binarySource) (*workerPool, deaths) {
	t.Helper()
	d := make(deaths, 16)
	maxIdle := 1
	cfg := Config{NodeID: ids.New(), SessionDir: t.TempDir(), Resources: cpus(2)}
	cfg.Pool.MaxIdle = &maxIdle
	cfg.Pool.IdleTimeout = time.Minute
	cfg.Pool.StartTimeout = 10 * time.Second
	p := newWorkerPool(cfg, hclog.NewNullLogger(), make(chan struct{}), bins, d)
	t.Cleanup(func() {
		p.mu.Lock()
		for _, w := range p.workers {
			select {
			case <-w.exited:
			default:
				if w.startTimer != nil {
					w.startTimer.Stop()
				}
				close(w.exited) // no process: end the kill timers
			}
		}
		p.mu.Unlock()
		p.stop()
	})
	return p, d
}

func (p *workerPool) addIdle(j *job, idleSince time.Time) *worker {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := &worker{id: ids.New(), job: j, state: stateIdle, idleSince: idleSince, addr: &gorayv1.Address{},
		out: newOutbox(), exited: make(chan struct{}), startTimer: time.NewTimer(time.Hour)}
	pj := p.jobLocked(j, workerSpec{})
	pj.workers[w.id] = w
	pj.idle = append(pj.idle, w)
	p.workers[w.id] = w
	return w
}

func killing(p *workerPool, w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return w.killing
}

// TestWorkerPoolReap: surplus idle workers are reaped oldest first, but
// never one that owns objects or holds a lease, nor one idle for less than
// IdleTimeout.
func TestWorkerPoolReap(t *testing.T) {
	p, _ := testPool(t, fakeBinaries{})
	j := testJob()
	now := time.Now()
	old := now.Add(-time.Hour)
	owner, holder, oldest, young, newest := p.addIdle(j, old), p.addIdle(j, old), p.addIdle(j, old), p.addIdle(j, now), p.addIdle(j, now)
	p.setOwnsObjects(owner, true)
	p.reap(now, map[ids.ID]bool{holder.id: true})
	for _, tt := range []struct {
		name string
		w    *worker
		want bool
	}{
		{"owns objects", owner, false},
		{"holds a lease", holder, false},
		{"oldest plain", oldest, true},
		{"idle briefly", young, false},
		{"newest", newest, false},
	} {
		if got := killing(p, tt.w); got != tt.want {
			t.Errorf("%s: reaped = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestWorkerPoolLeaseEnded: the worker of an ended lease (given back with
// the next bindIdle) is reused unless
// the lease asked to disconnect it, it hosted an actor or its job ended.
func TestWorkerPoolLeaseEnded(t *testing.T) {
	p, _ := testPool(t, fakeBinaries{})
	for _, tt := range []struct {
		name       string
		actor      bool
		disconnect bool
		jobDone    bool
		wantKilled bool
	}{
		{"plain", false, false, false, false},
		{"disconnect", false, true, false, true},
		{"actor", true, false, false, true},
		{"job finished", false, false, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := testJob()
			p.addIdle(j, time.Now())
			l := &lease{id: ids.New()}
			if tt.actor {
				l.actorID = ids.New()
			}
			rd := &dispatchRound{cands: []*pendingLease{{job: j, cand: l}}}
			p.bindIdle(rd)
			if l.worker == nil {
				t.Fatal("no idle worker bound")
			}
			if lt, alive := p.leaseOf(l.worker.id); !alive || lt != l {
				t.Fatalf("leaseOf = %v, %v; want the lease", lt, alive)
			}
			j.finished.Store(tt.jobDone)
			p.bindIdle(&dispatchRound{ended: l, disconnect: tt.disconnect})
			if got := killing(p, l.worker); got != tt.wantKilled {
				t.Fatalf("killed = %v, want %v", got, tt.wantKilled)
			}
		})
	}
}

// TestWorkerPoolStartFailure: a worker whose binary cannot be found dies
// at once, and its death fails the job's waiting requests.
func TestWorkerPoolStartFailure(t *testing.T) {
	p, d := testPool(t, fakeBinaries{err: errors.New("no such binary")})
	j := testJob()
	j.info = &gorayv1.JobInfo{}
	p.bindIdle(&dispatchRound{need: []jobNeed{{job: j, n: 1}}})
	select {
	case ev := <-d:
		var wse *WorkerStartError
		if !errors.As(ev.jobFailed, &wse) || ev.w.job != j {
			t.Fatalf("death event %+v, want the job failed with a WorkerStartError", ev)
		}
	case <-time.After(waitfor.Generous):
		t.Fatal("no death event")
	}
}

// TestWorkerPoolEndJobKeepsDetached: a job's end kills its workers but
// the one hosting a detached actor, which outlives its job.
func TestWorkerPoolEndJobKeepsDetached(t *testing.T) {
	p, _ := testPool(t, fakeBinaries{})
	j := testJob()
	plain, owned, detached := p.addIdle(j, time.Now()), p.addIdle(j, time.Now()), p.addIdle(j, time.Now())
	bind := func(w *worker, l *lease) {
		p.mu.Lock()
		pj := p.jobLocked(j, workerSpec{})
		pj.idle = slices.DeleteFunc(pj.idle, func(x *worker) bool { return x == w })
		pj.idle = append(pj.idle, w) // bindIdle takes the last idle one
		p.mu.Unlock()
		p.bindIdle(&dispatchRound{cands: []*pendingLease{{job: j, cand: l}}})
		if l.worker != w {
			t.Fatalf("lease bound to %v, want %v", l.worker, w)
		}
	}
	bind(owned, &lease{id: ids.New(), actorID: ids.New()})
	bind(detached, &lease{id: ids.New(), actorID: ids.New(), detached: true})
	j.finished.Store(true)
	p.endJob(j)
	for _, tt := range []struct {
		name string
		w    *worker
		want bool
	}{{"idle", plain, true}, {"owned actor", owned, true}, {"detached actor", detached, false}} {
		if got := killing(p, tt.w); got != tt.want {
			t.Errorf("%s worker: killed = %v at the job's end, want %v", tt.name, got, tt.want)
		}
	}
}
