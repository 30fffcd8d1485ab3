package raylet

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/raylet/internal/policy"
)

// respillAfter is how long a request waits locally before the raylet looks
// for another node that could run it now.
const respillAfter = 200 * time.Millisecond

// lease is a granted worker lease. The fields above blocked never change
// once the lease is granted; blocked and ended are guarded by scheduler.mu.
type lease struct {
	id      ids.ID
	res     resources.Set
	actorID ids.ID
	// holder is the process the lease was granted to (zero when the
	// request did not say); its death returns the lease, as does the
	// death of holderNode, the node it runs on (zero: not said).
	holder     ids.ID
	holderNode ids.ID
	// requestID is the caller's name for the request that was granted
	// (empty for old callers); CancelWorkerLease finds the lease by it.
	requestID string
	// detached: the lease hosts a detached actor, whose worker outlives
	// its job (workerPool.endJob keeps it).
	detached bool
	// worker, addr and pid are set by the worker pool when it binds an
	// idle worker to the lease, before the lease is granted.
	worker *worker
	addr   *gorayv1.Address
	pid    int
	// cancelled is set when CancelWorkerLease returned the lease before
	// its request's reply was sent.
	cancelled atomic.Bool
	// blocked is set while the worker is blocked in Get: the lease's CPU
	// is lent back to the node.
	blocked bool
	// ended is set once the lease was returned (or its worker died).
	ended bool
	// retriable, function and created are the memory monitor's: whether
	// the request said its work may be retried, what it was for, and when
	// the lease was made (the newest is killed first).
	retriable bool
	function  string
	created   time.Time
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
// lease, spill or err is set (under scheduler.mu); answered says so.
type pendingLease struct {
	job     *job
	res     resources.Set
	actorID ids.ID
	holder  ids.ID
	// holderNode is lease.holderNode.
	holderNode ids.ID
	// requestID is the caller's name for the request (may be empty).
	requestID string
	detached  bool // for a detached actor (lease.detached)
	function  string
	retriable bool // LeaseRequest.retriable, for the memory monitor
	// spec is the request's variables and working dir: only a worker
	// started with them serves it (worker.spec).
	spec     workerSpec
	strategy *gorayv1.SchedulingStrategy
	// group is the placement group the request is for (ids.Nil: none);
	// its resources are then the group's.
	group    ids.ID
	queued   time.Time
	class    *schedClass
	ready    chan struct{}
	answered bool
	// cand is the lease the request gets when a dispatch picks it: its
	// resources are reserved and the worker pool binds a worker to it.
	cand  *lease
	lease *lease
	// spill, when set instead of lease, sends the caller to another node.
	spill *policy.Node
	err   error
}

// answer closes p.ready; s.mu must be held.
func (p *pendingLease) answer() {
	p.answered = true
	close(p.ready)
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

// workerBinder is what the scheduler needs from the worker pool.
type workerBinder interface {
	// bindIdle first takes back the worker of the lease that ended
	// (rd.ended, when set: idle again, or killed when rd.disconnect is
	// set, it hosted an actor or its job finished), then binds an idle
	// worker of its job (the most recently used) to each candidate's
	// lease (p.cand), leaving candidates of jobs without an idle worker
	// unbound, then starts workers for rd.need and the unbound candidates,
	// within the concurrent start limit.
	bindIdle(rd *dispatchRound)
	// unbind makes the workers bound to leases that were not granted idle
	// again.
	unbind(ls []*lease)
}

// dispatchRound is one pass of a dispatch: the lease that ended (its
// worker goes back to the pool), the requests picked (their resources
// reserved), the workers to start, and what to give back.
type dispatchRound struct {
	ended      *lease
	disconnect bool
	cands      []*pendingLease
	need       []jobNeed
	skip       []poolKey // workers kinds without an idle worker in this dispatch
	unbound    []*lease  // bound to requests answered meanwhile
}

// jobNeed is how many more workers of job, started with the variables env
// names, the waiting requests could use.
type jobNeed struct {
	job  *job
	spec workerSpec
	n    int
}

func (rd *dispatchRound) addNeed(j *job, spec workerSpec) {
	for i := range rd.need {
		if rd.need[i].job == j && rd.need[i].spec == spec {
			rd.need[i].n++
			return
		}
	}
	rd.need = append(rd.need, jobNeed{j, spec, 1})
}

var rounds = sync.Pool{New: func() any { return new(dispatchRound) }}

// scheduler is the node's lease scheduler: it decides where a lease
// request goes (the policies of package policy over this node and the
// cluster view), queues the requests that run here in scheduling classes,
// grants them to idle workers of their job as resources allow, and keeps
// the granted leases, the node's total and available resources, and the
// placement group bundles held here (bundles.go).
//
// While the node drains (draining, see drain.go) the scheduler grants no
// lease and prepares no bundle: the policies send requests to other nodes
// (those only this node can take wait here), and waiting ones are passed
// on as other nodes free up.
//
// mu guards total (the node's own resources plus the committed bundles'
// group resources), available, leases, the classes and their queues, the
// round-robin cursors, the tombstones, bundles, removed, draining and the
// fields of pendingLease, lease and heldBundle that say so. The scheduler
// calls the worker pool (workers) only with mu released.
type scheduler struct {
	nodeID  ids.ID
	log     hclog.Logger
	workers workerBinder

	mu         sync.Mutex
	closed     bool
	total      resources.Set
	available  resources.Set
	leases     map[ids.ID]*lease
	classes    map[string]*schedClass
	order      []*schedClass
	rr         int
	spreadNext int
	tombstones tombstones
	// bundles are the placement group bundles held here, by group and
	// index; removed are the groups the GCS said were removed.
	bundles map[ids.ID]map[int]*heldBundle
	removed removedGroups
	// draining: the node drains; nothing is granted or prepared.
	draining bool
}

func newScheduler(nodeID ids.ID, total resources.Set, log hclog.Logger, workers workerBinder) *scheduler {
	return &scheduler{
		nodeID: nodeID, total: total.Clone(), log: log, workers: workers,
		available: total.Clone(), leases: map[ids.ID]*lease{}, classes: map[string]*schedClass{},
		bundles: map[ids.ID]map[int]*heldBundle{},
	}
}

// request decides where p goes given the cluster view and, when it stays
// here and its job is known (p.job set), queues it and dispatches. A
// request whose id was cancelled before it arrived fails with
// LeaseCancelledError, one for a removed placement group with
// PlacementGroupRemovedError. A request for group resources no node has
// yet (its group is pending) waits here.
func (s *scheduler) request(p *pendingLease, view *clusterSnapshot, spilled int32) (policy.Decision, error) {
	rd := rounds.Get().(*dispatchRound)
	defer putRound(rd)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return policy.Decision{}, ErrShuttingDown
	}
	if p.requestID != "" && s.tombstones.take(p.requestID, time.Now()) {
		s.mu.Unlock()
		return policy.Decision{}, &LeaseCancelledError{RequestID: []byte(p.requestID)}
	}
	if err := s.groupRemovedLocked(p); err != nil {
		s.mu.Unlock()
		return policy.Decision{}, err
	}
	c := policy.Cluster{Self: s.nodeID, Total: s.total, Available: s.available, Peers: view.list, ByID: view.byID, Draining: s.draining}
	d := policy.Decide(&c, p.res, p.strategy, spilled, &s.spreadNext)
	if d.Spill != nil || d.Unschedulable != "" || p.job == nil {
		s.mu.Unlock()
		return d, nil
	}
	if err := s.enqueueLocked(p); err != nil {
		s.mu.Unlock()
		return d, err
	}
	s.collectLocked(rd)
	s.mu.Unlock()
	s.dispatchFrom(rd)
	return d, nil
}

// enqueue queues p (of a job learnt after request decided) and
// dispatches.
func (s *scheduler) enqueue(p *pendingLease) error {
	rd := rounds.Get().(*dispatchRound)
	defer putRound(rd)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrShuttingDown
	}
	if err := s.enqueueLocked(p); err != nil {
		s.mu.Unlock()
		return err
	}
	s.collectLocked(rd)
	s.mu.Unlock()
	s.dispatchFrom(rd)
	return nil
}

