// Package spawn starts child processes that die with this process but not
// before it.
//
// Linux delivers a child's Pdeathsig when the OS *thread* that forked it
// exits, not the process. Go terminates a thread when a goroutine locked to
// it (runtime.LockOSThread) exits, and any thread that once forked a child
// may later be locked by some goroutine, so a child started from an
// arbitrary goroutine can be killed long before its parent dies. Start
// forks every child from one goroutine locked, for the life of the
// process, to a thread that never exits.
package spawn

import (
	"os/exec"
	"runtime"
	"sync"
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	once sync.Once
	reqs chan request
)

// Start starts cmd (cmd.Start) from a thread that never exits, so a
// Pdeathsig in cmd.SysProcAttr fires only when this process dies (even by
// kill -9). The child inherits no descriptor this process got from its
// parent (CloseOnExecInherited).
func Start(cmd *exec.Cmd) error {
	if err := CloseOnExecInherited(); err != nil {
		return err
	}
	once.Do(func() {
		reqs = make(chan request)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must not exit
			for req := range reqs {
				req.done <- req.cmd.Start()
			}
		}()
	})
	req := request{cmd: cmd, done: make(chan error, 1)}
	reqs <- req
	return <-req.done
}
