package raylet

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

var _ gorayv1.RayletServer = (*Raylet)(nil)

// recvUntilError reads a stream in the background, passing each message to
// handle (when not nil); the returned channel is closed when Recv fails (the
// peer closed the stream or died).
func recvUntilError[T any](recv func() (*T, error), handle func(*T)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := recv()
			if err != nil {
				return
			}
			if handle != nil {
				handle(m)
			}
		}
	}()
	return done
}

// WorkerSession serves a worker process started by this raylet: the first
// message registers it (it must carry the worker id from GORAY_WORKER_ID),
// the reply is REGISTERED with the node and store information, and the
// stream then stays open for the worker's life. Later messages report
// owns_objects (a worker that owns objects is not reaped as idle); the
// raylet sends EXIT and WORKER_DIED commands. When the stream closes the
// worker is considered dead and its process is killed.
func (r *Raylet) WorkerSession(stream gorayv1.Raylet_WorkerSessionServer) error {
	msg, err := stream.Recv()
	if err != nil {
		return err
	}
	wid, err := ids.FromBytes(msg.GetWorkerId())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "worker registration: %v", err)
	}
	r.mu.Lock()
	w := r.workers[wid]
	switch {
	case r.shuttingDown:
		r.mu.Unlock()
		return toStatus(ErrShuttingDown)
	case w == nil:
		r.mu.Unlock()
		return status.Errorf(codes.NotFound, "worker %s was not started by this raylet", wid)
	case w.state != stateStarting || w.killing:
		r.mu.Unlock()
		return status.Errorf(codes.FailedPrecondition, "worker %s cannot register in state %s", wid, w.state)
	}
	addr := proto.Clone(msg.GetAddress()).(*gorayv1.Address)
	if addr == nil {
		addr = &gorayv1.Address{}
	}
	addr.NodeId, addr.WorkerId = r.cfg.NodeID.Bytes(), wid.Bytes()
	w.addr = addr
	if w.pid == 0 {
		w.pid = int(msg.GetPid())
	}
	jobID := w.job.id
	r.mu.Unlock()

	if err := stream.Send(&gorayv1.RayletCommand{
		Kind:       gorayv1.RayletCommand_REGISTERED,
		Node:       r.nodeInfo(),
		Store:      r.storeInfo(),
		JobId:      jobID.Bytes(),
		GcsAddress: r.cfg.GCSAddress,
	}); err != nil {
		r.mu.Lock()
		r.killWorkerLocked(w, fmt.Sprintf("worker session failed: %v", err), true)
		r.mu.Unlock()
		return err
	}

	r.mu.Lock()
	if w.state == stateStarting && !w.killing {
		w.startTimer.Stop()
		w.state = stateIdle
		w.idleSince = time.Now()
		r.starting--
		w.job.starting--
		w.job.startFailures = 0
		w.job.idle = append(w.job.idle, w)
		r.dispatchLocked()
		r.log.Debug("worker registered", "worker_id", wid, "job_id", jobID, "pid", w.pid, "address", addr.GetUnixPath())
	}
	r.mu.Unlock()

	recvDone := recvUntilError(stream.Recv, func(m *gorayv1.WorkerMessage) {
		r.mu.Lock()
		w.ownsObjects = m.GetOwnsObjects()
		r.mu.Unlock()
	})
	reason := ""
loop:
	for {
		select {
		case <-w.out.notify:
			exit := false
			for _, c := range w.out.take() {
				if err := stream.Send(c); err != nil {
					reason = fmt.Sprintf("worker session failed: %v", err)
					break loop
				}
				if c.GetKind() == gorayv1.RayletCommand_EXIT {
					exit = true
					break
				}
			}
			if exit {
				break loop
			}
		case <-recvDone:
			reason = "worker session closed"
			break loop
		case <-stream.Context().Done():
			reason = "worker session closed: " + stream.Context().Err().Error()
			break loop
		case <-w.exited:
			break loop
		}
	}
	if reason != "" {
		// The process may have died on its own (the usual way a session
		// ends): let its exit status explain the death.
		r.mu.Lock()
		if w.sessionReason == "" {
			w.sessionReason = reason
		}
		r.killWorkerLocked(w, "", false)
		r.mu.Unlock()
	}
	return nil
}

