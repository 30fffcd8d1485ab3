package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/goray-dev/goray/host/node"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/goray-dev/goray/internal/metrics"
	"github.com/goray-dev/goray/internal/recvseg"
	"github.com/goray-dev/goray/internal/workerenv"
	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
)

// killWait is how long stop waits for a process to die after SIGKILL.
const killWait = 5 * time.Second

// stopOptions are the flags of `goray stop`.
type stopOptions struct {
	tempDir string
	force   bool
	grace   time.Duration
}

// stoppedNode is a node stop ended.
type stoppedNode struct {
	Session string
	NodeID  string
	Head    bool
	Pid     int
	// How is "shutdown request", "SIGTERM", or "SIGKILL" (with --force or
	// after the grace period).
	How string
}

// leftover is a process of a session that outlived its node.
type leftover struct {
	Pid int
	// Why names what ties it to goray ("worker of <session>", ...).
	Why string
}

// stopResult is what stop did.
type stopResult struct {
	Stopped []stoppedNode
	Killed  []leftover
	// Cleaned are session dirs whose stale sockets or node.json were removed.
	Cleaned []string
	// Pools are the tensor segment pools of dead nodes removed from
	// /dev/shm: those the root's dead sessions recorded
	// (node.RemoveDeadPools).
	Pools []string
	// Segments are the tensor segments the processes of dead sessions
	// owned (their ledgers, internal/recvseg), unlinked from /dev/shm.
	Segments []string
	// Spill are the dead sessions whose local spill files were removed
	// (their <session>/spill directory: nodes that died without stopping),
	// SpillBytes what those files held.
	Spill      []string
	SpillBytes int64
}

// stopper stops every node under a temp dir.
type stopper struct {
	proc procFS
	root string
	opts stopOptions
	log  hclog.Logger
	// skip are pids never signalled (this process and its parent).
	skip []int
	// creds are presented with the shutdown request (nil: none; a node
	// that refuses it gets SIGTERM instead).
	creds *auth.Credentials
}

// StopError says some processes could not be stopped.
type StopError struct {
	// Pids are the processes still running.
	Pids []int
	Err  error
}

// Error names the surviving processes.
func (e *StopError) Error() string {
	return fmt.Sprintf("processes %v are still running after SIGKILL: %v", e.Pids, e.Err)
}

// Unwrap returns the cause (usually the wait's context error).
func (e *StopError) Unwrap() error { return e.Err }

// run stops the nodes (non-head nodes first, then heads), kills leftover
// processes of every session under the root and removes stale files.
func (s *stopper) run(ctx context.Context) (stopResult, error) {
	var res stopResult
	ss, err := s.proc.sessions(s.root)
	if err != nil {
		return res, err
	}
	var heads, others []session
	for _, se := range ss {
		if !se.Running {
			continue
		}
		if se.Info.Head {
			heads = append(heads, se)
		} else {
			others = append(others, se)
		}
	}
	var errs []error
	for _, group := range [][]session{others, heads} {
		stopped, err := s.stopNodes(ctx, group)
		res.Stopped = append(res.Stopped, stopped...)
		errs = append(errs, err)
	}

	killed, err := s.killLeftovers(ctx, nil)
	res.Killed = killed
	errs = append(errs, err)

	err = s.cleanDead(&res)
	errs = append(errs, err)
	return res, errors.Join(errs...)
}

// cleanDead removes what the dead sessions under the root left (their
// leftover processes are dead by now): the tensor segments their ledgers
// list, the segment pools they recorded, their sockets and node.json, and
// the files of `goray start` runs that are over. Nothing outside the root's
// sessions is touched: not another temp dir's pools, nor another user's.
func (s *stopper) cleanDead(res *stopResult) error {
	dead, err := s.deadSessions()
	errs := []error{err}
	// A node killed with SIGKILL, and its workers, could not unlink the
	// tensor segments they owned.
	res.Segments, err = sweepSegments(dead)
	errs = append(errs, err)
	// A node killed with SIGKILL could not remove its segment pool: its
	// session names it (node.PoolRecord).
	dirs := make([]string, len(dead))
	for i, se := range dead {
		dirs[i] = se.Dir
	}
	res.Pools, err = node.RemoveDeadPools(dirs)
	errs = append(errs, err)
	// Before cleanStale, which removes the node.json that tells a node
	// that died from one that stopped.
	res.Spill, res.SpillBytes, err = removeDeadSpill(dead)
	errs = append(errs, err)
	res.Cleaned, err = cleanStale(dead)
	errs = append(errs, err)
	errs = append(errs, s.cleanStartFiles())
	return errors.Join(errs...)
}

