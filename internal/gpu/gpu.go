// Package gpu detects the node's NVIDIA GPUs through NVML.
//
// Detection is best effort: on machines without an NVIDIA driver (or builds
// without cgo) Detect fails with an error wrapping ErrNVMLUnavailable and
// Count reports zero GPUs.
package gpu

import (
	"errors"

	"github.com/hashicorp/go-hclog"
)

// ErrNVMLUnavailable means the NVML library could not be loaded or used: no
// NVIDIA driver is installed, or the binary was built without cgo.
var ErrNVMLUnavailable = errors.New("gpu: NVML is unavailable")

// Device describes one GPU.
type Device struct {
	// Index is the NVML device index.
	Index int
	// Name is the product name, e.g. "NVIDIA A100-SXM4-40GB".
	Name string
	// UUID is the device's stable identifier ("GPU-...").
	UUID string
	// MemoryBytes is the total device memory.
	MemoryBytes uint64
}

// Detector lists the GPUs of this machine.
type Detector interface {
	// Detect returns the devices found, or an error explaining why none
	// could be listed.
	Detect() ([]Device, error)
}

// Count returns how many GPUs d detects. It never fails: when detection
// fails (typically because NVML is absent) it logs the reason at debug level
// and returns 0. A nil d or log is allowed.
func Count(d Detector, log hclog.Logger) int {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if d == nil {
		log.Debug("no GPU detector; assuming 0 GPUs")
		return 0
	}
	devs, err := d.Detect()
	if err != nil {
		log.Debug("GPU detection failed; assuming 0 GPUs", "error", err)
		return 0
	}
	log.Debug("detected GPUs", "count", len(devs))
	return len(devs)
}
