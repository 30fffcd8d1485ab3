package raylet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/recvseg"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/rpc"
	"github.com/goray-dev/goray/raylet/internal/policy"
)

// The operations in this file span components: each calls them one after
// another and holds no lock of its own (see the lock rule in the package
// doc). The gRPC handlers (rpc.go) call them, or one component.

// registerJob registers a local driver's job: its binary is checked, the
// job reserved here, added to the GCS and, once the cluster view is fresh,
// made ready (before the driver's reply: it leases workers as soon as it
// has it).
func (r *Raylet) registerJob(ctx context.Context, j *job) error {
	// Check the binary now (hashed once per sha256 and cached), so that no
	// worker ever runs an unchecked one.
	if _, err := r.jobs.binaryPath(ctx, j.info); err != nil {
		return &badBinaryError{err: err}
	}
	// And the shipped working dir: copied from the driver's archive into
	// the cache (where other nodes fetch it) and unpacked.
	if _, err := r.jobs.workingDir(ctx, j.info); err != nil {
		return &badBinaryError{err: err}
	}
	// Reserved; not ready until the GCS knows it.
	if err := r.jobs.reserve(j); err != nil {
		return err
	}
	if r.cfg.GCS != nil {
		// Through a GCS outage the driver's registration waits for the GCS,
		// until the driver gives up (its context).
		req := &gorayv1.AddJobRequest{Job: j.info}
		if err := rpc.Retry(ctx, r.gcsAddress(), "AddJob", func(ctx context.Context, opts ...grpc.CallOption) error {
			_, err := r.cfg.GCS.AddJob(ctx, req, opts...)
			return err
		}); err != nil {
			r.jobs.remove(j)
			return &gcsError{what: fmt.Sprintf("adding job %s to the GCS", j.id), err: err}
		}
		// The job will schedule here: start from a fresh view of the
		// cluster, not one up to a report period old.
		r.syncCluster(ctx)
	}
	j.ready.Store(true)
	return nil
}

// badBinaryError is a job whose binary could not be checked.
type badBinaryError struct{ err error }

func (e *badBinaryError) Error() string { return e.err.Error() }
func (e *badBinaryError) Unwrap() error { return e.err }

// gcsError is a failed GCS call, keeping the GCS's status code.
type gcsError struct {
	what string
	err  error
}

func (e *gcsError) Error() string { return e.what + ": " + e.err.Error() }
func (e *gcsError) Unwrap() error { return e.err }

// workerReady makes a worker that got its REGISTERED reply idle and
// dispatches waiting requests to it.
func (r *Raylet) workerReady(w *worker) {
	if r.pool.ready(w) {
		r.sched.dispatch()
	}
}

// requestLease decides where p goes and, when it stays here, queues it
// (learning the job of another node's driver first) and waits for its
// lease. The decision says when it goes elsewhere (Spill) or cannot run
// (Unschedulable). When ctx ends first (or just as the lease is granted)
// the request is withdrawn and the error is ctx's.
func (r *Raylet) requestLease(ctx context.Context, jobID ids.ID, p *pendingLease, spilled int32) (policy.Decision, *lease, error) {
	if r.stopping.Load() {
		return policy.Decision{}, nil, ErrShuttingDown
	}
	j, err := r.jobs.lookup(jobID)
	switch {
	case err != nil:
		return policy.Decision{}, nil, err
	case j == nil && r.cfg.GCS == nil:
		return policy.Decision{}, nil, &JobNotFoundError{Job: jobID}
	}
	p.job = j
	view := r.cluster.snapshot()
	if st := p.strategy; st.GetKind() == gorayv1.SchedulingStrategy_NODE_AFFINITY && r.cfg.GCS != nil {
		if target, err := ids.FromBytes(st.GetNodeId()); err == nil && target != r.cfg.NodeID && view.byID[target] == nil {
			// A node that joined since the last refresh: look again.
			r.syncCluster(ctx)
			view = r.cluster.snapshot()
		}
	}
	d, err := r.sched.request(p, view, spilled)
	if err != nil || d.Spill != nil || d.Unschedulable != "" {
		return d, nil, err
	}
	if p.job == nil {
		// A job of another node's driver: learn it (and its binary) first.
		if p.job, err = r.remoteJob(ctx, jobID); err != nil {
			return d, nil, err
		}
		if err := r.sched.enqueue(p); err != nil {
			return d, nil, err
		}
	}
	select {
	case <-p.ready:
	case <-ctx.Done():
		if dequeued, granted := r.sched.withdraw(p); granted != nil {
			r.sched.returnLease(granted.id, false) // no-op when already ended
		} else if dequeued {
			r.sched.dispatch()
		}
		return d, nil, ctx.Err()
	}
	switch {
	case p.err != nil:
		return d, nil, p.err
	case p.spill != nil:
		return policy.Decision{Spill: p.spill}, nil, nil
	}
	l := p.lease
	if l.cancelled.Load() {
		return d, nil, &LeaseCancelledError{RequestID: []byte(p.requestID)}
	}
	if err := ctx.Err(); err != nil {
		// Granted as the caller gave up: it would never learn of the lease.
		r.sched.returnLease(l.id, false)
		return d, nil, err
	}
	r.log.Trace("lease granted", "lease_id", l.id, "worker_id", l.worker.id, "job_id", jobID,
		"resources", p.res.String(), "actor_id", p.actorID, "function", p.function)
	return d, l, nil
}

