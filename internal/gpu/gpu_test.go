package gpu

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

type fakeDetector struct {
	devs []Device
	err  error
}

func (f fakeDetector) Detect() ([]Device, error) { return f.devs, f.err }

func TestCount(t *testing.T) {
	tests := []struct {
		name string
		d    Detector
		want int
	}{
		{"nil detector", nil, 0},
		{"nvml unavailable", fakeDetector{err: ErrNVMLUnavailable}, 0},
		{"other error", fakeDetector{err: errors.New("boom")}, 0},
		{"no devices", fakeDetector{}, 0},
		{"two devices", fakeDetector{devs: []Device{{Index: 0, Name: "A"}, {Index: 1, Name: "B"}}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Count(tt.d, nil); got != tt.want {
				t.Fatalf("Count = %d, want %d", got, tt.want)
			}
		})
	}
}

// nvmlPresent reports whether this machine has the NVML library, in which
// case Detect is expected to succeed instead of failing.
func nvmlPresent() bool {
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu"} {
		if _, err := os.Stat(filepath.Join(dir, "libnvidia-ml.so.1")); err == nil {
			return true
		}
	}
	return false
}

func TestNVMLDetect(t *testing.T) {
	devs, err := NewNVML().Detect()
	if nvmlPresent() || err == nil {
		// A GPU machine: detection must work and agree with Count.
		if err != nil {
			t.Fatalf("Detect with NVML present: %v", err)
		}
		for i, d := range devs {
			if d.Index != i || d.UUID == "" {
				t.Errorf("device %d = %+v, want index %d and a UUID", i, d, i)
			}
		}
		if got := Count(NewNVML(), nil); got != len(devs) {
			t.Fatalf("Count = %d, want %d", got, len(devs))
		}
		return
	}
	if !errors.Is(err, ErrNVMLUnavailable) {
		t.Fatalf("Detect without NVML: err = %v, want ErrNVMLUnavailable", err)
	}
	if len(devs) != 0 {
		t.Fatalf("Detect without NVML returned devices: %+v", devs)
	}
	if got := Count(NewNVML(), nil); got != 0 {
		t.Fatalf("Count without NVML = %d, want 0", got)
	}
}