// DriverSession registers a driver's job: the first message carries the
// JobInfo (a job id is assigned when empty), the job is added to the GCS,
// the reply is REGISTERED, and workers are prestarted. While the session
// lasts the driver receives WORKER_DIED for every driver or worker of the
// node that dies. When the stream closes the job ends: its workers (actors
// included) are killed, the driver's store pins dropped, the objects it
// owned freed, the other sessions told (WORKER_DIED) and the job marked
// finished in the GCS.
func (r *Raylet) DriverSession(stream gorayv1.Raylet_DriverSessionServer) error {
	msg, err := stream.Recv()
	if err != nil {
		return err
	}
	info := proto.Clone(msg.GetJob()).(*gorayv1.JobInfo)
	if info == nil || info.GetBinaryPath() == "" {
		return status.Error(codes.InvalidArgument, "driver registration: job.binary_path is required")
	}
	if !digest.ValidSHA256(info.GetBinarySha256()) {
		return status.Errorf(codes.InvalidArgument, "driver registration: job.binary_sha256 %q is not a sha256 (64 lowercase hexadecimal digits); the raylet runs only job binaries whose hash it checked", info.GetBinarySha256())
	}
	jobID := ids.New()
	if len(info.GetJobId()) > 0 {
		if jobID, err = ids.FromBytes(info.GetJobId()); err != nil {
			return status.Errorf(codes.InvalidArgument, "driver registration: job id: %v", err)
		}
	}
	info.JobId = jobID.Bytes()
	info.State = "RUNNING"
	if info.StartTimeMs == 0 {
		info.StartTimeMs = time.Now().UnixMilli()
	}
	if info.DriverPid == 0 {
		info.DriverPid = msg.GetPid()
	}
	info.DriverNodeId = r.cfg.NodeID.Bytes()
	// Check the binary now (hashed once per sha256 and cached), so that no
	// worker ever runs an unchecked one.
	if _, err := r.jobBinary(stream.Context(), info); err != nil {
		return status.Errorf(codes.InvalidArgument, "driver registration: %v", err)
	}
	j := &job{
		id:         jobID,
		info:       info,
		driverID:   ids.MustFromBytes(msg.GetAddress().GetWorkerId()),
		driverAddr: msg.GetAddress(),
		driverPID:  msg.GetPid(),
		out:        newOutbox(),
		workers:    map[ids.ID]*worker{},
	}

	r.mu.Lock()
	if r.shuttingDown {
		r.mu.Unlock()
		return toStatus(ErrShuttingDown)
	}
	if _, dup := r.jobs[jobID]; dup {
		r.mu.Unlock()
		return status.Errorf(codes.AlreadyExists, "job %s is already registered on this node", jobID)
	}
	r.jobs[jobID] = j // reserved; not ready until the GCS knows it
	r.mu.Unlock()

	if r.cfg.GCS != nil {
		if _, err := r.cfg.GCS.AddJob(stream.Context(), &gorayv1.AddJobRequest{Job: info}); err != nil {
			r.mu.Lock()
			delete(r.jobs, jobID)
			r.mu.Unlock()
			return status.Errorf(status.Code(err), "adding job %s to the GCS: %v", jobID, err)
		}
	}
	if r.cfg.GCS != nil {
		// The job will schedule here: start from a fresh view of the
		// cluster, not one up to a report period old.
		r.syncCluster(stream.Context())
	}
	// Ready before the reply: the driver leases workers as soon as it has
	// it.
	r.mu.Lock()
	j.ready = true
	r.mu.Unlock()
	if err := stream.Send(&gorayv1.RayletCommand{
		Kind:       gorayv1.RayletCommand_REGISTERED,
		Node:       r.nodeInfo(),
		Store:      r.storeInfo(),
		JobId:      jobID.Bytes(),
		GcsAddress: r.cfg.GCSAddress,
	}); err != nil {
		r.endJob(j)
		return err
	}
	r.mu.Lock()
	if !r.shuttingDown {
		for range r.pool.prestart {
			r.startWorkerLocked(j)
		}
	}
	r.mu.Unlock()
	r.log.Info("job registered", "job_id", jobID, "binary", info.GetBinaryPath(), "driver_pid", msg.GetPid())

	recvDone := recvUntilError(stream.Recv, nil)
loop:
	for {
		select {
		case <-recvDone:
			break loop
		case <-stream.Context().Done():
			break loop
		case <-r.closing:
			_ = stream.Send(&gorayv1.RayletCommand{Kind: gorayv1.RayletCommand_EXIT, Reason: "node shutting down"})
			break loop
		case <-j.out.notify:
			for _, c := range j.out.take() {
				if err := stream.Send(c); err != nil {
					break loop
				}
			}
		}
	}
	r.endJob(j)
	return nil
}

