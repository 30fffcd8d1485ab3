package raylet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/logline"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// flushTimeout bounds a driver's Flush (each node's Drain within it).
const flushTimeout = 10 * time.Second

// registerLogServices registers the WorkerLogs and LogFiles services.
func (r *Raylet) registerLogServices(g *grpc.Server) {
	gorayv1.RegisterWorkerLogsServer(g, &workerLogsService{r: r})
	gorayv1.RegisterLogFilesServer(g, &logFilesService{r: r})
}

// pushLogs implements logSender: this node's hub when the driver runs
// here, else the driver node's raylet.
func (r *Raylet) pushLogs(ctx context.Context, driverNode ids.ID, b *gorayv1.LogBatch) (bool, error) {
	if driverNode == r.cfg.NodeID {
		return r.logHub.deliver(ids.MustFromBytes(b.JobId), b), nil
	}
	p := r.cluster.peer(driverNode)
	if p == nil {
		if _, _, err := r.peerClient(driverNode); err != nil {
			return false, err
		}
		p = r.cluster.peer(driverNode)
	}
	if !p.Alive {
		return false, &NodeDeadError{Node: p.ID, Reason: p.Info.GetDeathReason()}
	}
	cc, err := r.cluster.clientConn(p.Info.GetRayletTcp())
	if err != nil {
		return false, err
	}
	rep, err := gorayv1.NewWorkerLogsClient(cc).Push(ctx, b)
	if err != nil {
		return false, err
	}
	return rep.GetSubscribed(), nil
}

// flushLogs has every alive node push the lines of job's workers written
// so far, then queues a flush mark behind them for job's subscriptions.
// It returns the nodes that did not manage in time, with why.
func (r *Raylet) flushLogs(ctx context.Context, job ids.ID, flushID uint64) []string {
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
	)
	fail := func(node ids.ID, err error) {
		mu.Lock()
		defer mu.Unlock()
		failed = append(failed, fmt.Sprintf("node %s: %v", node.Short(), err))
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.logs.drain(ctx, job); err != nil {
			fail(r.cfg.NodeID, err)
		}
	}()
	for _, p := range r.cluster.snapshot().list {
		if !p.Alive || p.Info.GetRayletTcp() == "" {
			continue
		}
		cc, err := r.cluster.clientConn(p.Info.GetRayletTcp())
		if err != nil {
			fail(p.ID, err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := gorayv1.NewWorkerLogsClient(cc).Drain(ctx, &gorayv1.DrainLogsRequest{JobId: job.Bytes()}); err != nil {
				fail(p.ID, err)
			}
		}()
	}
	wg.Wait()
	r.logHub.mark(job, flushID)
	return failed
}

// workerLogsService serves WorkerLogs: it decodes, calls the hub, the
// forwarder or one Raylet method, and encodes.
type workerLogsService struct {
	gorayv1.UnimplementedWorkerLogsServer
	r *Raylet
}

// Subscribe streams the job's lines to its driver until the call ends or
// the node stops.
func (s *workerLogsService) Subscribe(req *gorayv1.SubscribeLogsRequest, stream gorayv1.WorkerLogs_SubscribeServer) error {
	job, err := ids.FromBytes(req.GetJobId())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "log subscription: job id: %v", err)
	}
	sub, err := s.r.logHub.subscribe(job)
	if err != nil {
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	defer s.r.logHub.unsubscribe(sub)
	if err := stream.Send(&gorayv1.LogBatch{JobId: job.Bytes()}); err != nil {
		return err
	}
	for {
		select {
		case <-sub.notify:
			for _, b := range s.r.logHub.take(sub) {
				if err := stream.Send(b); err != nil {
					return err
				}
			}
		case <-stream.Context().Done():
			return nil
		case <-s.r.closing:
			return nil
		}
	}
}

