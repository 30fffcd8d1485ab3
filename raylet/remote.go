package raylet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Transfer tuning between nodes.
const (
	// chunkSize is the size of one ReadObject / FetchBinary message.
	chunkSize = 1 << 20
	// pullStreams is how many ReadObject streams one pull uses at most.
	pullStreams = 4
	// minStreamBytes is the least a pull stream carries; smaller objects
	// use fewer streams.
	minStreamBytes = 8 << 20
	// firstPart is what the first stream of a pull asks for; its first
	// chunk tells the object's size.
	firstPart = 4 << 20
	// pullTimeout bounds one pull (the owner's Get has its own deadline).
	pullTimeout = 10 * time.Minute
)

// NodeDeadError says a node of the cluster is dead.
type NodeDeadError struct {
	Node   ids.ID
	Reason string
}

func (e *NodeDeadError) Error() string {
	return fmt.Sprintf("node %s is dead (%s)", e.Node.Short(), e.Reason)
}

// dialOptions are the options of connections to other raylets: keepalives
// notice a node that vanished without closing its connections.
func dialOptions(addr string, creds *auth.Credentials) []grpc.DialOption {
	return append(creds.DialOptions(addr),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		grpc.WithInitialWindowSize(4<<20),
		grpc.WithInitialConnWindowSize(16<<20),
		grpc.WithReadBufferSize(1<<20),
		grpc.WithWriteBufferSize(1<<20),
	)
}

func spillReply(p *peerNode) *gorayv1.LeaseReply {
	return &gorayv1.LeaseReply{SpillbackNodeId: p.id.Bytes(), SpillbackRaylet: p.info.GetRayletTcp()}
}

// ------------------------------------------------------------ remote jobs

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
	path, err := r.jobBinary(ctx, info)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", jobID.Short(), err)
	}
	info.BinaryPath = path
	if wd := info.GetWorkingDir(); wd != "" {
		if st, err := os.Stat(wd); err != nil || !st.IsDir() {
			info.WorkingDir = "" // the driver's directory does not exist here
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if j := r.jobs[jobID]; j != nil {
		return j, nil
	}
	j := &job{id: jobID, info: info, remote: true, ready: true, workers: map[ids.ID]*worker{}}
	r.jobs[jobID] = j
	r.log.Info("job of another node registered", "job_id", jobID, "binary", path,
		"driver_node", idShort(info.GetDriverNodeId()))
	return j, nil
}

func idShort(b []byte) string {
	id, err := ids.FromBytes(b)
	if err != nil {
		return "?"
	}
	return id.Short()
}

// FetchBinary streams a job binary this node has (a local driver's, or one
// in the cache) by its sha256.
func (r *Raylet) FetchBinary(req *gorayv1.FetchBinaryRequest, stream gorayv1.Raylet_FetchBinaryServer) error {
	sum := req.GetSha256()
	var paths []string
	r.mu.Lock()
	for _, j := range r.jobs {
		if j.info.GetBinarySha256() == sum {
			paths = append(paths, j.info.GetBinaryPath())
			if !j.remote && j.driverPID > 0 {
				// The running driver's executable, even if its file was
				// replaced or removed since.
				paths = append(paths, fmt.Sprintf("/proc/%d/exe", j.driverPID))
			}
		}
	}
	r.mu.Unlock()
	paths = append(paths, filepath.Join(r.cfg.BinaryCacheDir, sum))
	for _, p := range paths {
		if got, err := digest.FileSHA256(p); err != nil || got != sum {
			continue // gone, or replaced by another build
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			continue
		}
		buf := make([]byte, chunkSize)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				if err := stream.Send(&gorayv1.BinaryChunk{Data: buf[:n], Size: st.Size()}); err != nil {
					return err
				}
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return status.Errorf(codes.Internal, "reading %s: %v", p, err)
			}
		}
	}
	return status.Errorf(codes.NotFound, "node %s has no binary with sha256 %s", r.cfg.NodeID.Short(), sum)
}

