// The object table: what this process owns and borrows, reference counts,
// borrowers and the frees they lead to (Ray's reference counter).

package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// object is one entry of the object table. An owned entry holds the value
// (inline) or its store location and the full reference count; a borrowed
// entry counts this process's references and caches the value once fetched.
type object struct {
	id    ids.ObjectID
	owned bool
	owner *pb.Address

	local     int // live handles in this process
	submitted int // in-flight tasks that take the object as an argument
	contained int // values held by this process that contain the reference
	borrowers map[string]*pb.Address
	copies    []ids.ID // nodes of its borrowers, which may hold a copy (copies.go)

	ready chan struct{} // closed when done
	done  bool
	ret   *pb.ReturnObject // inline value or store location
	err   error            // system error (worker crashed, actor died, ...)

	nested []codec.RefInfo // references inside the value, held via contained

	// Borrowed entries.
	registered bool // the owner knows this process borrows the object
	pendingAdd bool // registration queued, not yet sent
	fetching   bool
	stopFetch  context.CancelFunc

	task *taskRecord // creating task (owned, for list and retries)
	size int64
	// collected: its tensors were collected already (the owner closed).
	collected bool
}

type ownerKey string

func keyOf(a *pb.Address) ownerKey { return ownerKey(a.GetWorkerId()) }

type borrowBatch struct {
	owner *pb.Address
	ids   []ids.ObjectID
}

type objectTable struct {
	cw *CoreWorker
	// borrowMu serialises borrower updates to owners, so that a flush never
	// returns while another flush still carries its registrations, and a
	// removal never overtakes the registration it undoes.
	borrowMu sync.Mutex
	mu       sync.Mutex
	objs     map[ids.ObjectID]*object

	// Borrower registrations not yet sent, by owner.
	adds map[ownerKey]*borrowBatch
	// Borrower removals and store frees, sent in the background.
	removes map[ownerKey]*borrowBatch
	frees   []pendingFree
	// noted are borrowed objects whose owners know this node may hold a
	// copy (copies.go).
	noted map[ids.ObjectID]struct{}
	// tensorGC are envelopes of freed transport objects to collect.
	tensorGC [][]byte
	kick     chan struct{}
	owned    int // owned entries, for ownsAny
}

func newObjectTable(cw *CoreWorker) *objectTable {
	return &objectTable{
		cw:      cw,
		objs:    map[ids.ObjectID]*object{},
		adds:    map[ownerKey]*borrowBatch{},
		removes: map[ownerKey]*borrowBatch{},
		kick:    make(chan struct{}, 1),
	}
}

// newOwned creates an owned, pending object with local handles already
// counted.
func (t *objectTable) newOwned(id ids.ObjectID, task *taskRecord, local int) *object {
	o := &object{id: id, owned: true, owner: t.cw.addr, ready: make(chan struct{}), task: task, local: local}
	t.mu.Lock()
	t.objs[id] = o
	t.owned++
	first := t.owned == 1
	t.mu.Unlock()
	if first {
		t.kickOwnership()
	}
	return o
}

// ownsAny reports whether this process owns any object, or an actor
// (not detached) that is not dead: an owner must outlive what it owns, so
// its raylet does not reap it as an idle worker (the raylets of the nodes
// where its actors run kill them when it dies, as Ray does).
func (t *objectTable) ownsAny() bool {
	t.mu.Lock()
	owned := t.owned
	t.mu.Unlock()
	return owned > 0 || (t.cw.actors != nil && t.cw.actors.ownsLive())
}

func (t *objectTable) kickOwnership() {
	if t.cw.ownsKick == nil {
		return
	}
	select {
	case t.cw.ownsKick <- struct{}{}:
	default:
	}
}

// entryLocked returns the entry for id, creating a borrowed one when the
// owner is another process. Callers hold t.mu.
func (t *objectTable) entryLocked(id ids.ObjectID, owner *pb.Address) *object {
	o := t.objs[id]
	if o == nil && owner != nil && !t.cw.isSelf(owner) {
		o = &object{id: id, owner: owner, ready: make(chan struct{})}
		t.objs[id] = o
	}
	return o
}

// queueAddLocked queues a borrower registration for a new borrowed entry.
func (t *objectTable) queueAddLocked(o *object) {
	if o.owned || o.registered || o.pendingAdd {
		return
	}
	o.pendingAdd = true
	k := keyOf(o.owner)
	b := t.adds[k]
	if b == nil {
		b = &borrowBatch{owner: o.owner}
		t.adds[k] = b
	}
	b.ids = append(b.ids, o.id)
}

