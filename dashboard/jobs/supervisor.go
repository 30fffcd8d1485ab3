package jobs

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/internal/logrotate"
	"github.com/goray-dev/goray/internal/spawn"
	"github.com/goray-dev/goray/internal/workdir"
	"github.com/hashicorp/go-hclog"
)

// Supervisor defaults.
const (
	// DefaultMaxRunning is how many drivers run at once unless
	// Options.MaxRunning says otherwise; later jobs wait in PENDING.
	DefaultMaxRunning = 16
	// DefaultMaxJobs bounds the job records kept (finished ones included:
	// delete them with DELETE /api/jobs/{id}).
	DefaultMaxJobs = 10000
	// DefaultMaxFinished is how many finished jobs are kept (the GCS's
	// finished_jobs history cap): past it the records, driver logs and
	// working directories of those that ended first are removed.
	DefaultMaxFinished = 10000
	// DefaultStopGrace is how long a stopped driver gets between SIGTERM
	// and SIGKILL.
	DefaultStopGrace = 10 * time.Second
	// linkPeriod is how often a running job looks for the goray job its
	// driver registered, until it finds it.
	linkPeriod = 200 * time.Millisecond
	// maxArgs and maxEnv bound a submission (its body is bounded too).
	maxArgs, maxEnv, maxMetadata = 4096, 1024, 256
	// MaxRecordExtras bounds what a submission adds to its job's record:
	// its arguments, metadata and variable names, JSON-encoded together.
	// With the rest of a record (its status, times and paths: a few
	// hundred bytes plus twice the session directory's path),
	// DefaultMaxJobs records stay within the GCS KV's quota of a namespace
	// (256 MiB, gcs.DefaultKVNamespaceBytes).
	MaxRecordExtras = 16 << 10
)

// Variables the supervisor sets for every driver; a submission may not
// set them.
const (
	// EnvAddress is the cluster's GCS address (sdk/ray's GORAY_ADDRESS).
	EnvAddress = "GORAY_ADDRESS"
	// EnvNodeIP makes the driver attach to the head (sdk/ray's
	// GORAY_NODE_IP).
	EnvNodeIP = "GORAY_NODE_IP"
	// EnvSubmissionID is the job's submission id, for the driver to read.
	EnvSubmissionID = "GORAY_JOB_SUBMISSION_ID"
	// EnvWorkingDir is the directory the driver ships to its workers
	// (sdk/ray's GORAY_WORKING_DIR): the job's unpacked working dir.
	EnvWorkingDir = "GORAY_WORKING_DIR"
)

// Errors of the supervisor; the handlers map them to status codes.
var (
	// ErrNotFound: no job with this submission id.
	ErrNotFound = errors.New("no such job")
	// ErrExists: a job with this submission id exists already.
	ErrExists = errors.New("a job with this submission id exists already")
	// ErrNotFinished: the job is still pending or running.
	ErrNotFinished = errors.New("the job has not finished (stop it first)")
	// ErrTooManyJobs: the head keeps Options.MaxJobs records already.
	ErrTooManyJobs = errors.New("too many jobs kept on the head (delete finished ones with `goray job delete`)")
	// ErrClosed: the head is stopping.
	ErrClosed = errors.New("the head is stopping")
)

// InvalidError says what is wrong with a submission, naming the field.
type InvalidError struct {
	Field, Problem string
}

// Error names the field and the problem.
func (e *InvalidError) Error() string { return e.Field + ": " + e.Problem }

// Store keeps job records (the GCS KV in a node; GCSStore) and finds the
// goray job a driver registered.
type Store interface {
	// Put writes the record of one job; Del removes it.
	Put(ctx context.Context, id string, value []byte) error
	Del(ctx context.Context, id string) error
	// List returns every record.
	List(ctx context.Context) (map[string][]byte, error)
	// DriverJob returns the id of the goray job whose driver is process
	// pid on this node, registered at since or later, when there is one.
	DriverJob(ctx context.Context, pid int, since time.Time) (string, bool, error)
}

