package core

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/logline"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Worker output (docs/logs.md). A worker writes a marker line on stdout
// and stderr whenever it starts running something other than before (a
// task of another function, an actor), so its raylet knows whom the
// following lines belong to. A driver subscribes to its job's lines at
// its raylet before it registers, prints them with a prefix naming the
// task or actor, the worker's pid and its node, and flushes them before
// it shuts down.

// Bounds of a driver's queue of lines to print: batches beyond them are
// dropped, counted and reported once printing catches up.
const (
	maxPrintQueueLines = 20000
	maxPrintQueueBytes = 16 << 20
	maxPrintMarks      = 64
	// printerStopWait bounds how long Close waits for the printer (a
	// write to a stdout nobody reads never returns).
	printerStopWait = 2 * time.Second
)

// outputMarks writes markers on this process's stdout and stderr.
type outputMarks struct {
	mu     sync.Mutex
	last   logline.Attribution
	stdout io.Writer
	stderr io.Writer
}

// marks is the worker's: a process has one stdout and one stderr.
var marks = &outputMarks{stdout: os.Stdout, stderr: os.Stderr}

// begin notes that the worker starts running what a describes, writing a
// marker unless it was already running the same.
func (m *outputMarks) begin(a logline.Attribution) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a == m.last {
		return
	}
	m.last = a
	mk := logline.Marker(a)
	_, _ = m.stdout.Write(mk)
	_, _ = m.stderr.Write(mk)
}

// taskStarted marks the start of a task of function fn.
func taskStarted(fn string) { marks.begin(logline.Attribution{Task: fn}) }

// actorStarted marks the start of an actor (its constructor runs).
func actorStarted(ref ActorRef) {
	marks.begin(logline.Attribution{ActorClass: ref.Class, ActorName: ref.Name, ActorID: ref.ID.String()})
}

// logPrinter receives a driver's job's lines from its raylet and prints
// them. mu guards the queue and the counters; the printer goroutine
// writes with no lock held.
type logPrinter struct {
	stdout, stderr *bufio.Writer // the same writer when both go to one place
	job            ids.ID
	raylet         pb.WorkerLogsClient
	nextFlush      atomic.Uint64

	mu      sync.Mutex
	queue   []*pb.LogBatch
	lines   int
	bytes   int
	marks   int
	lost    uint64
	printed uint64        // the last flush mark printed
	advance chan struct{} // closed and replaced when printed grows
	ended   bool          // the subscription ended
	kick    chan struct{}
	stopped chan struct{} // closed when the printer goroutine returns
}

// subscribeLogs subscribes to the driver's job's lines (before the driver
// registers, so that no line of its workers is missed) and starts
// printing them to the configured writers.
func (cw *CoreWorker) subscribeLogs(ctx context.Context) error {
	if cw.mode != ModeDriver || cw.cfg.LogStdout == nil {
		return nil
	}
	if cw.cfg.Job == nil {
		cw.cfg.Job = &pb.JobInfo{}
	}
	if len(cw.cfg.Job.JobId) == 0 {
		cw.cfg.Job.JobId = ids.New().Bytes()
	}
	job, err := ids.FromBytes(cw.cfg.Job.JobId)
	if err != nil {
		return fmt.Errorf("goray: job id: %w", err)
	}
	errW := cw.cfg.LogStderr
	if errW == nil {
		errW = cw.cfg.LogStdout
	}
	p := &logPrinter{
		job: job, raylet: pb.NewWorkerLogsClient(cw.rayletCC),
		advance: make(chan struct{}), kick: make(chan struct{}, 1), stopped: make(chan struct{}),
	}
	p.stdout = bufio.NewWriter(cw.cfg.LogStdout)
	p.stderr = p.stdout
	if errW != cw.cfg.LogStdout {
		p.stderr = bufio.NewWriter(errW)
	}
	st, err := p.raylet.Subscribe(cw.ctx, &pb.SubscribeLogsRequest{JobId: job.Bytes()})
	if err != nil {
		return fmt.Errorf("goray: subscribing to the job's worker output: %w", err)
	}
	// The first (empty) batch says the subscription is in place.
	first := make(chan error, 1)
	go func() { _, err := st.Recv(); first <- err }()
	select {
	case err := <-first:
		if err != nil {
			return fmt.Errorf("goray: subscribing to the job's worker output: %w", err)
		}
	case <-ctx.Done():
		return fmt.Errorf("goray: subscribing to the job's worker output: %w", ctx.Err())
	}
	cw.logs = p
	cw.wg.Add(1)
	go func() {
		defer cw.wg.Done()
		for {
			b, err := st.Recv()
			if err != nil {
				p.end()
				return
			}
			p.push(b)
		}
	}()
	go p.run()
	return nil
}

