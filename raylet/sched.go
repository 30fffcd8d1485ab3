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
	// requestID is the caller's name for the request that was granted
	// (empty for old callers); CancelWorkerLease finds the lease by it.
	requestID string
	// cancelled is set when CancelWorkerLease returned the lease before
	// its request's reply was sent.
	cancelled bool
	// blocked is set while the worker is blocked in Get: the lease's CPU
	// is lent back to the node.
	blocked bool
}

// held returns the resources l takes from the node now: all of l.res, less
// its CPU while the worker is blocked.
func (l *lease) held() resources.Set {
	if !l.blocked {
		return l.res
	}
	h := l.res.Clone()
	delete(h, resources.CPU)
	return h
}

// lentCPU is the CPU a blocked worker lends back.
func (l *lease) lentCPU() resources.Set {
	return resources.Set{resources.CPU: l.res[resources.CPU]}
}

// pendingLease is a waiting RequestWorkerLease call. ready is closed once
// lease or err is set (under Raylet.mu).
type pendingLease struct {
	job     *job
	res     resources.Set
	actorID ids.ID
	holder  ids.ID
	// requestID is the caller's name for the request (may be empty).
	requestID string
	function  string
	strategy  *gorayv1.SchedulingStrategy
	queued    time.Time
	class     *schedClass
	ready     chan struct{}
	lease     *lease
	// spill, when set instead of lease, sends the caller to another node.
	spill *peerNode
	err   error
}

// tombstones remembers cancelled lease request ids whose request had not
// arrived yet: CancelWorkerLease can overtake RequestWorkerLease (they are
// separate calls), and the request must then be refused rather than
// granted to a caller that already gave up. Entries expire after
// tombstoneTTL; at most maxTombstones are kept.
type tombstones struct {
	at    map[string]time.Time
	order []tombstone // oldest first
}

type tombstone struct {
	id string
	at time.Time
}

// add records id as cancelled at now.
func (t *tombstones) add(id string, now time.Time) {
	if t.at == nil {
		t.at = map[string]time.Time{}
	}
	t.at[id] = now
	t.order = append(t.order, tombstone{id, now})
	for len(t.order) > 0 && (len(t.order) > maxTombstones || now.Sub(t.order[0].at) > tombstoneTTL) {
		if old := t.order[0]; t.at[old.id].Equal(old.at) {
			delete(t.at, old.id)
		}
		t.order = t.order[1:]
	}
}

// take reports whether id was cancelled (within the TTL) and forgets it.
func (t *tombstones) take(id string, now time.Time) bool {
	at, ok := t.at[id]
	if !ok {
		return false
	}
	delete(t.at, id)
	return now.Sub(at) <= tombstoneTTL
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
	l := &lease{id: ids.New(), worker: w, res: p.res, actorID: p.actorID, holder: p.holder, requestID: p.requestID}
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

// releaseLeaseLocked forgets l and gives the resources it still holds back
// to the node. It reports false when l had already ended.
func (r *Raylet) releaseLeaseLocked(l *lease) bool {
	if r.leases[l.id] != l {
		return false
	}
	delete(r.leases, l.id)
	if l.worker.lease == l {
		l.worker.lease = nil
	}
	r.available.Add(l.held())
	l.blocked = false
	return true
}

// returnLeaseLocked ends l: its resources return to the pool and the worker
// becomes idle, or is killed when disconnect is set, it hosted an actor or
// its job has finished. Returning an ended lease does nothing.
func (r *Raylet) returnLeaseLocked(l *lease, disconnect bool) {
	if !r.releaseLeaseLocked(l) {
		return
	}
	w := l.worker
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
	r.takeQueuedLocked(func(p *pendingLease) bool {
		if p.job != j {
			return false
		}
		p.err = err
		close(p.ready)
		return true
	})
}

// takeQueuedLocked removes the waiting requests for which take reports true
// (take answers them) and drops the classes it empties.
func (r *Raylet) takeQueuedLocked(take func(*pendingLease) bool) {
	for i := 0; i < len(r.order); {
		c := r.order[i]
		c.queue = slices.DeleteFunc(c.queue, take)
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
