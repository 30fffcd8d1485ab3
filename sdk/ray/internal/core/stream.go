// Streaming generators, the owner's side (Ray's ObjectRefGenerator): a
// task or actor method yields items, each its own owned object
// ObjectIDFor(task, index+2), reported by the worker as it is made. The
// consumer takes them in order with Next; the worker waits while its
// consumer has Backpressure items it has not taken (AckStream tells it how
// many were taken). An error ends the stream after the items made before
// it. A retried attempt (its worker died) makes the items again from the
// first: those already received are dropped, so the consumer sees each
// once; a lost item is rebuilt by re-running the generator (lineage).

package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/goray-dev/goray/internal/codec"
	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// DefaultBackpressure is how many items a generator may have made that its
// consumer has not taken before it waits (Ray's
// _generator_backpressure_num_objects, which Ray leaves off by default; a
// bound keeps an unread stream from filling the owner's memory).
const DefaultBackpressure = 64

// maxAckWait bounds one AckStream call.
const maxAckWait = 10 * time.Second

// Stream is the consumer's side of a streaming generator call.
type Stream struct {
	cw  *CoreWorker
	rec *taskRecord // for lineage only: a retry replaces rec.spec
	// Fixed when the call is made (read without a lock).
	taskID   ids.ID
	function string
	bound    int     // the spec's backpressure (0: none)
	done     *Handle // the call's own return: its end (value or error)

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when items arrive or the stream ends
	items    []*Handle     // received, not taken yet, in order
	received int64         // items received (the index of the next one)
	taken    int64         // items handed to the consumer
	ended    bool
	total    int64 // items the producer made (set when ended)
	err      error // the error that ended it (nil: its end)
	errSent  bool  // err was returned by Next
	closed   bool
	// peer is the worker running the current attempt (acks go there).
	peer  *pb.Address
	ackCh chan struct{} // kicks the acker
	stop  context.CancelFunc
	// unfollow stops Remote's context from closing the stream.
	unfollow func() bool
}

// ItemID returns the object id of item index of generator task t.
func ItemID(t ids.ID, index int64) ids.ObjectID { return ids.ObjectIDFor(t, uint32(index)+2) }

// SubmitStream submits a streaming generator task (opts.Backpressure
// bounds its unconsumed items; 0 DefaultBackpressure, <0 none) and returns
// its stream.
func (cw *CoreWorker) SubmitStream(ctx context.Context, function string, args []ArgInput, opts TaskOptions) *Stream {
	opts.streaming = true
	return cw.streamOf(ctx, cw.SubmitTaskReturns(ctx, function, args, opts)[0])
}

// SubmitActorStream is SubmitStream of an actor method.
func (cw *CoreWorker) SubmitActorStream(ctx context.Context, actor ActorRef, method string, args []ArgInput, opts TaskOptions) *Stream {
	opts.streaming = true
	return cw.streamOf(ctx, cw.SubmitActorTaskReturns(ctx, actor, method, args, opts)[0])
}

// streamOf returns the stream of the generator call whose return h is; the
// call's context ending (Remote's ctx) stops the producer.
func (cw *CoreWorker) streamOf(ctx context.Context, h *Handle) *Stream {
	rec := cw.objects.taskOf(h.ID)
	st := rec.stream
	st.mu.Lock()
	st.done = h
	st.unfollow = context.AfterFunc(ctx, st.Close)
	st.mu.Unlock()
	return st
}

