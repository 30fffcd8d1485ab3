package raylet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/resources"
	"github.com/goray-dev/goray/internal/workerenv"
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
	addr := proto.Clone(msg.GetAddress()).(*gorayv1.Address)
	if addr == nil {
		addr = &gorayv1.Address{}
	}
	addr.NodeId, addr.WorkerId = r.cfg.NodeID.Bytes(), wid.Bytes()
	w, err := r.pool.register(wid, addr, int(msg.GetPid()))
	var re *registerError
	switch {
	case errors.As(err, &re) && re.unknown:
		return status.Error(codes.NotFound, err.Error())
	case errors.As(err, &re):
		return status.Error(codes.FailedPrecondition, err.Error())
	case err != nil:
		return toStatus(err)
	}

	if err := stream.Send(&gorayv1.RayletCommand{
		Kind:       gorayv1.RayletCommand_REGISTERED,
		Node:       r.nodeInfo(),
		Store:      r.storeInfo(),
		JobId:      w.job.id.Bytes(),
		GcsAddress: r.cfg.GCSAddress,
	}); err != nil {
		r.pool.kill(w, fmt.Sprintf("worker session failed: %v", err), "", true)
		return err
	}
	r.workerReady(w)

	recvDone := recvUntilError(stream.Recv, func(m *gorayv1.WorkerMessage) {
		r.pool.setOwnsObjects(w, m.GetOwnsObjects())
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
		r.pool.kill(w, "", reason, false)
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
	j := &job{
		id:         jobID,
		info:       info,
		driverID:   ids.MustFromBytes(msg.GetAddress().GetWorkerId()),
		driverAddr: msg.GetAddress(),
		driverPID:  msg.GetPid(),
		out:        newOutbox(),
	}
	var (
		bb *badBinaryError
		ge *gcsError
	)
	switch err := r.registerJob(stream.Context(), j); {
	case errors.As(err, &bb):
		return status.Errorf(codes.InvalidArgument, "driver registration: %v", bb.err)
	case errors.As(err, &ge):
		return status.Errorf(status.Code(ge.err), "%v", err)
	case err != nil:
		return toStatus(err)
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
	r.pool.prestart(j)
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

// RequestWorkerLease waits until a worker of the job can be leased with the
// requested resources, then returns its address. When the call's context
// ends first (or just as the lease is granted) the request is withdrawn
// and nothing stays taken. Requests that exceed the node's total resources
// wait (and are reported as infeasible demand) until cancelled. A request
// may be named by a caller-chosen request_id for CancelWorkerLease. A
// request placed in a placement group (placement_group_id) asks for the
// group's resources: it waits while no node has them (the group is
// pending), and fails with placement_group_removed (and unschedulable
// saying why) once this node was told the group was removed.
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

	if err := workerenv.CheckVars(req.GetEnvVars()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "lease request: %v", err)
	}
	spec := workerSpec{env: strings.Join(req.GetEnvVars(), "\x00")}
	if sum := req.GetWorkingDirSha256(); sum != "" {
		if !digest.ValidSHA256(sum) {
			return nil, status.Errorf(codes.InvalidArgument, "lease request: working_dir_sha256 %q is not a sha256 (64 lowercase hexadecimal digits)", clipString(sum))
		}
		if spec.dirNode, err = ids.FromBytes(req.GetWorkingDirNode()); err != nil || spec.dirNode.IsNil() {
			return nil, status.Errorf(codes.InvalidArgument, "lease request: working_dir_node: the node whose raylet has working dir %s is required", sum[:12])
		}
		spec.dir = sum
	}

	holder, _ := ids.FromBytes(req.GetHolderId())
	holderNode, _ := ids.FromBytes(req.GetHolderNodeId())
	p := &pendingLease{
		res: res, actorID: actorID, holder: holder, holderNode: holderNode, requestID: string(req.GetRequestId()), detached: req.GetDetached() && !actorID.IsNil(),
		function: req.GetFunction(), strategy: req.GetStrategy(), queued: time.Now(), ready: make(chan struct{}),
		retriable: req.GetRetriable(), spec: spec,
	}
	if g := req.GetPlacementGroupId(); len(g) > 0 {
		if p.group, err = ids.FromBytes(g); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "lease request: placement group id: %v", err)
		}
	}
	d, l, err := r.requestLease(ctx, jobID, p, req.GetSpillbackCount())
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil, status.FromContextError(err).Err()
	case err != nil:
		if rep := groupRemovedReply(err); rep != nil {
			r.log.Debug("lease request for a removed placement group", "function", req.GetFunction(), "reason", rep.GetUnschedulable())
			return rep, nil
		}
		return nil, toStatus(err)
	case d.Unschedulable != "":
		r.log.Debug("lease request unschedulable", "function", req.GetFunction(), "reason", d.Unschedulable)
		return &gorayv1.LeaseReply{Unschedulable: d.Unschedulable}, nil
	case d.Spill != nil:
		r.log.Trace("lease request spilled back", "function", req.GetFunction(), "to", d.Spill.ID)
		return spillReply(d.Spill), nil
	}
	return &gorayv1.LeaseReply{
		LeaseId:   l.id.Bytes(),
		Worker:    proto.Clone(l.addr).(*gorayv1.Address),
		WorkerPid: int32(l.pid),
	}, nil
}

