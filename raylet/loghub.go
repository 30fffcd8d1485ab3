package raylet

import (
	"fmt"
	"sync"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Bounds of the hub's subscriptions.
const (
	// maxSubQueueLines and maxSubQueueBytes bound what waits for one
	// subscriber; batches that do not fit are dropped and counted.
	maxSubQueueLines = 20000
	maxSubQueueBytes = 16 << 20
	// maxSubMarks bounds the flush marks waiting for one subscriber.
	maxSubMarks = 64
	// maxSubsPerJob and maxSubs bound the subscriptions.
	maxSubsPerJob = 4
	maxSubs       = 1024
)

// TooManySubscriptionsError refuses a subscription beyond the hub's bounds.
type TooManySubscriptionsError struct {
	Job   ids.ID
	Limit int
}

func (e *TooManySubscriptionsError) Error() string {
	return fmt.Sprintf("job %s: too many log subscriptions on this node (at most %d)", e.Job.Short(), e.Limit)
}

// logHub is the driver side of log streaming: the batches pushed by the
// nodes of a job (and this node's own) wait here for the job's
// subscriptions (its driver's Subscribe stream). Each subscription's queue
// is bounded: a driver that does not keep up loses batches, counted and
// reported in the next batch it gets.
//
// mu guards subs, count and every logSub's queue.
type logHub struct {
	mu    sync.Mutex
	subs  map[ids.ID]map[*logSub]struct{}
	count int
}

// logSub is one subscription.
type logSub struct {
	job    ids.ID
	queue  []*gorayv1.LogBatch
	lines  int
	bytes  int
	marks  int
	lost   uint64
	notify chan struct{} // cap 1
}

func newLogHub() *logHub { return &logHub{subs: map[ids.ID]map[*logSub]struct{}{}} }

// subscribe adds a subscription to job's lines.
func (h *logHub) subscribe(job ids.ID) (*logSub, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.count >= maxSubs {
		return nil, &TooManySubscriptionsError{Job: job, Limit: maxSubs}
	}
	set := h.subs[job]
	if len(set) >= maxSubsPerJob {
		return nil, &TooManySubscriptionsError{Job: job, Limit: maxSubsPerJob}
	}
	if set == nil {
		set = map[*logSub]struct{}{}
		h.subs[job] = set
	}
	s := &logSub{job: job, notify: make(chan struct{}, 1)}
	set[s] = struct{}{}
	h.count++
	return s, nil
}

// unsubscribe removes s.
func (h *logHub) unsubscribe(s *logSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if set := h.subs[s.job]; set != nil {
		if _, ok := set[s]; ok {
			delete(set, s)
			h.count--
		}
		if len(set) == 0 {
			delete(h.subs, s.job)
		}
	}
	s.queue = nil
}

// batchBytes is what a batch counts against a queue's byte bound: its
// lines and its sources' names.
func batchBytes(b *gorayv1.LogBatch) int {
	n := 0
	for _, l := range b.GetLines() {
		n += len(l.GetText())
	}
	for _, s := range b.GetSources() {
		n += len(s.GetTask()) + len(s.GetActorClass()) + len(s.GetActorName())
	}
	return n
}

// batchLines is what a batch counts against a queue's line bound: its
// lines, and at least one, so that line-less batches cannot pile up.
func batchLines(b *gorayv1.LogBatch) int { return max(len(b.GetLines()), 1) }

// deliver queues b for every subscription of its job; subscribed is false
// when there is none.
func (h *logHub) deliver(job ids.ID, b *gorayv1.LogBatch) (subscribed bool) {
	size := batchBytes(b)
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[job]
	lines := batchLines(b)
	for s := range set {
		if s.lines+lines > maxSubQueueLines || s.bytes+size > maxSubQueueBytes {
			s.lost += uint64(len(b.Lines)) + b.GetDropped()
			continue
		}
		c := &gorayv1.LogBatch{JobId: b.JobId, NodeId: b.NodeId, NodeIp: b.NodeIp, NodeName: b.NodeName,
			Sources: b.Sources, Lines: b.Lines, Dropped: b.GetDropped() + s.lost}
		s.lost = 0
		s.queue = append(s.queue, c)
		s.lines += lines
		s.bytes += size
		s.kick()
	}
	return len(set) > 0
}

// mark queues a flush mark after what job's subscriptions hold.
func (h *logHub) mark(job ids.ID, flushID uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[job] {
		if s.marks >= maxSubMarks {
			continue // the driver times out waiting for it
		}
		s.queue = append(s.queue, &gorayv1.LogBatch{JobId: job.Bytes(), FlushId: flushID, Dropped: s.lost})
		s.lost = 0
		s.marks++
		s.kick()
	}
}

// take returns what waits for s, oldest first.
func (h *logHub) take(s *logSub) []*gorayv1.LogBatch {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := s.queue
	s.queue, s.lines, s.bytes, s.marks = nil, 0, 0, 0
	return q
}

func (s *logSub) kick() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}
