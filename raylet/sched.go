package raylet

import (
	"slices"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
)

// lease is a granted worker lease.
type lease struct {
	id      ids.ID
	worker  *worker
	res     resources.Set
	actorID ids.ID
	// holder is the process the lease was granted to (zero when the
	// request did not say); its death returns the lease.
	holder ids.ID
}

// pendingLease is a waiting RequestWorkerLease call. ready is closed once
// lease or err is set (under Raylet.mu).
type pendingLease struct {
	job      *job
	res      resources.Set
	actorID  ids.ID
	holder   ids.ID
	function string
	class    *schedClass
	ready    chan struct{}
	lease    *lease
	err      error
}

// schedClass groups waiting requests with the same job and resources;
// requests of one class are served in FIFO order.
type schedClass struct {
	key   string
	res   resources.Set
	queue []*pendingLease
}

func classKey(job ids.ID, res resources.Set) string {
	return job.String() + "|" + res.Key()
}

// enqueueLocked adds p to its scheduling class.
func (r *Raylet) enqueueLocked(p *pendingLease) {
	key := classKey(p.job.id, p.res)
	c := r.classes[key]
	if c == nil {
		c = &schedClass{key: key, res: p.res}
		r.classes[key] = c
		r.order = append(r.order, c)
	}
	p.class = c
	c.queue = append(c.queue, p)
}

// removeClassLocked drops the empty class at index i of the round-robin
// order, keeping the cursor on the class that followed it.
func (r *Raylet) removeClassLocked(i int) {
	c := r.order[i]
	delete(r.classes, c.key)
	r.order = slices.Delete(r.order, i, i+1)
	if i < r.rr {
		r.rr--
	}
	if r.rr >= len(r.order) {
		r.rr = 0
	}
}

// dequeueLocked removes a waiting request; it reports false when p is no
// longer queued.
func (r *Raylet) dequeueLocked(p *pendingLease) bool {
	c := p.class
	i := slices.Index(c.queue, p)
	if i < 0 {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	if len(c.queue) == 0 {
		if ci := slices.Index(r.order, c); ci >= 0 {
			r.removeClassLocked(ci)
		}
	}
	return true
}

// dispatchLocked grants as many waiting requests as resources and idle
// workers allow, round-robin across scheduling classes and FIFO within a
// class, then starts workers for the grantable requests that lack one.
func (r *Raylet) dispatchLocked() {
	if r.shuttingDown {
		return
	}
	for {
		n := len(r.order)
		granted := false
		for k := 0; k < n; k++ {
			i := (r.rr + k) % n
			c := r.order[i]
			p := c.queue[0]
			if !r.available.Fits(p.res) || len(p.job.idle) == 0 {
				continue
			}
			w := p.job.idle[len(p.job.idle)-1] // most recently used
			p.job.idle = p.job.idle[:len(p.job.idle)-1]
			c.queue = c.queue[1:]
			r.grantLocked(p, w)
			if len(c.queue) == 0 {
				r.rr = i
				r.removeClassLocked(i)
			} else {
				r.rr = (i + 1) % n
			}
			granted = true
			break
		}
		if !granted {
			break
		}
	}
	r.startWorkersLocked()
}

// grantLocked gives w to p.
func (r *Raylet) grantLocked(p *pendingLease, w *worker) {
	l := &lease{id: ids.New(), worker: w, res: p.res, actorID: p.actorID, holder: p.holder}
	r.available.Sub(p.res)
	r.leases[l.id] = l
	w.lease = l
	w.state = stateLeased
	if !p.actorID.IsNil() {
		w.state = stateActor
		w.actorID = p.actorID
	}
	p.lease = l
	close(p.ready)
}

// startWorkersLocked starts workers for waiting requests that the available
// resources could serve now but no idle or starting worker will, within
// the concurrent start limit.
func (r *Raylet) startWorkersLocked() {
	if len(r.order) == 0 || r.starting >= r.pool.maxStarting {
		return
	}
	avail := r.available.Clone()
	need := map[*job]int{}
	n := len(r.order)
	for k := 0; k < n; k++ {
		c := r.order[(r.rr+k)%n]
		for _, p := range c.queue {
			if !avail.Fits(p.res) {
				break
			}
			avail.Sub(p.res)
			need[p.job]++
		}
	}
	for j, cnt := range need {
		if j.finished || j.startFailures >= maxStartFailures && j.starting > 0 {
			continue
		}
		for deficit := cnt - len(j.idle) - j.starting; deficit > 0 && r.starting < r.pool.maxStarting; deficit-- {
			r.startWorkerLocked(j)
		}
	}
}

// returnLeaseLocked ends l: its resources return to the pool and the worker
// becomes idle, or is killed when disconnect is set, it hosted an actor or
// its job has finished.
func (r *Raylet) returnLeaseLocked(l *lease, disconnect bool) {
	w := l.worker
	delete(r.leases, l.id)
	if w.lease == l {
		w.lease = nil
	}
	r.available.Add(l.res)
	switch {
	case w.state == stateDead || w.killing:
	case disconnect:
		r.killWorkerLocked(w, "lease returned with disconnect_worker", false)
	case w.state == stateActor:
		r.killWorkerLocked(w, "actor lease returned", false)
	case w.job.finished:
		r.killWorkerLocked(w, "job finished", false)
	default:
		w.state = stateIdle
		w.idleSince = time.Now()
		w.job.idle = append(w.job.idle, w)
	}
	r.dispatchLocked()
}

// failJobLocked fails every waiting request of j with err.
func (r *Raylet) failJobLocked(j *job, err error) {
	for i := 0; i < len(r.order); {
		c := r.order[i]
		c.queue = slices.DeleteFunc(c.queue, func(p *pendingLease) bool {
			if p.job != j {
				return false
			}
			p.err = err
			close(p.ready)
			return true
		})
		if len(c.queue) == 0 {
			r.removeClassLocked(i)
			continue
		}
		i++
	}
}

// pendingDemandLocked aggregates waiting requests by resource shape.
func (r *Raylet) pendingDemandLocked() []*gorayv1.PendingDemand {
	byKey := map[string]*gorayv1.PendingDemand{}
	var out []*gorayv1.PendingDemand
	for _, c := range r.order {
		k := c.res.Key()
		d := byKey[k]
		if d == nil {
			d = &gorayv1.PendingDemand{
				Resources:  resourcesProto(c.res),
				Infeasible: !r.cfg.Resources.Fits(c.res),
			}
			byKey[k] = d
			out = append(out, d)
		}
		d.Count += int32(len(c.queue))
	}
	return out
}