// endJob ends j after its driver disconnected.
func (r *Raylet) endJob(j *job) {
	r.mu.Lock()
	if j.finished {
		r.mu.Unlock()
		return
	}
	j.finished = true
	delete(r.jobs, j.id)
	r.failJobLocked(j, &JobFinishedError{Job: j.id})
	for _, w := range j.workers {
		r.killWorkerLocked(w, "job finished", false)
	}
	var aborts, frees []ids.ObjectID
	if !j.driverID.IsNil() {
		aborts, frees = r.objectsOfDeadLocked(j.driverID)
		if j.ready {
			r.broadcastDiedLocked(j.driverID)
			if !r.shuttingDown {
				defer r.notifyPeersDied(j.driverID)
			}
		}
	}
	r.mu.Unlock()

	if !j.driverID.IsNil() {
		r.sweepReceived(j.driverID)
		r.cfg.Store.ReleaseClient(j.driverID)
		for _, o := range aborts {
			_ = r.cfg.Store.Abort(o)
		}
		if len(frees) > 0 {
			r.freeObjects(frees)
		}
	}
	if r.cfg.GCS != nil && !j.remote {
		ctx, cancel := context.WithTimeout(context.Background(), gcsTimeout)
		defer cancel()
		if _, err := r.cfg.GCS.MarkJobFinished(ctx, &gorayv1.MarkJobFinishedRequest{JobId: j.id.Bytes()}); err != nil {
			r.log.Warn("marking job finished in the GCS", "job_id", j.id, "error", err)
		}
	}
	r.log.Info("job finished", "job_id", j.id)
}

