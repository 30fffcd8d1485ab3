package gcs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/gcs/internal/store"
)

// Tables of the GCS's storage.
const (
	tableMeta   = "meta"
	tableNodes  = "nodes"
	tableJobs   = "jobs"
	tableActors = "actors"
	tableGroups = "placement_groups"
	tableKV     = "kv"
)

// change is one record to write (or delete) in the storage.
type change struct {
	table, key string
	value      []byte // nil with del
	del        bool
	seq        uint64
}

// journal writes the GCS's changes to its storage in the order they were
// made, from one goroutine: the changes queued since the last write go in
// one batch (one store call per table, one fsync), so concurrent handlers
// share the cost. A handler queues its changes while it holds the lock
// that made them, which keeps the storage's order the tables' order, and
// waits (after unlocking) until they are durable before it answers. When
// the storage fails, the journal keeps its queue and retries with backoff:
// nothing acknowledged is lost, and callers waiting meanwhile get
// Unavailable when their context ends.
type journal struct {
	st  store.Store
	log hclog.Logger

	mu      sync.Mutex
	queue   []change
	seq     uint64        // of the last change queued
	durable uint64        // of the last change written
	written chan struct{} // closed and replaced after each write
	lastErr error         // of the last failed write, until one succeeds
	wake    chan struct{} // capacity 1
	stop    chan struct{}
	stopped chan struct{}

	// ctx bounds the writes; cancel ends one in flight when close gives up.
	ctx    context.Context
	cancel context.CancelFunc
}

func newJournal(st store.Store, log hclog.Logger) *journal {
	j := &journal{st: st, log: log.Named("storage"), written: make(chan struct{}), wake: make(chan struct{}, 1),
		stop: make(chan struct{}), stopped: make(chan struct{})}
	j.ctx, j.cancel = context.WithCancel(context.Background())
	go j.run()
	return j
}

// put queues a record; the caller holds the lock of the table it changed.
func (j *journal) put(table, key string, m proto.Message) uint64 {
	b, err := proto.Marshal(m)
	if err != nil {
		// Our own messages always marshal.
		panic(fmt.Sprintf("gcs: marshalling a %s record: %v", table, err))
	}
	return j.add(change{table: table, key: key, value: b})
}

// putRaw queues a record of bytes.
func (j *journal) putRaw(table, key string, value []byte) uint64 {
	return j.add(change{table: table, key: key, value: append([]byte{}, value...)})
}

// del queues a deletion.
func (j *journal) del(table, key string) uint64 {
	return j.add(change{table: table, key: key, del: true})
}

func (j *journal) add(c change) uint64 {
	j.mu.Lock()
	j.seq++
	c.seq = j.seq
	j.queue = append(j.queue, c)
	seq := j.seq
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return seq
}

// wait blocks until the change seq is durable, or ctx ends (then the
// error is Unavailable and says why the storage is behind).
func (j *journal) wait(ctx context.Context, seq uint64) error {
	for {
		j.mu.Lock()
		if j.durable >= seq {
			j.mu.Unlock()
			return nil
		}
		ch := j.written
		j.mu.Unlock()
		select {
		case <-ch:
		case <-j.stopped:
			return status.Error(codes.Unavailable, "GCS storage: the GCS is stopping")
		case <-ctx.Done():
			j.mu.Lock()
			last := j.lastErr
			j.mu.Unlock()
			why := "the write is still queued"
			if last != nil {
				why = last.Error()
			}
			return status.Errorf(codes.Unavailable, "GCS storage (%s) did not take the change in time: %s (%v)", j.st.Describe(), why, ctx.Err())
		}
	}
}

// retry bounds between attempts of a failing write.
const (
	journalRetryMin = 50 * time.Millisecond
	journalRetryMax = 2 * time.Second
)

func (j *journal) run() {
	defer close(j.stopped)
	backoff := journalRetryMin
	for {
		j.mu.Lock()
		batch := j.queue
		j.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-j.wake:
				continue
			case <-j.stop:
				return
			}
		}
		err := j.write(batch)
		j.mu.Lock()
		if err == nil {
			j.queue = j.queue[len(batch):]
			j.durable = batch[len(batch)-1].seq
			if j.lastErr != nil {
				j.log.Info("GCS storage writes again", "backend", j.st.Describe())
			}
			j.lastErr = nil
			close(j.written)
			j.written = make(chan struct{})
			backoff = journalRetryMin
		} else {
			if j.lastErr == nil {
				j.log.Error("GCS storage write failed; retrying", "backend", j.st.Describe(), "error", err)
			}
			j.lastErr = err
		}
		j.mu.Unlock()
		if err != nil {
			select {
			case <-time.After(backoff):
			case <-j.stop:
				return
			}
			backoff = min(2*backoff, journalRetryMax)
		}
	}
}

// write stores a batch in one atomic Apply: the last change of each key,
// in the order the keys were first changed. It gives up when the journal
// closes (ctx of run) or after writeTimeout.
func (j *journal) write(batch []change) error {
	type key struct{ table, key string }
	last := make(map[key]int, len(batch))
	var order []key
	for i, c := range batch {
		k := key{c.table, c.key}
		if _, seen := last[k]; !seen {
			order = append(order, k)
		}
		last[k] = i
	}
	writes := make([]store.Write, 0, len(order))
	for _, k := range order {
		c := batch[last[k]]
		writes = append(writes, store.Write{Table: c.table, Key: c.key, Value: c.value, Delete: c.del})
	}
	ctx, cancel := context.WithTimeout(j.ctx, writeTimeout)
	defer cancel()
	return j.st.Apply(ctx, writes)
}

// writeTimeout bounds one batch's write.
const writeTimeout = 30 * time.Second

// close stops the writer after it wrote what is queued (bounded by ctx).
func (j *journal) close(ctx context.Context) error {
	for {
		j.mu.Lock()
		pending := len(j.queue)
		ch := j.written
		j.mu.Unlock()
		if pending == 0 {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			close(j.stop)
			j.cancel() // a write in flight ends now
			<-j.stopped
			return fmt.Errorf("GCS storage: %d changes not written at shutdown: %w", pending, ctx.Err())
		}
	}
	close(j.stop)
	<-j.stopped
	j.cancel()
	return nil
}

// durable is what a handler waits for before it answers: the last change
// it queued. The zero value waits for nothing.
type durable struct {
	j   *journal
	seq uint64
}

// wait is deferred before the handler takes its lock, so it runs after the
// unlock: it turns a successful answer into an Unavailable error when the
// change does not become durable while the caller waits.
func (d *durable) wait(ctx context.Context, err *error) {
	if d.j == nil || d.seq == 0 || *err != nil {
		return
	}
	if werr := d.j.wait(ctx, d.seq); werr != nil {
		*err = werr
	}
}