// groupRemovedReply is the reply to a request whose placement group was
// removed (err is a PlacementGroupRemovedError), else nil.
func groupRemovedReply(err error) *gorayv1.LeaseReply {
	var pgr *PlacementGroupRemovedError
	if !errors.As(err, &pgr) {
		return nil
	}
	return &gorayv1.LeaseReply{Unschedulable: pgr.reason(), PlacementGroupRemoved: true}
}

// ReturnWorkerLease ends a lease. The worker is reused for later leases of
// its job unless disconnect_worker is set or it hosted an actor, in which
// case it is killed. Returning an unknown (already ended) lease succeeds.
func (r *Raylet) ReturnWorkerLease(ctx context.Context, req *gorayv1.ReturnLeaseRequest) (*gorayv1.ReturnLeaseReply, error) {
	id, err := ids.FromBytes(req.GetLeaseId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "return lease: lease id: %v", err)
	}
	known, kill := r.returnLeaseNoting(id, req.GetDisconnectWorker())
	if !known {
		r.log.Debug("return of unknown lease", "lease_id", id)
	}
	return &gorayv1.ReturnLeaseReply{MemoryKill: kill}, nil
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
	waiting, returned := r.cancelLease(rid)
	if waiting+returned > 0 {
		r.log.Debug("lease request cancelled", "request_id", fmt.Sprintf("%x", req.GetRequestId()),
			"waiting", waiting, "returned", returned)
	}
	return &gorayv1.CancelLeaseReply{Returned: returned > 0}, nil
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
	if err := r.taskBlocked(wid, req.GetBlocked()); err != nil {
		return nil, toStatus(err)
	}
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
	ownerNode, _ := ids.FromBytes(req.GetOwner().GetNodeId())
	off, err := r.objects.create(ctx, oid, req.GetDataSize(), req.GetMetadata(), owner, ownerNode, creator)
	if err != nil {
		return nil, storeStatus(err)
	}
	return &gorayv1.CreateObjectReply{Offset: off}, nil
}

// SealObject seals an object created with CreateObject, on behalf of its
// creator.
func (r *Raylet) SealObject(ctx context.Context, req *gorayv1.SealObjectRequest) (*gorayv1.SealObjectReply, error) {
	oid, err := ids.ObjectIDFromBytes(req.GetObjectId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "seal object: %v", err)
	}
	if err := r.objects.seal(oid, req.GetRelease()); err != nil {
		return nil, storeStatus(err)
	}
	return &gorayv1.SealObjectReply{}, nil
}

// GetObjects looks objects up in the store, pinning the found ones for the
// client.
func (r *Raylet) GetObjects(ctx context.Context, req *gorayv1.GetObjectsRequest) (*gorayv1.GetObjectsReply, error) {
	objs, err := parseObjectIDs(req.GetObjectIds())
	if err != nil {
		return nil, err
	}
	entries, err := r.objects.get(ctx, objs, ids.MustFromBytes(req.GetClientId()))
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
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
	r.freeObjects(objs, req.GetObjectIds(), req.GetBroadcast())
	return &gorayv1.FreeObjectsReply{}, nil
}