// newStream creates the stream state of generator call rec.
func newStream(cw *CoreWorker, rec *taskRecord) *Stream {
	st := &Stream{cw: cw, rec: rec, taskID: ids.MustFromBytes(rec.spec.TaskId), function: rec.spec.Function, bound: int(rec.spec.Backpressure),
		changed: make(chan struct{}), ackCh: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(cw.ctx)
	st.stop = cancel
	go st.acker(ctx)
	return st
}

// ID returns the generator call's task id.
func (st *Stream) ID() ids.ID { return st.taskID }

// Next returns the next item's handle, the error that ended the stream
// (once, after the items made before it), or io.EOF at its end. It waits
// for the item, bounded by ctx.
func (st *Stream) Next(ctx context.Context) (*Handle, error) {
	var unblock func()
	defer func() {
		if unblock != nil {
			unblock()
		}
	}()
	for {
		st.mu.Lock()
		if st.closed {
			st.mu.Unlock()
			return nil, ErrStreamClosed
		}
		if len(st.items) > 0 {
			h := st.items[0]
			st.items[0] = nil
			st.items = st.items[1:]
			st.taken++
			st.mu.Unlock()
			st.kickAck()
			return h, nil
		}
		if st.ended {
			if st.err != nil && !st.errSent {
				st.errSent = true
				st.mu.Unlock()
				return nil, st.err
			}
			st.mu.Unlock()
			return nil, io.EOF
		}
		ch := st.changed
		st.mu.Unlock()
		if unblock == nil {
			// This task waits: lend its CPU to the node meanwhile (the
			// generator may need it).
			unblock = st.cw.blocked()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-st.cw.closed:
			return nil, ErrShutdown
		}
	}
}

// Ready returns a channel closed once Next would not wait: an item has
// arrived that was not taken yet, or the stream ended or was closed.
func (st *Stream) Ready() <-chan struct{} {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.items) > 0 || st.ended || st.closed {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return st.changed
}

// ErrStreamClosed is returned by Next after Close.
var ErrStreamClosed = errors.New("goray: the stream was closed")

// Buffered reports how many items were received and not taken yet.
func (st *Stream) Buffered() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.items)
}

// Close stops the producer if it is still running (ray.Cancel of the
// call), drops the items not taken and ends the stream; later Next calls
// return ErrStreamClosed. Items already taken stay valid.
func (st *Stream) Close() {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.closed = true
	items := st.items
	st.items = nil
	running := !st.ended
	done, unfollow := st.done, st.unfollow
	st.signalLocked()
	st.mu.Unlock()
	if unfollow != nil {
		unfollow()
	}
	for _, h := range items {
		h.Release()
	}
	if running {
		// The producer's end (its cancelled reply) stops the acker.
		ctx, cancel := context.WithTimeout(context.Background(), maxAckWait)
		if err := st.cw.CancelTask(ctx, st.rec.retID, false); err != nil {
			st.cw.log.Debug("cancelling a closed stream's producer failed", "task", st.ID().Short(), "error", err)
		}
		cancel()
	}
	if done != nil {
		done.Release()
	}
}

func (st *Stream) signalLocked() {
	close(st.changed)
	st.changed = make(chan struct{})
}

// item records item index of the generator's current attempt.
func (st *Stream) item(index int64, ret *pb.ReturnObject) {
	id := ItemID(st.ID(), index)
	st.mu.Lock()
	switch {
	case index < st.received || st.closed || st.ended:
		// Made again by a retried attempt or a re-run rebuilding a lost
		// item (complete records it only for an item waiting to be
		// rebuilt), or not wanted any more (complete frees it).
		st.mu.Unlock()
		st.cw.objects.complete(id, ret, nil, true)
		return
	case index > st.received:
		// Items come in order on one stream; a gap is a broken producer.
		last := st.received - 1
		st.mu.Unlock()
		st.cw.objects.complete(id, ret, nil, true)
		st.broken(fmt.Errorf("goray: generator %s sent item %d after item %d", st.function, index, last))
		return
	}
	if bound := st.bound; bound > 0 && len(st.items) >= 2*bound+16 {
		// The producer ignores its bound: keep no more of its items.
		n := len(st.items) + 1
		st.mu.Unlock()
		st.cw.objects.complete(id, ret, nil, true)
		st.broken(fmt.Errorf("goray: generator %s sent %d items its caller has not taken, over its bound of %d", st.function, n, bound))
		return
	}
	st.cw.objects.newOwned(id, st.rec, 1)
	st.cw.objects.complete(id, ret, nil, true)
	st.items = append(st.items, st.cw.wrapHandle(id, st.cw.addr))
	st.received++
	st.signalLocked()
	st.mu.Unlock()
}

// finish ends the stream from the call's final reply or failure: total
// items were made, then ret (an error object) or sysErr, if any, ended it.
func (st *Stream) finish(total int64, ret *pb.ReturnObject, sysErr error) {
	err := sysErr
	if err == nil && ret != nil && codec.FormatOf(ret.Metadata) == codec.FormatError {
		err = decodeRemoteError(ret.Data)
	}
	if total < 0 {
		total = st.receivedCount() // failed by the owner
	}
	if err == nil && total > st.receivedCount() {
		err = fmt.Errorf("goray: generator %s made %d items, %d reached the caller", st.function, total, st.receivedCount())
	}
	st.end(total, err)
}