func putRound(rd *dispatchRound) {
	clear(rd.cands)
	clear(rd.need)
	clear(rd.skip)
	clear(rd.unbound)
	rd.cands, rd.need, rd.skip, rd.unbound = rd.cands[:0], rd.need[:0], rd.skip[:0], rd.unbound[:0]
	rd.ended, rd.disconnect = nil, false
	rounds.Put(rd)
}

// enqueueLocked adds p to its scheduling class.
func (s *scheduler) enqueueLocked(p *pendingLease) error {
	if p.job.finished.Load() {
		return &JobFinishedError{Job: p.job.id}
	}
	if err := s.groupRemovedLocked(p); err != nil {
		return err
	}
	key := classKey(p.job.id, p.res)
	c := s.classes[key]
	if c == nil {
		c = &schedClass{key: key, res: p.res}
		s.classes[key] = c
		s.order = append(s.order, c)
	}
	p.class = c
	c.queue = append(c.queue, p)
	return nil
}

// removeClassLocked drops the empty class at index i of the round-robin
// order, keeping the cursor on the class that followed it.
func (s *scheduler) removeClassLocked(i int) {
	c := s.order[i]
	delete(s.classes, c.key)
	s.order = slices.Delete(s.order, i, i+1)
	if i < s.rr {
		s.rr--
	}
	if s.rr >= len(s.order) {
		s.rr = 0
	}
}

