package transport

import (
	"context"
	"fmt"
	"sync"
)

// MaxAbortedRemembered bounds how many aborted objects an Aborts remembers;
// the oldest are forgotten first.
const MaxAbortedRemembered = 4096

// Aborts is a helper for transport authors: it tracks the pending calls of
// one transport instance per object so Abort can unblock them, and
// remembers aborted objects so later calls fail too. The zero value is
// ready to use.
//
//	ctx, done, err := t.aborts.Begin(ctx, req.ObjectID)
//	if err != nil { return nil, err }
//	defer done()
//	... block on ctx.Done(); then return transport.ContextError(ctx)
type Aborts struct {
	mu      sync.Mutex
	pending map[string]map[*pendingCall]struct{}
	aborted map[string]error
	order   []string
}

type pendingCall struct {
	cancel context.CancelCauseFunc
}

// Begin registers a pending call for the object. The returned context is
// cancelled with the abort error (see ContextError) when the object is
// aborted; done unregisters the call and must be called. If the object was
// already aborted Begin returns that error.
func (a *Aborts) Begin(ctx context.Context, objectID string) (context.Context, func(), error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.aborted[objectID]; err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithCancelCause(ctx)
	p := &pendingCall{cancel: cancel}
	if a.pending == nil {
		a.pending = make(map[string]map[*pendingCall]struct{})
	}
	set := a.pending[objectID]
	if set == nil {
		set = make(map[*pendingCall]struct{})
		a.pending[objectID] = set
	}
	set[p] = struct{}{}
	done := func() {
		a.mu.Lock()
		if set := a.pending[objectID]; set != nil {
			delete(set, p)
			if len(set) == 0 {
				delete(a.pending, objectID)
			}
		}
		a.mu.Unlock()
		cancel(nil)
	}
	return cctx, done, nil
}

// Abort marks the object aborted and cancels its pending calls. It returns
// the error those calls see, which matches ErrAborted and carries reason.
func (a *Aborts) Abort(objectID, reason string) error {
	if reason == "" {
		reason = "no reason given"
	}
	err := fmt.Errorf("%w: %s", ErrAborted, reason)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.aborted == nil {
		a.aborted = make(map[string]error)
	}
	if _, ok := a.aborted[objectID]; !ok {
		a.order = append(a.order, objectID)
		for len(a.order) > MaxAbortedRemembered {
			delete(a.aborted, a.order[0])
			a.order = a.order[1:]
		}
	}
	a.aborted[objectID] = err
	for p := range a.pending[objectID] {
		p.cancel(err)
	}
	return err
}

// Aborted returns the abort error of the object, or nil.
func (a *Aborts) Aborted(objectID string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.aborted[objectID]
}

// Forget clears the object's aborted mark (GarbageCollect calls it).
func (a *Aborts) Forget(objectID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.aborted[objectID]; !ok {
		return
	}
	delete(a.aborted, objectID)
	for i, id := range a.order {
		if id == objectID {
			a.order = append(a.order[:i], a.order[i+1:]...)
			break
		}
	}
}

// Pending returns how many calls are registered for the object.
func (a *Aborts) Pending(objectID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending[objectID])
}