// Flush hands over every node's lines of the job, then marks the end.
func (s *workerLogsService) Flush(ctx context.Context, req *gorayv1.FlushLogsRequest) (*gorayv1.FlushLogsReply, error) {
	job, err := ids.FromBytes(req.GetJobId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "log flush: job id: %v", err)
	}
	return &gorayv1.FlushLogsReply{Failed: s.r.flushLogs(ctx, job, req.GetFlushId())}, nil
}

// Push takes another node's batch of a job's lines.
func (s *workerLogsService) Push(ctx context.Context, b *gorayv1.LogBatch) (*gorayv1.PushLogsReply, error) {
	job, err := checkBatch(b)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "log push: %v", err)
	}
	return &gorayv1.PushLogsReply{Subscribed: s.r.logHub.deliver(job, b)}, nil
}

// Drain pushes this node's lines of the job written so far.
func (s *workerLogsService) Drain(ctx context.Context, req *gorayv1.DrainLogsRequest) (*gorayv1.DrainLogsReply, error) {
	job, err := ids.FromBytes(req.GetJobId())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "log drain: job id: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	if err := s.r.logs.drain(ctx, job); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return &gorayv1.DrainLogsReply{}, nil
}

// maxLogName bounds each name a pushed batch carries (a source's task,
// actor class and name; the node's IP and name).
const maxLogName = 1024

// ErrBadBatch says a pushed batch breaks the bounds or is inconsistent.
var ErrBadBatch = errors.New("bad log batch")

// checkBatch checks a pushed batch against the bounds a sender keeps and
// returns its job.
func checkBatch(b *gorayv1.LogBatch) (ids.ID, error) {
	job, err := ids.FromBytes(b.GetJobId())
	if err != nil {
		return ids.Nil, fmt.Errorf("%w: job id: %v", ErrBadBatch, err)
	}
	if _, err := ids.FromBytes(b.GetNodeId()); err != nil {
		return ids.Nil, fmt.Errorf("%w: node id: %v", ErrBadBatch, err)
	}
	if len(b.GetLines()) > maxBatchLines || len(b.GetSources()) > maxBatchLines {
		return ids.Nil, fmt.Errorf("%w: %d lines from %d sources (at most %d)", ErrBadBatch, len(b.GetLines()), len(b.GetSources()), maxBatchLines)
	}
	if len(b.GetNodeIp()) > maxLogName || len(b.GetNodeName()) > maxLogName {
		return ids.Nil, fmt.Errorf("%w: node ip or name longer than %d bytes", ErrBadBatch, maxLogName)
	}
	size := 0
	for i, src := range b.GetSources() {
		for _, f := range []string{src.GetTask(), src.GetActorClass(), src.GetActorName()} {
			if len(f) > maxLogName {
				return ids.Nil, fmt.Errorf("%w: source %d has a name of %d bytes (at most %d)", ErrBadBatch, i, len(f), maxLogName)
			}
			size += len(f)
		}
		if len(src.GetWorkerId()) > ids.Size || len(src.GetActorId()) > ids.Size {
			return ids.Nil, fmt.Errorf("%w: source %d has an id longer than %d bytes", ErrBadBatch, i, ids.Size)
		}
	}
	for i, l := range b.GetLines() {
		if len(l.GetText()) > logline.MaxLine {
			return ids.Nil, fmt.Errorf("%w: line %d has %d bytes (at most %d)", ErrBadBatch, i, len(l.GetText()), logline.MaxLine)
		}
		if int(l.GetSource()) >= len(b.GetSources()) {
			return ids.Nil, fmt.Errorf("%w: line %d names source %d of %d", ErrBadBatch, i, l.GetSource(), len(b.GetSources()))
		}
		size += len(l.GetText())
	}
	if size > maxBatchBytes+logline.MaxLine {
		return ids.Nil, fmt.Errorf("%w: %d bytes of lines (at most %d)", ErrBadBatch, size, maxBatchBytes)
	}
	if b.GetFlushId() != 0 {
		return ids.Nil, fmt.Errorf("%w: a pushed batch carries no flush id", ErrBadBatch)
	}
	return job, nil
}