// Options configures NewSupervisor.
type Options struct {
	// Binaries holds the job binaries (required).
	Binaries *Binaries
	// Store keeps the records (required).
	Store Store
	// SessionDir is the head's session: drivers log to
	// logs/job-driver-<id>.log and run in jobs/<id>.
	SessionDir string
	// GCSAddress and NodeIP are the drivers' GORAY_ADDRESS and
	// GORAY_NODE_IP.
	GCSAddress, NodeIP string
	// Auth gives the drivers the cluster's token and TLS files (in their
	// environment, as workers get them).
	Auth *auth.Credentials
	// MaxRunning, MaxJobs, MaxFinished and StopGrace default to
	// DefaultMaxRunning, DefaultMaxJobs, DefaultMaxFinished and
	// DefaultStopGrace.
	MaxRunning, MaxJobs, MaxFinished int
	StopGrace                        time.Duration
	// Environ is the environment drivers start from, before the
	// submission's and the supervisor's variables (default: this
	// process's, less every GORAY_ variable).
	Environ []string
	// Logger receives the supervisor's logs.
	Logger hclog.Logger
	// LogLimits bound each driver's log file: it rotates at
	// LogLimits.MaxFileSize, keeping LogLimits.MaxFiles rotated copies
	// (zero: internal/logrotate's defaults).
	LogLimits logrotate.Limits
}

// Supervisor runs jobs as driver processes. mu guards jobs, dirty and
// closed; it is never held across a process start, a wait or a call to
// the Store.
type Supervisor struct {
	o     Options
	log   hclog.Logger
	slots chan struct{}
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	kick  chan struct{} // the persister has work

	mu     sync.Mutex
	jobs   map[string]*entry
	dirty  map[string]bool // records to write (or delete, when gone from jobs)
	closed bool
	// dropped counts the finished jobs removed past MaxFinished.
	dropped int64
}

// entry is one job. Its fields are guarded by Supervisor.mu.
type entry struct {
	job      Job
	env      []string
	stopWhy  string        // set when a stop was asked
	stopReq  chan struct{} // closed when a stop is asked
	changed  chan struct{} // closed and replaced at every change
	finished chan struct{} // closed once the job is terminal
}

// NewSupervisor returns a supervisor; Load brings back the records of an
// earlier head, Close stops every driver.
func NewSupervisor(o Options) *Supervisor {
	if o.MaxRunning <= 0 {
		o.MaxRunning = DefaultMaxRunning
	}
	if o.MaxJobs <= 0 {
		o.MaxJobs = DefaultMaxJobs
	}
	if o.MaxFinished <= 0 {
		o.MaxFinished = DefaultMaxFinished
	}
	if o.StopGrace <= 0 {
		o.StopGrace = DefaultStopGrace
	}
	if o.Environ == nil {
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GORAY_") {
				o.Environ = append(o.Environ, kv)
			}
		}
	}
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &Supervisor{o: o, log: log, slots: make(chan struct{}, o.MaxRunning), kick: make(chan struct{}, 1),
		jobs: map[string]*entry{}, dirty: map[string]bool{}}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.persist()
	return s
}