// dequeueLocked removes a waiting request; it reports false when p is no
// longer queued.
func (s *scheduler) dequeueLocked(p *pendingLease) bool {
	c := p.class
	i := slices.Index(c.queue, p)
	if i < 0 {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	if len(c.queue) == 0 {
		if ci := slices.Index(s.order, c); ci >= 0 {
			s.removeClassLocked(ci)
		}
	}
	return true
}

// dispatch grants as many waiting requests as resources and idle workers
// allow, round-robin across scheduling classes and FIFO within a class,
// and has the pool start workers for the grantable requests that lack one.
func (s *scheduler) dispatch() {
	rd := rounds.Get().(*dispatchRound)
	defer putRound(rd)
	s.mu.Lock()
	s.collectLocked(rd)
	s.mu.Unlock()
	s.dispatchFrom(rd)
}

// dispatchFrom finishes a dispatch whose first pass collectLocked made:
// the pool binds workers (mu released), then the bound requests are
// granted; passes repeat while a request found no idle worker of its job
// (its job is then skipped) or was answered meanwhile.
func (s *scheduler) dispatchFrom(rd *dispatchRound) {
	for {
		if len(rd.cands) == 0 && len(rd.need) == 0 && rd.ended == nil {
			return
		}
		s.workers.bindIdle(rd)
		rd.ended = nil
		if len(rd.cands) == 0 {
			return // only workers to start
		}
		s.mu.Lock()
		again := s.finishLocked(rd)
		s.mu.Unlock()
		if len(rd.unbound) > 0 {
			s.workers.unbind(rd.unbound)
			clear(rd.unbound)
			rd.unbound = rd.unbound[:0]
		}
		if !again {
			return
		}
		s.mu.Lock()
		s.collectLocked(rd)
		s.mu.Unlock()
	}
}

// collectLocked picks the requests a dispatch grants, as if every job had
// idle workers (but those in rd.skip), reserving their resources, and the
// workers the rest could use now.
func (s *scheduler) collectLocked(rd *dispatchRound) {
	clear(rd.cands)
	clear(rd.need)
	rd.cands, rd.need = rd.cands[:0], rd.need[:0]
	if s.closed || s.draining {
		return
	}
	n := len(s.order)
	for {
		picked := false
		for k := 0; k < n; k++ {
			i := (s.rr + k) % n
			p := firstUnpicked(s.order[i])
			if p == nil || !s.available.Fits(p.res) || slices.Contains(rd.skip, keyFor(p.job, p.spec)) {
				continue
			}
			s.available.Sub(p.res)
			if p.cand == nil {
				p.cand = &lease{id: ids.New(), res: p.res, actorID: p.actorID, holder: p.holder, holderNode: p.holderNode, requestID: p.requestID, detached: p.detached,
					retriable: p.retriable, function: p.function, created: time.Now()}
			}
			rd.cands = append(rd.cands, p)
			s.rr = (i + 1) % n
			picked = true
			break
		}
		if !picked {
			break
		}
	}
	// Workers for the requests the available resources could serve now
	// once these are granted.
	var avail resources.Set
	for k := 0; k < n; k++ {
		for _, p := range s.order[(s.rr+k)%n].queue {
			if p.cand != nil {
				continue // picked by this or a concurrent dispatch
			}
			if avail == nil {
				avail = s.available.Clone()
			}
			if !avail.Fits(p.res) {
				break
			}
			avail.Sub(p.res)
			rd.addNeed(p.job, p.spec)
		}
	}
}

// firstUnpicked returns the first request of c no dispatch picked.
func firstUnpicked(c *schedClass) *pendingLease {
	for _, p := range c.queue {
		if p.cand == nil { // else a dispatch in flight grants it or puts it back
			return p
		}
	}
	return nil
}

// finishLocked grants the candidates the pool bound a worker to and puts
// the others back; it reports whether another pass may grant more.
func (s *scheduler) finishLocked(rd *dispatchRound) (again bool) {
	for _, p := range rd.cands {
		l := p.cand
		switch {
		case p.answered:
			// Cancelled, failed or passed on meanwhile.
			s.available.Add(p.res)
			p.cand = nil
			if l.worker != nil {
				rd.unbound = append(rd.unbound, l)
				again = true
			}
		case !p.group.IsNil() && !s.total.Fits(p.res):
			// Its bundle was cancelled meanwhile (cancelBundles took the
			// reserved share off available with the bundle): it waits.
			s.available.Add(p.res)
			p.cand = nil
			if l.worker != nil {
				rd.unbound = append(rd.unbound, l)
				again = true
			}
		case l.worker == nil:
			s.available.Add(p.res)
			p.cand = nil
			rd.skip = append(rd.skip, keyFor(p.job, p.spec))
			again = true
		case l.ended:
			// Its worker died while it was being bound: try again.
			s.available.Add(p.res)
			p.cand = nil
			again = true
		default:
			s.leases[l.id] = l
			p.lease = l
			s.dequeueLocked(p)
			p.answer()
		}
	}
	return again && !s.closed
}

// endLease forgets l and gives the resources it still holds back to the
// node. It reports false when l had already ended (or was never granted).
func (s *scheduler) endLease(l *lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endLeaseLocked(l)
}

func (s *scheduler) endLeaseLocked(l *lease) bool {
	l.ended = true
	if s.leases[l.id] != l {
		return false
	}
	delete(s.leases, l.id)
	s.available.Add(l.held())
	l.blocked = false
	return true
}

// returnLease ends the granted lease id: its resources return to the
// node, its worker to the pool (idle, or killed when disconnect is set, it
// hosted an actor or its job finished), and waiting requests are
// dispatched, with one pass of each lock when nothing else is waiting. It
// reports false for an unknown (already ended) lease.
func (s *scheduler) returnLease(id ids.ID, disconnect bool) bool {
	rd := rounds.Get().(*dispatchRound)
	defer putRound(rd)
	s.mu.Lock()
	l := s.leases[id]
	if l == nil || !s.endLeaseLocked(l) {
		s.mu.Unlock()
		return false
	}
	rd.ended, rd.disconnect = l, disconnect
	s.collectLocked(rd)
	s.mu.Unlock()
	s.dispatchFrom(rd)
	return true
}

// heldBy returns the leases granted to holder.
func (s *scheduler) heldBy(holder ids.ID) []*lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*lease
	for _, l := range s.leases {
		if l.holder == holder {
			out = append(out, l)
		}
	}
	return out
}

