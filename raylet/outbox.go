package raylet

import (
	"sync"

	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// outbox queues commands for one session stream (a driver's or a
// worker's). The session's handler goroutine is the stream's only sender:
// it sends REGISTERED itself and then drains the outbox, so sends never
// interleave, and pushing (done under a component's lock) never waits for a slow
// stream. The queue is unbounded; it only grows by one small command per
// process death on the node while a stream is stuck.
type outbox struct {
	mu     sync.Mutex
	queue  []*gorayv1.RayletCommand
	notify chan struct{} // holds a token while queue may be non-empty
}

func newOutbox() *outbox {
	return &outbox{notify: make(chan struct{}, 1)}
}

// push queues c and wakes the session; it never blocks.
func (o *outbox) push(c *gorayv1.RayletCommand) {
	o.mu.Lock()
	o.queue = append(o.queue, c)
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// take removes and returns every queued command, oldest first.
func (o *outbox) take() []*gorayv1.RayletCommand {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queue
	o.queue = nil
	return q
}
