//go:build linux && cgo

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NewNVML returns a Detector backed by NVML (libnvidia-ml.so.1, loaded at
// run time with dlopen).
func NewNVML() Detector { return nvmlDetector{} }

type nvmlDetector struct{}

// Detect initialises NVML, lists the devices and shuts NVML down again.
// When the library cannot be loaded the error wraps ErrNVMLUnavailable; a
// panic inside go-nvml is recovered and reported the same way.
func (nvmlDetector) Detect() (devs []Device, err error) {
	defer func() {
		if p := recover(); p != nil {
			devs, err = nil, fmt.Errorf("%w: panic in NVML: %v", ErrNVMLUnavailable, p)
		}
	}()
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvmlInit: %v", ErrNVMLUnavailable, ret)
	}
	defer lib.Shutdown()

	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: nvmlDeviceGetCount: %v", ret)
	}
	devs = make([]Device, 0, n)
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu: device %d: nvmlDeviceGetHandleByIndex: %v", i, ret)
		}
		dev := Device{Index: i}
		if dev.Name, ret = d.GetName(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu: device %d: nvmlDeviceGetName: %v", i, ret)
		}
		if dev.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu: device %d: nvmlDeviceGetUUID: %v", i, ret)
		}
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu: device %d: nvmlDeviceGetMemoryInfo: %v", i, ret)
		}
		dev.MemoryBytes = mem.Total
		devs = append(devs, dev)
	}
	return devs, nil
}