// heldOn returns the leases whose holders run on node.
func (s *scheduler) heldOn(node ids.ID) []*lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*lease
	for _, l := range s.leases {
		if !node.IsNil() && l.holderNode == node {
			out = append(out, l)
		}
	}
	return out
}

// holders returns the processes that hold leases.
func (s *scheduler) holders() map[ids.ID]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[ids.ID]bool{}
	for _, l := range s.leases {
		if !l.holder.IsNil() {
			out[l.holder] = true
		}
	}
	return out
}

// withdraw takes back a request whose caller gave up: it leaves the queue
// (it reports true; dispatch then) or, when it was granted meanwhile, its
// lease is returned (granted is that lease).
func (s *scheduler) withdraw(p *pendingLease) (dequeued bool, granted *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case p.lease != nil:
		return false, p.lease
	case p.err == nil && p.spill == nil:
		if s.dequeueLocked(p) {
			p.answered = true // never granted now; a dispatch in flight puts it back
			return true, nil
		}
	}
	return false, nil
}

// cancel cancels the requests named rid: waiting ones fail with
// LeaseCancelledError, and the leases granted for them are returned
// (marked cancelled) for the caller to end. With neither, rid is
// remembered for a request still on its way.
func (s *scheduler) cancel(rid string) (waiting int, granted []*lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ws []*pendingLease
	for _, c := range s.order {
		for _, p := range c.queue {
			if p.requestID == rid {
				ws = append(ws, p)
			}
		}
	}
	for _, p := range ws {
		s.dequeueLocked(p)
		p.err = &LeaseCancelledError{RequestID: []byte(rid)}
		p.answer()
	}
	for _, l := range s.leases {
		if l.requestID == rid {
			granted = append(granted, l)
		}
	}
	for _, l := range granted {
		l.cancelled.Store(true)
	}
	if len(ws)+len(granted) == 0 {
		s.tombstones.add(rid, time.Now())
	}
	return len(ws), granted
}