// Load reads the records the Store keeps (jobs of earlier heads). A job an
// earlier head left PENDING or RUNNING died with that head: it is marked
// FAILED. Unreadable records are logged and skipped.
func (s *Supervisor) Load(ctx context.Context) error {
	recs, err := s.o.Store.List(ctx)
	if err != nil {
		return fmt.Errorf("job records: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, b := range recs {
		var j Job
		if err := json.Unmarshal(b, &j); err != nil || j.SubmissionID != id {
			s.log.Warn("skipping an unreadable job record", "key", id, "error", err)
			continue
		}
		if err := s.checkRecord(j); err != nil {
			// Its paths would be read (logs) and removed (delete): a
			// record naming others is never trusted.
			s.log.Warn("skipping an invalid job record", "key", id, "error", err)
			continue
		}
		e := newEntry(j, nil)
		if !j.Status.Terminal() {
			now := time.Now()
			e.job.Status, e.job.Message, e.job.EndTime = StatusFailed, "the head stopped while the job was "+strings.ToLower(string(j.Status))+"; its driver ended with it", &now
			s.dirty[id] = true
		}
		close(e.finished)
		s.jobs[id] = e
	}
	gone := s.pruneLocked(s.o.MaxFinished)
	s.kickLocked()
	s.removeFiles(gone) // (its own files only: checked by checkRecord)
	return nil
}

func newEntry(j Job, env []string) *entry {
	return &entry{job: j, env: env, stopReq: make(chan struct{}), changed: make(chan struct{}), finished: make(chan struct{})}
}

// submissionIDRe is what a submission id may be: never "." or "..", nor
// a hidden file's name, as it names a directory and a file.
var submissionIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// sessionPrefix starts the name of a head's session directory; the
// sessions of earlier heads are its session's siblings.
const sessionPrefix = "session_"

// checkRecord checks the paths of a record loaded from the Store: the
// supervisor reads its log file and removes its working directory, so
// they must be where Submit puts them, in this head's session or an
// earlier head's (a sibling "session_*" directory).
func (s *Supervisor) checkRecord(j Job) error {
	id := j.SubmissionID
	if !submissionIDRe.MatchString(id) {
		return fmt.Errorf("submission id %q: not a valid submission id", id)
	}
	session := filepath.Dir(filepath.Dir(j.LogFile))
	if j.LogFile != filepath.Join(session, "logs", "job-driver-"+id+".log") {
		return fmt.Errorf("log file %q: not <session>/logs/job-driver-%s.log", j.LogFile, id)
	}
	if j.WorkingDir != filepath.Join(session, "jobs", id) {
		return fmt.Errorf("working directory %q: not %s", j.WorkingDir, filepath.Join(session, "jobs", id))
	}
	own := filepath.Clean(s.o.SessionDir)
	if session != own && (filepath.Dir(session) != filepath.Dir(own) || !strings.HasPrefix(filepath.Base(session), sessionPrefix)) {
		return fmt.Errorf("log file %q: not in this head's session %s nor in a %s* directory beside it", j.LogFile, own, sessionPrefix)
	}
	return nil
}

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// check validates a submission and returns the id to use.
func (s *Supervisor) check(req *SubmitRequest) error {
	if !digest.ValidSHA256(req.BinarySHA256) {
		return &InvalidError{"binary_sha256", fmt.Sprintf("%q is %v", req.BinarySHA256, ErrBadSHA256)}
	}
	if _, ok, err := s.o.Binaries.Has(req.BinarySHA256); err != nil {
		return err
	} else if !ok {
		return &InvalidError{"binary_sha256", fmt.Sprintf("%s: %v", req.BinarySHA256, ErrUnknownBinary)}
	}
	if sum := req.WorkingDirSHA256; sum != "" {
		if !digest.ValidSHA256(sum) {
			return &InvalidError{"working_dir_sha256", fmt.Sprintf("%q is %v", sum, ErrBadSHA256)}
		}
		if _, ok, err := s.o.Binaries.Has(sum); err != nil {
			return err
		} else if !ok {
			return &InvalidError{"working_dir_sha256", fmt.Sprintf("%s: %v", sum, ErrUnknownBinary)}
		}
	}
	if req.SubmissionID != "" && !submissionIDRe.MatchString(req.SubmissionID) {
		return &InvalidError{"submission_id", fmt.Sprintf("%q: want 1 to 128 letters, digits, '_', '-' or '.', starting with a letter or digit", req.SubmissionID)}
	}
	if len(req.Args) > maxArgs {
		return &InvalidError{"args", fmt.Sprintf("%d arguments, at most %d", len(req.Args), maxArgs)}
	}
	for i, a := range req.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return &InvalidError{fmt.Sprintf("args[%d]", i), "contains a NUL byte"}
		}
	}
	if len(req.Env) > maxEnv {
		return &InvalidError{"env", fmt.Sprintf("%d variables, at most %d", len(req.Env), maxEnv)}
	}
	for i, kv := range req.Env {
		name, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || !envNameRe.MatchString(name):
			return &InvalidError{fmt.Sprintf("env[%d]", i), fmt.Sprintf("%q is not NAME=value with NAME letters, digits and '_'", kv)}
		case strings.IndexByte(kv, 0) >= 0:
			return &InvalidError{fmt.Sprintf("env[%d]", i), "contains a NUL byte"}
		case reserved(name):
			return &InvalidError{fmt.Sprintf("env[%d]", i), fmt.Sprintf("%s is set by the head for every job (the cluster's address and credentials)", name)}
		}
	}
	if len(req.Metadata) > maxMetadata {
		return &InvalidError{"metadata", fmt.Sprintf("%d entries, at most %d", len(req.Metadata), maxMetadata)}
	}
	if n := extrasSize(req); n > MaxRecordExtras {
		return &InvalidError{"args, metadata, env", fmt.Sprintf("%d bytes as JSON (arguments, metadata and variable names together); the head keeps at most %d bytes (%d KiB) of them per job", n, MaxRecordExtras, MaxRecordExtras>>10)}
	}
	return nil
}