// broken ends the stream with err, a producer breaking the protocol, and
// stops the producer.
func (st *Stream) broken(err error) {
	st.end(0, err)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), maxAckWait)
		defer cancel()
		_ = st.cw.CancelTask(ctx, st.rec.retID, false)
	}()
}

func (st *Stream) receivedCount() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.received
}

func (st *Stream) end(total int64, err error) {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	st.ended, st.total, st.err = true, total, err
	st.signalLocked()
	st.mu.Unlock()
	// A re-run rebuilding a lost item learns from its spec that it need
	// not wait (dispatched).
	st.stop()
}

// dispatched notes the worker an attempt was sent to and returns the
// count of items taken that the attempt starts from (no bound once the
// stream ended: a re-run only rebuilds).
func (st *Stream) dispatched(worker *pb.Address) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.peer = worker
	if st.ended {
		return math.MaxInt64 / 2
	}
	return st.taken
}

func (st *Stream) kickAck() {
	select {
	case st.ackCh <- struct{}{}:
	default:
	}
}

// acker sends the count of taken items to the producer's worker whenever
// it grows, one call at a time (counts taken meanwhile go together).
func (st *Stream) acker(ctx context.Context) {
	var sent int64 = -1
	var sentTo *pb.Address
	for {
		select {
		case <-st.ackCh:
		case <-ctx.Done():
			return
		}
		st.mu.Lock()
		taken, peer := st.taken, st.peer
		if st.ended {
			// A re-run rebuilding a lost item need not wait. A closed
			// stream whose producer runs keeps its bound: the producer is
			// being cancelled, not let loose.
			taken = math.MaxInt64 / 2
		}
		st.mu.Unlock()
		if peer == nil || (taken == sent && peer == sentTo) {
			continue
		}
		cli, err := st.cw.peer(peer)
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, maxAckWait)
			_, err = cli.AckStream(actx, &pb.AckStreamRequest{TaskId: st.taskID.Bytes(), Consumed: taken})
			cancel()
		}
		if err != nil {
			// The attempt's worker is gone: its retry starts from the
			// count in its spec.
			st.cw.log.Debug("stream ack failed", "task", st.ID().Short(), "error", err)
			continue
		}
		sent, sentTo = taken, peer
	}
}

// completeReply records the final reply of call rec: its returns and, for
// a generator, the end of its stream.
func (cw *CoreWorker) completeReply(rec *taskRecord, rep *pb.TaskReply) {
	cw.completeReturns(rec, rep.Ret, rep.MoreRets, nil, true)
	if rec.stream != nil {
		rec.stream.finish(rep.NumItems, rep.Ret, nil)
	}
}

// streamItem records an item reply of call rec (nil: the call is not
// known, or not a generator: the item is dropped, its store copy freed).
func (cw *CoreWorker) streamItem(rec *taskRecord, rep *pb.TaskReply) {
	if rec == nil || rec.stream == nil {
		if id, err := ids.ObjectIDFromBytes(rep.GetRet().GetObjectId()); err == nil {
			cw.objects.complete(id, rep.Ret, nil, true)
		}
		return
	}
	rec.stream.item(rep.ItemIndex, rep.Ret)
}

// streaming makes rec a generator call when opts ask for one.
func (cw *CoreWorker) streaming(rec *taskRecord, opts TaskOptions) {
	if !opts.streaming {
		return
	}
	bound := opts.Backpressure
	switch {
	case bound == 0:
		bound = DefaultBackpressure
	case bound < 0:
		bound = 0
	}
	rec.spec.Streaming, rec.spec.Backpressure = true, int32(min(bound, math.MaxInt32))
	rec.stream = newStream(cw, rec)
}

// FailedStream returns a stream that ends with err before any item.
func (cw *CoreWorker) FailedStream(err error) *Stream {
	st := &Stream{cw: cw, rec: &taskRecord{spec: &pb.TaskSpec{TaskId: ids.Nil.Bytes()}}, changed: make(chan struct{}), ackCh: make(chan struct{}, 1), stop: func() {}}
	st.end(0, err)
	return st
}