// setBlocked records that the worker of l blocked (its CPU is lent back
// to the node) or resumed (taken again, even oversubscribing). It reports
// whether resources were lent, so that a dispatch may grant more.
func (s *scheduler) setBlocked(l *lease, blocked bool) (lent bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[l.id] != l || l.blocked == blocked {
		return false
	}
	l.blocked = blocked
	if blocked {
		s.available.Add(l.lentCPU())
	} else {
		s.available.Sub(l.lentCPU()) // may go negative: oversubscribed
	}
	s.log.Trace("task blocked", "worker_id", l.worker.id, "lease_id", l.id, "blocked", blocked,
		"available", s.available.String())
	return blocked
}

// failJob fails every waiting request of j with err, or with spec only
// those asking for workers started so (their workers cannot start).
func (s *scheduler) failJob(j *job, spec *workerSpec, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takeQueuedLocked(func(p *pendingLease) bool {
		if p.job != j || (spec != nil && keyFor(p.job, p.spec) != keyFor(j, *spec)) {
			return false
		}
		p.err = err
		p.answer()
		return true
	})
}

// takeQueuedLocked removes the waiting requests for which take reports true
// (take answers them) and drops the classes it empties.
func (s *scheduler) takeQueuedLocked(take func(*pendingLease) bool) {
	for i := 0; i < len(s.order); {
		c := s.order[i]
		c.queue = slices.DeleteFunc(c.queue, take)
		if len(c.queue) == 0 {
			s.removeClassLocked(i)
			continue
		}
		i++
	}
}