// cancelLease cancels the lease request named rid (see CancelWorkerLease)
// and reports how many requests were waiting and leases returned.
func (r *Raylet) cancelLease(rid string) (waiting, returned int) {
	waiting, granted := r.sched.cancel(rid)
	for _, l := range granted {
		r.sched.returnLease(l.id, false)
	}
	if waiting > 0 && len(granted) == 0 {
		r.sched.dispatch()
	}
	return waiting, len(granted)
}

// cancelBundles gives back the bundles of group named by indexes (none:
// every bundle of the group here, and the group is remembered as removed;
// see scheduler.cancelBundles). The workers of the leases that held the
// cancelled bundles' resources are killed at once, with reason, and the
// resources given back are dispatched. It reports how many workers were
// killed and the available resources after the call.
func (r *Raylet) cancelBundles(group ids.ID, indexes []int, reason string) (killed int, avail resources.Set) {
	all := len(indexes) == 0
	if reason == "" {
		reason = fmt.Sprintf("the bundles of placement group %s on node %s were cancelled", group.Short(), r.cfg.NodeID.Short())
	}
	ended := r.sched.cancelBundles(group, indexes, all, reason)
	if len(ended) > 0 {
		ws := make([]*worker, 0, len(ended))
		for _, l := range ended {
			if l.worker != nil && !slices.Contains(ws, l.worker) {
				ws = append(ws, l.worker)
			}
		}
		r.pool.forceKill(ws, reason)
		killed = len(ws)
		r.log.Info("placement group bundles cancelled; killed their workers", "group", group.Short(),
			"bundles", indexes, "workers", killed, "reason", reason)
	}
	r.sched.dispatch()
	return killed, r.sched.availableResources()
}

// releaseUnusedBundles gives back every placement group bundle held here
// that inUse does not name (see scheduler.releaseUnused): the GCS's sweep
// after a restart. The workers of the leases that held the released
// bundles' resources are killed at once, with reason, and the resources
// given back are dispatched. It reports the bundles released and the
// available resources after the call.
func (r *Raylet) releaseUnusedBundles(inUse map[bundleRef]bool, reason string) (released []bundleRef, avail resources.Set) {
	if reason == "" {
		reason = fmt.Sprintf("placement group bundle released from node %s: the GCS does not have it placed there", r.cfg.NodeID.Short())
	}
	released, ended := r.sched.releaseUnused(inUse)
	killed := 0
	if len(ended) > 0 {
		ws := make([]*worker, 0, len(ended))
		for _, l := range ended {
			if l.worker != nil && !slices.Contains(ws, l.worker) {
				ws = append(ws, l.worker)
			}
		}
		r.pool.forceKill(ws, reason)
		killed = len(ws)
	}
	if len(released) > 0 {
		names := make([]string, 0, len(released))
		for _, b := range released {
			names = append(names, fmt.Sprintf("%s[%d]", b.group.Short(), b.index))
		}
		r.log.Info("released placement group bundles the GCS does not use", "bundles", names,
			"in_use", len(inUse), "workers_killed", killed, "reason", reason)
	}
	r.sched.dispatch()
	return released, r.sched.availableResources()
}

