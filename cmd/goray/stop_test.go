package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/host/node"
	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/recvseg"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/internal/workerenv"
	"github.com/goray-dev/goray/sdk/transport/shmem"
	"github.com/hashicorp/go-hclog"
)

// waitCmdline polls until pid runs the program named want (after exec).
func waitCmdline(t *testing.T, pid int, want string) {
	t.Helper()
	p := procFS{"/proc"}
	var args []string
	if !poll(5*time.Second, func() bool {
		args, _ = p.cmdline(pid)
		return len(args) > 0 && filepath.Base(args[0]) == want
	}) {
		t.Fatalf("pid %d runs %q, want %s", pid, args, want)
	}
}

// poll calls cond every 20ms until it holds (true) or timeout (at least
// waitfor.Generous) passes (false).
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(max(timeout, waitfor.Generous))
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
}

func TestStopperStopsEverything(t *testing.T) {
	root := t.TempDir()
	p := procFS{"/proc"}

	worker := startProc(t, nil, "sleep", "60")
	workerSession := makeSession(t, root, "session_1_worker", &node.Info{NodeID: "11112222", Pid: worker.Process.Pid,
		RayletSocket: filepath.Join(root, "session_1_worker", "sockets", "raylet.sock")})

	// The head ignores SIGTERM, so only SIGKILL after the grace period ends it.
	head := startProc(t, nil, "sh", "-c", `trap "" TERM; exec sleep 60`)
	waitCmdline(t, head.Process.Pid, "sleep")
	makeSession(t, root, "session_2_head", &node.Info{NodeID: "33334444", Head: true, Pid: head.Process.Pid})

	deadSession := makeSession(t, root, "session_0_dead", &node.Info{NodeID: "55556666", Pid: deadPid})

	// Workers may inherit the daemon marker; they still count as workers.
	taskWorker := startProc(t, []string{envDaemonRoot + "=" + root, workerenv.SessionDir + "=" + workerSession}, "sleep", "60")
	daemon := startProc(t, []string{envDaemonRoot + "=" + root}, "sleep", "60")
	other := startProc(t, []string{workerenv.SessionDir + "=" + workerSession + "0"}, "sleep", "60")

	s := &stopper{proc: p, root: root, opts: stopOptions{grace: 300 * time.Millisecond}, log: hclog.NewNullLogger(), skip: []int{os.Getpid()}}
	res, err := s.run(context.Background())
	if err != nil {
		t.Fatalf("stop: %v", err)
	}

	if len(res.Stopped) != 2 {
		t.Fatalf("stopped %+v, want 2 nodes", res.Stopped)
	}
	if n := res.Stopped[0]; n.Pid != worker.Process.Pid || n.Head || n.How != "SIGTERM" {
		t.Errorf("first stopped = %+v, want the non-head node by SIGTERM (no raylet socket)", n)
	}
	if n := res.Stopped[1]; n.Pid != head.Process.Pid || !n.Head || !strings.HasPrefix(n.How, "SIGKILL after") {
		t.Errorf("second stopped = %+v, want the head by SIGKILL after the grace period", n)
	}
	var killed []int
	for _, l := range res.Killed {
		killed = append(killed, l.Pid)
		switch l.Pid {
		case taskWorker.Process.Pid:
			if l.Why != "worker of session_1_worker" {
				t.Errorf("worker killed as %q", l.Why)
			}
		case daemon.Process.Pid:
			if !strings.HasPrefix(l.Why, "goray node process under") {
				t.Errorf("daemon killed as %q", l.Why)
			}
		}
	}
	slices.Sort(killed)
	want := []int{taskWorker.Process.Pid, daemon.Process.Pid}
	slices.Sort(want)
	if !slices.Equal(killed, want) {
		t.Errorf("killed %+v, want pids %v", res.Killed, want)
	}
	for _, pid := range append(want, worker.Process.Pid, head.Process.Pid) {
		if p.running(pid) {
			t.Errorf("pid %d still running", pid)
		}
	}
	if !p.running(other.Process.Pid) {
		t.Error("stop killed a process of another session")
	}

	// Every session's node is dead now, so their stale files are gone.
	for _, dir := range []string{deadSession, workerSession} {
		for _, f := range []string{"sockets", "node.json"} {
			if _, err := os.Lstat(filepath.Join(dir, f)); !os.IsNotExist(err) {
				t.Errorf("%s/%s still exists (err %v)", dir, f, err)
			}
		}
		if !slices.Contains(res.Cleaned, dir) {
			t.Errorf("cleaned %v does not name %s", res.Cleaned, dir)
		}
	}

	var out bytes.Buffer
	writeStopResult(&out, root, res)
	for _, w := range []string{"Stopped goray node 11112222", "Stopped goray head node 33334444", "Killed 2 leftover processes", "Removed stale sockets and state files of"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}

func TestStopperForce(t *testing.T) {
	root := t.TempDir()
	n := startProc(t, nil, "sh", "-c", `trap "" TERM; exec sleep 60`)
	waitCmdline(t, n.Process.Pid, "sleep")
	makeSession(t, root, "session_1", &node.Info{NodeID: "77778888", Head: true, Pid: n.Process.Pid})
	// A long grace period shows --force does not wait for it.
	s := &stopper{proc: procFS{"/proc"}, root: root, opts: stopOptions{force: true, grace: time.Hour}, log: hclog.NewNullLogger()}
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	res, err := s.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stopped) != 1 || res.Stopped[0].How != "SIGKILL" {
		t.Fatalf("stopped = %+v, want one node by SIGKILL", res.Stopped)
	}
	if (procFS{"/proc"}).running(n.Process.Pid) {
		t.Error("node still running")
	}
}