// respill passes requests that have waited here for respillAfter and
// cannot be granted now (nothing is while the node drains) on to a node
// that has the resources free and does not drain.
func (s *scheduler) respill(view *clusterSnapshot, now time.Time) {
	if len(view.list) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takeQueuedLocked(func(p *pendingLease) bool {
		grantable := !s.draining && s.available.Fits(p.res) && s.total.Fits(p.res)
		if p.cand != nil || now.Sub(p.queued) < respillAfter || grantable {
			return false
		}
		st := p.strategy
		if st.GetKind() == gorayv1.SchedulingStrategy_NODE_AFFINITY && !st.GetSoft() {
			return false // pinned here
		}
		target := policy.LeastLoadedFree(view.list, p.res)
		if target == nil {
			return false
		}
		p.spill = target
		p.answer()
		return true
	})
}

// pendingDemand aggregates waiting requests by resource shape (a request
// placed in a group shows the group's resource names). A request for
// group resources this node has none of yet is not infeasible here: its
// group may still be placed here.
func (s *scheduler) pendingDemand() []*gorayv1.PendingDemand {
	s.mu.Lock()
	defer s.mu.Unlock()
	byKey := map[string]*gorayv1.PendingDemand{}
	var out []*gorayv1.PendingDemand
	for _, c := range s.order {
		k := c.res.Key()
		d := byKey[k]
		if d == nil {
			d = &gorayv1.PendingDemand{
				Resources:  resourcesProto(c.res),
				Infeasible: s.infeasibleLocked(c.res),
			}
			byKey[k] = d
			out = append(out, d)
		}
		d.Count += int32(len(c.queue))
	}
	return out
}

// availableResources returns a copy of the available resources.
func (s *scheduler) availableResources() resources.Set {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.available.Clone()
}

// close fails every waiting request with ErrShuttingDown; later requests
// fail the same way.
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, c := range s.order {
		for _, p := range c.queue {
			p.err = ErrShuttingDown
			p.answer()
		}
	}
	s.order, s.classes, s.rr = nil, map[string]*schedClass{}, 0
}

// drainBlockers is what keeps an idle node from starting to drain.
type drainBlockers struct {
	leases, queued, bundles int
}

// none reports whether nothing blocks the drain.
func (b drainBlockers) none() bool { return b.leases == 0 && b.queued == 0 && b.bundles == 0 }

// reasons says what blocks the drain ("2 leases granted").
func (b drainBlockers) reasons() []string {
	var out []string
	if b.leases > 0 {
		out = append(out, plural(b.leases, "lease", "leases")+" granted")
	}
	if b.queued > 0 {
		out = append(out, plural(b.queued, "lease request", "lease requests")+" queued")
	}
	if b.bundles > 0 {
		out = append(out, plural(b.bundles, "placement group bundle", "placement group bundles")+" held")
	}
	return out
}

func (s *scheduler) blockersLocked() drainBlockers {
	b := drainBlockers{leases: len(s.leases)}
	for _, c := range s.order {
		b.queued += len(c.queue)
	}
	for _, g := range s.bundles {
		b.bundles += len(g)
	}
	return b
}

// drainBlockers reports what would keep the node from starting to drain
// now.
func (s *scheduler) drainBlockers() drainBlockers {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blockersLocked()
}

// startDrain stops granting leases and preparing bundles, when nothing
// blocks it: no lease granted, no request queued, no bundle held (checked
// and set at once, so that nothing is granted in between). Otherwise it
// changes nothing and reports what blocks it. A node already draining
// stays so (ok). ErrShuttingDown once closed.
func (s *scheduler) startDrain() (blockers drainBlockers, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return drainBlockers{}, false, ErrShuttingDown
	}
	if s.draining {
		return drainBlockers{}, true, nil
	}
	if b := s.blockersLocked(); !b.none() {
		return b, false, nil
	}
	s.draining = true
	return drainBlockers{}, true, nil
}

// endDrain grants leases again; it reports whether the node was draining
// (the caller then dispatches the requests that waited).
func (s *scheduler) endDrain() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.draining
	s.draining = false
	return was
}

// isDraining reports whether the node drains.
func (s *scheduler) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// grantedLeases counts the leases granted and not yet ended.
func (s *scheduler) grantedLeases() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases)
}
