package core

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Concurrency groups (Ray's concurrency_groups). An actor declares named
// groups, each with a limit; every call runs in one group (the default
// group unless its method or the call names one), whose limit bounds how
// many of its calls run at once. Each group has its own queue on the
// actor's worker (callGroups), so the calls of one group never wait for
// another's: a health method in its own group answers while the compute
// group is saturated. The default group's limit is the actor's
// MaxConcurrency (1 unless set: its calls run one at a time, in the order
// they arrived).
//
// The group travels in TaskSpec.concurrency_group; the declarations in the
// creation's TaskSpec.concurrency_groups and in the GCS's ActorInfo, so
// that a caller who knows them (the owner, or a caller who resolved the
// actor) fails a call naming an undeclared group before sending it, with
// an *UnknownConcurrencyGroupError. The worker checks again.

// ErrUnknownConcurrencyGroup matches a call naming a concurrency group its
// actor does not declare.
var ErrUnknownConcurrencyGroup = errors.New("unknown concurrency group")

// KindUnknownGroup is RemoteError.Kind of an UnknownConcurrencyGroupError
// detected by the actor's worker.
const KindUnknownGroup = "unknown_concurrency_group"

// maxQueuedCalls bounds the calls waiting in one concurrency group of an
// actor. Beyond it, receiving from the stream the next call came on waits
// (back-pressure on that caller) until the group has room.
const maxQueuedCalls = 10000

// UnknownConcurrencyGroupError says an actor call named a concurrency group
// its actor does not declare. It matches ErrUnknownConcurrencyGroup.
type UnknownConcurrencyGroupError struct {
	// Method is the registered name of the method called.
	Method string
	// Group is the group the call named.
	Group string
	// ActorID and Class say which actor.
	ActorID ids.ID
	Class   string
	// Groups are the groups the actor declares, with their limits.
	Groups map[string]int
	// Detail is the whole message when the actor's worker found the
	// error (only the message crosses processes; the fields above but
	// Method are then unset).
	Detail string
}

func (e *UnknownConcurrencyGroupError) Error() string {
	if e.Detail != "" {
		return e.Detail
	}
	return unknownGroupMessage(e.Method, e.Group, e.Class, e.ActorID, e.Groups)
}

// Is matches ErrUnknownConcurrencyGroup.
func (e *UnknownConcurrencyGroupError) Is(target error) bool {
	return target == ErrUnknownConcurrencyGroup
}

func unknownGroupMessage(method, group, class string, actor ids.ID, groups map[string]int) string {
	var decl []string
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		decl = append(decl, fmt.Sprintf("%q (limit %d)", name, groups[name]))
	}
	declared := "declares no concurrency group, only the default group"
	if len(decl) > 0 {
		declared = "declares " + strings.Join(decl, ", ") + " and the default group"
	}
	return fmt.Sprintf("call of %s names concurrency group %q, but actor %s (%s) %s; declare it with ray.ConcurrencyGroup(%q, limit)",
		method, group, class, actor.Short(), declared, group)
}

// groupLimits converts the wire's declarations.
func groupLimits(in map[string]int32) map[string]int {
	out := make(map[string]int, len(in))
	for k, v := range in {
		out[k] = int(v)
	}
	return out
}

// checkGroup fails rec when it names a group its actor does not declare,
// as far as c knows the declarations (nil: the call may go).
func (c *actorClient) checkGroup(rec *taskRecord) error {
	group := rec.spec.GetConcurrencyGroup()
	if group == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups == nil {
		return nil // not known yet: the worker checks
	}
	if _, ok := c.groups[group]; ok {
		return nil
	}
	return &UnknownConcurrencyGroupError{Method: rec.spec.Function, Group: group, ActorID: c.ref.ID, Class: c.ref.Class, Groups: maps.Clone(c.groups)}
}

// learnGroups records the actor's declared groups from its GCS record.
func (c *actorClient) learnGroups(a *pb.ActorInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.groups = groupLimits(a.GetConcurrencyGroups())
}

