// Streaming generators, the worker's side: the items a generator yields
// are stored (inline or in this node's store) and reported to the owner on
// the call's stream as they are made; a yield waits while the owner's
// consumer has the call's backpressure bound of items not taken (AckStream
// raises the count taken).

package core

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNotGenerator is returned by Yield outside a streaming generator.
var ErrNotGenerator = errors.New("goray: yield outside a streaming generator call")

// producer is one generator call running (or about to run) here.
type producer struct {
	e      *executor
	spec   *pb.TaskSpec
	taskID ids.ID
	send   func(*pb.TaskReply)
	// caller ends when the stream the call came on ends (its owner is gone).
	caller context.Context
	bound  int64

	yieldMu  sync.Mutex // one yield at a time; guards produced, finished
	produced int64
	finished bool

	mu       sync.Mutex
	consumed int64
	changed  chan struct{}
}

type producerKey struct{}

// addProducer registers generator call spec, which came on a stream whose
// context is caller and whose replies send sends.
func (e *executor) addProducer(caller context.Context, spec *pb.TaskSpec, send func(*pb.TaskReply)) *producer {
	id := ids.MustFromBytes(spec.TaskId)
	p := &producer{e: e, spec: spec, taskID: id, send: send, caller: caller, bound: int64(spec.Backpressure),
		consumed: spec.StreamConsumed, changed: make(chan struct{})}
	e.mu.Lock()
	if n, ok := e.earlyAcks[id]; ok {
		p.consumed = max(p.consumed, n)
		delete(e.earlyAcks, id)
	}
	if e.producers == nil {
		e.producers = map[ids.ID]*producer{}
	}
	e.producers[id] = p
	e.mu.Unlock()
	return p
}

// dropProducer forgets p (its call returned, or its stream ended).
func (e *executor) dropProducer(p *producer) {
	e.mu.Lock()
	if e.producers[p.taskID] == p {
		delete(e.producers, p.taskID)
	}
	e.mu.Unlock()
}

func (e *executor) producerOf(id ids.ID) *producer {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.producers[id]
}

// ack records that the consumer of generator call id took consumed items;
// an ack that comes before its call is kept (bounded) for it.
func (e *executor) ack(id ids.ID, consumed int64) {
	e.mu.Lock()
	p := e.producers[id]
	if p == nil {
		if e.earlyAcks == nil || len(e.earlyAcks) >= maxEarlyCancels {
			e.earlyAcks = map[ids.ID]int64{}
		}
		e.earlyAcks[id] = max(e.earlyAcks[id], consumed)
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	p.mu.Lock()
	if consumed > p.consumed {
		p.consumed = consumed
		close(p.changed)
		p.changed = make(chan struct{})
	}
	p.mu.Unlock()
}

// Yield sends v as the next item of the generator call running with ctx.
// It waits while the consumer has the call's backpressure bound of items
// not taken, and returns an error when the call was cancelled (the
// consumer stopped), its caller is gone, or v cannot be encoded; the
// generator should then return that error.
func Yield(ctx context.Context, v any) error {
	p, ok := ctx.Value(producerKey{}).(*producer)
	if !ok {
		return ErrNotGenerator
	}
	return p.yield(ctx, v)
}

func (p *producer) yield(ctx context.Context, v any) error {
	p.yieldMu.Lock()
	defer p.yieldMu.Unlock()
	if p.finished {
		return fmt.Errorf("goray: %s yielded after it returned", p.spec.Function)
	}
	for {
		p.mu.Lock()
		if p.bound <= 0 || p.produced-p.consumed < p.bound {
			p.mu.Unlock()
			break
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-p.caller.Done():
			return errors.New("goray: the generator's caller is gone")
		}
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	ret, err := p.e.encodeReturn(ctx, p.spec, ItemID(p.taskID, p.produced), v)
	if err != nil {
		return fmt.Errorf("goray: item %d of %s: %w", p.produced, p.spec.Function, err)
	}
	p.send(&pb.TaskReply{TaskId: p.spec.TaskId, Ret: ret, StreamItem: true, ItemIndex: p.produced})
	p.produced++
	return nil
}

// finish ends p's yields and returns how many items it made.
func (p *producer) finish() int64 {
	p.yieldMu.Lock()
	defer p.yieldMu.Unlock()
	p.finished = true
	return p.produced
}

// AckStream records how many items the consumer of a generator call
// running here has taken (flow control; see producer.yield).
func (s *coreWorkerService) AckStream(ctx context.Context, req *pb.AckStreamRequest) (*pb.AckStreamReply, error) {
	id, err := ids.FromBytes(req.GetTaskId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "ack stream: task_id: %v", err)
	}
	s.cw.exec.ack(id, req.GetConsumed())
	return &pb.AckStreamReply{}, nil
}
