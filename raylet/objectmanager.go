package raylet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/raylet/internal/dataplane"
	"github.com/goray-dev/goray/raylet/internal/spill"
)

// Transfer tuning between nodes.
const (
	// pullStreams is how many ranged connections one pull uses at most.
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

// peerDirectory is what the object manager needs from the cluster view.
type peerDirectory interface {
	// peerInfo returns the record of another node; a dead node is a
	// *NodeDeadError.
	peerInfo(node ids.ID) (*gorayv1.NodeInfo, error)
	// nodeDied reports whether a transfer from node failed because the
	// node is dead (err says so, or the refreshed view does).
	nodeDied(node ids.ID, err error) bool
}

// pull is a transfer of an object from another node in flight.
type pull struct {
	done chan struct{}
	err  error
	node ids.ID                  // the node pulled from
	stop context.CancelCauseFunc // ends the transfer (its node died)
}

// objectManager is the raylet's side of the node's object store: who
// owns each object (objects are freed when their owner, or its node,
// dies), creating objects and making room for them (evicting copies of
// other nodes' objects, then spilling), pulling objects from other nodes
// into this store, serving this store's objects to other nodes (the data
// plane, internal/dataplane, of which it is the Source) and the spiller
// (internal/spill, see spill.go).
//
// mu guards creates, owners, owned, ownerNodes, secondary and pulls. The
// spiller and the data-plane server have their own locks; the object
// manager never calls them, the store or the cluster view with mu held,
// and they call it only with theirs released.
type objectManager struct {
	nodeID  ids.ID
	store   ObjectStore
	log     hclog.Logger
	auth    *auth.Credentials
	gcs     gorayv1.GcsClient
	closing <-chan struct{}
	peers   peerDirectory
	spill   *spill.Spiller
	data    *dataplane.Server
	pulled  atomic.Int64 // object bytes pulled from other nodes (metrics)

	mu         sync.Mutex
	creates    map[ids.ObjectID]ids.ID              // unsealed object -> creating client
	owners     map[ids.ObjectID]ids.ID              // created object -> owner, until freed
	owned      map[ids.ID]map[ids.ObjectID]struct{} // owner -> its objects
	ownerNodes map[ids.ObjectID]ids.ID              // objects owned on other nodes -> that node
	secondary  map[ids.ObjectID]bool                // copies pulled from other nodes
	pulls      map[ids.ObjectID]*pull               // transfers from other nodes in flight
}

func newObjectManager(cfg Config, log hclog.Logger, closing <-chan struct{}, peers peerDirectory) *objectManager {
	om := &objectManager{
		nodeID: cfg.NodeID, store: cfg.Store, log: log, auth: cfg.Auth, gcs: cfg.GCS, closing: closing, peers: peers,
		creates: map[ids.ObjectID]ids.ID{}, owners: map[ids.ObjectID]ids.ID{}, owned: map[ids.ID]map[ids.ObjectID]struct{}{},
		ownerNodes: map[ids.ObjectID]ids.ID{}, secondary: map[ids.ObjectID]bool{}, pulls: map[ids.ObjectID]*pull{},
	}
	om.spill = spill.New(cfg.Spill, cfg.NodeID, spillStore{cfg.Store}, spillObjects{om}, cfg.GCS, log)
	om.data = dataplane.NewServer(om, cfg.Auth, log)
	return om
}

// create allocates an unsealed object (making room when the store is
// full), held by creator until sealed and owned by owner (a process of
// node ownerNode) until freed.
//
// An object that exists already, sealed (a copy pulled here before, or a
// restored one), is the creator's result too: a task re-run to rebuild an
// object lost with its node can land where a copy of it lives. The create
// fails with "already exists" as before, but the copy becomes a primary
// copy owned by owner (no longer evictable), and the creator reads it
// (core's storeValue) instead of failing.
func (om *objectManager) create(ctx context.Context, oid ids.ObjectID, size int64, meta []byte, owner, ownerNode, creator ids.ID) (int64, error) {
	off, err := om.createMakingRoom(ctx, oid, size, meta, creator)
	if err != nil {
		if isExists(err) {
			om.adoptCopy(oid, owner, ownerNode)
		}
		return 0, err
	}
	om.mu.Lock()
	om.creates[oid] = creator
	om.trackOwnerLocked(oid, owner, ownerNode)
	om.mu.Unlock()
	return off, nil
}

// seal seals an object on behalf of its creator.
func (om *objectManager) seal(oid ids.ObjectID, release bool) error {
	om.mu.Lock()
	client := om.creates[oid]
	om.mu.Unlock()
	if err := om.store.Seal(oid, client, release); err != nil {
		return err
	}
	om.mu.Lock()
	delete(om.creates, oid)
	om.mu.Unlock()
	return nil
}

// get looks objects up, restoring spilled ones first, pinning the found
// ones for client, atomically with the spiller (spill.Spiller.Pin): a
// live object is never missed while it is being spilled.
func (om *objectManager) get(ctx context.Context, objs []ids.ObjectID, client ids.ID) ([]StoreEntry, error) {
	return om.spill.Pin(ctx, objs, client)
}

// free deletes objects (and their stored copies) at their owner's request.
func (om *objectManager) free(objs []ids.ObjectID) {
	om.freeObjects(objs)
	om.mu.Lock()
	for _, o := range objs {
		delete(om.creates, o)
		om.forgetObjectLocked(o)
	}
	om.mu.Unlock()
}

// freeObjects frees objects from the store and their stored copies.
func (om *objectManager) freeObjects(objs []ids.ObjectID) {
	om.store.Free(objs)
	om.spill.Forget(objs)
}

// processDied drops the store pins of a dead local driver or worker and
// its objects (ownerDied).
func (om *objectManager) processDied(id ids.ID) {
	aborts, frees := om.objectsOf(id)
	om.store.ReleaseClient(id)
	om.dropObjects(aborts, frees)
}

// ownerDied aborts the objects a dead driver or worker (of any node) was
// creating and frees those it owned.
func (om *objectManager) ownerDied(id ids.ID) {
	om.dropObjects(om.objectsOf(id))
}

func (om *objectManager) dropObjects(aborts, frees []ids.ObjectID) {
	for _, o := range aborts {
		_ = om.store.Abort(o)
	}
	if len(frees) > 0 {
		om.freeObjects(frees)
	}
}

// objectsOf forgets the objects of a dead driver or worker: it returns the
// unsealed objects it was creating (to abort) and the other objects it
// owned (to free).
func (om *objectManager) objectsOf(id ids.ID) (aborts, frees []ids.ObjectID) {
	om.mu.Lock()
	defer om.mu.Unlock()
	for o, c := range om.creates {
		if c == id {
			aborts = append(aborts, o)
			delete(om.creates, o)
			om.forgetObjectLocked(o)
		}
	}
	for o := range om.owned[id] {
		frees = append(frees, o)
		om.forgetObjectLocked(o)
	}
	return aborts, frees
}

// freeOwnedOn frees the objects here whose owners ran on the dead nodes:
// nobody can read or free them any more.
// Pulls from those nodes end at once (endPullsFrom).
func (om *objectManager) freeOwnedOn(nodes []ids.ID) {
	if len(nodes) == 0 {
		return
	}
	om.endPullsFrom(nodes)
	om.mu.Lock()
	var frees []ids.ObjectID
	for o, owner := range om.ownerNodes {
		if slices.Contains(nodes, owner) {
			frees = append(frees, o)
		}
	}
	for _, o := range frees {
		om.forgetObjectLocked(o)
	}
	om.mu.Unlock()
	if len(frees) > 0 {
		om.freeObjects(frees)
		om.log.Info("freed objects owned on dead nodes", "objects", len(frees))
	}
}

// adoptCopy makes the sealed copy of oid here a primary copy owned by
// owner (a process of node ownerNode): a copy pulled from another node is
// no longer evicted to make room (it is spilled instead, as every primary
// copy). An object not sealed (still being created or pulled) is left
// alone.
func (om *objectManager) adoptCopy(oid ids.ObjectID, owner, ownerNode ids.ID) {
	client := ids.New()
	es := om.store.GetEntries([]ids.ObjectID{oid}, client)
	if len(es) != 1 || !es[0].Found {
		return
	}
	defer om.store.Release([]ids.ObjectID{oid}, client)
	om.mu.Lock()
	defer om.mu.Unlock()
	if _, creating := om.creates[oid]; creating {
		return
	}
	if !om.secondary[oid] && om.owners[oid] == owner {
		return
	}
	om.trackOwnerLocked(oid, owner, ownerNode)
	om.log.Debug("a copy becomes the object's primary copy", "object_id", oid, "owner", owner)
}

// isExists reports whether a store error says the object exists.
func isExists(err error) bool {
	return status.Code(storeStatus(err)) == codes.AlreadyExists
}

// endPullsFrom ends the transfers from the dead nodes (each fails with a
// *NodeDeadError, and a copy the node spilled to shared storage is
// restored instead, as for any pull from a dead node): a frozen node would
// hold them, and the readers waiting on them, for pullTimeout.
func (om *objectManager) endPullsFrom(nodes []ids.ID) {
	om.mu.Lock()
	defer om.mu.Unlock()
	for _, p := range om.pulls {
		if slices.Contains(nodes, p.node) {
			p.stop(&NodeDeadError{Node: p.node, Reason: "reported dead while the object was pulled from it"})
		}
	}
}

// track records that owner (a process of node ownerNode) owns o, until o
// is freed; secondary marks a copy pulled from another node.
func (om *objectManager) track(o ids.ObjectID, owner *gorayv1.Address, secondary bool) {
	ownerID, _ := ids.FromBytes(owner.GetWorkerId())
	ownerNode, _ := ids.FromBytes(owner.GetNodeId())
	om.mu.Lock()
	defer om.mu.Unlock()
	om.trackOwnerLocked(o, ownerID, ownerNode)
	if secondary {
		om.secondary[o] = true
	}
}

// trackOwnerLocked records that owner (a process of node ownerNode) owns o,
// until o is freed.
func (om *objectManager) trackOwnerLocked(o ids.ObjectID, owner, ownerNode ids.ID) {
	om.forgetObjectLocked(o)
	if owner.IsNil() {
		return
	}
	om.owners[o] = owner
	if !ownerNode.IsNil() && ownerNode != om.nodeID {
		om.ownerNodes[o] = ownerNode
	}
	objs := om.owned[owner]
	if objs == nil {
		objs = map[ids.ObjectID]struct{}{}
		om.owned[owner] = objs
	}
	objs[o] = struct{}{}
}

// forgetObjectLocked drops o's owner record.
func (om *objectManager) forgetObjectLocked(o ids.ObjectID) {
	owner, ok := om.owners[o]
	if !ok {
		return
	}
	delete(om.owners, o)
	delete(om.ownerNodes, o)
	delete(om.secondary, o)
	if objs := om.owned[owner]; objs != nil {
		delete(objs, o)
		if len(objs) == 0 {
			delete(om.owned, owner)
		}
	}
}

// primaries reports which objects are primary copies: objects created
// here whose owner has not freed them.
func (om *objectManager) primaries(objs []ids.ObjectID) []bool {
	out := make([]bool, len(objs))
	om.mu.Lock()
	defer om.mu.Unlock()
	for i, o := range objs {
		_, owned := om.owners[o]
		out[i] = owned && !om.secondary[o]
	}
	return out
}

// holdings says where the node's primary copies are: in memory (sealed
// or not) or stored, and which of them are recorded in shared storage
// (see spill.Holdings).
func (om *objectManager) holdings() spill.Holdings {
	entries := om.store.ListEntries()
	oids := make([]ids.ObjectID, len(entries))
	for i, e := range entries {
		oids[i] = e.ID
	}
	primary := om.primaries(oids)
	in := entries[:0]
	for i, e := range entries {
		if primary[i] && !e.Freed {
			in = append(in, e)
		}
	}
	return om.spill.Holdings(in)
}

// alive reports which objects have not been freed by their owner.
func (om *objectManager) alive(objs []ids.ObjectID) []bool {
	out := make([]bool, len(objs))
	om.mu.Lock()
	defer om.mu.Unlock()
	for i, o := range objs {
		_, out[i] = om.owners[o]
	}
	return out
}

// evictSecondaries frees unpinned copies this node pulled from other nodes
// (their primary lives elsewhere, so nothing is lost; a reader here pulls
// again), oldest first, until need bytes are free or none is left. It
// works whether spilling is on or not, and returns the bytes freed.
func (om *objectManager) evictSecondaries(need int64) int64 {
	entries := om.store.ListEntries()
	sort.Slice(entries, func(i, j int) bool { return entries[i].Seq < entries[j].Seq })
	var drop []ids.ObjectID
	var freed int64
	type evicted struct {
		size             int64
		owner, ownerNode ids.ID
	}
	was := map[ids.ObjectID]evicted{}
	om.mu.Lock()
	for _, e := range entries {
		if freed >= need {
			break
		}
		if !om.secondary[e.ID] || !e.Sealed || e.Freed || e.Pins > 0 {
			continue
		}
		drop = append(drop, e.ID)
		freed += e.DataSize
		was[e.ID] = evicted{e.DataSize, om.owners[e.ID], om.ownerNodes[e.ID]}
		om.forgetObjectLocked(e.ID)
	}
	om.mu.Unlock()
	if len(drop) == 0 {
		return 0
	}
	// Only those no reader pinned meanwhile (atomically with the read
	// path, spill.Spiller.Pin); the others stay secondary copies.
	drop = om.spill.FreeIdle(drop)
	freed = 0
	om.mu.Lock()
	for _, o := range drop {
		freed += was[o].size
		delete(was, o)
	}
	for o, w := range was {
		if _, tracked := om.owners[o]; !tracked && !w.owner.IsNil() {
			om.trackOwnerLocked(o, w.owner, w.ownerNode)
			om.secondary[o] = true
		}
	}
	om.mu.Unlock()
	if len(drop) > 0 {
		om.log.Debug("evicted copies of other nodes' objects", "objects", len(drop), "bytes", freed)
	}
	return freed
}

// createMakingRoom creates an object in the store and, when it does not
// fit, makes room: copies of other nodes' objects are evicted first, then
// (with spilling on) this node's own objects are spilled, waiting up to
// spilling.wait or until ctx ends. When it still fails, the error is the
// store's first, followed by why spilling could not help.
func (om *objectManager) createMakingRoom(ctx context.Context, oid ids.ObjectID, size int64, meta []byte, creator ids.ID) (int64, error) {
	var off int64
	create := func() (err error) {
		off, err = om.store.Create(oid, size, meta, creator)
		return err
	}
	first := create()
	var full interface{ StoreFull() bool }
	if first == nil || !errors.As(first, &full) {
		return off, first
	}
	if om.evictSecondaries(size) > 0 && create() == nil {
		return off, nil
	}
	if !om.spill.Enabled() {
		return off, first
	}
	if werr := om.spill.WaitForRoom(ctx, size, create); werr != nil {
		return off, fmt.Errorf("%w; %v", first, werr)
	}
	return off, nil
}

// pull copies an object from the node holding it into this node's store.
// Concurrent pulls of one object share one transfer.
func (om *objectManager) pull(ctx context.Context, oid ids.ObjectID, node ids.ID, owner *gorayv1.Address) error {
	if node == om.nodeID || om.store.Contains(oid) {
		return nil
	}
	if om.spill.Has(oid) {
		// Its copy here is spilled (a copy that became this node's
		// primary): restore it rather than pull a second one, whose create
		// would race the restore's.
		err := om.spill.Restore(ctx, oid)
		if err == nil {
			return nil
		}
		om.log.Debug("restoring the spilled copy failed; pulling it", "object_id", oid, "node", node, "error", err)
	}
	om.mu.Lock()
	p := om.pulls[oid]
	if p == nil {
		pctx, stop := context.WithCancelCause(context.Background())
		p = &pull{done: make(chan struct{}), node: node, stop: stop}
		om.pulls[oid] = p
		owner := proto.Clone(owner).(*gorayv1.Address)
		go func() {
			defer stop(nil)
			p.err = om.runPull(pctx, oid, node, owner)
			if p.err != nil && om.peers.nodeDied(node, p.err) {
				// Its node is gone: restore the copy it spilled to shared
				// storage, if any.
				if err := om.spill.RestoreFromRecord(oid, node, owner); err == nil {
					p.err = nil
				} else if !errors.Is(err, spill.ErrNoSpilledCopy) {
					om.log.Warn("restoring a dead node's object from its spilled copy failed", "object_id", oid, "node", node, "error", err)
					p.err = fmt.Errorf("%w; restoring its spilled copy: %v", p.err, err)
				}
				if p.err != nil {
					// The caller learns the node is dead (not a failure to
					// retry), whatever the transfer's own error was.
					p.err = &pullError{err: p.err, dead: true}
				}
			}
			om.mu.Lock()
			delete(om.pulls, oid)
			om.mu.Unlock()
			close(p.done)
		}()
	}
	om.mu.Unlock()
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pullError is a pull that failed because its source node is dead: the
// copy there is gone (unless it was restored from shared storage).
type pullError struct {
	err  error
	dead bool
}

func (e *pullError) Error() string { return e.err.Error() }
func (e *pullError) Unwrap() error { return e.err }

// runPull reads the object from node's data plane in parallel ranged
// streams straight into a new object of this store, sealed once complete;
// on failure the partial object is discarded.
// A transfer from a node reported dead meanwhile (endPullsFrom) ends at
// once with a *NodeDeadError: a frozen node would hold it for pullTimeout.
func (om *objectManager) runPull(pctx context.Context, oid ids.ObjectID, node ids.ID, owner *gorayv1.Address) (err error) {
	info, err := om.peers.peerInfo(node)
	if err != nil {
		return err
	}
	addr := info.GetObjectAddr()
	if addr == "" {
		return fmt.Errorf("node %s serves no object data plane", node.Short())
	}
	ctx, cancel := context.WithTimeout(pctx, pullTimeout)
	defer cancel()
	defer func() {
		var nd *NodeDeadError
		if cause := context.Cause(pctx); err != nil && errors.As(cause, &nd) {
			err = fmt.Errorf("%w (pulling object %s: %v)", cause, oid, err)
		}
	}()
	go func() {
		select {
		case <-om.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	first, err := dataplane.Dial(ctx, addr, om.auth)
	if err != nil {
		return err
	}
	defer first.Close()
	size, meta, err := first.Request(oid, 0, firstPart)
	if err != nil {
		return err
	}
	creator := ids.New()
	off, err := om.createMakingRoom(ctx, oid, size, meta, creator)
	// A copy that exists is the pull's result once sealed. One freed but
	// still held by a reader's brief pin (a lookup pins, then finds it
	// freed, then lets go) blocks its id until the pin goes: try again,
	// pausing a little longer each time, while ctx lasts.
	for pause := 100 * time.Microsecond; err != nil && isExists(err); pause = min(2*pause, 20*time.Millisecond) {
		if om.store.Contains(oid) {
			return nil // arrived meanwhile (it may be evicted again at once: the reader asks again)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("making room for object %s (%d bytes): a freed copy still holds its id: %w", oid, size, ctx.Err())
		case <-t.C:
		}
		off, err = om.createMakingRoom(ctx, oid, size, meta, creator)
	}
	if err != nil {
		return fmt.Errorf("making room for object %s (%d bytes): %w", oid, size, err)
	}
	dst := om.store.Data(off, size)
	// Fault the destination pages in at once: receiving into a cold arena
	// page by page is several times slower. Best effort (Linux 5.14+).
	if size >= minStreamBytes {
		_ = unix.Madvise(dst, unix.MADV_POPULATE_WRITE)
	}
	ok := false
	defer func() {
		if !ok {
			_ = om.store.Abort(oid)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, pullStreams+1)
	wg.Add(1)
	go func() { defer wg.Done(); errs <- first.ReadInto(dst[:min(size, firstPart)]) }()
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
					rr, err := dataplane.Dial(ctx, addr, om.auth)
					if err != nil {
						return err
					}
					defer rr.Close()
					if _, _, err := rr.Request(oid, o, l); err != nil {
						return err
					}
					return rr.ReadInto(dst[o : o+l])
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
			if ctx.Err() != nil && isClosed(om.closing) {
				return ErrShuttingDown
			}
			return err
		}
	}
	if err := om.store.Seal(oid, creator, true); err != nil {
		return err
	}
	ok = true
	om.pulled.Add(size)
	om.track(oid, owner, true)
	if d := time.Since(start); size > 0 {
		om.log.Debug("object pulled", "object_id", oid, "from", node, "bytes", size, "took", d,
			"gbps", float64(size)/d.Seconds()/1e9)
	}
	return nil
}

// closeConns closes the served object data connections.
func (om *objectManager) closeConns() { om.data.Close() }

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// pullStatus is the gRPC status of a pull of oid from node (PullObject):
// FailedPrecondition when the node is dead (the copy there is gone),
// NotFound when the node answered that it does not hold the object,
// Unavailable when the transfer failed (the node is unreachable, slow or
// frozen, but not known to be dead: the caller may try again).
func pullStatus(ctx context.Context, oid ids.ObjectID, node ids.ID, err error) error {
	var (
		nd      *NodeDeadError
		pe      *pullError
		refused *dataplane.Error
	)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return status.FromContextError(ctx.Err()).Err()
	case errors.As(err, &nd), errors.As(err, &pe) && pe.dead:
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.As(err, &refused) && refused.Status == dataplane.StatusNotFound:
		return status.Errorf(codes.NotFound, "pulling object %s from node %s: %v", oid, node.Short(), err)
	}
	return status.Errorf(codes.Unavailable, "pulling object %s from node %s: %v", oid, node.Short(), err)
}
