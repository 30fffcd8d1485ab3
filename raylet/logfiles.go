package raylet

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/logrotate"
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

// ReadLog streams one log (its last lines, then what is appended), across
// its rotated files (internal/logrotate).
func (s *logFilesService) ReadLog(req *gorayv1.ReadLogRequest, stream gorayv1.LogFiles_ReadLogServer) error {
	if req.GetTailLines() < 0 {
		return status.Errorf(codes.InvalidArgument, "read log %q: tail_lines %d is negative", req.GetName(), req.GetTailLines())
	}
	dir := s.dir()
	if err := logfiles.CheckName(req.GetName()); err != nil {
		return status.Errorf(codes.InvalidArgument, "read log: %v", err)
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
	sent := false
	err := logrotate.Read(ctx, filepath.Join(string(dir), req.GetName()), logrotate.ReadOptions{
		Tail: req.GetTailLines(), Follow: req.GetFollow(), Poll: logrotate.PollInterval,
		// Every file is opened by its plain name in the directory, with
		// the confinement of logfiles (no symbolic link, regular files).
		Open: func(path string) (*os.File, error) { return dir.Open(filepath.Base(path)) },
	}, func(b []byte) error {
		sent = true
		return stream.Send(&gorayv1.LogChunk{Data: b})
	})
	switch {
	case err == nil:
	case errors.Is(err, logfiles.ErrBadName), errors.Is(err, logfiles.ErrNotLog):
		return status.Errorf(codes.InvalidArgument, "read log: %v", err)
	case errors.Is(err, os.ErrNotExist) && !sent:
		return status.Errorf(codes.NotFound, "read log: %v (in %s of node %s)", err, dir, s.r.cfg.NodeID.Short())
	default:
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Errorf(codes.Internal, "read log %s: %v", req.GetName(), err)
	}
	if isClosed(s.r.closing) && stream.Context().Err() == nil {
		return status.Errorf(codes.Unavailable, "node %s is shutting down", s.r.cfg.NodeID.Short())
	}
	return nil
}
