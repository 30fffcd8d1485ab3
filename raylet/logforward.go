package raylet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/logline"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// Bounds of the lines a node queues for the drivers of its jobs.
const (
	// maxJobQueueLines and maxJobQueueBytes bound one job's queue on a
	// node; lines that do not fit are dropped and counted.
	maxJobQueueLines = 10000
	maxJobQueueBytes = 8 << 20
	// maxBatchLines and maxBatchBytes bound one pushed batch (a Push
	// carrying more is refused).
	maxBatchLines = 1000
	maxBatchBytes = 1 << 20
	// pushTimeout bounds one Push to the driver's raylet.
	pushTimeout = 10 * time.Second
	// readChunk is what a stream reads from a worker's pipe at once.
	readChunk = 64 << 10
	// outputGrace is how long a dead worker's streams are read after it
	// exited (a child of the worker may hold the pipes open).
	outputGrace = time.Second
)

// logSender pushes a batch of a job's lines to the raylet of the job's
// driver (this node's hub when the driver runs here). subscribed is false
// when no driver of the job subscribes there.
type logSender interface {
	pushLogs(ctx context.Context, driverNode ids.ID, b *gorayv1.LogBatch) (subscribed bool, err error)
}

// logForwarder is the worker side of log streaming (docs/logs.md): it
// reads every worker's stdout and stderr pipes (outStream), appends them
// to the worker's log files and queues each line for the driver of the
// worker's job; one goroutine per job pushes the queue in batches to the
// driver's raylet. A slow or absent driver never blocks a worker: a full
// queue drops lines and counts them, and the count travels with the next
// batch.
//
// mu guards closed, jobs and every jobLogs' fields. A stream's own mutex
// is taken before mu (reading a chunk queues its lines), never after.
type logForwarder struct {
	nodeID   ids.ID
	nodeIP   string
	nodeName string
	log      hclog.Logger
	send     logSender
	// copyTo (Config.WorkerOutput) also receives every line, prefixed
	// "(worker <short id> pid=N) "; copyMu serialises its writes.
	copyTo io.Writer
	copyMu sync.Mutex

	stop chan struct{} // closed by close
	// ctx ends with close: it bounds the pushes under way.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	jobs   map[ids.ID]*jobLogs

	// afterRead, when set (tests), is called by a stream right after it
	// read a chunk from its pipe and before it handles it, under its mu.
	afterRead func()
}

// jobLogs is one job's lines on this node, waiting to be pushed.
type jobLogs struct {
	id, driverNode ids.ID
	streams        map[*outStream]struct{}
	lines          []queuedLine
	bytes          int
	// queued counts the lines queued (or dropped at the queue); done the
	// lines pushed or given up; dropped the lines lost since the last
	// batch, reported with the next one.
	queued, done, dropped uint64
	// muted: the driver's raylet has no subscriber (LogToDriver off), or
	// the job has no driver node: nothing is queued.
	muted, ended bool
	kick         chan struct{}
	progress     chan struct{} // closed and replaced whenever done grows
}

// queuedLine is one line of a worker.
type queuedLine struct {
	origin *lineOrigin
	stderr bool
	text   []byte
}

// lineOrigin is a worker and what it was running; it never changes once
// made (a marker makes a new one).
type lineOrigin struct {
	worker ids.ID
	pid    int32
	attr   logline.Attribution
}

func newLogForwarder(cfg Config, log hclog.Logger, send logSender) *logForwarder {
	fw := &logForwarder{
		nodeID: cfg.NodeID, nodeIP: nodeIP(cfg), nodeName: cfg.NodeName, log: log, send: send,
		copyTo: cfg.WorkerOutput, stop: make(chan struct{}), jobs: map[ids.ID]*jobLogs{},
	}
	fw.ctx, fw.cancel = context.WithCancel(context.Background())
	return fw
}