// RequestWorkerLease waits until a worker of the job can be leased with the
// requested resources, then returns its address. When the call's context
// ends first (or just as the lease is granted) the request is withdrawn
// and nothing stays taken. Requests that exceed the node's total resources
// wait (and are reported as infeasible demand) until cancelled. A request
// may be named by a caller-chosen request_id for CancelWorkerLease.
func (r *Raylet) RequestWorkerLease(ctx context.Context, req *gorayv1.LeaseRequest) (*gorayv1.LeaseReply, error) {
	jobID, err := ids.FromBytes(req.GetJobId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "lease request: job id: %v", err)
	}
	res, err := resourcesFromProto(req.GetResources())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "lease request: %v", err)
	}
	var actorID ids.ID
	if len(req.GetActorId()) > 0 {
		if actorID, err = ids.FromBytes(req.GetActorId()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "lease request: actor id: %v", err)
		}
	}

	r.mu.Lock()
	j := r.jobs[jobID]
	switch {
	case r.shuttingDown:
		r.mu.Unlock()
		return nil, toStatus(ErrShuttingDown)
	case j != nil && !j.ready:
		r.mu.Unlock()
		return nil, toStatus(&JobNotFoundError{Job: jobID})
	case j == nil && r.cfg.GCS == nil:
		r.mu.Unlock()
		return nil, toStatus(&JobNotFoundError{Job: jobID})
	}
	if rid := string(req.GetRequestId()); rid != "" && r.tombstones.take(rid, time.Now()) {
		r.mu.Unlock()
		return nil, toStatus(&LeaseCancelledError{RequestID: req.GetRequestId()})
	}
	if st := req.GetStrategy(); st.GetKind() == gorayv1.SchedulingStrategy_NODE_AFFINITY && r.cfg.GCS != nil {
		if target, err := ids.FromBytes(st.GetNodeId()); err == nil && target != r.cfg.NodeID && r.peers[target] == nil {
			// A node that joined since the last refresh: look again.
			r.mu.Unlock()
			r.syncCluster(ctx)
			r.mu.Lock()
		}
	}
	d := r.scheduleLocked(res, req.GetStrategy(), req.GetSpillbackCount())
	switch {
	case d.unschedulable != "":
		r.mu.Unlock()
		r.log.Debug("lease request unschedulable", "function", req.GetFunction(), "reason", d.unschedulable)
		return &gorayv1.LeaseReply{Unschedulable: d.unschedulable}, nil
	case d.spill != nil:
		r.mu.Unlock()
		r.log.Trace("lease request spilled back", "function", req.GetFunction(), "to", d.spill.id)
		return spillReply(d.spill), nil
	}
	if j == nil {
		// A job of another node's driver: learn it (and its binary) first.
		r.mu.Unlock()
		var err error
		if j, err = r.remoteJob(ctx, jobID); err != nil {
			return nil, toStatus(err)
		}
		r.mu.Lock()
		if r.shuttingDown {
			r.mu.Unlock()
			return nil, toStatus(ErrShuttingDown)
		}
	}
	holder, _ := ids.FromBytes(req.GetHolderId())
	p := &pendingLease{
		job: j, res: res, actorID: actorID, holder: holder, requestID: string(req.GetRequestId()),
		function: req.GetFunction(), strategy: req.GetStrategy(), queued: time.Now(), ready: make(chan struct{}),
	}
	r.enqueueLocked(p)
	r.dispatchLocked()
	r.mu.Unlock()

	select {
	case <-p.ready:
	case <-ctx.Done():
		r.mu.Lock()
		switch {
		case p.lease != nil:
			r.returnLeaseLocked(p.lease, false) // no-op when already ended
		case p.err == nil:
			r.dequeueLocked(p)
			r.dispatchLocked()
		}
		r.mu.Unlock()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if p.err != nil {
		return nil, toStatus(p.err)
	}
	if p.spill != nil {
		return spillReply(p.spill), nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.lease.cancelled {
		return nil, toStatus(&LeaseCancelledError{RequestID: req.GetRequestId()})
	}
	if err := ctx.Err(); err != nil {
		// Granted as the caller gave up: it would never learn of the lease.
		r.returnLeaseLocked(p.lease, false)
		return nil, status.FromContextError(err).Err()
	}
	w := p.lease.worker
	r.log.Trace("lease granted", "lease_id", p.lease.id, "worker_id", w.id, "job_id", jobID,
		"resources", p.res.String(), "actor_id", actorID, "function", p.function)
	return &gorayv1.LeaseReply{
		LeaseId:   p.lease.id.Bytes(),
		Worker:    proto.Clone(w.addr).(*gorayv1.Address),
		WorkerPid: int32(w.pid),
	}, nil
}

// ReturnWorkerLease ends a lease. The worker is reused for later leases of
// its job unless disconnect_worker is set or it hosted an actor, in which
// case it is killed. Returning an unknown (already ended) lease succeeds.
func (r *Raylet) ReturnWorkerLease(ctx context.Context, req *gorayv1.ReturnLeaseRequest) (*gorayv1.ReturnLeaseReply, error) {
	id, err := ids.FromBytes(req.GetLeaseId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "return lease: lease id: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.leases[id]; l != nil {
		r.returnLeaseLocked(l, req.GetDisconnectWorker())
	} else {
		r.log.Debug("return of unknown lease", "lease_id", id)
	}
	return &gorayv1.ReturnLeaseReply{}, nil
}

// CancelWorkerLease cancels the lease request named request_id: a request
// still waiting is dropped (its RequestWorkerLease call fails with
// Canceled), and a lease granted for it that has not been returned is
// returned, since the caller never received it (returned=true). Cancelling
// an unknown or already cancelled request succeeds with returned=false; an
// unknown id is remembered for a while, so that the request, should it
// arrive after its cancellation, fails with Canceled instead of being
// granted.
func (r *Raylet) CancelWorkerLease(ctx context.Context, req *gorayv1.CancelLeaseRequest) (*gorayv1.CancelLeaseReply, error) {
	rid := string(req.GetRequestId())
	if rid == "" {
		return nil, status.Error(codes.InvalidArgument, "cancel lease: request_id is required")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var waiting []*pendingLease
	for _, c := range r.order {
		for _, p := range c.queue {
			if p.requestID == rid {
				waiting = append(waiting, p)
			}
		}
	}
	for _, p := range waiting {
		r.dequeueLocked(p)
		p.err = &LeaseCancelledError{RequestID: req.GetRequestId()}
		close(p.ready)
	}
	var granted []*lease
	for _, l := range r.leases {
		if l.requestID == rid {
			granted = append(granted, l)
		}
	}
	for _, l := range granted {
		l.cancelled = true
		r.returnLeaseLocked(l, false)
	}
	if len(waiting) > 0 && len(granted) == 0 {
		r.dispatchLocked()
	}
	if len(waiting)+len(granted) == 0 {
		// The request may still be on its way: refuse it when it arrives.
		r.tombstones.add(rid, time.Now())
	} else {
		r.log.Debug("lease request cancelled", "request_id", fmt.Sprintf("%x", req.GetRequestId()),
			"waiting", len(waiting), "returned", len(granted))
	}
	return &gorayv1.CancelLeaseReply{Returned: len(granted) > 0}, nil
}

// NotifyTaskBlocked records that a worker executing a task under a lease
// blocked in Get or Wait (blocked=true) or resumed (false). While it is
// blocked the lease's CPU is lent back to the node so that other requests
// (such as the nested tasks it waits for) can be granted; when it resumes
// the CPU is taken again even if that oversubscribes the node, in which
// case nothing needing CPU is granted until enough leases return. Reports
// for a worker without a lease, for a driver, and repeated reports are
// no-ops; an unknown worker is NotFound.
func (r *Raylet) NotifyTaskBlocked(ctx context.Context, req *gorayv1.TaskBlockedRequest) (*gorayv1.TaskBlockedReply, error) {
	wid, err := ids.FromBytes(req.GetWorkerId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "task blocked: worker id: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[wid]
	if w == nil || w.state == stateDead {
		for _, j := range r.jobs {
			if j.driverID == wid && !j.finished {
				return &gorayv1.TaskBlockedReply{}, nil // drivers hold no lease
			}
		}
		return nil, toStatus(&WorkerNotFoundError{Worker: wid})
	}
	l := w.lease
	if l == nil || l.blocked == req.GetBlocked() {
		return &gorayv1.TaskBlockedReply{}, nil
	}
	l.blocked = req.GetBlocked()
	if l.blocked {
		r.available.Add(l.lentCPU())
		r.dispatchLocked()
	} else {
		r.available.Sub(l.lentCPU()) // may go negative: oversubscribed
	}
	r.log.Trace("task blocked", "worker_id", wid, "lease_id", l.id, "blocked", l.blocked,
		"available", r.available.String())
	return &gorayv1.TaskBlockedReply{}, nil
}

// CreateObject allocates an unsealed object in the store. The creator
// (creator_id, or the owner's worker id when empty) holds the creator pin
// until the object is sealed; the owner (owner.worker_id) is remembered so
// that the object is freed when that driver or worker dies, unless
// FreeObjects frees it first.
func (r *Raylet) CreateObject(ctx context.Context, req *gorayv1.CreateObjectRequest) (*gorayv1.CreateObjectReply, error) {
	oid, err := ids.ObjectIDFromBytes(req.GetObjectId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "create object: %v", err)
	}
	if req.GetDataSize() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "create object %s: negative size %d", oid, req.GetDataSize())
	}
	owner := ids.MustFromBytes(req.GetOwner().GetWorkerId())
	creator := owner
	if len(req.GetCreatorId()) > 0 {
		if creator, err = ids.FromBytes(req.GetCreatorId()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "create object %s: creator id: %v", oid, err)
		}
	}
	off, err := r.createMakingRoom(ctx, oid, req.GetDataSize(), req.GetMetadata(), creator)
	if err != nil {
		return nil, storeStatus(err)
	}
	r.mu.Lock()
	r.creates[oid] = creator
	ownerNode, _ := ids.FromBytes(req.GetOwner().GetNodeId())
	r.trackOwnerLocked(oid, owner, ownerNode)
	r.mu.Unlock()
	return &gorayv1.CreateObjectReply{Offset: off}, nil
}