// groupCall is one call waiting in a concurrency group: run sends its
// reply; done tells its stream it is over (run or dropped).
type groupCall struct {
	ctx  context.Context // the stream's: once it ends, nobody awaits the reply
	run  func()
	done func()
}

// callGroup is one concurrency group of an actor on its worker: a bounded
// FIFO queue of calls and a dispatcher starting them in order while fewer
// than limit run.
type callGroup struct {
	name  string
	limit int
	slots chan struct{} // one per running call

	mu    sync.Mutex
	queue []groupCall   // at most maxQueuedCalls
	ready chan struct{} // signalled when a call is queued
	room  chan struct{} // closed (and replaced) when a full queue has room
}

// callGroups are the concurrency groups of the actor a worker hosts.
type callGroups struct {
	def   *callGroup
	named map[string]*callGroup
	class string
	actor ids.ID

	// serial runs the calls of an actor without named groups and a
	// default limit of 1 one at a time (runDirect).
	serial sync.Mutex

	stop      chan struct{}
	closeOnce sync.Once
	mu        sync.RWMutex // held (read) while enqueueing; shut set under write
	shut      bool
	wg        sync.WaitGroup // dispatchers and running calls
}

// errGroupsClosed: the actor's worker is closing.
var errGroupsClosed = errors.New("the actor's concurrency groups are closed")

// newCallGroups starts the default group with limit defLimit (at least 1)
// and the named groups with theirs.
func newCallGroups(actor ids.ID, class string, defLimit int, named map[string]int32) *callGroups {
	gs := &callGroups{named: map[string]*callGroup{}, class: class, actor: actor, stop: make(chan struct{})}
	gs.def = gs.start("", defLimit)
	for name, limit := range named {
		gs.named[name] = gs.start(name, int(limit))
	}
	return gs
}

func (gs *callGroups) start(name string, limit int) *callGroup {
	limit = max(limit, 1)
	g := &callGroup{name: name, limit: limit, slots: make(chan struct{}, limit), ready: make(chan struct{}, 1), room: make(chan struct{})}
	gs.wg.Add(1)
	go gs.dispatch(g)
	return g
}

// group returns the group a call of method naming group runs in.
func (gs *callGroups) group(method, group string) (*callGroup, error) {
	if group == "" {
		return gs.def, nil
	}
	if g := gs.named[group]; g != nil {
		return g, nil
	}
	limits := map[string]int{}
	for n, g := range gs.named {
		limits[n] = g.limit
	}
	return nil, &UnknownConcurrencyGroupError{Method: method, Group: group, ActorID: gs.actor, Class: gs.class, Groups: limits}
}

// enqueue queues c in g, waiting while g's queue is full until there is
// room, ctx ends or the groups close.
func (gs *callGroups) enqueue(ctx context.Context, g *callGroup, c groupCall) error {
	gs.mu.RLock()
	defer gs.mu.RUnlock()
	if gs.shut {
		return errGroupsClosed
	}
	for {
		g.mu.Lock()
		if len(g.queue) < maxQueuedCalls {
			g.queue = append(g.queue, c)
			g.mu.Unlock()
			select {
			case g.ready <- struct{}{}:
			default: // the dispatcher has a signal pending already
			}
			return nil
		}
		room := g.room
		g.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		case <-gs.stop:
			return errGroupsClosed
		}
	}
}

// next takes the call at the head of g's queue, waiting for one until the
// groups close (false).
func (gs *callGroups) next(g *callGroup) (groupCall, bool) {
	for {
		g.mu.Lock()
		if len(g.queue) > 0 {
			c := g.queue[0]
			if len(g.queue) == maxQueuedCalls {
				close(g.room) // enqueuers waiting for room try again
				g.room = make(chan struct{})
			}
			g.queue[0] = groupCall{}
			g.queue = g.queue[1:]
			g.mu.Unlock()
			return c, true
		}
		g.mu.Unlock()
		select {
		case <-g.ready:
		case <-gs.stop:
			return groupCall{}, false
		}
	}
}

