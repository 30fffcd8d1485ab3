package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procFS reads process information from a /proc tree. Root is "/proc"
// outside tests.
type procFS struct{ root string }

// pids lists the numeric entries of /proc, sorted.
func (p procFS) pids() ([]int, error) {
	ents, err := os.ReadDir(p.root)
	if err != nil {
		return nil, fmt.Errorf("listing processes in %s: %w", p.root, err)
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out, nil
}

// environ returns the environment of pid as NAME=value strings.
func (p procFS) environ(pid int) ([]string, error) {
	return p.nulList(pid, "environ")
}

// cmdline returns the arguments of pid.
func (p procFS) cmdline(pid int) ([]string, error) {
	return p.nulList(pid, "cmdline")
}

func (p procFS) nulList(pid int, name string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), name))
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, nil
	}
	return strings.Split(string(b), "\x00"), nil
}

// stat is the part of /proc/<pid>/stat goray uses.
type procStat struct {
	// State is the one-letter process state (R, S, D, Z, ...).
	State byte
	// StartTicks is the start time in clock ticks after boot.
	StartTicks uint64
}

// stat parses /proc/<pid>/stat. The command name (field 2) may contain
// spaces and parentheses, so fields are counted after its last ')'.
func (p procFS) stat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(b))
}

func parseStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed stat line %q", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); starttime is field 22, so f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed stat line %q", s)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed start time in stat line %q: %w", s, err)
	}
	return procStat{State: f[0][0], StartTicks: start}, nil
}

// clockTicks is sysconf(_SC_CLK_TCK), 100 on every Linux platform Go
// supports.
const clockTicks = 100

// bootTime reads the btime line of /proc/stat.
func (p procFS) bootTime() (time.Time, error) {
	b, err := os.ReadFile(filepath.Join(p.root, "stat"))
	if err != nil {
		return time.Time{}, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("malformed btime %q: %w", line, err)
			}
			return time.Unix(sec, 0), nil
		}
	}
	return time.Time{}, errors.New("no btime in " + filepath.Join(p.root, "stat"))
}

// startTime returns when pid started (to a clock tick, after the second the
// machine booted).
func (p procFS) startTime(pid int) (time.Time, error) {
	st, err := p.stat(pid)
	if err != nil {
		return time.Time{}, err
	}
	boot, err := p.bootTime()
	if err != nil {
		return time.Time{}, err
	}
	return boot.Add(time.Duration(st.StartTicks) * time.Second / clockTicks), nil
}

// running reports whether pid exists and is not a zombie. A zombie has
// exited; it only waits for its parent to reap it.
func (p procFS) running(pid int) bool {
	if pid <= 0 {
		return false
	}
	st, err := p.stat(pid)
	if err != nil {
		return false
	}
	return st.State != 'Z' && st.State != 'X'
}

// startedBy reports whether pid is running and started no later than t
// (plus slack for the coarse boot time), so that a pid recorded at t was not
// reused by a newer process.
func (p procFS) startedBy(pid int, t time.Time) bool {
	if !p.running(pid) {
		return false
	}
	st, err := p.startTime(pid)
	if err != nil {
		return true // cannot tell; assume it is the same process
	}
	return !st.After(t.Add(2 * time.Second))
}

// withEnv returns the pids whose environment contains name=value exactly,
// except the pids in skip. Processes that vanish or cannot be read are
// ignored.
func (p procFS) withEnv(name, value string, skip ...int) ([]int, error) {
	pids, err := p.pids()
	if err != nil {
		return nil, err
	}
	want := name + "=" + value
	var out []int
	for _, pid := range pids {
		if slices.Contains(skip, pid) || !p.running(pid) {
			continue
		}
		env, err := p.environ(pid)
		if err != nil {
			continue
		}
		if slices.Contains(env, want) {
			out = append(out, pid)
		}
	}
	return out, nil
}

// waitExit polls until none of pids is running or ctx ends, and returns the
// ones still running.
func (p procFS) waitExit(ctx context.Context, pids []int) []int {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var alive []int
		for _, pid := range pids {
			if p.running(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return alive
		case <-tick.C:
		}
	}
}

// sendSignal sends sig to pid; a process that is already gone is not an error.
func sendSignal(pid int, sig syscall.Signal) error {
	err := syscall.Kill(pid, sig)
	if err == nil || errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return fmt.Errorf("sending %s to pid %d: %w", sig, pid, err)
}
