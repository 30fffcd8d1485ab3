package main

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Progress on a terminal (schollz/progressbar): a spinner while a command
// waits for something whose length it cannot know (a node starting, a
// cluster resuming from its storage, instances terminating), a bar with
// bytes for a transfer of known size (a job's binary). Nothing is drawn
// when stderr is not a terminal, so scripts and tests read only the
// command's messages.

// spinner shows what on stderr with a spinner and the time spent, until
// the returned stop is called (which clears the line); set changes the
// text. Both are no-ops when stderr is not a terminal.
func (a *app) spinner(what string) (set func(string), stop func()) {
	if _, tty := termInfo(a.stderr); !tty {
		return func(string) {}, func() {}
	}
	bar := progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(a.stderr), progressbar.OptionSetDescription(what),
		progressbar.OptionSpinnerType(14), progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	done := make(chan struct{})
	ticked := make(chan struct{})
	go func() { // the spinner turns while nothing else happens
		defer close(ticked)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = bar.Add(1)
			}
		}
	}()
	stopped := false
	return func(s string) { bar.Describe(s) }, func() {
		if stopped {
			return
		}
		stopped = true
		close(done)
		<-ticked
		_ = bar.Finish()
		fmt.Fprint(a.stderr, "\r")
	}
}

// progress returns a wrapper that shows a transfer's progress in bytes on
// a terminal (nil elsewhere).
func (a *app) progress(what string) func(io.Reader, int64) io.Reader {
	if _, tty := termInfo(a.stderr); !tty {
		return nil
	}
	return func(r io.Reader, size int64) io.Reader {
		bar := progressbar.NewOptions64(size,
			progressbar.OptionSetWriter(a.stderr), progressbar.OptionSetDescription(what),
			progressbar.OptionShowBytes(true), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(), progressbar.OptionOnCompletion(func() { fmt.Fprint(a.stderr, "\r") }))
		return io.TeeReader(r, bar)
	}
}
