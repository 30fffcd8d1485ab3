package spawn

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/waitfor"
)

// startLocked runs start in a goroutine locked to its thread that then
// exits, which terminates the thread. Not the main thread: a goroutine
// that exits locked to it leaves the thread running (the runtime never
// ends the main thread), so a child's parent-death signal would never
// come; a goroutine that lands there keeps the main thread busy while
// another tries again elsewhere.
func startLocked(t *testing.T, start func(*exec.Cmd) error) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	started := make(chan struct{})
	var try func()
	try = func() {
		go func() {
			runtime.LockOSThread()
			if syscall.Gettid() == syscall.Getpid() {
				try() // this goroutine holds the main thread meanwhile
				<-started
				runtime.UnlockOSThread()
				return
			}
			done <- start(cmd)
			close(started)
			// Not unlocked: the thread exits with the goroutine.
		}()
	}
	try()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return cmd
}

// A child started by Start survives the exit of the thread its caller ran
// on; a control child forked by that kind of thread itself is killed, which
// shows the thread exits did happen.
func TestChildSurvivesThreadExit(t *testing.T) {
	child := startLocked(t, Start)
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	control := startLocked(t, (*exec.Cmd).Start)
	exited := make(chan error, 1)
	go func() { exited <- control.Wait() }()
	select {
	case <-exited:
	case <-time.After(waitfor.Generous):
		_ = control.Process.Kill()
		t.Fatal("the control child was not killed when its thread exited")
	}
	if err := child.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child started by Start died with a thread: %v", err)
	}
	var ws syscall.WaitStatus
	if pid, err := syscall.Wait4(child.Process.Pid, &ws, syscall.WNOHANG, nil); err != nil || pid != 0 {
		t.Fatalf("the child started by Start has exited (%v, %v)", ws, err)
	}
}