// jobLocked returns job's queue, creating it (and its sender) on first use.
func (fw *logForwarder) jobLocked(job, driverNode ids.ID) *jobLogs {
	jl := fw.jobs[job]
	if jl == nil {
		jl = &jobLogs{
			id: job, driverNode: driverNode, streams: map[*outStream]struct{}{},
			muted: driverNode.IsNil(), kick: make(chan struct{}, 1), progress: make(chan struct{}),
		}
		fw.jobs[job] = jl
		fw.wg.Add(1)
		go fw.sendLoop(jl)
	}
	return jl
}

// attach starts reading a worker's stdout and stderr pipes (rd), copying
// them to its log files (files) and to the driver of job. It takes
// ownership of rd and files; wait for the returned output before the
// worker's end is reported.
func (fw *logForwarder) attach(job, driverNode, worker ids.ID, pid int, rd [2]*os.File, files [2]io.WriteCloser) (*workerStreams, error) {
	ws := &workerStreams{}
	origin := &lineOrigin{worker: worker, pid: int32(pid)}
	var streams []*outStream
	for i := range 2 {
		rc, err := rd[i].SyscallConn()
		if err != nil {
			for j := range 2 {
				rd[j].Close()
				files[j].Close()
			}
			return nil, fmt.Errorf("reading worker output: %w", err)
		}
		streams = append(streams, &outStream{
			fw: fw, rd: rd[i], rc: rc, file: files[i], w: bufio.NewWriterSize(files[i], readChunk),
			stderr: i == 1, origin: origin, buf: make([]byte, readChunk),
			prefix: fmt.Sprintf("(worker %s pid=%d) ", worker.Short(), pid),
		})
	}
	fw.mu.Lock()
	if fw.closed {
		fw.mu.Unlock()
		for _, s := range streams {
			s.closeFiles()
		}
		return nil, ErrShuttingDown
	}
	jl := fw.jobLocked(job, driverNode)
	for _, s := range streams {
		s.jl = jl
		jl.streams[s] = struct{}{}
	}
	fw.mu.Unlock()
	for _, s := range streams {
		ws.wg.Add(1)
		go func() { defer ws.wg.Done(); s.run() }()
	}
	ws.streams = streams
	return ws, nil
}

// queueLocked queues one line of s's job (copying text), dropping it when
// the job's queue is full.
func (fw *logForwarder) queueLocked(jl *jobLogs, origin *lineOrigin, stderr bool, text []byte) {
	if jl.ended || jl.muted || fw.closed {
		return
	}
	jl.queued++
	if len(jl.lines) >= maxJobQueueLines || jl.bytes+len(text) > maxJobQueueBytes {
		jl.dropped++
		jl.done++
		fw.progressLocked(jl)
		return
	}
	jl.lines = append(jl.lines, queuedLine{origin: origin, stderr: stderr, text: append([]byte(nil), text...)})
	jl.bytes += len(text)
	select {
	case jl.kick <- struct{}{}:
	default:
	}
}

func (fw *logForwarder) progressLocked(jl *jobLogs) {
	close(jl.progress)
	jl.progress = make(chan struct{})
}

// takeBatch takes up to a batch of jl's lines; n is how many (0: none).
func (fw *logForwarder) takeBatch(jl *jobLogs) (b *gorayv1.LogBatch, n int) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if len(jl.lines) == 0 || jl.ended || fw.closed {
		return nil, 0
	}
	b = &gorayv1.LogBatch{JobId: jl.id.Bytes(), NodeId: fw.nodeID.Bytes(), NodeIp: fw.nodeIP, NodeName: fw.nodeName, Dropped: jl.dropped}
	jl.dropped = 0
	index := map[*lineOrigin]uint32{}
	size := 0
	for n < len(jl.lines) && n < maxBatchLines {
		l := jl.lines[n]
		if n > 0 && size+len(l.text) > maxBatchBytes {
			break
		}
		i, ok := index[l.origin]
		if !ok {
			i = uint32(len(b.Sources))
			index[l.origin] = i
			src := &gorayv1.LogSource{WorkerId: l.origin.worker.Bytes(), Pid: l.origin.pid, Task: l.origin.attr.Task,
				ActorClass: l.origin.attr.ActorClass, ActorName: l.origin.attr.ActorName}
			if id, err := ids.Parse(l.origin.attr.ActorID); err == nil {
				src.ActorId = id.Bytes()
			}
			b.Sources = append(b.Sources, src)
		}
		b.Lines = append(b.Lines, &gorayv1.LogLine{Source: i, Stderr: l.stderr, Text: l.text})
		size += len(l.text)
		n++
	}
	jl.lines = append(jl.lines[:0:0], jl.lines[n:]...)
	jl.bytes -= size
	return b, n
}