// GetNodeStats reports the node, its available resources, store usage and
// objects, workers, pending lease demand and connected clients; with
// include_owned also what each client owns (owned.go).
func (r *Raylet) GetNodeStats(ctx context.Context, req *gorayv1.GetNodeStatsRequest) (*gorayv1.GetNodeStatsReply, error) {
	reply := &gorayv1.GetNodeStatsReply{Node: r.nodeInfo()}
	reply.Available = resourcesProto(r.sched.availableResources())
	reply.Pending = r.sched.pendingDemand()
	reply.Clients = r.jobs.drivers()
	workers, clients := r.pool.stats()
	reply.Workers, reply.Clients = workers, append(reply.Clients, clients...)
	u := r.cfg.Store.Usage()
	reply.StoreUsed, reply.StoreCapacity, reply.StoreObjects = u.Used, u.Capacity, int64(u.Objects)
	for _, e := range r.cfg.Store.ListEntries() {
		reply.StoreObjectsList = append(reply.StoreObjectsList, storeObject(e))
	}
	if r.cfg.Plugins != nil {
		reply.Plugins = r.cfg.Plugins()
	}
	reply.Spill, reply.Spilled = r.objects.spill.Stats(), r.objects.spill.List()
	if req.GetIncludeOwned() {
		reply.Owned, reply.OwnedErrors = r.ownedOfClients(ctx, reply.Clients)
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

// FetchBinary streams a job binary this node has (a local driver's, or one
// in the cache) by its sha256.
func (r *Raylet) FetchBinary(req *gorayv1.FetchBinaryRequest, stream gorayv1.Raylet_FetchBinaryServer) error {
	// The sum names a file of the cache: it must be a sha256, never a path.
	if !digest.ValidSHA256(req.GetSha256()) {
		return status.Errorf(codes.InvalidArgument, "fetch binary: %q is not a sha256 (64 lowercase hexadecimal digits)", clipString(req.GetSha256()))
	}
	return r.jobs.sendBinary(req.GetSha256(), stream.Send)
}

// InstallWorkingDir copies an archive a process of this node packed into
// the cache (by sha256, checked), for its leases to name.
func (r *Raylet) InstallWorkingDir(ctx context.Context, req *gorayv1.InstallWorkingDirRequest) (*gorayv1.InstallWorkingDirReply, error) {
	if err := r.jobs.installWorkingDir(req.GetSha256(), req.GetPath()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "install working dir: %v", err)
	}
	return &gorayv1.InstallWorkingDirReply{}, nil
}

// clipString shortens s for an error message.
func clipString(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:80] + "..."
}

// PullObject copies an object from the node holding it into this node's
// store. Concurrent pulls of one object share one transfer.
func (r *Raylet) PullObject(ctx context.Context, req *gorayv1.PullObjectRequest) (*gorayv1.PullObjectReply, error) {
	oid, err := ids.ObjectIDFromBytes(req.GetObjectId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "pull object: %v", err)
	}
	node, err := ids.FromBytes(req.GetNodeId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "pull object %s: node id: %v", oid, err)
	}
	if err := pullStatus(ctx, oid, node, r.objects.pull(ctx, oid, node, req.GetOwner())); err != nil {
		return nil, err
	}
	return &gorayv1.PullObjectReply{}, nil
}

// WorkersDied handles the death of drivers or workers of another node: the
// objects they owned are freed here and local processes drop them as
// borrowers.
func (r *Raylet) WorkersDied(ctx context.Context, req *gorayv1.WorkersDiedRequest) (*gorayv1.WorkersDiedReply, error) {
	var dead []ids.ID
	for _, b := range req.GetWorkerIds() {
		if id, err := ids.FromBytes(b); err == nil {
			dead = append(dead, id)
		}
	}
	r.remoteProcessesDied(dead)
	return &gorayv1.WorkersDiedReply{}, nil
}