// startFilePrefix starts the names of the files `goray start` keeps in the
// temp dir while its node starts (startDaemon): goray-start-<its pid>.out,
// .ready and .ready.tmp.
const startFilePrefix = "goray-start-"

// cleanStartFiles removes the files of `goray start` runs under the root
// whose process is gone (killed before it could remove them); those of a
// run still going are left.
func (s *stopper) cleanStartFiles() error {
	matches, err := filepath.Glob(filepath.Join(s.root, startFilePrefix+"*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range matches {
		rest := strings.TrimPrefix(filepath.Base(p), startFilePrefix)
		pidStr, _, _ := strings.Cut(rest, ".")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || s.proc.running(pid) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// stopNodes asks each node to shut down (or SIGKILLs it with --force),
// waits for the grace period and SIGKILLs what is left.
func (s *stopper) stopNodes(ctx context.Context, group []session) ([]stoppedNode, error) {
	if len(group) == 0 {
		return nil, nil
	}
	out := make([]stoppedNode, len(group))
	pids := make([]int, len(group))
	var errs []error
	for i, se := range group {
		in := se.Info
		out[i] = stoppedNode{Session: se.Dir, NodeID: in.NodeID, Head: in.Head, Pid: in.Pid}
		pids[i] = in.Pid
		if s.opts.force {
			out[i].How = "SIGKILL"
			errs = append(errs, sendSignal(in.Pid, syscall.SIGKILL))
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := shutdownNode(rctx, in.RayletSocket, "goray stop", s.creds)
		cancel()
		if err == nil {
			out[i].How = "shutdown request"
			continue
		}
		s.log.Debug("shutdown request failed; sending SIGTERM", "node", shortHex(in.NodeID), "error", err)
		out[i].How = "SIGTERM"
		errs = append(errs, sendSignal(in.Pid, syscall.SIGTERM))
	}
	gctx, cancel := context.WithTimeout(ctx, s.opts.grace)
	alive := s.proc.waitExit(gctx, pids)
	cancel()
	for _, pid := range alive {
		i := slices.Index(pids, pid)
		s.log.Debug("node did not exit in time; sending SIGKILL", "pid", pid, "grace", s.opts.grace)
		out[i].How = fmt.Sprintf("SIGKILL after %s", s.opts.grace)
		errs = append(errs, sendSignal(pid, syscall.SIGKILL))
	}
	if err := s.waitKilled(ctx, alive); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

func (s *stopper) waitKilled(ctx context.Context, pids []int) error {
	if len(pids) == 0 {
		return nil
	}
	kctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	if still := s.proc.waitExit(kctx, pids); len(still) > 0 {
		return &StopError{Pids: still, Err: kctx.Err()}
	}
	return nil
}

// findLeftovers scans the environment of every process for a tie to a
// session under the root: workers carry GORAY_SESSION_DIR, node processes
// started by `goray start` carry GORAY_DAEMON_TEMP_DIR. With only set, just
// the workers of those sessions count (goray down stops one head of a temp
// dir other nodes may share); with nil, every session's and the daemon
// mark too (goray stop stops every node of the temp dir).
func (s *stopper) findLeftovers(only []session) ([]leftover, error) {
	ss := only
	if ss == nil {
		var err error
		if ss, err = s.proc.sessions(s.root); err != nil {
			return nil, err
		}
	}
	dirs := map[string]string{}
	for _, se := range ss {
		dirs[workerenv.SessionDir+"="+se.Dir] = filepath.Base(se.Dir)
	}
	daemon := envDaemonRoot + "=" + s.root
	pids, err := s.proc.pids()
	if err != nil {
		return nil, err
	}
	var out []leftover
	for _, pid := range pids {
		if slices.Contains(s.skip, pid) || !s.proc.running(pid) {
			continue
		}
		env, err := s.proc.environ(pid)
		if err != nil {
			continue
		}
		why := ""
		for _, kv := range env {
			if name, ok := dirs[kv]; ok {
				why = "worker of " + name
				break
			}
			if kv == daemon && only == nil {
				// Workers may inherit the marker too; keep looking for
				// their session.
				why = "goray node process under " + s.root
			}
		}
		if why != "" {
			out = append(out, leftover{Pid: pid, Why: why})
		}
	}
	return out, nil
}

// killLeftovers SIGKILLs the processes findLeftovers(only) reports and
// waits for them to exit.
func (s *stopper) killLeftovers(ctx context.Context, only []session) ([]leftover, error) {
	left, err := s.findLeftovers(only)
	if err != nil {
		return nil, err
	}
	var errs []error
	pids := make([]int, 0, len(left))
	for _, l := range left {
		s.log.Debug("killing leftover process", "pid", l.Pid, "why", l.Why)
		errs = append(errs, sendSignal(l.Pid, syscall.SIGKILL))
		pids = append(pids, l.Pid)
	}
	errs = append(errs, s.waitKilled(ctx, pids))
	return left, errors.Join(errs...)
}

// deadSessions lists the sessions under the root whose node no longer
// runs.
func (s *stopper) deadSessions() ([]session, error) {
	ss, err := s.proc.sessions(s.root)
	return slices.DeleteFunc(ss, func(se session) bool { return se.Running }), err
}

// spillDir is the directory under a session where the node spills by
// default (the in-process local-disk backend; host/node's spillConfig).
const spillDir = "spill"

// removeDeadSpill removes the local spill files of each dead session whose
// node died without stopping (its node.json is still there: a node that
// stops removes it, after deleting its spill files unless
// spilling.keep_files asked to keep them). Nobody else can read them: a
// node's local-disk spill files are only reachable through it. Spill
// files in shared storage (a storage plugin, which a drained node leaves
// for other nodes on purpose) are never under the session, and stay. It
// returns the sessions whose files it removed and their total size.
func removeDeadSpill(dead []session) ([]string, int64, error) {
	var removed []string
	var total int64
	var errs []error
	for _, se := range dead {
		if _, err := os.Lstat(filepath.Join(se.Dir, "node.json")); err != nil {
			continue // stopped (or never started): its own stop decided
		}
		dir := filepath.Join(se.Dir, spillDir)
		if _, err := os.Lstat(dir); err != nil {
			continue
		}
		var size int64
		_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					size += fi.Size()
				}
			}
			return nil
		})
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("removing the spill files of dead session %s: %w", se.Dir, err))
			continue
		}
		removed = append(removed, se.Dir)
		total += size
	}
	return removed, total, errors.Join(errs...)
}

