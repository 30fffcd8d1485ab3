//go:build !(linux && cgo)

package gpu

// NewNVML returns a Detector that always fails with ErrNVMLUnavailable:
// NVML needs Linux and cgo.
func NewNVML() Detector { return noNVML{} }

type noNVML struct{}

// Detect always returns ErrNVMLUnavailable.
func (noNVML) Detect() ([]Device, error) { return nil, ErrNVMLUnavailable }
