//go:build unix

package connlimit

import "syscall"

// fdLimit is the process's soft descriptor limit (0: unknown).
func fdLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<30 {
		return 0
	}
	return int(l.Cur)
}