// sent records the outcome of pushing n lines (with dropped lines
// reported in the batch).
func (fw *logForwarder) sent(jl *jobLogs, n int, dropped uint64, subscribed bool, err error) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	jl.done += uint64(n)
	if err != nil {
		jl.dropped += uint64(n) + dropped
	}
	if err == nil && !subscribed {
		jl.muted = true
		jl.done += uint64(len(jl.lines))
		jl.lines, jl.bytes = nil, 0
	}
	fw.progressLocked(jl)
}

// sendLoop pushes jl's lines until the job ends or the forwarder closes.
func (fw *logForwarder) sendLoop(jl *jobLogs) {
	defer fw.wg.Done()
	failing := false
	for {
		select {
		case <-jl.kick:
		case <-fw.stop:
			return
		}
		for {
			b, n := fw.takeBatch(jl)
			if b == nil {
				break
			}
			ctx, cancel := context.WithTimeout(fw.ctx, pushTimeout)
			subscribed, err := fw.send.pushLogs(ctx, jl.driverNode, b)
			cancel()
			if err != nil && !failing {
				fw.log.Warn("cannot hand worker output to the driver's node; lines are dropped until it works again",
					"job_id", jl.id, "driver_node", jl.driverNode.Short(), "error", err)
			} else if err == nil && failing {
				fw.log.Info("handing worker output to the driver's node works again", "job_id", jl.id)
			}
			failing = err != nil
			fw.sent(jl, n, b.Dropped, subscribed, err)
		}
		fw.mu.Lock()
		ended := jl.ended
		fw.mu.Unlock()
		if ended { // endJob dropped its queue: nothing more comes
			return
		}
	}
}

// drain reads what job's workers on this node wrote before the call and
// returns once those lines are pushed (or given up), the job ended or ctx
// ends.
func (fw *logForwarder) drain(ctx context.Context, job ids.ID) error {
	fw.mu.Lock()
	jl := fw.jobs[job]
	var streams []*outStream
	if jl != nil {
		for s := range jl.streams {
			streams = append(streams, s)
		}
	}
	fw.mu.Unlock()
	if jl == nil {
		return nil
	}
	for _, s := range streams {
		s.readAvailable()
	}
	fw.mu.Lock()
	target := jl.queued
	for jl.done < target && !jl.ended && !jl.muted && !fw.closed {
		progress := jl.progress
		fw.mu.Unlock()
		select {
		case <-progress:
		case <-ctx.Done():
			return ctx.Err()
		}
		fw.mu.Lock()
	}
	fw.mu.Unlock()
	return nil
}

// endJob drops job's queue: its driver is gone.
func (fw *logForwarder) endJob(job ids.ID) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if jl := fw.jobs[job]; jl != nil {
		jl.ended = true
		jl.lines, jl.bytes = nil, 0
		fw.progressLocked(jl)
		delete(fw.jobs, job)
		select {
		case jl.kick <- struct{}{}:
		default:
		}
	}
}

// close stops every sender; streams still open go on writing log files.
func (fw *logForwarder) close() {
	fw.mu.Lock()
	if !fw.closed {
		fw.closed = true
		close(fw.stop)
		fw.cancel()
	}
	fw.mu.Unlock()
	fw.wg.Wait()
}

func (fw *logForwarder) copyLine(prefix string, text []byte) {
	fw.copyMu.Lock()
	defer fw.copyMu.Unlock()
	_, _ = io.WriteString(fw.copyTo, prefix)
	_, _ = fw.copyTo.Write(text)
	_, _ = io.WriteString(fw.copyTo, "\n")
}