// addLocal counts a new handle.
func (t *objectTable) addLocal(id ids.ObjectID, owner *pb.Address) {
	t.mu.Lock()
	if o := t.entryLocked(id, owner); o != nil {
		o.local++
		t.queueAddLocked(o)
	}
	t.mu.Unlock()
}

func (t *objectTable) removeLocal(id ids.ObjectID) {
	t.mu.Lock()
	if o := t.objs[id]; o != nil && o.local > 0 {
		o.local--
		t.maybeReleaseLocked(o)
	}
	t.mu.Unlock()
	t.signal()
}

func (t *objectTable) addSubmitted(refs []codec.RefInfo) {
	t.mu.Lock()
	for _, r := range refs {
		if o := t.entryLocked(r.ID, r.Owner); o != nil {
			o.submitted++
			t.queueAddLocked(o)
		}
	}
	t.mu.Unlock()
}

// addSubmittedIfPresent is addSubmitted for objects this process still
// knows; it returns the first unknown one (nil when all are known), having
// counted the known ones.
func (t *objectTable) addSubmittedIfPresent(refs []codec.RefInfo) *ids.ObjectID {
	t.mu.Lock()
	defer t.mu.Unlock()
	var missing *ids.ObjectID
	for _, r := range refs {
		if o := t.objs[r.ID]; o != nil {
			o.submitted++
			t.queueAddLocked(o)
		} else if missing == nil {
			id := r.ID
			missing = &id
		}
	}
	return missing
}

// owns reports whether this process owns id.
func (t *objectTable) owns(id ids.ObjectID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.objs[id]
	return o != nil && o.owned
}

func (t *objectTable) removeSubmitted(refs []codec.RefInfo) {
	t.mu.Lock()
	for _, r := range refs {
		if o := t.objs[r.ID]; o != nil && o.submitted > 0 {
			o.submitted--
			t.maybeReleaseLocked(o)
		}
	}
	t.mu.Unlock()
	t.signal()
}

// addContained records that a value held by this process contains refs.
// registered says the owner already counts this process as a borrower (the
// executing worker registered us before replying).
func (t *objectTable) addContainedLocked(refs []codec.RefInfo, registered bool) {
	for _, r := range refs {
		o := t.entryLocked(r.ID, r.Owner)
		if o == nil {
			continue
		}
		o.contained++
		if registered && !o.owned {
			o.registered = true
		}
		t.queueAddLocked(o)
	}
}

// taskOf returns the record of the task producing an object this process
// owns (nil for other objects).
func (t *objectTable) taskOf(id ids.ObjectID) *taskRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.objs[id]; o != nil && o.owned {
		return o.task
	}
	return nil
}

// collectAllTensors queues the garbage collection of every tensor object
// this process owns, live or not: the owner is closing, and its objects die
// with it (the raylet frees its store objects; the transports holding its
// tensors learn it here).
func (t *objectTable) collectAllTensors() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range t.objs {
		if o.owned && o.done && o.ret != nil && codec.FormatOf(o.ret.Metadata) == codec.FormatTransport {
			t.tensorGC = append(t.tensorGC, o.ret.Data)
			o.collected = true
		}
	}
}

// maybeReleaseLocked frees or un-borrows o when nothing references it.
func (t *objectTable) maybeReleaseLocked(o *object) {
	total := o.local + o.submitted + o.contained
	if o.owned {
		total += len(o.borrowers)
		if total > 0 || !o.done {
			return
		}
		delete(t.objs, o.id)
		if t.owned--; t.owned == 0 {
			t.kickOwnership()
		}
		if o.ret != nil && o.ret.InStore {
			t.queueFreeLocked(o.id, o.ret, o.copies)
		}
		if o.ret != nil && codec.FormatOf(o.ret.Metadata) == codec.FormatTransport && !o.collected {
			t.tensorGC = append(t.tensorGC, o.ret.Data)
		}
		nested := o.nested
		o.nested = nil
		for _, r := range nested {
			if n := t.objs[r.ID]; n != nil && n.contained > 0 {
				n.contained--
				t.maybeReleaseLocked(n)
			}
		}
		return
	}
	if total > 0 {
		return
	}
	delete(t.objs, o.id)
	if o.stopFetch != nil {
		o.stopFetch()
	}
	k := keyOf(o.owner)
	if o.pendingAdd {
		if b := t.adds[k]; b != nil {
			for i, id := range b.ids {
				if id == o.id {
					b.ids = append(b.ids[:i], b.ids[i+1:]...)
					break
				}
			}
		}
		return
	}
	if o.registered {
		b := t.removes[k]
		if b == nil {
			b = &borrowBatch{owner: o.owner}
			t.removes[k] = b
		}
		b.ids = append(b.ids, o.id)
	}
}