// extrasSize is what req adds to its job's record: its arguments,
// metadata and variable names, JSON-encoded as the record has them.
func extrasSize(req *SubmitRequest) int {
	x := struct {
		Args     []string          `json:"args,omitempty"`
		EnvNames []string          `json:"env_names,omitempty"`
		Metadata map[string]string `json:"metadata,omitempty"`
	}{Args: req.Args, Metadata: req.Metadata}
	for _, kv := range req.Env {
		n, _, _ := strings.Cut(kv, "=")
		x.EnvNames = append(x.EnvNames, n)
	}
	b, err := json.Marshal(x)
	if err != nil {
		return MaxRecordExtras + 1 // strings and a map of strings always encode
	}
	return len(b)
}

// reserved reports whether the supervisor sets the variable name itself.
func reserved(name string) bool {
	return name == EnvAddress || name == EnvNodeIP || name == EnvSubmissionID || slices.Contains(auth.EnvNames, name)
}

// Submit accepts a job and starts its driver once a slot is free. Its
// errors: *InvalidError (the request), ErrExists, ErrTooManyJobs,
// ErrClosed.
func (s *Supervisor) Submit(req SubmitRequest) (string, error) {
	if err := s.check(&req); err != nil {
		return "", err
	}
	id := req.SubmissionID
	if id == "" {
		id = newSubmissionID()
	}
	names := make([]string, 0, len(req.Env))
	for _, kv := range req.Env {
		n, _, _ := strings.Cut(kv, "=")
		names = append(names, n)
	}
	j := Job{
		SubmissionID: id, Status: StatusPending, BinarySHA256: req.BinarySHA256, Args: req.Args, EnvNames: names,
		Metadata: req.Metadata, SubmitTime: time.Now(),
		LogFile:          filepath.Join(s.o.SessionDir, "logs", "job-driver-"+id+".log"),
		WorkingDir:       filepath.Join(s.o.SessionDir, "jobs", id),
		WorkingDirSHA256: req.WorkingDirSHA256,
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return "", ErrClosed
	case s.jobs[id] != nil:
		s.mu.Unlock()
		return "", fmt.Errorf("%q: %w", id, ErrExists)
	}
	var gone []Job
	if len(s.jobs) >= s.o.MaxJobs {
		// Room is made by the finished job that ended first, if any.
		gone = s.pruneLocked(s.finishedLocked() - (len(s.jobs) - s.o.MaxJobs + 1))
		if len(s.jobs) >= s.o.MaxJobs {
			s.mu.Unlock()
			return "", fmt.Errorf("%w: %d kept", ErrTooManyJobs, len(s.jobs))
		}
	}
	e := newEntry(j, slices.Clone(req.Env))
	s.jobs[id] = e
	s.dirty[id] = true
	s.kickLocked()
	s.wg.Add(1)
	s.mu.Unlock()
	s.removeFiles(gone)
	s.log.Info("job submitted", "submission_id", id, "binary", req.BinarySHA256[:12], "args", len(req.Args))
	go s.run(id, e)
	return id, nil
}

// newSubmissionID is "gorayjob_" and 16 random characters.
func newSubmissionID() string {
	return "gorayjob_" + strings.ToLower(rand.Text()[:16])
}

// Get returns a job.
func (s *Supervisor) Get(id string) (Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.jobs[id]
	if e == nil {
		return Job{}, fmt.Errorf("%q: %w", id, ErrNotFound)
	}
	return e.job, nil
}

// List returns every job, oldest submission first.
func (s *Supervisor) List() []Job {
	s.mu.Lock()
	out := make([]Job, 0, len(s.jobs))
	for _, e := range s.jobs {
		out = append(out, e.job)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Job) int {
		if c := a.SubmitTime.Compare(b.SubmitTime); c != 0 {
			return c
		}
		return strings.Compare(a.SubmissionID, b.SubmissionID)
	})
	return out
}

// Watch returns the job and a channel closed at its next change (status,
// pid, goray job id) or when it is deleted.
func (s *Supervisor) Watch(id string) (Job, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.jobs[id]
	if e == nil {
		return Job{}, nil, fmt.Errorf("%q: %w", id, ErrNotFound)
	}
	return e.job, e.changed, nil
}

