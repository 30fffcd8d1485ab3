// Package memory is the memory monitor's reading of the node's memory use
// and its worker killing policy (after Ray's memory monitor and its
// group-by-owner policy). The raylet's memoryMonitor component
// (raylet/memmonitor.go) runs them.
//
// A node in a memory-limited cgroup (v2 memory.max, v1
// memory.limit_in_bytes) is measured against its cgroup's limit: used is
// the cgroup's usage less its inactive file cache (reclaimable, as Ray
// counts it). Any other node is measured against the host:
// MemTotal − MemAvailable from /proc/meminfo.
package memory

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Usage is one reading of the node's memory.
type Usage struct {
	// Used and Total are in bytes.
	Used, Total int64
	// Source says where the reading came from: "cgroup v2 <dir>",
	// "cgroup v1 <dir>" or "/proc/meminfo".
	Source string
}

// Fraction is Used/Total (0 when Total is unknown).
func (u Usage) Fraction() float64 {
	if u.Total <= 0 {
		return 0
	}
	return float64(u.Used) / float64(u.Total)
}

// Reader reads the node's memory use.
type Reader interface {
	Read() (Usage, error)
}

// SystemReader reads the cgroup the process runs in when it has a memory
// limit, else the host's /proc/meminfo. Root is prepended to every path
// ("" is "/"), so a test can lay out fake files in a directory.
type SystemReader struct {
	Root string
}

// unlimited is at or above what cgroup v1 reports for "no limit"
// (PAGE_COUNTER_MAX pages, 0x7FFFFFFFFFFFF000 with 4 KiB pages).
const unlimited = int64(1) << 62

// Read implements Reader.
func (r SystemReader) Read() (Usage, error) {
	host, err := r.host()
	if err != nil {
		return Usage{}, err
	}
	cg, ok, err := r.cgroup(host.Total)
	if err != nil {
		return Usage{}, err
	}
	if ok {
		return cg, nil
	}
	return host, nil
}

func (r SystemReader) path(p string) string {
	if r.Root == "" {
		return p
	}
	return filepath.Join(r.Root, p)
}

// host reads /proc/meminfo: MemTotal − MemAvailable.
func (r SystemReader) host() (Usage, error) {
	p := r.path("/proc/meminfo")
	b, err := os.ReadFile(p)
	if err != nil {
		return Usage{}, fmt.Errorf("reading memory use: %w", err)
	}
	var total, avail int64 = -1, -1
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "MemTotal" && name != "MemAvailable") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || v < 0 || v > 1<<50 {
			return Usage{}, fmt.Errorf("reading memory use: %s: bad %s value %q", p, name, f[0])
		}
		if len(f) > 1 && f[1] == "kB" {
			v *= 1024
		}
		if name == "MemTotal" {
			total = v
		} else {
			avail = v
		}
	}
	if total <= 0 || avail < 0 {
		return Usage{}, fmt.Errorf("reading memory use: %s has no MemTotal or MemAvailable", p)
	}
	return Usage{Used: max(total-avail, 0), Total: total, Source: "/proc/meminfo"}, nil
}

// cgroup reads the memory cgroup of the process when it (or an ancestor)
// has a limit below the host's total; ok is false otherwise.
func (r SystemReader) cgroup(hostTotal int64) (u Usage, ok bool, err error) {
	b, err := os.ReadFile(r.path("/proc/self/cgroup"))
	if err != nil {
		return Usage{}, false, nil // no cgroups: the host's numbers
	}
	var v1, v2 string
	var hasV1, hasV2 bool
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, hasV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1, hasV1 = parts[2], true
			}
		}
	}
	// A v1 memory controller wins: on a hybrid host the v2 hierarchy has
	// no memory controller.
	if hasV1 {
		return r.limited(hostTotal, []string{"/sys/fs/cgroup/memory"}, v1, "cgroup v1",
			"memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
	}
	if hasV2 {
		return r.limited(hostTotal, []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}, v2, "cgroup v2",
			"memory.max", "memory.current", "inactive_file")
	}
	return Usage{}, false, nil
}

// limited looks for the cgroup directory of rel under each mount (the
// path as /proc/self/cgroup names it, else the mount itself, as inside a
// cgroup namespace) and walks up from it to the mount for the tightest
// limit below hostTotal. used is that cgroup's usage less its inactive
// file cache.
func (r SystemReader) limited(hostTotal int64, mounts []string, rel, kind, limitFile, usageFile, inactiveKey string) (Usage, bool, error) {
	for _, m := range mounts {
		mount := r.path(m)
		start := filepath.Join(mount, filepath.Clean("/"+rel))
		if _, err := os.Stat(filepath.Join(start, usageFile)); err != nil {
			start = mount
			if _, err := os.Stat(filepath.Join(start, usageFile)); err != nil {
				continue
			}
		}
		best, bestDir := int64(-1), ""
		for dir := start; ; dir = filepath.Dir(dir) {
			if lim, ok := readLimit(filepath.Join(dir, limitFile)); ok && lim < hostTotal && lim < unlimited && (best < 0 || lim < best) {
				best, bestDir = lim, dir
			}
			if dir == mount || len(dir) <= len(mount) {
				break
			}
		}
		if best < 0 {
			return Usage{}, false, nil
		}
		usage, err := readInt(filepath.Join(bestDir, usageFile))
		if err != nil {
			return Usage{}, false, fmt.Errorf("reading memory use: %w", err)
		}
		if inactive, ok := statValue(filepath.Join(bestDir, "memory.stat"), inactiveKey); ok {
			usage -= inactive
		}
		src := kind + " " + strings.TrimPrefix(bestDir, r.Root)
		return Usage{Used: max(usage, 0), Total: best, Source: src}, true, nil
	}
	return Usage{}, false, nil
}

// readLimit reads a limit file: a number of bytes, or "max" (no limit).
func readLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, false
	}
	return v, true
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s: not a byte count: %q", path, clip(string(b)))
	}
	return v, nil
}

// statValue reads key from a memory.stat file.
func statValue(path, key string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil && n >= 0
		}
	}
	return 0, false
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
