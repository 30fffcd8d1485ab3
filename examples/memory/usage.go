package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// nodeMemory reads this machine's memory as a node's memory monitor does
// (raylet/internal/memory, docs/memory.md "What is measured"): when the
// process is in a cgroup with a memory limit below the host's memory,
// the tightest limit of its cgroup and its ancestors, and used is that
// cgroup's usage less its inactive file cache; otherwise MemTotal and
// MemTotal − MemAvailable of /proc/meminfo.
func nodeMemory() (used, total int64, source string, err error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, "", fmt.Errorf("reading memory use: %w", err)
	}
	avail := int64(-1)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			total = v << 10
		case "MemAvailable:":
			avail = v << 10
		}
	}
	if total <= 0 || avail < 0 {
		return 0, 0, "", errors.New("reading memory use: /proc/meminfo has no MemTotal or MemAvailable")
	}
	if u, t, src, ok := cgroupMemory(total); ok {
		return u, t, src, nil
	}
	return max(total-avail, 0), total, "/proc/meminfo", nil
}

// cgroupMemory reads the memory cgroup of this process when it, or an
// ancestor, has a limit below hostTotal. A cgroup v1 memory controller
// wins over v2 (on a hybrid host v2 has no memory controller).
func cgroupMemory(hostTotal int64) (used, total int64, source string, ok bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, 0, "", false
	}
	var v1, v2 string
	var hasV1, hasV2 bool
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		p := strings.SplitN(line, ":", 3)
		if len(p) != 3 {
			continue
		}
		if p[0] == "0" && p[1] == "" {
			v2, hasV2 = p[2], true
		}
		for _, c := range strings.Split(p[1], ",") {
			if c == "memory" {
				v1, hasV1 = p[2], true
			}
		}
	}
	switch {
	case hasV1:
		return limitedCgroup(hostTotal, []string{"/sys/fs/cgroup/memory"}, v1, "cgroup v1",
			"memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
	case hasV2:
		return limitedCgroup(hostTotal, []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}, v2, "cgroup v2",
			"memory.max", "memory.current", "inactive_file")
	}
	return 0, 0, "", false
}

// limitedCgroup finds the cgroup directory of rel under a mount (else the
// mount itself, as in a cgroup namespace) and walks up to the mount for
// the tightest limit below hostTotal.
func limitedCgroup(hostTotal int64, mounts []string, rel, kind, limitFile, usageFile, inactiveKey string) (used, total int64, source string, ok bool) {
	for _, mount := range mounts {
		start := filepath.Join(mount, filepath.Clean("/"+rel))
		if !exists(filepath.Join(start, usageFile)) {
			if start = mount; !exists(filepath.Join(start, usageFile)) {
				continue
			}
		}
		best, bestDir := int64(-1), ""
		for dir := start; ; dir = filepath.Dir(dir) {
			if lim, err := readBytes(filepath.Join(dir, limitFile)); err == nil && lim > 0 && lim < hostTotal && lim < 1<<62 && (best < 0 || lim < best) {
				best, bestDir = lim, dir
			}
			if len(dir) <= len(mount) {
				break
			}
		}
		if best < 0 {
			return 0, 0, "", false
		}
		usage, err := readBytes(filepath.Join(bestDir, usageFile))
		if err != nil {
			return 0, 0, "", false
		}
		if stat, err := os.ReadFile(filepath.Join(bestDir, "memory.stat")); err == nil {
			for _, line := range strings.Split(string(stat), "\n") {
				if k, v, _ := strings.Cut(line, " "); k == inactiveKey {
					if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
						usage -= n
					}
				}
			}
		}
		return max(usage, 0), best, kind + " " + bestDir, true
	}
	return 0, 0, "", false
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readBytes reads a byte count ("max", no limit, is an error).
func readBytes(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