// Stop asks a job to stop: a pending job never starts, a running one's
// driver gets SIGTERM (its process group), then SIGKILL after StopGrace.
// It returns false when the job had finished already; Watch shows when it
// is STOPPED.
func (s *Supervisor) Stop(id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.jobs[id]
	if e == nil {
		return false, fmt.Errorf("%q: %w", id, ErrNotFound)
	}
	if e.job.Status.Terminal() {
		return false, nil
	}
	if e.stopWhy == "" {
		e.stopWhy = "stopped by request"
		close(e.stopReq)
		s.log.Info("job stop requested", "submission_id", id)
	}
	return true, nil
}

// Delete removes a finished job: its record, its log and working
// directory. ErrNotFinished when it is pending or running.
func (s *Supervisor) Delete(id string) error {
	s.mu.Lock()
	e := s.jobs[id]
	if e == nil {
		s.mu.Unlock()
		return fmt.Errorf("%q: %w", id, ErrNotFound)
	}
	if !e.job.Status.Terminal() {
		s.mu.Unlock()
		return fmt.Errorf("%q is %s: %w", id, e.job.Status, ErrNotFinished)
	}
	delete(s.jobs, id)
	s.dirty[id] = true
	s.kickLocked()
	close(e.changed)
	j := e.job
	s.mu.Unlock()
	s.removeFiles([]Job{j})
	s.log.Info("job deleted", "submission_id", id)
	return nil
}

// removeFiles removes the log files (with their rotated copies) and
// working directories of jobs gone from the table.
func (s *Supervisor) removeFiles(gone []Job) {
	for _, j := range gone {
		files, _ := logrotate.Files(j.LogFile)
		for _, f := range files {
			_ = os.Remove(f)
		}
		_ = os.RemoveAll(j.WorkingDir)
	}
}

// finishedLocked counts the finished jobs; s.mu must be held.
func (s *Supervisor) finishedLocked() int {
	n := 0
	for _, e := range s.jobs {
		if e.job.Status.Terminal() {
			n++
		}
	}
	return n
}

// pruneLocked drops the finished jobs past keep, those that ended first
// first (the GCS's bounded history, gcs/history.go): their records go
// from the table and the Store; it returns them, for removeFiles once
// s.mu is released. s.mu must be held.
func (s *Supervisor) pruneLocked(keep int) []Job {
	var done []*entry
	for _, e := range s.jobs {
		if e.job.Status.Terminal() {
			done = append(done, e)
		}
	}
	if len(done) <= max(keep, 0) {
		return nil
	}
	endOf := func(e *entry) time.Time {
		if e.job.EndTime != nil {
			return *e.job.EndTime
		}
		return e.job.SubmitTime
	}
	slices.SortFunc(done, func(a, b *entry) int {
		if c := endOf(a).Compare(endOf(b)); c != 0 {
			return c
		}
		return strings.Compare(a.job.SubmissionID, b.job.SubmissionID)
	})
	var gone []Job
	for _, e := range done[:len(done)-max(keep, 0)] {
		id := e.job.SubmissionID
		delete(s.jobs, id)
		s.dirty[id] = true
		close(e.changed)
		gone = append(gone, e.job)
	}
	s.dropped += int64(len(gone))
	s.kickLocked()
	s.log.Info("finished jobs dropped past the cap, oldest first (their records, logs and working directories)",
		"dropped", len(gone), "total_dropped", s.dropped, "cap", s.o.MaxFinished)
	return gone
}

// Dropped returns how many finished jobs were removed past
// Options.MaxFinished since this supervisor started.
func (s *Supervisor) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// update changes a job under the lock, marks its record for writing and
// wakes its watchers.
func (s *Supervisor) update(id string, e *entry, f func(j *Job)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&e.job)
	if s.jobs[id] == e {
		s.dirty[id] = true
		s.kickLocked()
	}
	close(e.changed)
	e.changed = make(chan struct{})
	if e.job.Status.Terminal() {
		e.env = nil
		select {
		case <-e.finished:
		default:
			close(e.finished)
		}
	}
}

// finish ends a job in status st with msg.
func (s *Supervisor) finish(id string, e *entry, st Status, msg string, code *int) {
	now := time.Now()
	s.update(id, e, func(j *Job) { j.Status, j.Message, j.EndTime, j.ExitCode = st, msg, &now, code })
	s.log.Info("job finished", "submission_id", id, "status", st, "message", msg)
	s.mu.Lock()
	gone := s.pruneLocked(s.o.MaxFinished)
	s.mu.Unlock()
	s.removeFiles(gone)
}