// push queues a batch to print, dropping it when the queue is full.
func (p *logPrinter) push(b *pb.LogBatch) {
	size := 0
	for _, l := range b.Lines {
		size += len(l.Text)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case b.FlushId != 0 && len(b.Lines) == 0:
		if p.marks >= maxPrintMarks {
			p.lost += b.Dropped
			return
		}
		p.marks++
	case p.lines+len(b.Lines) > maxPrintQueueLines || p.bytes+size > maxPrintQueueBytes:
		p.lost += uint64(len(b.Lines)) + b.Dropped
		return
	}
	p.queue = append(p.queue, b)
	p.lines += len(b.Lines)
	p.bytes += size
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// end notes that the subscription ended.
func (p *logPrinter) end() {
	p.mu.Lock()
	p.ended = true
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// run prints until the subscription ended and its queue is printed.
func (p *logPrinter) run() {
	defer close(p.stopped)
	for range p.kick {
		p.mu.Lock()
		q, lost, ended := p.queue, p.lost, p.ended
		p.queue, p.lines, p.bytes, p.marks, p.lost = nil, 0, 0, 0, 0
		p.mu.Unlock()
		var flushed uint64
		if lost > 0 {
			p.dropped(lost)
		}
		for _, b := range q {
			p.print(b)
			flushed = max(flushed, b.FlushId)
		}
		_ = p.stdout.Flush()
		_ = p.stderr.Flush()
		p.mu.Lock()
		if flushed > p.printed {
			p.printed = flushed
			close(p.advance)
			p.advance = make(chan struct{})
		}
		p.mu.Unlock()
		if ended {
			return
		}
	}
}

func (p *logPrinter) dropped(n uint64) {
	fmt.Fprintf(p.stderr, "[goray] %d lines of worker output were dropped (the driver or a node fell behind)\n", n)
}

// print writes one batch's lines, each with its prefix.
func (p *logPrinter) print(b *pb.LogBatch) {
	if b.Dropped > 0 {
		p.dropped(b.Dropped)
	}
	if len(b.Lines) == 0 {
		return
	}
	node := hex.EncodeToString(b.NodeId)
	if len(node) > 8 {
		node = node[:8]
	}
	prefixes := make([]string, len(b.Sources))
	for i, s := range b.Sources {
		prefixes[i] = logline.Prefix(logline.Origin{
			Attribution: logline.Attribution{Task: s.Task, ActorClass: s.ActorClass, ActorName: s.ActorName},
			Pid:         s.Pid, NodeID: node, NodeIP: b.NodeIp,
		})
	}
	for _, l := range b.Lines {
		w := p.stdout
		if l.Stderr {
			w = p.stderr
		}
		prefix := "(unknown) "
		if int(l.Source) < len(prefixes) {
			prefix = prefixes[l.Source]
		}
		_, _ = w.WriteString(prefix)
		_, _ = w.Write(l.Text)
		_ = w.WriteByte('\n')
	}
}

// FlushLogs prints every line the job's workers wrote before the call,
// on every node: each node hands its lines over, and FlushLogs returns
// once they are printed, or when ctx ends (then with its error). Without
// a subscription (LogToDriver off) it does nothing.
func (cw *CoreWorker) FlushLogs(ctx context.Context) error {
	p := cw.logs
	if p == nil {
		return nil
	}
	id := p.nextFlush.Add(1)
	rep, err := p.raylet.Flush(ctx, &pb.FlushLogsRequest{JobId: p.job.Bytes(), FlushId: id})
	if err != nil {
		return fmt.Errorf("goray: flushing worker output: %w", err)
	}
	if f := rep.GetFailed(); len(f) > 0 {
		cw.log.Warn("some nodes did not hand over their worker output in time", "nodes", strings.Join(f, "; "))
	}
	for {
		p.mu.Lock()
		printed, advance, ended := p.printed, p.advance, p.ended
		p.mu.Unlock()
		if printed >= id || ended {
			return nil
		}
		select {
		case <-advance:
		case <-p.stopped:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("goray: waiting for worker output to be printed: %w", ctx.Err())
		}
	}
}

// stopLogs waits (a little) for the printer after the subscription ended.
func (cw *CoreWorker) stopLogs() {
	if cw.logs == nil {
		return
	}
	cw.logs.end()
	t := time.NewTimer(printerStopWait)
	defer t.Stop()
	select {
	case <-cw.logs.stopped:
	case <-t.C:
	}
}