// dispatch starts g's calls in queue order, each once one of g's limit
// slots is free; a call whose stream ended meanwhile is dropped.
func (gs *callGroups) dispatch(g *callGroup) {
	defer gs.wg.Done()
	for {
		c, ok := gs.next(g)
		if !ok {
			return
		}
		select {
		case g.slots <- struct{}{}:
		case <-gs.stop:
			c.done()
			return
		}
		if c.ctx.Err() != nil {
			<-g.slots
			c.done()
			continue
		}
		if g.limit == 1 {
			// One at a time: no goroutine of its own needed.
			c.run()
			<-g.slots
			c.done()
			continue
		}
		gs.wg.Add(1)
		go func() {
			defer gs.wg.Done()
			defer c.done()
			defer func() { <-g.slots }()
			c.run()
		}()
	}
}

// runDirect runs a call of the default group of an actor that declares
// no other group: inline under the group's serial lock when its limit is
// 1 (the calls of one stream in their order, as before concurrency
// groups), else in a goroutine of the stream's wg once one of the group's
// slots is free (waiting for one honours ctx and the groups' closing).
func (gs *callGroups) runDirect(ctx context.Context, g *callGroup, run func(), wg *sync.WaitGroup) {
	if g.limit == 1 {
		gs.serial.Lock()
		defer gs.serial.Unlock()
		if ctx.Err() == nil {
			run()
		}
		return
	}
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		return
	case <-gs.stop:
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() { <-g.slots }()
		run()
	}()
}

// close stops the dispatchers, drops the calls still queued (their streams
// learn they are over) and waits for the running calls.
func (gs *callGroups) close() {
	gs.closeOnce.Do(func() {
		close(gs.stop) // enqueuers waiting for room give up their read lock
		gs.mu.Lock()
		gs.shut = true
		gs.mu.Unlock()
		gs.wg.Wait()
		for _, g := range append(slices.Collect(maps.Values(gs.named)), gs.def) {
			g.mu.Lock()
			queued := g.queue
			g.queue = nil
			g.mu.Unlock()
			for _, c := range queued {
				c.done()
			}
		}
	})
}

// pushActorCall queues a call of the actor self, which arrived on the
// stream of ctx, in its concurrency group; send answers it and wg counts
// the stream's calls not over yet. A call naming an undeclared group is
// answered at once with an UnknownConcurrencyGroupError.
func (e *executor) pushActorCall(ctx context.Context, gs *callGroups, spec *pb.TaskSpec, self any, send func(*pb.TaskReply), wg *sync.WaitGroup) {
	g, err := gs.group(spec.Function, spec.GetConcurrencyGroup())
	if err != nil {
		send(e.systemError(spec, KindUnknownGroup, err.Error()))
		return
	}
	if len(gs.named) == 0 {
		// An actor without named groups: its calls run as they arrive on
		// the stream, with no hand-off to a dispatcher (the synchronous
		// call path of plain actors stays as short as it was).
		gs.runDirect(ctx, g, func() { send(e.run(ctx, spec, self)) }, wg)
		return
	}
	wg.Add(1)
	c := groupCall{ctx: ctx, run: func() { send(e.run(ctx, spec, self)) }, done: wg.Done}
	if err := gs.enqueue(ctx, g, c); err != nil {
		wg.Done() // the stream ended or the worker closes: nobody awaits it
	}
}

// concurrencyGroups converts an actor's declared groups for the wire (nil
// when it declares none).
func (o TaskOptions) concurrencyGroups() map[string]int32 {
	if len(o.ConcurrencyGroups) == 0 {
		return nil
	}
	out := make(map[string]int32, len(o.ConcurrencyGroups))
	for k, v := range o.ConcurrencyGroups {
		out[k] = int32(v)
	}
	return out
}