// run waits for a slot, runs the job's driver and records how it ended.
func (s *Supervisor) run(id string, e *entry) {
	defer s.wg.Done()
	select {
	case s.slots <- struct{}{}:
	case <-e.stopReq:
		s.finish(id, e, StatusStopped, "stopped before it started", nil)
		return
	case <-s.ctx.Done():
		s.finish(id, e, StatusStopped, "the head stopped before the job started", nil)
		return
	}
	defer func() { <-s.slots }()
	s.mu.Lock()
	env := e.env
	j := e.job
	s.mu.Unlock()
	cmd, logFile, err := s.command(j, env)
	if err == nil {
		err = spawn.Start(cmd)
		if err != nil {
			_ = logFile.Close()
		}
	}
	if err != nil {
		s.finish(id, e, StatusFailed, "starting the driver: "+err.Error(), nil)
		return
	}
	// Closed once Wait returned: the driver's output is copied through it
	// until then.
	defer logFile.Close()
	pid := cmd.Process.Pid
	now := time.Now()
	s.update(id, e, func(j *Job) { j.Status, j.DriverPid, j.StartTime = StatusRunning, pid, &now })
	s.log.Info("job driver started", "submission_id", id, "pid", pid)

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	link := time.NewTicker(linkPeriod)
	defer link.Stop()
	var kill <-chan time.Time
	stopReq, why := e.stopReq, ""
	var waitErr error
wait:
	for {
		select {
		case waitErr = <-exited:
			break wait
		case <-stopReq:
			stopReq = nil
			s.mu.Lock()
			why = e.stopWhy
			s.mu.Unlock()
			s.signal(pid, syscall.SIGTERM)
			kill = time.After(s.o.StopGrace)
		case <-s.ctx.Done():
			if why == "" {
				why = "the head stopped"
				s.signal(pid, syscall.SIGTERM)
				kill = time.After(s.o.StopGrace)
			}
			stopReq = nil
		case <-kill:
			s.log.Warn("job driver ignored SIGTERM; killing it", "submission_id", id, "pid", pid, "grace", s.o.StopGrace)
			s.signal(pid, syscall.SIGKILL)
		case <-link.C:
			if s.linkDriver(id, e, pid) {
				link.Stop()
			}
		}
	}
	// Whatever the driver left in its process group goes with it.
	s.signal(pid, syscall.SIGKILL)
	s.linkDriver(id, e, pid)
	st, msg, code := exitStatus(waitErr)
	if why != "" {
		st, msg = StatusStopped, why+"; the driver "+msg
	}
	s.finish(id, e, st, msg, code)
}

// linkDriver records the goray job the driver registered, once; it reports
// whether the job is linked.
func (s *Supervisor) linkDriver(id string, e *entry, pid int) bool {
	s.mu.Lock()
	linked := e.job.GorayJobID != ""
	since := time.Time{}
	if e.job.StartTime != nil {
		since = e.job.StartTime.Truncate(time.Millisecond)
	}
	s.mu.Unlock()
	if linked {
		return true
	}
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	gid, ok, err := s.o.Store.DriverJob(ctx, pid, since)
	if err != nil || !ok {
		return false
	}
	s.update(id, e, func(j *Job) { j.GorayJobID = gid })
	s.log.Info("job driver connected", "submission_id", id, "goray_job", gid)
	return true
}

// signal sends sig to the driver's process group.
func (s *Supervisor) signal(pid int, sig syscall.Signal) {
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.log.Warn("signalling a job driver", "pid", pid, "signal", sig, "error", err)
	}
}

// exitStatus turns a driver's wait error into its job's status.
func exitStatus(err error) (Status, string, *int) {
	// ErrWaitDelay: it exited with status 0, and a process it left held
	// its output pipe past WaitDelay.
	if err == nil || errors.Is(err, exec.ErrWaitDelay) {
		zero := 0
		return StatusSucceeded, "exited with status 0", &zero
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code := -1
			return StatusFailed, fmt.Sprintf("was killed by signal %s (%d)", ws.Signal(), int(ws.Signal())), &code
		}
		code := ee.ExitCode()
		return StatusFailed, fmt.Sprintf("exited with status %d", code), &code
	}
	return StatusFailed, "could not be waited for: " + err.Error(), nil
}

