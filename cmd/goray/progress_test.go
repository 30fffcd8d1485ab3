package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: the side a program writes to (a
// terminal for termInfo) and the side that reads what it shows.
func openPTY(t *testing.T) (term, screen *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	rc, err := m.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr == nil {
			n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	}); err != nil || ierr != nil {
		t.Fatalf("unlocking the pty: %v %v", err, ierr)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening the pty's terminal: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, m
}

// readUntil reads the screen until it shows want or d passes.
func readUntil(t *testing.T, screen *os.File, want string, d time.Duration) string {
	t.Helper()
	var got bytes.Buffer
	buf := make([]byte, 4096)
	deadline := time.Now().Add(d)
	for !strings.Contains(got.String(), want) {
		if err := screen.SetReadDeadline(deadline); err != nil {
			t.Fatal(err)
		}
		n, err := screen.Read(buf)
		got.Write(buf[:n])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the terminal did not show %q within %s; it showed %q", want, d, got.String())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return got.String()
}

// TestSpinnerOnTerminal: on a terminal the spinner shows what is awaited,
// its new text, and turns; elsewhere nothing is written.
func TestSpinnerOnTerminal(t *testing.T) {
	term, screen := openPTY(t)
	a := &app{stderr: term}
	set, stop := a.spinner("starting the node")
	readUntil(t, screen, "starting the node", 10*time.Second)
	set("still starting")
	readUntil(t, screen, "still starting", 10*time.Second)
	stop()
	stop() // a second stop is harmless

	var buf bytes.Buffer
	a = &app{stderr: &buf}
	set, stop = a.spinner("starting the node")
	set("x")
	stop()
	if buf.Len() != 0 {
		t.Errorf("the spinner wrote %q to a non-terminal", buf.String())
	}
	if a.progress("upload") != nil {
		t.Errorf("progress returned a wrapper for a non-terminal")
	}
}

// TestProgressOnTerminal: a transfer's bar shows its rate in bytes.
func TestProgressOnTerminal(t *testing.T) {
	term, screen := openPTY(t)
	a := &app{stderr: term}
	wrap := a.progress("uploading job")
	if wrap == nil {
		t.Fatal("no progress on a terminal")
	}
	data := bytes.Repeat([]byte("x"), 3<<20)
	go func() {
		var sink bytes.Buffer
		_, _ = sink.ReadFrom(wrap(bytes.NewReader(data), int64(len(data))))
	}()
	readUntil(t, screen, "B/s", 10*time.Second) // its rate in bytes
}