// staleFiles are what a node keeps in its session for others to find it
// while it runs (sockets, node.json, the head's gcs.json and Prometheus
// discovery file): stale once it is dead.
var staleFiles = []string{"sockets", "node.json", "gcs.json", metrics.DiscoveryFile}

// cleanStale removes the stale files of each dead session (staleFiles);
// logs stay.
func cleanStale(dead []session) ([]string, error) {
	var cleaned []string
	var errs []error
	for _, se := range dead {
		removed := false
		for _, f := range staleFiles {
			p := filepath.Join(se.Dir, f)
			if _, err := os.Lstat(p); err != nil {
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, fmt.Errorf("removing stale %s: %w", p, err))
				continue
			}
			removed = true
		}
		// The discovery file's directory, when nothing else is in it.
		_ = os.Remove(filepath.Join(se.Dir, filepath.Dir(metrics.DiscoveryFile)))
		if removed {
			cleaned = append(cleaned, se.Dir)
		}
	}
	return cleaned, errors.Join(errs...)
}

// sweepSegments unlinks the tensor segments listed in the ledgers of each
// dead session (its leftover processes are dead by now) and returns them.
func sweepSegments(dead []session) ([]string, error) {
	var unlinked []string
	var errs []error
	for _, se := range dead {
		segs, err := recvseg.SweepAll(se.Dir)
		unlinked = append(unlinked, segs...)
		if err != nil {
			errs = append(errs, fmt.Errorf("unlinking the tensor segments of %s: %w", se.Dir, err))
		}
	}
	return unlinked, errors.Join(errs...)
}