// command builds the driver's command: the binary, its arguments, its
// environment, its working directory and its log file (a rotating writer,
// internal/logrotate, that the driver's stdout and stderr are copied into
// through a pipe; the caller closes it once Wait returned).
func (s *Supervisor) command(j Job, env []string) (*exec.Cmd, io.Closer, error) {
	if err := os.MkdirAll(j.WorkingDir, 0o700); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(filepath.Dir(j.LogFile), 0o700); err != nil {
		return nil, nil, err
	}
	f := logrotate.Open(j.LogFile, s.o.LogLimits)
	if _, err := f.Write(nil); err != nil { // the file exists once the job runs
		_ = f.Close()
		return nil, nil, err
	}
	dir, err := s.unpackWorkingDir(j)
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	cmd := exec.Command(s.o.Binaries.Path(j.BinarySHA256), j.Args...)
	cmd.Dir = dir
	// One writer for both (exec then copies one pipe); a process the
	// driver leaves holding the pipe delays Wait by at most WaitDelay.
	cmd.Stdout, cmd.Stderr = f, f
	cmd.WaitDelay = time.Second
	e := slices.Clone(s.o.Environ)
	e = append(e, env...)
	e = append(e, EnvAddress+"="+s.o.GCSAddress, EnvSubmissionID+"="+j.SubmissionID)
	if s.o.NodeIP != "" {
		e = append(e, EnvNodeIP+"="+s.o.NodeIP)
	}
	if j.WorkingDirSHA256 != "" {
		e = append(e, EnvWorkingDir+"="+dir)
	}
	cmd.Env = append(e, s.o.Auth.Env()...)
	// Its own process group (stop signals the group); killed if the head
	// dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, f, nil
}

// unpackWorkingDir returns the directory the job's driver starts in: its
// working dir archive unpacked into WorkingDir/working_dir (once: a
// restarted head finds it there), else WorkingDir.
func (s *Supervisor) unpackWorkingDir(j Job) (string, error) {
	if j.WorkingDirSHA256 == "" {
		return j.WorkingDir, nil
	}
	dest := filepath.Join(j.WorkingDir, "working_dir")
	if st, err := os.Stat(dest); err == nil && st.IsDir() {
		return dest, nil
	}
	f, err := os.Open(s.o.Binaries.Path(j.WorkingDirSHA256))
	if err != nil {
		return "", fmt.Errorf("the job's working dir %s: %w", j.WorkingDirSHA256[:12], err)
	}
	defer f.Close()
	if err := workdir.Extract(f, j.WorkingDirSHA256[:12], dest, workdir.Limits{}); err != nil {
		return "", err
	}
	return dest, nil
}

// kickLocked wakes the persister.
func (s *Supervisor) kickLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// persist writes changed records to the Store until Close, retrying those
// that fail (the GCS restarting) with a growing delay.
func (s *Supervisor) persist() {
	defer s.wg.Done()
	retry := time.Duration(0)
	for {
		var timer <-chan time.Time
		if retry > 0 {
			timer = time.After(retry)
		}
		select {
		case <-s.kick:
		case <-timer:
		case <-s.ctx.Done():
			return
		}
		if s.flush(s.ctx) {
			retry = 0
		} else {
			retry = min(max(2*retry, 100*time.Millisecond), 5*time.Second)
		}
	}
}

// flush writes the dirty records; false when some failed (they stay
// dirty).
func (s *Supervisor) flush(ctx context.Context) bool {
	s.mu.Lock()
	todo := make(map[string][]byte, len(s.dirty))
	for id := range s.dirty {
		if e := s.jobs[id]; e != nil {
			b, _ := json.Marshal(e.job)
			todo[id] = b
		} else {
			todo[id] = nil
		}
	}
	clear(s.dirty)
	s.mu.Unlock()
	ok := true
	for id, b := range todo {
		var err error
		if b == nil {
			err = s.o.Store.Del(ctx, id)
		} else {
			err = s.o.Store.Put(ctx, id, b)
		}
		if err != nil {
			ok = false
			s.log.Warn("saving a job record (will retry)", "submission_id", id, "error", err)
			s.mu.Lock()
			if _, again := s.dirty[id]; !again {
				s.dirty[id] = true
			}
			s.mu.Unlock()
		}
	}
	return ok
}

// Close stops every job (as Stop, with the same grace), waits for their
// drivers to exit and writes the last records (until ctx ends).
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stop()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("stopping jobs: %w", ctx.Err())
	}
	if !s.flush(ctx) {
		return errors.New("stopping jobs: some job records were not saved")
	}
	return nil
}