// taskBlocked records that the task of worker id blocked or resumed (see
// NotifyTaskBlocked).
func (r *Raylet) taskBlocked(id ids.ID, blocked bool) error {
	l, alive := r.pool.leaseOf(id)
	switch {
	case !alive && r.jobs.isDriver(id):
		return nil // drivers hold no lease
	case !alive:
		return &WorkerNotFoundError{Worker: id}
	case l == nil:
		return nil
	}
	if r.sched.setBlocked(l, blocked) {
		r.sched.dispatch()
	}
	return nil
}

// freeObjects frees objects (raw: their ids as sent) here and, with
// broadcast, on every other node.
func (r *Raylet) freeObjects(objs []ids.ObjectID, raw [][]byte, broadcast bool) {
	r.objects.free(objs)
	if broadcast {
		r.cluster.tell("free objects", func(ctx context.Context, c gorayv1.RayletClient) error {
			_, err := c.FreeObjects(ctx, &gorayv1.FreeObjectsRequest{ObjectIds: raw})
			return err
		})
	}
}

// remoteProcessesDied handles the death of drivers or workers of another
// node: the objects they owned are freed here, local processes drop them
// as borrowers, and the leases they held here end with their workers
// killed, as Ray kills the workers leased by an owner that died: the tasks
// they run have no one to return to, and a task of a removed placement
// group whose children ran here left their leases held, their CPUs out of
// use, until its job ended.
func (r *Raylet) remoteProcessesDied(dead []ids.ID) {
	for _, id := range dead {
		r.objects.ownerDied(id)
		r.broadcastDied(id)
		for _, l := range r.sched.heldBy(id) {
			r.sched.returnLease(l.id, true)
		}
	}
}

// workerDied implements poolEvents: after the pool forgot a dead worker,
// its lease's resources return to the node, as do the leases it held; its
// store pins and unsealed objects are dropped and the objects it owned
// freed; the node's other sessions and the other nodes are told of its
// death (WORKER_DIED); its stale socket file is removed; and the GCS
// learns of the death of an actor it hosted.
func (r *Raylet) workerDied(d workerDeath) {
	w := d.w
	if d.jobFailed != nil {
		r.sched.failJob(w.job, &w.spec, d.jobFailed)
	}
	if d.lease != nil {
		r.sched.endLease(d.lease)
	}
	// Leases this worker held on other workers (it submitted tasks or
	// created actors) would otherwise keep their resources forever.
	for _, l := range r.sched.heldBy(w.id) {
		r.sched.returnLease(l.id, false)
	}
	aborts, frees := r.objects.objectsOf(w.id)
	if d.registered {
		r.broadcastDied(w.id)
		if !d.closed {
			defer r.notifyPeersDied(w.id)
		}
	}
	if !d.closed {
		r.sched.dispatch()
	}
	r.cfg.Store.ReleaseClient(w.id)
	r.objects.dropObjects(aborts, frees)
	if d.registered {
		removeStaleSocket(w.addr.GetUnixPath())
	}
	r.sweepReceived(w.id)
	if d.actorID.IsNil() {
		r.log.Debug("worker exited", "worker_id", w.id, "job_id", w.job.id, "pid", d.pid, "reason", d.reason)
		return
	}
	r.log.Info("actor worker died", "worker_id", w.id, "actor_id", d.actorID, "pid", d.pid, "reason", d.reason)
	// During Shutdown one node-wide report covers every actor.
	if r.cfg.GCS != nil && !d.closed {
		req := &gorayv1.ReportWorkerFailureRequest{
			WorkerId: w.id.Bytes(), NodeId: r.cfg.NodeID.Bytes(), Reason: d.reason, Permanent: d.permanent,
			OutOfMemory: d.memoryKilled,
		}
		r.tellGCS("reporting the death of worker "+w.id.Short()+" (actor "+d.actorID.Short()+")", func(ctx context.Context, opts ...grpc.CallOption) error {
			_, err := r.cfg.GCS.ReportWorkerFailure(ctx, req, opts...)
			return err
		})
	}
}