// signal wakes the flush loop when something is queued for it: a store
// free, a borrower removal or a tensor collection. Most releases and
// completions queue nothing (small values live in this process), and
// waking the loop for nothing would cost a goroutine hand-off per call
// (callpath.go).
func (t *objectTable) signal() {
	t.mu.Lock()
	work := len(t.frees) > 0 || len(t.removes) > 0 || len(t.tensorGC) > 0
	t.mu.Unlock()
	if !work {
		return
	}
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// complete records the value of an owned object.
func (t *objectTable) complete(id ids.ObjectID, ret *pb.ReturnObject, sysErr error, nestedRegistered bool) {
	t.mu.Lock()
	o := t.objs[id]
	if o == nil || o.done {
		t.mu.Unlock()
		// Nobody holds the object any more: free a store copy at once.
		if o == nil && ret != nil && ret.InStore {
			t.mu.Lock()
			t.queueFreeLocked(id, ret, nil)
			t.mu.Unlock()
			t.signal()
		}
		if o == nil && ret != nil && codec.FormatOf(ret.Metadata) == codec.FormatTransport {
			t.dropTensorReply(ret)
		}
		return
	}
	o.ret = ret
	o.err = sysErr
	if ret != nil {
		o.size = ret.Size
		if len(ret.Nested) > 0 {
			refs := refsFromPB(ret.Nested)
			o.nested = refs
			t.addContainedLocked(refs, nestedRegistered)
		}
	}
	o.done = true
	close(o.ready)
	t.maybeReleaseLocked(o)
	t.mu.Unlock()
	t.signal()
}

// dropTensorReply collects the tensors of a transport reply that no object
// records (its task was failed or its caller gave up), so they do not leak.
func (t *objectTable) dropTensorReply(ret *pb.ReturnObject) {
	if ret == nil || codec.FormatOf(ret.Metadata) != codec.FormatTransport {
		return
	}
	t.mu.Lock()
	t.tensorGC = append(t.tensorGC, ret.Data)
	t.mu.Unlock()
	t.signal()
}

// lookup returns the entry for id or nil.
func (t *objectTable) lookup(id ids.ObjectID) *object {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.objs[id]
}

// readyChan returns a channel closed when the object's value or location is
// known, starting a fetch from the owner for borrowed objects.
func (t *objectTable) readyChan(id ids.ObjectID) (<-chan struct{}, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.objs[id]
	if o == nil {
		return nil, t.missingErr(id)
	}
	if !o.owned && !o.done && !o.fetching {
		o.fetching = true
		ctx, cancel := context.WithCancel(t.cw.ctx)
		o.stopFetch = cancel
		go t.fetch(ctx, o)
	}
	return o.ready, nil
}

func (t *objectTable) missingErr(id ids.ObjectID) error {
	if t.cw.idgen.Owns(id.TaskID()) {
		return &ObjectError{ObjectID: id, Kind: ErrObjectFreed, Detail: "its last reference was released"}
	}
	return &ObjectError{ObjectID: id, Kind: ErrObjectUnknown}
}

// fetch asks the owner for a borrowed object's value or location.
func (t *objectTable) fetch(ctx context.Context, o *object) {
	var ret *pb.ReturnObject
	var sysErr error
	for {
		cli, err := t.cw.peer(o.owner)
		if err == nil {
			var rep *pb.GetObjectStatusReply
			rep, err = cli.GetObjectStatus(ctx, &pb.GetObjectStatusRequest{ObjectId: o.id[:]})
			if err == nil {
				switch rep.Status {
				case pb.GetObjectStatusReply_READY:
					ret = rep.Object
				case pb.GetObjectStatusReply_FREED:
					sysErr = &ObjectError{ObjectID: o.id, Kind: ErrObjectFreed, Detail: "its owner freed it"}
				default:
					sysErr = &ObjectError{ObjectID: o.id, Kind: ErrObjectUnknown, Detail: "its owner does not know it"}
				}
				break
			}
		}
		if ctx.Err() != nil {
			return // entry released or shutting down
		}
		if status.Code(err) == codes.Unavailable || errors.Is(err, context.DeadlineExceeded) {
			sysErr = &ObjectError{ObjectID: o.id, Kind: ErrOwnerDied, Detail: fmt.Sprintf("owner %s unreachable: %v", ids.MustFromBytes(o.owner.WorkerId).Short(), status.Convert(err).Message())}
		} else {
			sysErr = &ObjectError{ObjectID: o.id, Kind: ErrOwnerDied, Detail: err.Error()}
		}
		break
	}
	t.mu.Lock()
	if !o.done {
		o.ret, o.err, o.done = ret, sysErr, true
		close(o.ready)
	}
	t.mu.Unlock()
}

// result returns the value or error of a done object.
func (t *objectTable) result(id ids.ObjectID) (*pb.ReturnObject, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.objs[id]
	if o == nil {
		return nil, t.missingErr(id)
	}
	return o.ret, o.err
}

// wait blocks until id is ready and returns its record.
func (t *objectTable) wait(ctx context.Context, id ids.ObjectID) (*pb.ReturnObject, error) {
	ch, err := t.readyChan(id)
	if err != nil {
		return nil, err
	}
	select {
	case <-ch:
	default:
		select {
		case <-ch:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, &GetTimeoutError{ObjectID: id, Err: ctx.Err()}
			}
			return nil, ctx.Err()
		case <-t.cw.closed:
			return nil, ErrShutdown
		}
	}
	return t.result(id)
}