func TestStopNothingRunning(t *testing.T) {
	root := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run([]string{"stop", "--temp-dir", root}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	if want := "No running goray nodes under " + root; !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout %q lacks %q", stdout.String(), want)
	}
}

// TestStopperUnlinksSegmentsOfDeadSessions: the tensor segments in the
// ledgers of a session whose node is dead (killed with SIGKILL, say) are
// unlinked; those of a session whose node runs are not.
func TestStopperUnlinksSegmentsOfDeadSessions(t *testing.T) {
	root := t.TempDir()
	p := procFS{"/proc"}
	segment := func(session string) string {
		t.Helper()
		name := shmem.NewName("goray-t-tt-stop-")
		s, err := shmem.Create(name, 4096)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		t.Cleanup(func() { _ = shmem.Unlink(name) })
		if err := recvseg.Add(recvseg.Dir(session, ids.New()), name); err != nil {
			t.Fatal(err)
		}
		return name
	}
	dead := makeSession(t, root, "session_0_dead", &node.Info{NodeID: "55556666", Pid: deadPid})
	deadSeg := segment(dead)
	live := startProc(t, nil, "sleep", "60")
	liveSession := makeSession(t, root, "session_1_live", &node.Info{NodeID: "77778888", Pid: live.Process.Pid})
	liveSeg := segment(liveSession)
	t.Cleanup(func() { _, _ = recvseg.SweepAll(liveSession) })

	s := &stopper{proc: p, root: root, opts: stopOptions{grace: 300 * time.Millisecond}, log: hclog.NewNullLogger(), skip: []int{os.Getpid()}}
	deadSessions, err := s.deadSessions()
	if err != nil {
		t.Fatal(err)
	}
	got, err := sweepSegments(deadSessions)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{deadSeg}) || shmem.Exists(deadSeg) {
		t.Errorf("swept %v (the dead session's segment still exists: %v), want %s unlinked", got, shmem.Exists(deadSeg), deadSeg)
	}
	if !shmem.Exists(liveSeg) {
		t.Errorf("the segment %s of a running node's session was unlinked", liveSeg)
	}

	// A full stop stops the running node, then unlinks its session's
	// segments too, and says so.
	res, err := s.run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Segments, []string{liveSeg}) || shmem.Exists(liveSeg) {
		t.Errorf("stop unlinked %v, want %s", res.Segments, liveSeg)
	}
	var out bytes.Buffer
	writeStopResult(&out, root, res)
	if !strings.Contains(out.String(), "Unlinked 1 tensor segment of dead sessions.") {
		t.Errorf("output does not say it unlinked a segment:\n%s", out.String())
	}
}
