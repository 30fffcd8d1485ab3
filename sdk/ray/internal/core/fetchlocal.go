package core

import (
	"sync"

	"github.com/goray-dev/goray/internal/ids"
)

// Wait's fetch_local (Ray's ray.wait(fetch_local=True), its default).
//
// With it, an object held in another node's store counts as ready for
// Wait only once a copy is in this node's, pulled as Get pulls it, so
// that the Get after a Wait reads it at once and a loop over Wait's
// results overlaps the transfers with its work. The pull outlives the
// Wait that started it (a loop polling with timeout 0 would otherwise
// cancel it each time and never see the object ready) and lasts until it
// ends or the core worker stops; there is one per object at a time, which
// the Waits of that object share, and an object whose pull ended stays
// ready for later Waits (the last maxFetched are remembered): a poll that
// started a new pull each time would never see it done. A copy that cannot be pulled (its node
// died: Get rebuilds it or reports it lost) counts as ready, as an object
// whose task failed does: Get says why. Objects inline in their owner, or
// in this node's store, are ready as soon as they are known.

// fetcher keeps the pulls under way, one per object, and remembers the
// last maxFetched objects whose pull ended, so that a later Wait (a loop
// polling with timeout 0) sees them ready instead of pulling again; its
// zero value is ready to use. A copy evicted since counts as ready too:
// Get pulls it again.
type fetcher struct {
	mu      sync.Mutex
	pulling map[ids.ObjectID]chan struct{} // closed when the pull ends
	fetched map[ids.ObjectID]struct{}
	order   []ids.ObjectID // fetched, oldest first
}

// maxFetched bounds what fetcher remembers.
const maxFetched = 4096

// closedChan is a channel that is closed.
var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// LocalChan returns a channel closed once h's object is ready and, when it
// is held in another node's store, a copy is in this node's (see above).
func (cw *CoreWorker) LocalChan(h *Handle) (<-chan struct{}, error) {
	ready, err := cw.ReadyChan(h)
	if err != nil {
		return nil, err
	}
	select {
	case <-ready:
		node, remote := cw.remoteCopy(h)
		if !remote {
			return ready, nil
		}
		return cw.fetch(h, node), nil
	default:
	}
	out := make(chan struct{})
	go func() {
		select {
		case <-ready:
		case <-cw.ctx.Done():
			return
		}
		if node, remote := cw.remoteCopy(h); remote {
			select {
			case <-cw.fetch(h, node):
			case <-cw.ctx.Done():
				return
			}
		}
		close(out)
	}()
	return out, nil
}

// remoteCopy reports the node whose store holds h's object (ready) when
// that is another node.
func (cw *CoreWorker) remoteCopy(h *Handle) (ids.ID, bool) {
	ret, err := cw.objects.result(h.ID)
	if err != nil || ret == nil || !ret.InStore {
		return ids.Nil, false
	}
	node, err := ids.FromBytes(ret.NodeId)
	if err != nil || node.IsNil() || node == cw.nodeID {
		return ids.Nil, false
	}
	return node, true
}

// fetch pulls h's object from node to this node's store, unless a pull of
// it is under way, and returns a channel closed when that pull ends.
func (cw *CoreWorker) fetch(h *Handle, node ids.ID) <-chan struct{} {
	f := &cw.fetches
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.fetched[h.ID]; ok {
		return closedChan
	}
	if ch, ok := f.pulling[h.ID]; ok {
		return ch
	}
	if f.pulling == nil {
		f.pulling = map[ids.ObjectID]chan struct{}{}
	}
	ch := make(chan struct{})
	f.pulling[h.ID] = ch
	go func() {
		defer func() {
			f.mu.Lock()
			delete(f.pulling, h.ID)
			if cw.ctx.Err() == nil {
				if f.fetched == nil {
					f.fetched = map[ids.ObjectID]struct{}{}
				}
				f.fetched[h.ID] = struct{}{}
				f.order = append(f.order, h.ID)
				for len(f.order) > maxFetched {
					delete(f.fetched, f.order[0])
					f.order = f.order[1:]
				}
			}
			f.mu.Unlock()
			close(ch)
		}()
		ctx := cw.ctx
		if !cw.isSelf(h.Owner) {
			// The owner learns of the copy before it lands (copies.go).
			cw.objects.noteCopy(ctx, h.ID, h.Owner)
		}
		if err := cw.pullObject(ctx, h.ID, node, h.Owner); err != nil && ctx.Err() == nil {
			cw.log.Debug("fetching an object for Wait failed; Get will say why", "object", h.ID, "node", node.Short(), "error", err)
		}
	}()
	return ch
}