// endJob ends j after its driver disconnected (or, for a job of another
// node's driver, after the GCS said it finished).
func (r *Raylet) endJob(j *job) {
	if !r.jobs.finish(j) {
		return
	}
	r.sched.failJob(j, nil, &JobFinishedError{Job: j.id})
	r.pool.endJob(j)
	r.logs.endJob(j.id)
	if !j.driverID.IsNil() {
		aborts, frees := r.objects.objectsOf(j.driverID)
		if j.ready.Load() {
			r.broadcastDied(j.driverID)
			if !r.stopping.Load() {
				r.notifyPeersDied(j.driverID)
			}
		}
		r.sweepReceived(j.driverID)
		r.cfg.Store.ReleaseClient(j.driverID)
		r.objects.dropObjects(aborts, frees)
	}
	if r.cfg.GCS != nil && !j.remote {
		req := &gorayv1.MarkJobFinishedRequest{JobId: j.id.Bytes()}
		r.tellGCS("marking job "+j.id.Short()+" finished", func(ctx context.Context, opts ...grpc.CallOption) error {
			_, err := r.cfg.GCS.MarkJobFinished(ctx, req, opts...)
			return err
		})
	}
	r.log.Info("job finished", "job_id", j.id)
}

// broadcastDied tells every other live session of the node (drivers of
// running jobs and registered workers) that the process dead died, so
// that owners drop it as a borrower.
func (r *Raylet) broadcastDied(dead ids.ID) {
	if r.stopping.Load() || dead.IsNil() {
		return
	}
	died := func() *gorayv1.RayletCommand {
		return &gorayv1.RayletCommand{Kind: gorayv1.RayletCommand_WORKER_DIED, WorkerId: dead.Bytes()}
	}
	r.jobs.push(dead, died)
	r.pool.push(dead, died)
}

// notifyPeersDied tells the other nodes that a local driver or worker
// died, batched with the other deaths not sent to each yet (deaths.go).
func (r *Raylet) notifyPeersDied(id ids.ID) {
	r.cluster.deaths.died(id)
}

// sweepReceived unlinks the tensor segments receives allocated for a dead
// driver or worker that it never released (see package recvseg).
func (r *Raylet) sweepReceived(id ids.ID) {
	segs, err := recvseg.Sweep(recvseg.Dir(r.cfg.SessionDir, id))
	if err != nil {
		r.log.Warn("unlinking a dead process's tensor segments failed", "worker_id", id, "error", err)
	}
	if len(segs) > 0 {
		r.log.Debug("unlinked a dead process's tensor segments", "worker_id", id, "segments", len(segs))
	}
}

// syncCluster refreshes the view of the other nodes from the GCS. Newly dead
// nodes are handled (their objects' owners, local sessions told), and
// requests waiting here are passed on to nodes that can run them now.
func (r *Raylet) syncCluster(ctx context.Context) {
	died, ok := r.cluster.refresh(ctx)
	if !ok {
		return
	}
	var deadIDs []ids.ID
	for _, p := range died {
		r.log.Warn("node died", "node_id", p.ID, "reason", p.Info.GetDeathReason())
		cmd := func() *gorayv1.RayletCommand { // one message per stream
			return &gorayv1.RayletCommand{Kind: gorayv1.RayletCommand_NODE_DIED, NodeId: p.ID.Bytes(), Reason: p.Info.GetDeathReason()}
		}
		r.jobs.push(ids.Nil, cmd)
		r.pool.push(ids.Nil, cmd)
		deadIDs = append(deadIDs, p.ID)
	}
	r.cluster.deaths.forget(deadIDs)
	// The processes of a dead node died with it: the leases they held
	// here end, and their workers are stopped (as for a remote holder
	// reported dead, remoteProcessesDied), or their CPUs stay held until
	// the job ends.
	for _, id := range deadIDs {
		for _, l := range r.sched.heldOn(id) {
			r.sched.returnLease(l.id, true)
		}
	}
	r.sched.respill(r.cluster.snapshot(), time.Now())
	r.objects.freeOwnedOn(deadIDs)
	r.syncJobs(ctx)
}

