package gcs

import (
	"sync"

	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// EventKind says what changed in an Event.
type EventKind int

// Event kinds. Node events carry Node, actor events Actor, job events Job.
const (
	// EventNodeAdded: a node registered (first registration of its id).
	EventNodeAdded EventKind = iota + 1
	// EventNodeDead: a node was declared dead (missed health checks or
	// unregistered). Node.death_reason says why.
	EventNodeDead
	// EventJobAdded: a job started.
	EventJobAdded
	// EventJobFinished: a job finished.
	EventJobFinished
	// EventActorRegistered: an actor was registered (state PENDING).
	EventActorRegistered
	// EventActorStateChanged: an actor became ALIVE or DEAD.
	EventActorStateChanged
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventNodeAdded:
		return "NodeAdded"
	case EventNodeDead:
		return "NodeDead"
	case EventJobAdded:
		return "JobAdded"
	case EventJobFinished:
		return "JobFinished"
	case EventActorRegistered:
		return "ActorRegistered"
	case EventActorStateChanged:
		return "ActorStateChanged"
	default:
		return "EventKind(?)"
	}
}

// Event is a change in the cluster tables, delivered to Subscribe observers.
// The messages are snapshots owned by the receiver.
type Event struct {
	Kind  EventKind
	Node  *gorayv1.NodeInfo
	Actor *gorayv1.ActorInfo
	Job   *gorayv1.JobInfo
}

// clone deep-copies the messages so that each receiver owns its own.
func (ev Event) clone() Event {
	if ev.Node != nil {
		ev.Node = cloneMsg(ev.Node)
	}
	if ev.Actor != nil {
		ev.Actor = cloneMsg(ev.Actor)
	}
	if ev.Job != nil {
		ev.Job = cloneMsg(ev.Job)
	}
	return ev
}

// subscriber buffers events without bound so that publishing never blocks
// the server, and delivers them in order from one goroutine.
type subscriber struct {
	out    chan Event
	wake   chan struct{} // capacity 1
	done   chan struct{}
	exited chan struct{}
	once   sync.Once

	mu    sync.Mutex
	queue []Event
}

func newSubscriber() *subscriber {
	sub := &subscriber{
		out:    make(chan Event),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	go sub.pump()
	return sub
}

// push queues ev; it never blocks.
func (sub *subscriber) push(ev Event) {
	sub.mu.Lock()
	sub.queue = append(sub.queue, ev)
	sub.mu.Unlock()
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

func (sub *subscriber) pump() {
	defer close(sub.exited)
	defer close(sub.out)
	for {
		sub.mu.Lock()
		if len(sub.queue) == 0 {
			sub.mu.Unlock()
			select {
			case <-sub.wake:
				continue
			case <-sub.done:
				return
			}
		}
		ev := sub.queue[0]
		sub.queue[0] = Event{}
		sub.queue = sub.queue[1:]
		sub.mu.Unlock()
		select {
		case sub.out <- ev:
		case <-sub.done:
			return
		}
	}
}

// stop ends the pump and waits for it; safe to call more than once.
func (sub *subscriber) stop() {
	sub.once.Do(func() { close(sub.done) })
	<-sub.exited
}

// Subscribe returns a channel of every table change from now on, in order,
// and a function that unsubscribes. Events are buffered without bound, so a
// slow reader never blocks the server; the caller must call unsubscribe when
// done, which closes the channel and releases the delivery goroutine.
func (s *Server) Subscribe() (<-chan Event, func()) {
	sub := newSubscriber()
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	return sub.out, func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
		sub.stop()
	}
}

// publishLocked sends ev to every subscriber. s.mu must be held, which keeps
// events in table order.
func (s *Server) publishLocked(ev Event) {
	for sub := range s.subs {
		sub.push(ev.clone())
	}
}