// PrepareBundleResources holds the bundles of a placement group out of the
// node's available resources, all or none (phase one of the GCS's
// two-phase reservation). Bundles already prepared or committed here are
// not held twice. When the others do not fit, the group was removed or
// the node drains, success is false, reason says why and nothing is held.
// The reply carries the available resources after the call.
func (r *Raylet) PrepareBundleResources(ctx context.Context, req *gorayv1.PrepareBundlesRequest) (*gorayv1.PrepareBundlesReply, error) {
	group, err := ids.FromBytes(req.GetPlacementGroupId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "prepare bundles: placement group id: %v", err)
	}
	if n := len(req.GetBundles()); n > maxGroupBundles {
		return nil, status.Errorf(codes.InvalidArgument, "prepare bundles of placement group %s: %d bundles; a group has at most %d", group.Short(), n, maxGroupBundles)
	}
	bundles := make([]groupBundle, 0, len(req.GetBundles()))
	for _, b := range req.GetBundles() {
		if b.GetIndex() < 0 || b.GetIndex() >= maxGroupBundles {
			return nil, status.Errorf(codes.InvalidArgument, "prepare bundles of placement group %s: bundle index %d is outside 0 to %d", group.Short(), b.GetIndex(), maxGroupBundles-1)
		}
		res, err := resourcesFromProto(b.GetResources())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "prepare bundles of placement group %s: bundle %d: %v", group.Short(), b.GetIndex(), err)
		}
		for name := range res {
			if resources.IsGroupName(name) {
				return nil, status.Errorf(codes.InvalidArgument, "prepare bundles of placement group %s: bundle %d: resource %q is a placement group resource", group.Short(), b.GetIndex(), name)
			}
		}
		bundles = append(bundles, groupBundle{index: int(b.GetIndex()), res: res})
	}
	ok, reason, avail, err := r.sched.prepareBundles(group, bundles)
	if err != nil {
		return nil, toStatus(err)
	}
	if !ok {
		r.log.Debug("placement group bundles do not fit", "group", group.Short(), "reason", reason)
	}
	return &gorayv1.PrepareBundlesReply{Success: ok, Reason: reason, Available: resourcesProto(nonNegative(avail))}, nil
}

// CommitBundleResources turns prepared bundles of a placement group into
// the group's resources on this node (phase two): each bundle's resources,
// under the group's names (the bundle's and the any-bundle ones, plus the
// bundle marker), join the node's total and available resources, and the
// requests waiting for them are granted. Committing a committed bundle is a
// no-op; committing one that is not prepared here is NotFound, naming it.
func (r *Raylet) CommitBundleResources(ctx context.Context, req *gorayv1.CommitBundlesRequest) (*gorayv1.CommitBundlesReply, error) {
	group, err := ids.FromBytes(req.GetPlacementGroupId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "commit bundles: placement group id: %v", err)
	}
	indexes, err := bundleIndexes("commit bundles", group, req.GetIndexes())
	if err != nil {
		return nil, err
	}
	avail, err := r.sched.commitBundles(group, indexes)
	if err != nil {
		return nil, toStatus(err)
	}
	return &gorayv1.CommitBundlesReply{Available: resourcesProto(nonNegative(avail))}, nil
}

// CancelResourceReserve gives prepared or committed bundles of a placement
// group back (indexes; none: every bundle of the group on this node). The
// workers of leases holding the resources of cancelled committed bundles
// are killed at once (their owners see them die) and those leases end; the
// bundles' group resources leave the node's total and available resources
// and their own resources return to available. Without indexes the group
// was removed: requests queued for it, and later ones, fail with
// placement_group_removed and reason. Idempotent. The reply carries the
// available resources after the call and how many workers were killed.
func (r *Raylet) CancelResourceReserve(ctx context.Context, req *gorayv1.CancelReserveRequest) (*gorayv1.CancelReserveReply, error) {
	group, err := ids.FromBytes(req.GetPlacementGroupId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "cancel bundles: placement group id: %v", err)
	}
	indexes, err := bundleIndexes("cancel bundles", group, req.GetIndexes())
	if err != nil {
		return nil, err
	}
	killed, avail := r.cancelBundles(group, indexes, req.GetReason())
	return &gorayv1.CancelReserveReply{Available: resourcesProto(nonNegative(avail)), WorkersKilled: int32(killed)}, nil
}

