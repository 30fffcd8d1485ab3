package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
)

// fakeProc builds a /proc tree in a temp dir.
type fakeProc struct {
	t    *testing.T
	root string
}

const fakeBtime = 1_700_000_000

func newFakeProc(t *testing.T) *fakeProc {
	t.Helper()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "stat"), "cpu  1 2 3\nbtime "+strconv.Itoa(fakeBtime)+"\nprocesses 5\n")
	return &fakeProc{t: t, root: root}
}

// add adds a process with the given state, start (seconds after boot),
// command name and environment.
func (f *fakeProc) add(pid int, state byte, startSec int, comm string, env ...string) {
	f.t.Helper()
	dir := filepath.Join(f.root, strconv.Itoa(pid))
	ticks := startSec * clockTicks
	stat := strconv.Itoa(pid) + " (" + comm + ") " + string(state) + " 1 1 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 " +
		strconv.Itoa(ticks) + " 1000 100 18446744073709551615\n"
	writeFile(f.t, filepath.Join(dir, "stat"), stat)
	writeFile(f.t, filepath.Join(dir, "environ"), strings.Join(env, "\x00")+"\x00")
	writeFile(f.t, filepath.Join(dir, "cmdline"), comm+"\x00--flag\x00")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    procStat
		wantErr bool
	}{
		{"plain", "42 (sleep) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 12345 1000 100", procStat{State: 'S', StartTicks: 12345}, false},
		{"comm with spaces and parens", "42 (a) b (c) Z 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 777 1000 100", procStat{State: 'Z', StartTicks: 777}, false},
		{"truncated", "42 (sleep) S 1 42", procStat{}, true},
		{"no comm", "garbage", procStat{}, true},
		{"bad start", "42 (x) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 nope 1000 100", procStat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat(tt.line)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseStat error = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("parseStat = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestFakeProcScanning(t *testing.T) {
	f := newFakeProc(t)
	f.add(100, 'S', 10, "goray", "HOME=/root", "GORAY_SESSION_DIR=/tmp/x/session_1")
	f.add(200, 'R', 20, "work er (2)", "GORAY_SESSION_DIR=/tmp/x/session_1", "A=B")
	f.add(300, 'Z', 30, "zombie", "GORAY_SESSION_DIR=/tmp/x/session_1")
	f.add(400, 'S', 40, "other", "GORAY_SESSION_DIR=/tmp/x/session_10")
	if err := os.MkdirAll(filepath.Join(f.root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := procFS{f.root}

	pids, err := p.pids()
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{100, 200, 300, 400}; !slices.Equal(pids, want) {
		t.Errorf("pids = %v, want %v", pids, want)
	}
	env, err := p.environ(200)
	if err != nil || !slices.Equal(env, []string{"GORAY_SESSION_DIR=/tmp/x/session_1", "A=B"}) {
		t.Errorf("environ(200) = %q, %v", env, err)
	}
	args, err := p.cmdline(100)
	if err != nil || !slices.Equal(args, []string{"goray", "--flag"}) {
		t.Errorf("cmdline(100) = %q, %v", args, err)
	}

	for pid, want := range map[int]bool{100: true, 200: true, 300: false, 999: false, 0: false} {
		if got := p.running(pid); got != want {
			t.Errorf("running(%d) = %v, want %v", pid, got, want)
		}
	}

	// Exact match only: session_10 is not session_1, zombies are gone, and
	// skipped pids are left out.
	got, err := p.withEnv("GORAY_SESSION_DIR", "/tmp/x/session_1", 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{200}; !slices.Equal(got, want) {
		t.Errorf("withEnv = %v, want %v", got, want)
	}

	st, err := p.startTime(200)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(fakeBtime+20, 0); !st.Equal(want) {
		t.Errorf("startTime(200) = %v, want %v", st, want)
	}
	// A pid recorded before the process started is a reused pid.
	if p.startedBy(200, time.Unix(fakeBtime+10, 0)) {
		t.Error("startedBy: a process started after the record counts as the recorded one")
	}
	if !p.startedBy(200, time.Unix(fakeBtime+25, 0)) {
		t.Error("startedBy: a process started before the record does not count")
	}
}

func TestRealProcSelf(t *testing.T) {
	p := procFS{"/proc"}
	if !p.running(os.Getpid()) {
		t.Fatal("running(self) = false")
	}
	st, err := p.startTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); st.After(now.Add(2*time.Second)) || st.Before(now.Add(-time.Hour)) {
		t.Errorf("startTime(self) = %v, not shortly before now %v", st, now)
	}
	env, err := p.environ(os.Getpid())
	if err != nil || len(env) == 0 {
		t.Errorf("environ(self) = %d entries, %v", len(env), err)
	}
}

// startProc starts a real process and reaps it at the end of the test.
func startProc(t *testing.T, env []string, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func TestWaitExit(t *testing.T) {
	p := procFS{"/proc"}
	cmd := startProc(t, nil, "sleep", "60")
	pid := cmd.Process.Pid

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if alive := p.waitExit(ctx, []int{pid}); !slices.Equal(alive, []int{pid}) {
		t.Fatalf("waitExit on a sleeping process = %v, want [%d]", alive, pid)
	}
	if err := sendSignal(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: a zombie counts as exited.
	ctx2, cancel2 := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel2()
	if alive := p.waitExit(ctx2, []int{pid}); alive != nil {
		t.Fatalf("waitExit after SIGKILL = %v, want none", alive)
	}
	_ = cmd.Wait()
	if err := sendSignal(pid, syscall.SIGKILL); err != nil {
		t.Errorf("signalling a gone process: %v", err)
	}
}
