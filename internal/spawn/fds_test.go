package spawn

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// childFds lists the descriptors a child started with exec.Command has.
func childFds(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("/bin/sh", "-c", "ls /proc/$$/fd").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// A descriptor without FD_CLOEXEC (as one inherited from a parent has) is
// inherited by every child until CloseOnExecInherited marks it; this
// process keeps it open.
func TestCloseOnExecInherited(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd())) // dup(2) leaves FD_CLOEXEC off
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	name := strconv.Itoa(fd)
	if !slices.Contains(childFds(t), name) {
		t.Fatalf("the child did not inherit descriptor %d without FD_CLOEXEC; the test shows nothing", fd)
	}
	if err := CloseOnExecInherited(); err != nil {
		t.Fatal(err)
	}
	if fds := childFds(t); slices.Contains(fds, name) {
		t.Errorf("a child still inherits descriptor %d after CloseOnExecInherited: %v", fd, fds)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		t.Errorf("descriptor %d is no longer open in this process: %v", fd, err)
	}
}