func writeStopResult(w io.Writer, root string, r stopResult) {
	if len(r.Stopped) == 0 {
		fmt.Fprintf(w, "No running goray nodes under %s.\n", root)
	}
	for _, n := range r.Stopped {
		kind := "node"
		if n.Head {
			kind = "head node"
		}
		fmt.Fprintf(w, "Stopped goray %s %s (pid %d, %s; session %s)\n", kind, shortHex(n.NodeID), n.Pid, n.How, n.Session)
	}
	if len(r.Killed) > 0 {
		parts := make([]string, len(r.Killed))
		for i, l := range r.Killed {
			parts[i] = fmt.Sprintf("pid %d (%s)", l.Pid, l.Why)
		}
		fmt.Fprintf(w, "Killed %s: %s\n", plural(len(r.Killed), "leftover process", "leftover processes"), strings.Join(parts, ", "))
	}
	writeCleanResult(w, r)
}

// writeCleanResult says what stop or down removed of dead sessions.
func writeCleanResult(w io.Writer, r stopResult) {
	if len(r.Cleaned) > 0 {
		fmt.Fprintf(w, "Removed stale sockets and state files of %s: %s\n", plural(len(r.Cleaned), "dead session", "dead sessions"), strings.Join(r.Cleaned, ", "))
	}
	if len(r.Spill) > 0 {
		fmt.Fprintf(w, "Removed the spill files (%s) of %s: %s\n", humanize.IBytes(uint64(r.SpillBytes)), plural(len(r.Spill), "dead node", "dead nodes"), strings.Join(r.Spill, ", "))
	}
	if len(r.Segments) > 0 {
		fmt.Fprintf(w, "Unlinked %s of dead sessions.\n", plural(len(r.Segments), "tensor segment", "tensor segments"))
	}
	if len(r.Pools) > 0 {
		fmt.Fprintf(w, "Removed %s of dead nodes: %s\n", plural(len(r.Pools), "tensor segment pool", "tensor segment pools"), strings.Join(r.Pools, ", "))
	}
}

func (a *app) stopCmd() *cobra.Command {
	var o stopOptions
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop every goray node started under the temp dir",
		Long: "Stop every goray node started under the temp dir: ask each to shut down, wait up to --grace,\n" +
			"then SIGKILL. Leftover worker processes are killed; of dead sessions, stale sockets and state files are\n" +
			"removed, the local spill files of nodes that died without stopping, and the tensor segments their\n" +
			"processes owned and the segment pools of dead nodes from /dev/shm. Logs stay.",
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if o.grace < 0 {
				return usagef("invalid --grace %s: must not be negative", o.grace)
			}
			root := absPath(o.tempDir)
			creds, err := auth.FromEnv()
			if err != nil {
				a.log.Debug("no credentials for the shutdown request; nodes get SIGTERM", "error", err)
			}
			s := &stopper{proc: procFS{a.procRoot}, root: root, opts: o, log: a.log, skip: []int{os.Getpid(), os.Getppid()}, creds: creds}
			_, stopSpin := a.spinner("stopping the nodes under " + root)
			res, err := s.run(cmd.Context())
			stopSpin()
			writeStopResult(a.stdout, root, res)
			return err
		}),
	}
	cmd.Flags().StringVar(&o.tempDir, "temp-dir", defaultTempDir, "root of the session directories of the nodes to stop")
	cmd.Flags().BoolVar(&o.force, "force", false, "SIGKILL the nodes at once instead of asking them to shut down")
	cmd.Flags().DurationVar(&o.grace, "grace", 10*time.Second, "how long each node may take to shut down before SIGKILL")
	return cmd
}
