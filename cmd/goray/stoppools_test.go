package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goray-dev/goray/host/node"
	"github.com/goray-dev/goray/internal/workerenv"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/hashicorp/go-hclog"
)

func TestStopResultNamesPools(t *testing.T) {
	var b bytes.Buffer
	writeStopResult(&b, "/tmp/goray", stopResult{Pools: []string{"/dev/shm/goray-pool-12-ab"}})
	if !strings.Contains(b.String(), "Removed 1 tensor segment pool of dead nodes: /dev/shm/goray-pool-12-ab") {
		t.Fatalf("stop output:\n%s", b.String())
	}
}

// exitedPid returns the pid of a process that ran and exited (and was
// reaped), as a node killed with SIGKILL leaves its pid in its pool's name.
func exitedPid(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

// deadPool makes a pool directory in /dev/shm named after pid, removed
// when the test ends.
func deadPool(t *testing.T, pid int) string {
	t.Helper()
	dir := filepath.Join(shmem.Dir, fmt.Sprintf("%s%d-%s", shmem.PoolPrefix, pid, shmem.NewName("")[:16]))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return !errors.Is(err, os.ErrNotExist)
}

// TestStopTouchesOnlyItsTempDir: goray stop removes the pools the dead
// sessions of its own temp dir recorded, and the files of `goray start`
// runs that are over there; another temp dir's pools and files, and a dead
// process's pool no session of its temp dir names, stay.
func TestStopTouchesOnlyItsTempDir(t *testing.T) {
	p := procFS{"/proc"}
	live := startProc(t, nil, "sleep", "60")
	type tempDir struct {
		root, session, pool  string
		deadStart, liveStart []string
	}
	mk := func(name string) tempDir {
		root := filepath.Join(t.TempDir(), name)
		pid := exitedPid(t)
		d := tempDir{root: root, pool: deadPool(t, pid)}
		d.session = makeSession(t, root, fmt.Sprintf("session_2026-01-01_00-00-00_%d", pid), &node.Info{NodeID: "aa" + name, Pid: pid})
		writeFile(t, filepath.Join(d.session, node.PoolRecord), d.pool+"\n")
		for _, ext := range []string{".out", ".ready", ".ready.tmp"} {
			d.deadStart = append(d.deadStart, filepath.Join(root, fmt.Sprintf("%s%d%s", startFilePrefix, exitedPid(t), ext)))
			d.liveStart = append(d.liveStart, filepath.Join(root, fmt.Sprintf("%s%d%s", startFilePrefix, live.Process.Pid, ext)))
		}
		for _, f := range append(slices.Clone(d.deadStart), d.liveStart...) {
			writeFile(t, f, "")
		}
		return d
	}
	a, b := mk("a"), mk("b")
	unnamed := deadPool(t, exitedPid(t))

	s := &stopper{proc: p, root: a.root, opts: stopOptions{grace: 0}, log: hclog.NewNullLogger(), skip: []int{os.Getpid()}}
	res, err := s.run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Pools, []string{a.pool}) || exists(a.pool) {
		t.Errorf("stop removed the pools %v, want only %s (its temp dir's dead node's)", res.Pools, a.pool)
	}
	if exists(filepath.Join(a.session, node.PoolRecord)) {
		t.Errorf("the record of the removed pool is still in %s", a.session)
	}
	for _, kept := range []string{b.pool, unnamed, filepath.Join(b.session, node.PoolRecord), filepath.Join(b.session, "node.json")} {
		if !exists(kept) {
			t.Errorf("stop --temp-dir %s removed %s", a.root, kept)
		}
	}
	for _, f := range a.deadStart {
		if exists(f) {
			t.Errorf("stop left %s (its goray start is over)", f)
		}
	}
	for _, f := range append(slices.Clone(a.liveStart), append(b.deadStart, b.liveStart...)...) {
		if !exists(f) {
			t.Errorf("stop --temp-dir %s removed %s", a.root, f)
		}
	}
}

// TestDownLeftoversOnlyOfItsHeads: goray down stops one cluster's head in a
// temp dir other nodes may share, so the leftovers it kills are that
// head's workers only: not another running node's workers, nor a node
// process `goray start` marked with the temp dir.
func TestDownLeftoversOnlyOfItsHeads(t *testing.T) {
	root := t.TempDir()
	stopped := makeSession(t, root, "session_1_head", &node.Info{NodeID: "11112222", Head: true, Pid: deadPid})
	other := makeSession(t, root, "session_2_node", &node.Info{NodeID: "33334444", Pid: os.Getpid()})
	mine := startProc(t, []string{envDaemonRoot + "=" + root, workerenv.SessionDir + "=" + stopped}, "sleep", "60")
	theirs := startProc(t, []string{envDaemonRoot + "=" + root, workerenv.SessionDir + "=" + other}, "sleep", "60")
	daemon := startProc(t, []string{envDaemonRoot + "=" + root}, "sleep", "60")
	s := &stopper{proc: procFS{"/proc"}, root: root, log: hclog.NewNullLogger(), skip: []int{os.Getpid()}}
	ss, err := s.proc.sessions(root)
	if err != nil {
		t.Fatal(err)
	}
	heads := slices.DeleteFunc(ss, func(se session) bool { return se.Dir != stopped })
	tests := []struct {
		name string
		only []session
		want []int
	}{
		{"down: the stopped head's workers", heads, []int{mine.Process.Pid}},
		{"stop: every session's, and the daemons", nil, []int{mine.Process.Pid, theirs.Process.Pid, daemon.Process.Pid}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			left, err := s.findLeftovers(tt.only)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, l := range left {
				if slices.Contains([]int{mine.Process.Pid, theirs.Process.Pid, daemon.Process.Pid}, l.Pid) {
					got = append(got, l.Pid)
				}
			}
			slices.Sort(got)
			slices.Sort(tt.want)
			if !slices.Equal(got, tt.want) {
				t.Errorf("leftovers %v, want %v", got, tt.want)
			}
		})
	}
}
