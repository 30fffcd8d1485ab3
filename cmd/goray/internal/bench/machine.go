package bench

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// detectMachine describes this machine.
func detectMachine() Machine {
	return Machine{
		Cores:       runtime.NumCPU(),
		MemoryBytes: memTotal("/proc/meminfo"),
		GoVersion:   runtime.Version(),
		OS:          runtime.GOOS,
		Arch:        runtime.GOARCH,
		CPUModel:    cpuModel("/proc/cpuinfo"),
	}
}

// memTotal reads MemTotal from a meminfo file (0 when unknown).
func memTotal(path string) int64 {
	v := procField(path, "MemTotal")
	f := strings.Fields(v)
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0
	}
	if len(f) > 1 && strings.EqualFold(f[1], "kB") {
		n *= 1024
	}
	return n
}

// cpuModel reads the first "model name" from a cpuinfo file.
func cpuModel(path string) string {
	if m := procField(path, "model name"); m != "" {
		return m
	}
	return "unknown"
}

// procField returns the value of the first "key: value" line with key.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// commit returns override, else the binary's VCS revision (with "-dirty"
// for modified trees), else "unknown".
func commit(override string) string {
	if override != "" {
		return override
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