// SealObject seals an object created with CreateObject, on behalf of its
// creator.
func (r *Raylet) SealObject(ctx context.Context, req *gorayv1.SealObjectRequest) (*gorayv1.SealObjectReply, error) {
	oid, err := ids.ObjectIDFromBytes(req.GetObjectId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "seal object: %v", err)
	}
	r.mu.Lock()
	client := r.creates[oid]
	r.mu.Unlock()
	if err := r.cfg.Store.Seal(oid, client, req.GetRelease()); err != nil {
		return nil, storeStatus(err)
	}
	r.mu.Lock()
	delete(r.creates, oid)
	r.mu.Unlock()
	return &gorayv1.SealObjectReply{}, nil
}

// GetObjects looks objects up in the store, pinning the found ones for the
// client.
func (r *Raylet) GetObjects(ctx context.Context, req *gorayv1.GetObjectsRequest) (*gorayv1.GetObjectsReply, error) {
	objs, err := parseObjectIDs(req.GetObjectIds())
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if r.spill.has(o) && !r.cfg.Store.Contains(o) {
			if err := r.spill.restoreObject(ctx, o); err != nil {
				return nil, status.Errorf(codes.Unavailable, "object %s is spilled and could not be restored: %v", o, err)
			}
		}
	}
	entries := r.cfg.Store.GetEntries(objs, ids.MustFromBytes(req.GetClientId()))
	out := make([]*gorayv1.StoreObject, 0, len(entries))
	for _, e := range entries {
		out = append(out, storeObject(e))
	}
	return &gorayv1.GetObjectsReply{Objects: out}, nil
}

