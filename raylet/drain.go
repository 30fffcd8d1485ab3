package raylet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dustin/go-humanize"

	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/raylet/internal/spill"
)

// Draining (DrainRaylet, which the GCS's DrainNode forwards): before the
// autoscaler terminates an idle node, the node moves its primary copies
// away, so that no object still referenced dies with it (Ray's DrainNode).
//
// The first call is accepted only when the node is idle — no lease
// granted, no lease request queued, no placement group bundle held, not the
// head — and each primary copy it holds can outlive it: it holds none, or
// it spills to shared storage (spill.Spiller.Shared: a storage plugin
// every node reads, with each spilled object recorded in the GCS). A
// refused call changes nothing and says why. Once accepted the scheduler
// grants nothing more (requests go to other nodes, or wait here), the
// heartbeats say the node drains (other raylets send it no work, the GCS
// places no bundle on it), and a background loop spills every primary copy
// to the shared storage (spill.Spiller.SpillAll), again and again, so that
// copies made meanwhile (a worker finishing a task) are moved too. The node
// is drained once no primary copy is left only on it and no lease is
// granted. A cancel ends the drain and the node schedules again. A drained
// node that stops keeps its spilled files and their GCS records (see
// spill.Spiller.DeleteAll): readers restore the objects from them.

// Drain loop timing.
const (
	// drainCheck is how often a draining node looks for primary copies
	// to spill.
	drainCheck = 100 * time.Millisecond
	// drainBackoffMax caps the wait between failed spill rounds.
	drainBackoffMax = 5 * time.Second
)

// drainer is the node's drain before it is terminated: whether it drains
// and why, its background spill loop and that loop's last outcome. The
// scheduler's own flag (scheduler.draining) is what stops grants; the
// drainer runs the loop and reports.
//
// mu guards every field but op; it is never held across a call to another
// component. op serialises the drain operations (Raylet.drain and
// Raylet.cancelDrain): each holds it from start to end while it asks the
// scheduler, the object manager and the spiller, so that two calls do not
// interleave a start with a cancel. No component ever calls the drainer,
// and nothing else takes op, so holding it across those calls cannot
// deadlock.
type drainer struct {
	closing <-chan struct{}

	op sync.Mutex

	mu       sync.Mutex
	closed   bool // the node shuts down: no loop starts any more
	active   bool
	reason   string
	stop     context.CancelFunc // ends the loop (nil: none runs)
	loopDone chan struct{}      // closed when the loop returned
	lastErr  error              // the loop's last spill error, nil once one succeeds
}

func newDrainer(closing <-chan struct{}) *drainer {
	return &drainer{closing: closing}
}

// start records that the node drains for reason and, when loop is not
// nil, runs it in the background until the drain ends (end) or the node
// shuts down (closing; close then waits for it).
func (d *drainer) start(reason string, loop func(ctx context.Context)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.active, d.reason, d.lastErr = true, reason, nil
	if loop == nil || d.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	d.stop, d.loopDone = cancel, done
	go func() {
		defer close(done)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			select {
			case <-d.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		loop(ctx)
		cancel()
		<-watched
	}()
}

// isActive reports whether the node drains.
func (d *drainer) isActive() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.active
}

// stopLoop ends the background loop, if one runs, and waits for it.
func (d *drainer) stopLoop() {
	d.mu.Lock()
	stop, done := d.stop, d.loopDone
	d.stop, d.loopDone = nil, nil
	d.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// close stops the loop for good (Shutdown): none starts after it.
func (d *drainer) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.stopLoop()
}

// end ends the drain (its loop first) and reports whether the node was
// draining, and why.
func (d *drainer) end() (was bool, reason string) {
	d.stopLoop()
	d.mu.Lock()
	defer d.mu.Unlock()
	was, reason = d.active, d.reason
	d.active, d.reason, d.lastErr = false, "", nil
	return was, reason
}

// setLast records the outcome of a spill round of the loop.
func (d *drainer) setLast(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastErr = err
}

// last returns the loop's last spill error.
func (d *drainer) last() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastErr
}

// drainStatus is the answer to a DrainRaylet call.
type drainStatus struct {
	accepted  bool
	rejection string
	drained   bool
	left      int64
	progress  string
}

func (s drainStatus) reply() *gorayv1.DrainRayletReply {
	return &gorayv1.DrainRayletReply{
		Accepted: s.accepted, RejectionReason: s.rejection, Drained: s.drained,
		PrimariesLeft: s.left, Progress: s.progress,
	}
}

