package raylet

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/raylet/internal/logfiles"
)

// logFilesService serves LogFiles: the node's log directory
// (SessionDir/logs), confined by internal/logfiles.
type logFilesService struct {
	gorayv1.UnimplementedLogFilesServer
	r *Raylet
}

func (s *logFilesService) dir() logfiles.Dir {
	return logfiles.Dir(filepath.Join(s.r.cfg.SessionDir, "logs"))
}

// ListLogs lists the node's log files and its live workers.
func (s *logFilesService) ListLogs(ctx context.Context, req *gorayv1.ListLogsRequest) (*gorayv1.ListLogsReply, error) {
	files, err := s.dir().List()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "listing %s: %v", s.dir(), err)
	}
	rep := &gorayv1.ListLogsReply{NodeId: s.r.cfg.NodeID.Bytes(), NodeName: s.r.cfg.NodeName, LogDir: string(s.dir())}
	for _, f := range files {
		rep.Files = append(rep.Files, &gorayv1.LogFileInfo{Name: f.Name, Size: f.Size, MtimeMs: f.ModTime.UnixMilli()})
	}
	ws, _ := s.r.pool.stats()
	for _, w := range ws {
		rep.Workers = append(rep.Workers, &gorayv1.LogWorker{WorkerId: w.WorkerId, Pid: w.Pid, JobId: w.JobId, ActorId: w.ActorId})
	}
	return rep, nil
}

// ReadLog streams one log file (its last lines, then what is appended).
func (s *logFilesService) ReadLog(req *gorayv1.ReadLogRequest, stream gorayv1.LogFiles_ReadLogServer) error {
	if req.GetTailLines() < 0 {
		return status.Errorf(codes.InvalidArgument, "read log %q: tail_lines %d is negative", req.GetName(), req.GetTailLines())
	}
	f, err := s.dir().Open(req.GetName())
	switch {
	case errors.Is(err, logfiles.ErrBadName), errors.Is(err, logfiles.ErrNotLog):
		return status.Errorf(codes.InvalidArgument, "read log: %v", err)
	case errors.Is(err, os.ErrNotExist):
		return status.Errorf(codes.NotFound, "read log: %v (in %s of node %s)", err, s.dir(), s.r.cfg.NodeID.Short())
	case err != nil:
		return status.Errorf(codes.Internal, "read log: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return status.Errorf(codes.Internal, "read log: %v", err)
	}
	offset, err := logfiles.TailOffset(f, fi.Size(), req.GetTailLines())
	if err != nil {
		return status.Errorf(codes.Internal, "read log %s: %v", req.GetName(), err)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-s.r.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	err = logfiles.Stream(ctx, f, offset, req.GetFollow(), func(b []byte) error {
		return stream.Send(&gorayv1.LogChunk{Data: b})
	})
	if err == nil && isClosed(s.r.closing) && stream.Context().Err() == nil {
		return status.Errorf(codes.Unavailable, "node %s is shutting down", s.r.cfg.NodeID.Short())
	}
	return err
}
