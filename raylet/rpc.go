package raylet

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

var _ gorayv1.RayletServer = (*Raylet)(nil)

// recvUntilError drains a stream in the background; the returned channel
// is closed when Recv fails (the peer closed the stream or died).
func recvUntilError[T any](recv func() (*T, error)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := recv(); err != nil {
				return
			}
		}
	}()
	return done
}

// WorkerSession serves a worker process started by this raylet: the first
// message registers it (it must carry the worker id from GORAY_WORKER_ID),
// the reply is REGISTERED with the node and store information, and the
// stream then stays open for the worker's life. When the stream closes the
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

	recvDone := recvUntilError(stream.Recv)
	reason := ""
loop:
	for {
		select {
		case c := <-w.cmds:
			if err := stream.Send(c); err != nil {
				reason = fmt.Sprintf("worker session failed: %v", err)
				break loop
			}
			if c.GetKind() == gorayv1.RayletCommand_EXIT {
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
// the reply is REGISTERED, and workers are prestarted. When the stream
// closes the job ends: its workers (actors included) are killed, the
// driver's store pins dropped and the job marked finished in the GCS.
func (r *Raylet) DriverSession(stream gorayv1.Raylet_DriverSessionServer) error {
	msg, err := stream.Recv()
	if err != nil {
		return err
	}
	info := proto.Clone(msg.GetJob()).(*gorayv1.JobInfo)
	if info == nil || info.GetBinaryPath() == "" {
		return status.Error(codes.InvalidArgument, "driver registration: job.binary_path is required")
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
	j := &job{
		id:         jobID,
		info:       info,
		driverID:   ids.MustFromBytes(msg.GetAddress().GetWorkerId()),
		driverAddr: msg.GetAddress(),
		driverPID:  msg.GetPid(),
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
	j.ready = true
	if !r.shuttingDown {
		for range r.pool.prestart {
			r.startWorkerLocked(j)
		}
	}
	r.mu.Unlock()
	r.log.Info("job registered", "job_id", jobID, "binary", info.GetBinaryPath(), "driver_pid", msg.GetPid())

	recvDone := recvUntilError(stream.Recv)
	select {
	case <-recvDone:
	case <-stream.Context().Done():
	case <-r.closing:
		_ = stream.Send(&gorayv1.RayletCommand{Kind: gorayv1.RayletCommand_EXIT, Reason: "node shutting down"})
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
	var aborts []ids.ObjectID
	if !j.driverID.IsNil() {
		for o, c := range r.creates {
			if c == j.driverID {
				aborts = append(aborts, o)
				delete(r.creates, o)
			}
		}
	}
	r.mu.Unlock()

	if !j.driverID.IsNil() {
		r.cfg.Store.ReleaseClient(j.driverID)
		for _, o := range aborts {
			_ = r.cfg.Store.Abort(o)
		}
	}
	if r.cfg.GCS != nil {
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
// ends first the request is withdrawn and nothing stays taken. Requests
// that exceed the node's total resources wait (and are reported as
// infeasible demand) until cancelled.
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
	case j == nil || !j.ready:
		r.mu.Unlock()
		return nil, toStatus(&JobNotFoundError{Job: jobID})
	}
	holder, _ := ids.FromBytes(req.GetHolderId())
	p := &pendingLease{job: j, res: res, actorID: actorID, holder: holder, function: req.GetFunction(), ready: make(chan struct{})}
	r.enqueueLocked(p)
	r.dispatchLocked()
	r.mu.Unlock()

	select {
	case <-p.ready:
	case <-ctx.Done():
		r.mu.Lock()
		switch {
		case p.lease != nil:
			r.returnLeaseLocked(p.lease, false)
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
	r.mu.Lock()
	defer r.mu.Unlock()
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

// CreateObject allocates an unsealed object in the store; the owner's
// worker id is the pin holder.
func (r *Raylet) CreateObject(ctx context.Context, req *gorayv1.CreateObjectRequest) (*gorayv1.CreateObjectReply, error) {
	oid, err := ids.ObjectIDFromBytes(req.GetObjectId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "create object: %v", err)
	}
	if req.GetDataSize() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "create object %s: negative size %d", oid, req.GetDataSize())
	}
	client := ids.MustFromBytes(req.GetOwner().GetWorkerId())
	off, err := r.cfg.Store.Create(oid, req.GetDataSize(), req.GetMetadata(), client)
	if err != nil {
		return nil, storeStatus(err)
	}
	r.mu.Lock()
	r.creates[oid] = client
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
	r.cfg.Store.Free(objs)
	r.mu.Lock()
	for _, o := range objs {
		delete(r.creates, o)
	}
	r.mu.Unlock()
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
	return reply, nil
}

// ShutdownNode asks the node to stop: Done is closed and the node host
// shuts the raylet down.
func (r *Raylet) ShutdownNode(ctx context.Context, req *gorayv1.ShutdownNodeRequest) (*gorayv1.ShutdownNodeReply, error) {
	r.log.Info("node shutdown requested", "reason", req.GetReason())
	r.closeDone()
	return &gorayv1.ShutdownNodeReply{}, nil
}