// drain starts draining the node for reason when it may (see the comment
// at the top of the file), or reports the progress of the drain under
// way. A refusal (accepted false, with the reasons) changes nothing.
// ErrShuttingDown once the node stops.
func (r *Raylet) drain(reason string) (drainStatus, error) {
	r.drainer.op.Lock()
	defer r.drainer.op.Unlock()
	if r.stopping.Load() {
		return drainStatus{}, ErrShuttingDown
	}
	if r.drainer.isActive() {
		return r.drainProgress(), nil
	}
	var reasons []string
	if r.cfg.IsHead {
		reasons = append(reasons, "node is the head node")
	}
	shared := r.objects.spill.Shared()
	h := r.objects.holdings()
	if h.Left > 0 && !shared {
		reasons = append(reasons, noSharedStorage(h))
	}
	if len(reasons) > 0 {
		// Refused anyway: say everything that is in the way.
		b := r.sched.drainBlockers()
		return r.refuseDrain(append(b.reasons(), reasons...)), nil
	}
	b, ok, err := r.sched.startDrain()
	switch {
	case err != nil:
		return drainStatus{}, err
	case !ok:
		return r.refuseDrain(b.reasons()), nil
	}
	r.objects.spill.SetDraining(true)
	var loop func(context.Context)
	if shared {
		loop = r.drainLoop
	}
	r.drainer.start(reason, loop)
	r.log.Info("node draining: it takes no new work and moves its primary copies to shared storage",
		"node_id", r.cfg.NodeID, "reason", reason, "primary_copies", h.Left+h.Moved, "storage", r.objects.spill.Location())
	st := r.drainProgress()
	st.accepted = true
	return st, nil
}

// refuseDrain is the answer to a drain refused for reasons.
func (r *Raylet) refuseDrain(reasons []string) drainStatus {
	msg := strings.Join(reasons, "; ")
	r.log.Info("drain refused", "node_id", r.cfg.NodeID, "reason", msg)
	return drainStatus{rejection: msg}
}

// noSharedStorage says that the primary copies of h cannot leave the node.
func noSharedStorage(h spill.Holdings) string {
	them := "them"
	if h.Left == 1 {
		them = "it"
	}
	return fmt.Sprintf("node holds %s (%s) and has no shared spill storage to move %s to",
		plural(h.Left, "primary copy", "primary copies"), humanize.IBytes(uint64(h.LeftBytes)), them)
}

// drainProgress reports the drain under way: drained once no primary copy
// is left only on this node and no lease is granted.
func (r *Raylet) drainProgress() drainStatus {
	leases := r.sched.grantedLeases()
	h := r.objects.holdings()
	st := drainStatus{accepted: true, left: int64(h.Left), drained: h.Left == 0 && leases == 0}
	var parts []string
	switch {
	case h.Left+h.Moved == 0:
		parts = append(parts, "no primary copy held")
	case r.objects.spill.Shared():
		parts = append(parts, fmt.Sprintf("spilled %d of %d primary copies to %s", h.Moved, h.Moved+h.Left, r.objects.spill.Location()))
		if h.Left > 0 {
			left := fmt.Sprintf("%d left (%s)", h.Left, humanize.IBytes(uint64(h.LeftBytes)))
			if h.Busy > 0 {
				left += fmt.Sprintf(", %d of them pinned by readers or not sealed yet", h.Busy)
			}
			parts = append(parts, left)
		}
		if err := r.drainer.last(); err != nil {
			parts = append(parts, "spilling is failing: "+err.Error())
		}
	default:
		parts = append(parts, noSharedStorage(h))
	}
	if leases > 0 {
		parts = append(parts, plural(leases, "lease", "leases")+" granted")
	}
	st.progress = strings.Join(parts, "; ")
	if st.drained {
		st.progress = "drained: " + st.progress
	}
	return st
}

// cancelDrain ends the drain: the loop stops, the node schedules again
// (the requests that waited are dispatched) and a later stop deletes its
// spilled files as usual. Cancelling a node that does not drain is no
// error.
func (r *Raylet) cancelDrain(reason string) drainStatus {
	r.drainer.op.Lock()
	defer r.drainer.op.Unlock()
	was, why := r.drainer.end()
	r.objects.spill.SetDraining(false)
	if r.sched.endDrain() {
		r.sched.dispatch()
	}
	if !was {
		return drainStatus{accepted: true, progress: "the node was not draining"}
	}
	r.log.Info("drain cancelled: the node schedules again", "node_id", r.cfg.NodeID, "reason", reason, "drained_for", why)
	return drainStatus{accepted: true, progress: "drain cancelled: the node schedules again"}
}

// drainLoop spills every primary copy to the shared storage, again every
// drainCheck (copies made meanwhile are moved too), backing off while the
// storage fails, until ctx ends.
func (r *Raylet) drainLoop(ctx context.Context) {
	backoff := drainCheck
	for {
		n, err := r.objects.spill.SpillAll(ctx)
		if ctx.Err() != nil {
			return
		}
		r.drainer.setLast(err)
		wait := drainCheck
		if err != nil {
			r.log.Warn("draining: spilling primary copies failed; retrying", "error", err, "retry_in", backoff)
			wait, backoff = backoff, min(2*backoff, drainBackoffMax)
		} else {
			backoff = drainCheck
			if n > 0 {
				r.log.Debug("draining: primary copies spilled", "objects", n)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// plural is "1 lease" or "2 leases".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
