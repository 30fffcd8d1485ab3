package ray

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/goray-dev/goray/internal/workdir"
	"github.com/goray-dev/goray/internal/workerenv"
	"github.com/goray-dev/goray/sdk/ray/internal/core"
)

// EnvWorkingDir, when set and Init has no WorkingDir option, names the
// directory the job ships as its working dir (relative to the driver's
// directory). `goray job submit --working-dir` sets it to the directory it
// unpacked the upload into, which is also the driver's directory, so the
// driver and every worker start in the same files, as in Ray.
const EnvWorkingDir = "GORAY_WORKING_DIR"

// MaxWorkingDirBytes bounds the files of a working dir together (what
// WorkingDir ships to every node); it also holds at most
// MaxWorkingDirEntries files, directories and links.
const (
	MaxWorkingDirBytes   = workdir.DefaultMaxBytes
	MaxWorkingDirEntries = workdir.DefaultMaxEntries
)

// WorkingDir ships the directory dir to every node that runs the job's
// workers, which start in their node's copy, as Ray's
// runtime_env={"working_dir": dir} does: a worker opens "config.yaml" and
// reads the driver's file, on any node. The driver's own directory does not
// change. Entries matching one of excludes (path.Match patterns, matched
// against a path relative to dir and against its base name, as "*.log" or
// "data/raw") are left out.
//
// Init packs the directory into one archive (files, directories and links
// that stay inside it; times and owners are not kept), at most
// MaxWorkingDirBytes of files: a missing directory, a link leading out of
// it or a larger tree is an error of Init that names the path. Nodes fetch
// the archive from the driver's node, check its sha256 and unpack it once;
// jobs shipping the same files share the copy. Workers may write to it,
// but what they write stays on their node and is seen by later jobs with
// the same files: write results elsewhere (an object, or a temporary
// directory). Without this option a worker starts in the driver's
// directory when its node has one by that path.
func WorkingDir(dir string, excludes ...string) InitOption {
	return func(o *initOptions) {
		o.workingDir = &workingDirOption{dir: dir, excludes: excludes}
	}
}

// workingDirOption is WorkingDir's.
type workingDirOption struct {
	dir      string
	excludes []string
}

// packWorkingDir packs the working dir Init ships (WorkingDir's, else
// $GORAY_WORKING_DIR's) into a temporary file: its path, to remove once the
// job is registered, and its sha256; "" when there is none.
func packWorkingDir(o *workingDirOption, getenv func(string) string) (path, sum string, err error) {
	if o == nil {
		if dir := getenv(EnvWorkingDir); dir != "" {
			o = &workingDirOption{dir: dir}
		}
	}
	if o == nil {
		return "", "", nil
	}
	dir := o.dir
	if dir == "" {
		return "", "", fmt.Errorf("goray: WorkingDir: no directory given")
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	path, p, err := workdir.PackFile(dir, o.excludes, workdir.Limits{}, "")
	if err != nil {
		return "", "", fmt.Errorf("goray: %w", err)
	}
	return path, p.SHA256, nil
}

// removePackage removes the archive packWorkingDir wrote.
func removePackage(path string) {
	if path != "" {
		os.Remove(path)
	}
}

// WorkerDir gives a task or actor a working dir of its own, as Ray's
// runtime_env={"working_dir": dir} in a task's or actor's options: its
// worker starts in a copy of dir on its node (instead of the job's
// WorkingDir), shipped as WorkingDir ships the job's, with the same limits
// and excludes. The directory is packed once per process, at the first
// call that names it: later changes to it are not shipped. A worker
// started in it runs only calls naming the same files, and what such a
// task or actor submits inherits it (a WorkerDir of its own overrides it),
// as in Ray. A missing directory fails the call (its Get returns the
// error, an actor's first call too).
func WorkerDir(dir string, excludes ...string) Option {
	return func(c *callOptions) {
		c.workerDir = &workingDirOption{dir: dir, excludes: excludes}
	}
}

// callWorkingDir returns a call's working dir (name is the function or
// class): WorkerDir's, installed on this node, else the one this worker
// was started in for its own lease, else nil (the job's).
func callWorkingDir(name string, o *workingDirOption) (*core.WorkingDir, error) {
	if o == nil {
		return inheritedWorkingDir()
	}
	if o.dir == "" {
		return nil, fmt.Errorf("goray: %s: WorkerDir: no directory given", name)
	}
	cw, err := current()
	if err != nil {
		return nil, err
	}
	wd, err := cw.InstallWorkingDir(context.Background(), o.dir, o.excludes)
	if err != nil {
		return nil, fmt.Errorf("goray: %s: WorkerDir: %w", name, err)
	}
	return wd, nil
}

// inheritedWorkingDir is the working dir this worker was started in for a
// task or actor ($GORAY_LEASE_WORKING_DIR), which what it submits
// inherits.
var inheritedWorkingDir = sync.OnceValues(func() (*core.WorkingDir, error) {
	s := os.Getenv(workerenv.LeaseWorkingDir)
	if s == "" {
		return nil, nil
	}
	return core.ParseWorkingDir(s)
})
