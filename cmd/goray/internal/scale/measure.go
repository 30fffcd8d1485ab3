package scale

import (
	"bytes"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
)

// fdLimit is the process's descriptor limit (Go raises the soft limit to
// the hard one at start).
func fdLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 1024
	}
	return r.Cur
}

// cpuTime is the process's user and system CPU time so far (getrusage).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapInUse collects garbage twice and returns the heap in use.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// cpuProfile samples the process's CPU while it runs.
type cpuProfile struct {
	buf   bytes.Buffer
	start time.Time
	cpu   time.Duration
	on    bool
}

// startCPUProfile starts sampling; it fails when another profile runs (a
// test run with -cpuprofile): then only the whole process's time is known.
func startCPUProfile() *cpuProfile {
	p := &cpuProfile{start: time.Now(), cpu: cpuTime()}
	p.on = pprof.StartCPUProfile(&p.buf) == nil
	return p
}

// cpuSplit is the CPU time of a window, by part of the process.
type cpuSplit struct {
	Wall    time.Duration
	Process time.Duration // getrusage: the whole process
	// Sampled is the profile's total; GCS and Sim its samples labelled
	// partGCS and partSim; ByRPC the GCS's by method (what is not under a
	// method: reading and decoding requests, health checks, placement).
	Sampled, GCS, Sim time.Duration
	ByRPC             map[string]time.Duration
	Profiled          bool
}

// GCSShare is the GCS's share of the process's CPU time, scaled from the
// profile's samples to getrusage's total.
func (c cpuSplit) GCSProcess() time.Duration { return c.scale(c.GCS) }

// SimProcess is the simulated nodes' share, scaled likewise.
func (c cpuSplit) SimProcess() time.Duration { return c.scale(c.Sim) }

func (c cpuSplit) scale(d time.Duration) time.Duration {
	if c.Sampled <= 0 {
		return 0
	}
	return time.Duration(float64(d) / float64(c.Sampled) * float64(c.Process))
}

// stop ends sampling and splits the window's time.
func (p *cpuProfile) stop() (cpuSplit, error) {
	s := cpuSplit{Wall: time.Since(p.start), ByRPC: map[string]time.Duration{}}
	if p.on {
		pprof.StopCPUProfile()
	}
	s.Process = cpuTime() - p.cpu
	if !p.on {
		return s, nil
	}
	prof, err := profile.Parse(&p.buf)
	if err != nil {
		return s, fmt.Errorf("scale: reading the CPU profile: %w", err)
	}
	s.Profiled = true
	vi := len(prof.SampleType) - 1 // cpu nanoseconds
	for _, smp := range prof.Sample {
		d := time.Duration(smp.Value[vi])
		s.Sampled += d
		switch part := first(smp.Label[labelPart]); part {
		case partGCS:
			s.GCS += d
			m := first(smp.Label[labelRPC])
			if m == "" {
				m = "(transport, decoding, health checks, placement)"
			} else {
				m = m[strings.LastIndex(m, "/")+1:]
			}
			s.ByRPC[m] += d
		case partSim:
			s.Sim += d
		}
	}
	return s, nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// heapSplit attributes the heap in use, from a heap profile, to the GCS
// (allocations under a frame of package gcs or of a gRPC server, which
// only the GCS has connections on when it is taken) and the rest.
type heapSplit struct {
	InUse uint64 // runtime.MemStats.HeapInuse
	GCS   uint64 // heap profile: in-use bytes attributed to the GCS
	Other uint64
}

// heapProfile takes the split now (after garbage collection).
func heapProfile() (heapSplit, error) {
	h := heapSplit{InUse: heapInUse()}
	var buf bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&buf, 0); err != nil {
		return h, err
	}
	prof, err := profile.Parse(&buf)
	if err != nil {
		return h, fmt.Errorf("scale: reading the heap profile: %w", err)
	}
	vi := -1
	for i, st := range prof.SampleType {
		if st.Type == "inuse_space" {
			vi = i
		}
	}
	if vi < 0 {
		return h, fmt.Errorf("scale: the heap profile has no inuse_space")
	}
	for _, smp := range prof.Sample {
		v := uint64(smp.Value[vi])
		if gcsStack(smp) {
			h.GCS += v
		} else {
			h.Other += v
		}
	}
	return h, nil
}

// gcsStack reports whether an allocation was made by the GCS: a frame of
// package gcs, or of a gRPC server's transport (only the GCS's server has
// connections while the simulated nodes join).
func gcsStack(s *profile.Sample) bool {
	for _, loc := range s.Location {
		for _, ln := range loc.Line {
			if ln.Function == nil {
				continue
			}
			fn := ln.Function.Name
			switch {
			case strings.HasPrefix(fn, "github.com/goray-dev/goray/gcs."),
				strings.Contains(fn, "grpc/internal/transport.NewServerTransport"),
				strings.Contains(fn, "grpc/internal/transport.(*http2Server)"),
				strings.Contains(fn, "grpc.(*Server)."):
				return true
			}
		}
	}
	return false
}