// ReleaseObjects drops the client's pins.
func (r *Raylet) ReleaseObjects(ctx context.Context, req *gorayv1.ReleaseObjectsRequest) (*gorayv1.ReleaseObjectsReply, error) {
	objs, err := parseObjectIDs(req.GetObjectIds())
	if err != nil {
		return nil, err
	}
	r.cfg.Store.Release(objs, ids.MustFromBytes(req.GetClientId()))
	return &gorayv1.ReleaseObjectsReply{}, nil
}

// FreeObjects deletes objects from the store.
func (r *Raylet) FreeObjects(ctx context.Context, req *gorayv1.FreeObjectsRequest) (*gorayv1.FreeObjectsReply, error) {
	objs, err := parseObjectIDs(req.GetObjectIds())
	if err != nil {
		return nil, err
	}
	r.freeObjects(objs)
	r.mu.Lock()
	for _, o := range objs {
		delete(r.creates, o)
		r.forgetObjectLocked(o)
	}
	r.mu.Unlock()
	if req.GetBroadcast() {
		ids := req.GetObjectIds()
		r.tellPeers("free objects", func(ctx context.Context, c gorayv1.RayletClient) error {
			_, err := c.FreeObjects(ctx, &gorayv1.FreeObjectsRequest{ObjectIds: ids})
			return err
		})
	}
	return &gorayv1.FreeObjectsReply{}, nil
}

// GetNodeStats reports the node, its available resources, store usage and
// objects, workers, pending lease demand and connected clients.
func (r *Raylet) GetNodeStats(ctx context.Context, req *gorayv1.GetNodeStatsRequest) (*gorayv1.GetNodeStatsReply, error) {
	reply := &gorayv1.GetNodeStatsReply{Node: r.nodeInfo()}
	r.mu.Lock()
	reply.Available = resourcesProto(r.available)
	reply.Pending = r.pendingDemandLocked()
	for _, j := range r.jobs {
		if j.ready && j.driverAddr != nil {
			reply.Clients = append(reply.Clients, proto.Clone(j.driverAddr).(*gorayv1.Address))
		}
	}
	for _, w := range r.workers {
		ws := &gorayv1.WorkerStats{
			WorkerId: w.id.Bytes(),
			Pid:      int32(w.pid),
			JobId:    w.job.id.Bytes(),
			State:    w.state.String(),
		}
		if !w.actorID.IsNil() {
			ws.ActorId = w.actorID.Bytes()
		}
		if w.addr != nil {
			ws.Address = proto.Clone(w.addr).(*gorayv1.Address)
			reply.Clients = append(reply.Clients, proto.Clone(w.addr).(*gorayv1.Address))
		}
		reply.Workers = append(reply.Workers, ws)
	}
	r.mu.Unlock()
	u := r.cfg.Store.Usage()
	reply.StoreUsed, reply.StoreCapacity, reply.StoreObjects = u.Used, u.Capacity, int64(u.Objects)
	for _, e := range r.cfg.Store.ListEntries() {
		reply.StoreObjectsList = append(reply.StoreObjectsList, storeObject(e))
	}
	if r.cfg.Plugins != nil {
		reply.Plugins = r.cfg.Plugins()
	}
	reply.Spill, reply.Spilled = r.spill.statsProto(), r.spill.listProto()
	return reply, nil
}

// ShutdownNode asks the node to stop: Done is closed and the node host
// shuts the raylet down.
func (r *Raylet) ShutdownNode(ctx context.Context, req *gorayv1.ShutdownNodeRequest) (*gorayv1.ShutdownNodeReply, error) {
	r.log.Info("node shutdown requested", "reason", req.GetReason())
	r.closeDone()
	return &gorayv1.ShutdownNodeReply{}, nil
}
