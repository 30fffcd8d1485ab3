package spawn

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseOnExecInherited marks every descriptor of this process above 2
// close-on-exec, so that no child it starts afterwards inherits one.
//
// Go opens its own descriptors close-on-exec, and exec.Cmd passes a child
// only stdin, stdout, stderr and ExtraFiles; but descriptors this process
// inherited from its parent (a lock `flock` holds, a shell's `3>file`) are
// not close-on-exec, and every child would otherwise inherit them and hold
// them open for its whole life. Marking them changes nothing for this
// process itself.
func CloseOnExecInherited() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("listing this process's descriptors: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // closed since the listing (the listing's own), or already marked
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil {
			return fmt.Errorf("marking descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}