// flushBorrows sends queued borrower registrations and waits for them; it
// runs before a task reply and before Get returns, so an owner never frees
// an object a borrower has just received.
func (t *objectTable) flushBorrows(ctx context.Context) {
	t.borrowMu.Lock()
	defer t.borrowMu.Unlock()
	t.mu.Lock()
	if len(t.adds) == 0 {
		t.mu.Unlock()
		return
	}
	batches := t.adds
	t.adds = map[ownerKey]*borrowBatch{}
	for _, b := range batches {
		for _, id := range b.ids {
			if o := t.objs[id]; o != nil {
				o.pendingAdd = false
				o.registered = true
			}
		}
	}
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, b := range batches {
		if len(b.ids) == 0 {
			continue
		}
		wg.Add(1)
		go func(b *borrowBatch) {
			defer wg.Done()
			t.sendBorrowers(ctx, b.owner, t.cw.addr, b.ids, nil)
		}(b)
	}
	wg.Wait()
}

func (t *objectTable) sendBorrowers(ctx context.Context, owner, borrower *pb.Address, add, remove []ids.ObjectID) {
	cli, err := t.cw.peer(owner)
	if err != nil {
		return
	}
	req := &pb.UpdateBorrowersRequest{Borrower: borrower}
	for _, id := range add {
		req.Add = append(req.Add, id.Bytes())
	}
	for _, id := range remove {
		req.Remove = append(req.Remove, id.Bytes())
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cli.UpdateBorrowers(ctx, req); err != nil {
		t.cw.log.Debug("updating borrowers failed", "owner", ids.MustFromBytes(owner.WorkerId).Short(), "error", err)
	}
}

// updateBorrowers applies a borrower's report on the owner side.
func (t *objectTable) updateBorrowers(req *pb.UpdateBorrowersRequest) []ids.ObjectID {
	key := string(req.Borrower.GetWorkerId())
	var unknown []ids.ObjectID
	t.mu.Lock()
	for _, b := range req.Add {
		id, err := ids.ObjectIDFromBytes(b)
		if err != nil {
			continue
		}
		o := t.objs[id]
		if o == nil || !o.owned {
			unknown = append(unknown, id)
			continue
		}
		if o.borrowers == nil {
			o.borrowers = map[string]*pb.Address{}
		}
		o.borrowers[key] = req.Borrower
		o.addCopyNodeLocked(req.Borrower.GetNodeId())
	}
	for _, b := range req.Remove {
		id, err := ids.ObjectIDFromBytes(b)
		if err != nil {
			continue
		}
		if o := t.objs[id]; o != nil && o.owned {
			delete(o.borrowers, key)
			t.maybeReleaseLocked(o)
		}
	}
	t.mu.Unlock()
	t.signal()
	return unknown
}

// borrowerDied drops every borrow of a process that is gone.
func (t *objectTable) borrowerDied(worker []byte) {
	t.mu.Lock()
	for _, o := range t.objs {
		if o.owned && o.borrowers != nil {
			if _, ok := o.borrowers[string(worker)]; ok {
				delete(o.borrowers, string(worker))
				t.maybeReleaseLocked(o)
			}
		}
	}
	t.mu.Unlock()
	t.signal()
}

// relocate records that an owned object's primary copy moved from node
// from to node to (restored there from a dead node's spilled copy), so
// later readers pull it from there.
func (t *objectTable) relocate(id ids.ObjectID, from, to ids.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.objs[id]
	if o == nil || !o.owned || o.ret == nil || string(o.ret.NodeId) != string(from.Bytes()) {
		return
	}
	ret := proto.Clone(o.ret).(*pb.ReturnObject)
	ret.NodeId = to.Bytes()
	o.ret = ret
}

// nodeDied drops every borrow by a process of a dead node.
func (t *objectTable) nodeDied(node []byte) {
	t.mu.Lock()
	for _, o := range t.objs {
		if !o.owned || o.borrowers == nil {
			continue
		}
		for k, a := range o.borrowers {
			if string(a.GetNodeId()) == string(node) {
				delete(o.borrowers, k)
			}
		}
		t.maybeReleaseLocked(o)
	}
	t.mu.Unlock()
	t.signal()
}

// flushLoop sends borrower removals and store frees in the background.
func (t *objectTable) flushLoop() {
	for {
		select {
		case <-t.cw.ctx.Done():
			return
		case <-t.kick:
		}
		t.borrowMu.Lock()
		t.mu.Lock()
		removes := t.removes
		t.removes = map[ownerKey]*borrowBatch{}
		t.mu.Unlock()
		for _, b := range removes {
			t.sendBorrowers(t.cw.ctx, b.owner, t.cw.addr, nil, b.ids)
		}
		t.borrowMu.Unlock()
		t.flushFrees()
		// Not tied to cw.ctx: Close cancels that, then waits for this loop.
		t.flushTensorGC(context.Background(), false)
	}
}

// flushTensorGC tells transports about freed tensor objects now. Those a
// plugin could not take (restarting, not answering) are retried a second
// later, unless final is set (Close).
func (t *objectTable) flushTensorGC(ctx context.Context, final bool) {
	t.mu.Lock()
	gcs := t.tensorGC
	t.tensorGC = nil
	t.mu.Unlock()
	var again [][]byte
	for _, env := range gcs {
		if t.cw.collectTensors(ctx, env) && !final {
			again = append(again, env)
		}
	}
	if len(again) > 0 {
		t.mu.Lock()
		t.tensorGC = append(t.tensorGC, again...)
		t.mu.Unlock()
		time.AfterFunc(time.Second, t.signal)
	}
}

// flushFrees frees queued store objects now. Besides the background loop,
// a large put calls it first, so that memory just released is reused while
// its pages are still warm.
func (t *objectTable) flushFrees() {
	t.mu.Lock()
	frees := t.frees
	t.frees = nil
	t.mu.Unlock()
	if len(frees) == 0 || t.cw.raylet == nil {
		return
	}
	// Not tied to any caller's context: a free must not be dropped because
	// a Put's context ended. Copies pulled by other nodes go too.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := t.sendFrees(ctx, frees); err != nil {
		t.cw.log.Debug("freeing objects failed; will retry", "count", len(frees), "error", err)
		t.mu.Lock()
		t.frees = append(t.frees, frees...)
		t.mu.Unlock()
		time.AfterFunc(time.Second, t.signal)
	}
}

func refsFromPB(rs []*pb.ObjectRef) []codec.RefInfo {
	out := make([]codec.RefInfo, 0, len(rs))
	for _, r := range rs {
		id, err := ids.ObjectIDFromBytes(r.ObjectId)
		if err != nil {
			continue
		}
		out = append(out, codec.RefInfo{ID: id, Owner: r.Owner})
	}
	return out
}

func refsToPB(rs []codec.RefInfo) []*pb.ObjectRef {
	if len(rs) == 0 {
		return nil
	}
	out := make([]*pb.ObjectRef, len(rs))
	for i, r := range rs {
		out[i] = &pb.ObjectRef{ObjectId: r.ID.Bytes(), Owner: r.Owner}
	}
	return out
}