// syncJobs ends the jobs of other nodes' drivers that finished.
func (r *Raylet) syncJobs(ctx context.Context) {
	r.mu.Lock()
	remote := 0
	for _, j := range r.jobs {
		if j.remote {
			remote++
		}
	}
	r.mu.Unlock()
	if remote == 0 {
		return
	}
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
		r.mu.Lock()
		j := r.jobs[id]
		r.mu.Unlock()
		if j != nil && j.remote {
			r.endJob(j)
		}
	}
}

// ------------------------------------------------------- objects between nodes

// pull is a transfer of an object from another node in flight.
type pull struct {
	done chan struct{}
	err  error
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
	if node == r.cfg.NodeID || r.cfg.Store.Contains(oid) {
		return &gorayv1.PullObjectReply{}, nil
	}
	r.mu.Lock()
	p := r.pulls[oid]
	if p == nil {
		p = &pull{done: make(chan struct{})}
		r.pulls[oid] = p
		owner := proto.Clone(req.GetOwner()).(*gorayv1.Address)
		go func() {
			p.err = r.runPull(oid, node, owner)
			if p.err != nil && r.nodeDied(node, p.err) {
				// Its node is gone: restore the copy it spilled to shared
				// storage, if any.
				if err := r.spill.restoreFromRecord(oid, node, owner); err == nil {
					p.err = nil
				} else if !errors.Is(err, errNoSpilledCopy) {
					r.log.Warn("restoring a dead node's object from its spilled copy failed", "object_id", oid, "node", node, "error", err)
					p.err = fmt.Errorf("%w; restoring its spilled copy: %v", p.err, err)
				}
			}
			r.mu.Lock()
			delete(r.pulls, oid)
			r.mu.Unlock()
			close(p.done)
		}()
	}
	r.mu.Unlock()
	select {
	case <-p.done:
		if p.err != nil {
			var nd *NodeDeadError
			if errors.As(p.err, &nd) {
				return nil, status.Error(codes.FailedPrecondition, p.err.Error())
			}
			return nil, status.Errorf(codes.Unavailable, "pulling object %s from node %s: %v", oid, node.Short(), p.err)
		}
		return &gorayv1.PullObjectReply{}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// nodeDied reports whether a pull from node failed because the node is
// dead (err says so, or the cluster view does once refreshed).
func (r *Raylet) nodeDied(node ids.ID, err error) bool {
	var nd *NodeDeadError
	if errors.As(err, &nd) {
		return true
	}
	if r.cfg.GCS == nil || r.isClosing() {
		return false
	}
	r.syncCluster(context.Background())
	_, _, perr := r.peerClient(node)
	return errors.As(perr, &nd)
}

// runPull reads the object from node's data plane in parallel ranged
// streams straight into a new object of this store, sealed once complete;
// on failure the partial object is discarded.
func (r *Raylet) runPull(oid ids.ObjectID, node ids.ID, owner *gorayv1.Address) error {
	_, info, err := r.peerClient(node)
	if err != nil {
		return err
	}
	addr := info.GetObjectAddr()
	if addr == "" {
		return fmt.Errorf("node %s serves no object data plane", node.Short())
	}
	ctx, cancel := context.WithTimeout(context.Background(), pullTimeout)
	defer cancel()
	go func() {
		select {
		case <-r.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	first, err := dialData(ctx, addr, r.cfg.Auth)
	if err != nil {
		return err
	}
	defer first.Close()
	size, meta, err := first.request(oid, 0, firstPart)
	if err != nil {
		return err
	}
	creator := ids.New()
	off, err := r.createMakingRoom(ctx, oid, size, meta, creator)
	if err != nil {
		if r.cfg.Store.Contains(oid) {
			return nil // arrived meanwhile
		}
		return fmt.Errorf("making room for object %s (%d bytes): %w", oid, size, err)
	}
	dst := r.cfg.Store.Data(off, size)
	// Fault the destination pages in at once: receiving into a cold arena
	// page by page is several times slower. Best effort (Linux 5.14+).
	if size >= minStreamBytes {
		_ = unix.Madvise(dst, unix.MADV_POPULATE_WRITE)
	}
	ok := false
	defer func() {
		if !ok {
			_ = r.cfg.Store.Abort(oid)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, pullStreams+1)
	wg.Add(1)
	go func() { defer wg.Done(); errs <- first.readInto(dst[:min(size, firstPart)]) }()
	if rest := size - firstPart; rest > 0 {
		n := int64(min(pullStreams, max(1, int(rest/minStreamBytes))))
		per := (rest + n - 1) / n
		for i := int64(0); i < n; i++ {
			o := firstPart + i*per
			l := min(per, size-o)
			if l <= 0 {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := func() error {
					rr, err := dialData(ctx, addr, r.cfg.Auth)
					if err != nil {
						return err
					}
					defer rr.Close()
					if _, _, err := rr.request(oid, o, l); err != nil {
						return err
					}
					return rr.readInto(dst[o : o+l])
				}()
				if err != nil {
					cancel()
				}
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			if ctx.Err() != nil && r.isClosing() {
				return ErrShuttingDown
			}
			return err
		}
	}
	if err := r.cfg.Store.Seal(oid, creator, true); err != nil {
		return err
	}
	ok = true
	ownerID, _ := ids.FromBytes(owner.GetWorkerId())
	ownerNode, _ := ids.FromBytes(owner.GetNodeId())
	r.mu.Lock()
	r.trackOwnerLocked(oid, ownerID, ownerNode)
	r.secondary[oid] = true
	r.mu.Unlock()
	if d := time.Since(start); size > 0 {
		r.log.Debug("object pulled", "object_id", oid, "from", node, "bytes", size, "took", d,
			"gbps", float64(size)/d.Seconds()/1e9)
	}
	return nil
}

func (r *Raylet) isClosing() bool {
	select {
	case <-r.closing:
		return true
	default:
		return false
	}
}

// --------------------------------------------------------- deaths between nodes

// WorkersDied handles the death of drivers or workers of another node: the
// objects they owned are freed here and local processes drop them as
// borrowers.
func (r *Raylet) WorkersDied(ctx context.Context, req *gorayv1.WorkersDiedRequest) (*gorayv1.WorkersDiedReply, error) {
	var aborts, frees []ids.ObjectID
	r.mu.Lock()
	for _, b := range req.GetWorkerIds() {
		id, err := ids.FromBytes(b)
		if err != nil {
			continue
		}
		a, f := r.objectsOfDeadLocked(id)
		aborts, frees = append(aborts, a...), append(frees, f...)
		r.broadcastDiedLocked(id)
	}
	r.mu.Unlock()
	for _, o := range aborts {
		_ = r.cfg.Store.Abort(o)
	}
	if len(frees) > 0 {
		r.freeObjects(frees)
	}
	return &gorayv1.WorkersDiedReply{}, nil
}

// tellPeers runs call against every alive other node's raylet, in the
// background, bounded by gcsTimeout each.
func (r *Raylet) tellPeers(what string, call func(context.Context, gorayv1.RayletClient) error) {
	r.mu.Lock()
	var addrs []string
	for _, p := range r.peers {
		if p.alive && p.info.GetRayletTcp() != "" {
			addrs = append(addrs, p.info.GetRayletTcp())
		}
	}
	r.mu.Unlock()
	for _, a := range addrs {
		cli, err := r.peerConn(a)
		if err != nil {
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), gcsTimeout)
			defer cancel()
			if err := call(ctx, cli); err != nil {
				r.log.Debug("telling another node failed", "what", what, "raylet", a, "error", err)
			}
		}()
	}
}

// notifyPeersDied tells the other nodes that a local driver or worker died.
func (r *Raylet) notifyPeersDied(id ids.ID) {
	r.tellPeers("worker died", func(ctx context.Context, c gorayv1.RayletClient) error {
		_, err := c.WorkersDied(ctx, &gorayv1.WorkersDiedRequest{WorkerIds: [][]byte{id.Bytes()}, NodeId: r.cfg.NodeID.Bytes()})
		return err
	})
}
