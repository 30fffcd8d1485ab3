package core

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/internal/workdir"
)

// WorkingDir is the working dir of a task or actor (TaskOptions.WorkingDir,
// sdk/ray's WorkerDir): the sha256 of its archive and the node whose raylet
// has it (where it was installed). Its worker starts in the unpacked copy,
// which overrides the job's.
type WorkingDir struct {
	SHA256 string
	Node   ids.ID
}

// key is the working dir's part of a scheduling key.
func (w *WorkingDir) key() string {
	if w == nil {
		return ""
	}
	return "\x00dir\x00" + w.SHA256
}

// ParseWorkingDir reads "SHA256@NODE" (workerenv.LeaseWorkingDir).
func ParseWorkingDir(s string) (*WorkingDir, error) {
	sum, node, ok := strings.Cut(s, "@")
	if !ok {
		return nil, fmt.Errorf("working dir %q: want SHA256@NODE", s)
	}
	id, err := ids.Parse(node)
	if err != nil {
		return nil, fmt.Errorf("working dir %q: %w", s, err)
	}
	return &WorkingDir{SHA256: sum, Node: id}, nil
}

// installTimeout bounds the raylet's copy of an archive into its cache.
const installTimeout = 5 * time.Minute

// workDirs are the working dirs this process packed and installed, by
// directory and excludes: each is packed once per process.
type workDirs struct {
	mu   sync.Mutex
	done map[string]*wdInstall
}

type wdInstall struct {
	ready chan struct{}
	wd    *WorkingDir
	err   error
}

// InstallWorkingDir packs the directory dir, less what excludes match
// (internal/workdir), and installs the archive on this node's raylet: the
// working dir a call names. A directory is packed once per process, at its
// first use; a failure is not kept (the next call tries again).
func (cw *CoreWorker) InstallWorkingDir(ctx context.Context, dir string, excludes []string) (*WorkingDir, error) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	key := dir + "\x00" + strings.Join(excludes, "\x00")
	w := &cw.workDirs
	w.mu.Lock()
	if w.done == nil {
		w.done = map[string]*wdInstall{}
	}
	in := w.done[key]
	if in == nil {
		in = &wdInstall{ready: make(chan struct{})}
		w.done[key] = in
		go func() {
			in.wd, in.err = cw.installWorkingDir(dir, excludes)
			if in.err != nil {
				w.mu.Lock()
				delete(w.done, key)
				w.mu.Unlock()
			}
			close(in.ready)
		}()
	}
	w.mu.Unlock()
	select {
	case <-in.ready:
		return in.wd, in.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (cw *CoreWorker) installWorkingDir(dir string, excludes []string) (*WorkingDir, error) {
	path, p, err := workdir.PackFile(dir, excludes, workdir.Limits{}, "")
	if err != nil {
		return nil, err
	}
	defer os.Remove(path)
	// The raylet copies and hashes the archive (up to about 100 MiB).
	ctx, cancel := context.WithTimeout(cw.ctx, installTimeout)
	defer cancel()
	if _, err := cw.raylet.InstallWorkingDir(ctx, &pb.InstallWorkingDirRequest{Sha256: p.SHA256, Path: path}); err != nil {
		return nil, fmt.Errorf("working dir %s: installing it on this node: %w", dir, err)
	}
	return &WorkingDir{SHA256: p.SHA256, Node: cw.nodeID}, nil
}