// workerStreams is a worker's two streams.
type workerStreams struct {
	streams []*outStream
	wg      sync.WaitGroup
}

// finish waits up to outputGrace for the streams to reach the end (the
// worker exited; a child of it may hold the pipes open), then closes
// them and the log files.
func (ws *workerStreams) finish() {
	done := make(chan struct{})
	go func() { ws.wg.Wait(); close(done) }()
	t := time.NewTimer(outputGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		for _, s := range ws.streams {
			_ = s.rd.SetReadDeadline(time.Now()) // ends the read loop
		}
		<-done
	}
	for _, s := range ws.streams {
		s.closeFiles()
	}
}

// outStream reads one of a worker's pipes. mu serialises reading and
// handling a chunk (the read loop's and a drain's), so lines keep their
// order and a drain that returns has handled every byte written before it.
type outStream struct {
	fw     *logForwarder
	rd     *os.File // the pipe's read end (non-blocking)
	rc     syscall.RawConn
	file   io.WriteCloser // the worker's log file (rotating)
	w      *bufio.Writer
	stderr bool
	prefix string // for Config.WorkerOutput
	jl     *jobLogs

	mu     sync.Mutex
	origin *lineOrigin
	split  logline.Splitter
	buf    []byte
	eof    bool
}

// run reads until the pipe's end (or its read deadline).
func (s *outStream) run() {
	err := s.rc.Read(func(fd uintptr) bool { return s.readFD(int(fd), -1) })
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, os.ErrClosed) {
		s.fw.log.Debug("reading worker output failed", "error", err)
	}
	s.mu.Lock()
	s.eof = true
	s.split.Flush(s.handle)
	_ = s.w.Flush()
	s.mu.Unlock()
	s.fw.mu.Lock()
	delete(s.jl.streams, s)
	s.fw.mu.Unlock()
}

// readAvailable handles what the pipe holds now (at most what it held
// when called, so a worker writing without pause cannot keep it going),
// and what the read loop took from it before: when it returns, every byte
// written to the pipe before the call has been handled.
func (s *outStream) readAvailable() {
	_ = s.rc.Control(func(fd uintptr) {
		n, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
		if err == nil && n > 0 {
			s.readFD(int(fd), n)
		}
	})
	// The read loop reads and handles a chunk under mu: bytes it read
	// before the pipe was found empty are handled once mu is free.
	s.mu.Lock()
	s.mu.Unlock() //nolint:staticcheck // an empty critical section: waiting for the read loop's chunk
}

// readFD reads chunks from fd and handles them, each under mu, until the
// pipe is empty (false: wait for more), at its end (true), or budget
// bytes were read (budget < 0: no budget).
func (s *outStream) readFD(fd, budget int) bool {
	for {
		s.mu.Lock()
		if s.eof {
			s.mu.Unlock()
			return true
		}
		n, err := unix.Read(fd, s.buf)
		if n > 0 && s.fw.afterRead != nil {
			s.fw.afterRead()
		}
		if n > 0 {
			s.split.Write(s.buf[:n], s.handle)
		}
		if n <= 0 || budget >= 0 {
			_ = s.w.Flush()
		}
		s.mu.Unlock()
		switch {
		case n > 0:
			if budget >= 0 {
				if budget -= n; budget <= 0 {
					return true
				}
			}
			continue
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		}
		return true // end of the pipe, or an error
	}
}

// handle takes one piece of output (under mu).
func (s *outStream) handle(p logline.Piece) {
	if p.Marker != nil {
		s.origin = &lineOrigin{worker: s.origin.worker, pid: s.origin.pid, attr: *p.Marker}
		return
	}
	_, _ = s.w.Write(p.Text)
	if p.Newline {
		_ = s.w.WriteByte('\n')
	}
	if s.fw.copyTo != nil {
		s.fw.copyLine(s.prefix, p.Text)
	}
	s.fw.mu.Lock()
	s.fw.queueLocked(s.jl, s.origin, s.stderr, p.Text)
	s.fw.mu.Unlock()
}

func (s *outStream) closeFiles() {
	_ = s.rd.Close()
	_ = s.file.Close()
}
