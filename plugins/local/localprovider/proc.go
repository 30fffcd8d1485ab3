package localprovider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A node process is recognised by its command line: it holds
// `--temp-dir <the instance's directory>`, which no other process has.
// (Before the setup commands finish the process is the shell that runs
// them, whose arguments are goray's command line.)

// procAlive reports whether pid is a live (not zombie) process whose
// command line has --temp-dir dir: the node of the instance in dir.
func procAlive(pid int, dir string) bool {
	if pid <= 0 {
		return false
	}
	if zombie, err := procZombie(pid); err != nil || zombie {
		return false
	}
	return procIsNode(pid, dir)
}

// procZombie reports whether pid is a zombie (exited, not yet reaped).
func procZombie(pid int) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false, err
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	s := b[i+2]
	return s == 'Z' || s == 'X', nil
}

// procArgs returns the command line of pid.
func procArgs(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// procIsNode reports whether pid's command line has --temp-dir dir.
func procIsNode(pid int, dir string) bool {
	args, err := procArgs(pid)
	if err != nil {
		return false
	}
	return hasTempDir(args, dir)
}

func hasTempDir(args []string, dir string) bool {
	for i, a := range args {
		if a == "--temp-dir" && i+1 < len(args) && args[i+1] == dir {
			return true
		}
		if a == "--temp-dir="+dir {
			return true
		}
	}
	return false
}

// pids returns the pids of every process but this one.
func pids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// findNode returns the pid of the live node process of the instance in
// dir, or 0: how a provider that died between starting a node and
// recording its pid finds it again instead of starting another.
func findNode(dir string) int {
	for _, pid := range pids() {
		if procAlive(pid, dir) {
			return pid
		}
	}
	return 0
}

// mentions reports whether pid's command line or environment names dir or
// a path under it (a node's workers carry their session directory in
// their environment).
func mentions(pid int, dir string) bool {
	var parts []string
	if args, err := procArgs(pid); err == nil {
		parts = args
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil {
		for _, kv := range strings.Split(string(b), "\x00") {
			// A shell whose working directory is there is not the node's.
			if !strings.HasPrefix(kv, "PWD=") && !strings.HasPrefix(kv, "OLDPWD=") {
				parts = append(parts, kv)
			}
		}
	}
	for _, p := range parts {
		if i := strings.Index(p, dir); i >= 0 {
			rest := p[i+len(dir):]
			if rest == "" || rest[0] == filepath.Separator {
				return true
			}
		}
	}
	return false
}

// leftovers returns the live processes that mention dir.
func leftovers(dir string) []int {
	var out []int
	for _, pid := range pids() {
		if z, err := procZombie(pid); err == nil && !z && mentions(pid, dir) {
			out = append(out, pid)
		}
	}
	return out
}

// stopPollInterval is how often stopNode checks whether a process is gone
// (a polling interval, not synchronisation).
const stopPollInterval = 50 * time.Millisecond

// killWait is how long stopNode waits for a process to die after
// SIGKILL.
const killWait = 10 * time.Second

// errStillRunning is wrapped by stopNode's error when a process survives
// SIGKILL.
var errStillRunning = errors.New("still running after SIGKILL")

// stopNode stops the node process pid of the instance in dir and
// everything it left behind: SIGTERM to its process group (the node leads
// its own session), up to grace for it to exit, then SIGKILL to the group;
// then SIGKILL to any process that still mentions dir (workers). exited,
// if not nil, is closed when the process has been reaped (a child of this
// provider); otherwise /proc tells. It returns how the node ended
// ("SIGTERM", "SIGKILL", "not running") or why it could not be stopped.
func stopNode(ctx context.Context, pid int, dir string, grace time.Duration, exited <-chan struct{}) (string, error) {
	gone := func() bool {
		if exited != nil {
			select {
			case <-exited:
				return true
			default:
				return false
			}
		}
		return !procAlive(pid, dir)
	}
	wait := func(d time.Duration) bool {
		deadline := time.Now().Add(d)
		for !gone() {
			if time.Now().After(deadline) {
				return false
			}
			select {
			case <-exited:
			case <-ctx.Done():
				return gone()
			case <-time.After(stopPollInterval):
			}
		}
		return true
	}
	how := "not running"
	if !gone() {
		how = "SIGTERM"
		signalGroup(pid, syscall.SIGTERM)
		if !wait(grace) {
			how = "SIGKILL"
			signalGroup(pid, syscall.SIGKILL)
			if !wait(killWait) {
				return how, fmt.Errorf("node process %d: %w", pid, errStillRunning)
			}
		}
	}
	// The node is gone: its workers die with it (they get SIGKILL when
	// their parent dies), but make sure nothing of the instance is left.
	// (Not through the group: its id may name another group by now.)
	deadline := time.Now().Add(killWait)
	for {
		left := leftovers(dir)
		if len(left) == 0 {
			return how, nil
		}
		for _, p := range left {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return how, fmt.Errorf("processes %v of the node in %s: %w", left, dir, errStillRunning)
		}
		time.Sleep(stopPollInterval)
	}
}

// signalGroup sends sig to pid's process group, or to pid alone when it
// leads none.
func signalGroup(pid int, sig syscall.Signal) {
	if pid <= 0 {
		return
	}
	if err := syscall.Kill(-pid, sig); err != nil {
		_ = syscall.Kill(pid, sig)
	}
}
