package onesided

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// ShmDomain returns the id of this process's shared-memory domain: the
// kernel's boot id and the device and inode of /dev/shm. Two processes with
// the same domain see the same segments, so a reader can map a source's
// segment instead of reading it over TCP.
func ShmDomain() (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("shared-memory domain: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(shmem.Dir, &st); err != nil {
		return "", fmt.Errorf("shared-memory domain: stat %s: %w", shmem.Dir, err)
	}
	return fmt.Sprintf("%s/%d:%d", strings.TrimSpace(string(boot)), st.Dev, st.Ino), nil
}

// pidNamespace names this process's pid namespace ("" if unknown), so
// process ids are only compared within one namespace.
func pidNamespace() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}

// processGone reports whether no live process with this id exists. A
// zombie (killed, not yet reaped by its parent) counts as gone: it holds
// nothing and will never serve again.
func processGone(pid int) bool {
	if pid <= 0 {
		return false
	}
	if errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("onesided: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// randomKey returns a non-zero random 64-bit key.
func randomKey() uint64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic("onesided: crypto/rand failed: " + err.Error())
		}
		k := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		if k != 0 {
			return k
		}
	}
}