// syncJobs ends the jobs of other nodes' drivers that finished.
func (r *Raylet) syncJobs(ctx context.Context) {
	remote := r.jobs.remote()
	if len(remote) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, gcsTimeout)
	defer cancel()
	rep, err := r.cfg.GCS.GetAllJobs(ctx, &gorayv1.GetAllJobsRequest{})
	if err != nil {
		return
	}
	for _, info := range rep.GetJobs() {
		if info.GetState() != "FINISHED" {
			continue
		}
		id, err := ids.FromBytes(info.GetJobId())
		if err != nil {
			continue
		}
		if j := r.jobs.get(id); j != nil && j.remote {
			r.endJob(j)
		}
	}
}

// peerClient returns a client for the raylet of node id, if it is known
// and alive, refreshing the view once for a node it does not know.
func (r *Raylet) peerClient(id ids.ID) (gorayv1.RayletClient, *gorayv1.NodeInfo, error) {
	p := r.cluster.peer(id)
	if p == nil && r.cfg.GCS != nil {
		// Joined since the last refresh, perhaps.
		r.syncCluster(context.Background())
		p = r.cluster.peer(id)
	}
	if p == nil {
		return nil, nil, fmt.Errorf("node %s is not in the cluster", id.Short())
	}
	c, err := r.cluster.client(p)
	return c, p.Info, err
}

// peerInfo implements peerDirectory.
func (r *Raylet) peerInfo(node ids.ID) (*gorayv1.NodeInfo, error) {
	_, info, err := r.peerClient(node)
	return info, err
}

// nodeDied implements peerDirectory: it reports whether a transfer from
// node failed because the node is dead (err says so, or the cluster view
// does once refreshed).
func (r *Raylet) nodeDied(node ids.ID, err error) bool {
	var nd *NodeDeadError
	if errors.As(err, &nd) {
		return true
	}
	if r.cfg.GCS == nil || isClosed(r.closing) {
		return false
	}
	r.syncCluster(context.Background())
	_, _, perr := r.peerClient(node)
	return errors.As(perr, &nd)
}

// remoteJob returns the job of a driver on another node, registering it
// here: its record comes from the GCS and its binary from the driver's
// node (content-addressed by sha256, cached per node and checked before
// any worker runs it).
func (r *Raylet) remoteJob(ctx context.Context, jobID ids.ID) (*job, error) {
	gctx, cancel := context.WithTimeout(ctx, gcsTimeout)
	// With env: the variables the driver forwards to its workers.
	rep, err := r.cfg.GCS.GetAllJobs(gctx, &gorayv1.GetAllJobsRequest{IncludeEnv: true})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("looking up job %s in the GCS: %w", jobID.Short(), err)
	}
	var info *gorayv1.JobInfo
	for _, j := range rep.GetJobs() {
		if string(j.GetJobId()) == string(jobID[:]) {
			info = proto.Clone(j).(*gorayv1.JobInfo)
		}
	}
	if info == nil {
		return nil, &JobNotFoundError{Job: jobID}
	}
	if info.GetState() == "FINISHED" || string(info.GetDriverNodeId()) == string(r.cfg.NodeID[:]) {
		// (A job of a local driver that is not registered here has ended.)
		return nil, &JobFinishedError{Job: jobID}
	}
	path, err := r.jobs.binaryPath(ctx, info)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", jobID.Short(), err)
	}
	info.BinaryPath = path
	if wd := info.GetWorkingDir(); wd != "" {
		if st, err := os.Stat(wd); err != nil || !st.IsDir() {
			info.WorkingDir = "" // the driver's directory does not exist here
		}
	}
	j, err := r.jobs.addRemote(jobID, info)
	if err == nil && j.info == info {
		r.log.Info("job of another node registered", "job_id", jobID, "binary", path,
			"driver_node", idShort(info.GetDriverNodeId()))
	}
	return j, err
}

func idShort(b []byte) string {
	id, err := ids.FromBytes(b)
	if err != nil {
		return "?"
	}
	return id.Short()
}

func spillReply(p *policy.Node) *gorayv1.LeaseReply {
	return &gorayv1.LeaseReply{SpillbackNodeId: p.ID.Bytes(), SpillbackRaylet: p.Info.GetRayletTcp()}
}