// ReleaseUnusedBundles gives back every placement group bundle this node
// holds, prepared or committed, that in_use does not name: the GCS's sweep
// when a node comes back to it (after a GCS restart), so that bundles a
// reservation cut short left here do not stay held. Each is released as
// CancelResourceReserve releases a named bundle: the workers of leases
// holding its resources are killed (told reason), its group resources
// leave the node's total and available resources and its own resources
// return to available. The groups are not taken as removed: requests
// queued for them keep waiting for the bundles to be placed again.
// Idempotent. in_use is refused (InvalidArgument) with a malformed group
// id, an index outside 0 to maxGroupBundles-1, or more refs of one group
// than a group has bundles. The reply lists the bundles released and the
// available resources after the call.
func (r *Raylet) ReleaseUnusedBundles(ctx context.Context, req *gorayv1.ReleaseUnusedBundlesRequest) (*gorayv1.ReleaseUnusedBundlesReply, error) {
	inUse, err := bundleRefs(req.GetInUse())
	if err != nil {
		return nil, err
	}
	released, avail := r.releaseUnusedBundles(inUse, req.GetReason())
	rep := &gorayv1.ReleaseUnusedBundlesReply{Available: resourcesProto(nonNegative(avail))}
	for _, b := range released {
		rep.Released = append(rep.Released, &gorayv1.BundleRef{PlacementGroupId: b.group.Bytes(), Index: int32(b.index)})
	}
	return rep, nil
}

// DrainRaylet drains the node before it is terminated (see drain.go): the
// first call is accepted only when the node is idle (no lease granted or
// queued, no placement group bundle held, not the head) and each primary
// copy it holds can move to shared spill storage (or it holds none); a
// refusal says why and changes nothing. Once accepted the node takes no
// new work and spills every primary copy to the shared storage in the
// background; later calls report progress, drained once no primary copy
// is left only here and no lease is granted. cancel ends the drain.
func (r *Raylet) DrainRaylet(ctx context.Context, req *gorayv1.DrainRayletRequest) (*gorayv1.DrainRayletReply, error) {
	if req.GetCancel() {
		return r.cancelDrain(req.GetReason()).reply(), nil
	}
	st, err := r.drain(req.GetReason())
	if err != nil {
		return nil, toStatus(err)
	}
	return st.reply(), nil
}

// bundleRefs decodes the in_use list of ReleaseUnusedBundles, within the
// bundle limits of a group.
func bundleRefs(in []*gorayv1.BundleRef) (map[bundleRef]bool, error) {
	out := make(map[bundleRef]bool, len(in))
	perGroup := map[ids.ID]int{}
	for n, b := range in {
		group, err := ids.FromBytes(b.GetPlacementGroupId())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "release unused bundles: in_use[%d]: placement group id: %v", n, err)
		}
		if i := b.GetIndex(); i < 0 || i >= maxGroupBundles {
			return nil, status.Errorf(codes.InvalidArgument, "release unused bundles: in_use[%d]: bundle index %d of placement group %s is outside 0 to %d", n, i, group.Short(), maxGroupBundles-1)
		}
		if perGroup[group]++; perGroup[group] > maxGroupBundles {
			return nil, status.Errorf(codes.InvalidArgument, "release unused bundles: in_use names more than %d bundles of placement group %s; a group has at most %d", maxGroupBundles, group.Short(), maxGroupBundles)
		}
		out[bundleRef{group: group, index: int(b.GetIndex())}] = true
	}
	return out, nil
}

// bundleIndexes decodes the bundle indexes of a request (what names the
// call in errors).
func bundleIndexes(what string, group ids.ID, in []int32) ([]int, error) {
	out := make([]int, 0, len(in))
	for _, i := range in {
		if i < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "%s of placement group %s: bundle index %d is negative", what, group.Short(), i)
		}
		out = append(out, int(i))
	}
	return out, nil
}
