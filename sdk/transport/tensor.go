package transport

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/goray-dev/goray/internal/segtrack"
	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// DType is a tensor element type. Its value is the name used on the wire and
// in messages ("float32").
type DType string

// Element types every transport understands.
const (
	Float16  DType = "float16"
	BFloat16 DType = "bfloat16"
	Float32  DType = "float32"
	Float64  DType = "float64"
	Int8     DType = "int8"
	Int16    DType = "int16"
	Int32    DType = "int32"
	Int64    DType = "int64"
	Uint8    DType = "uint8"
	Bool     DType = "bool"
)

// DTypes lists every known element type.
var DTypes = []DType{Float16, BFloat16, Float32, Float64, Int8, Int16, Int32, Int64, Uint8, Bool}

// ElementSize returns the size of one element in bytes, or 0 for an unknown
// type.
func (d DType) ElementSize() int {
	switch d {
	case Int8, Uint8, Bool:
		return 1
	case Float16, BFloat16, Int16:
		return 2
	case Float32, Int32:
		return 4
	case Float64, Int64:
		return 8
	}
	return 0
}

// Valid reports whether d is a known element type.
func (d DType) Valid() bool { return d.ElementSize() != 0 }

// String returns the type's name.
func (d DType) String() string { return string(d) }

// CPU is the device name of host memory.
const CPU = "cpu"

// Buffer is a handle to a tensor's bytes: a range of a shared-memory segment
// (see package shmem). Handles cross process and plugin boundaries; bytes
// never do.
type Buffer struct {
	// Segment names a file in /dev/shm ("goray-t-..."); empty only for
	// zero-length tensors.
	Segment string
	// Offset and Length delimit the tensor's bytes inside the segment.
	Offset, Length int64
}

// TensorMeta is a tensor's layout without its bytes.
type TensorMeta struct {
	DType DType
	Shape []int64
	// Device is CPU ("cpu", also assumed when empty) or an accelerator name
	// such as "cuda:0".
	Device string
}

// Tensor is a dense, row-major tensor whose bytes live in shared memory.
type Tensor struct {
	DType  DType
	Shape  []int64
	Device string
	Buffer Buffer
}

// Meta returns the tensor's layout.
func (t Tensor) Meta() TensorMeta {
	return TensorMeta{DType: t.DType, Shape: slices.Clone(t.Shape), Device: t.Device}
}

// NumElements returns the product of the shape, or -1 if a dimension is
// negative or the product overflows.
func NumElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d != 0 && n > math.MaxInt64/d {
			return -1
		}
		n *= d
	}
	return n
}

// ByteSize returns the number of bytes a tensor of this layout occupies, or
// -1 if the layout is invalid.
func (m TensorMeta) ByteSize() int64 {
	es := int64(m.DType.ElementSize())
	n := NumElements(m.Shape)
	if es == 0 || n < 0 || n > math.MaxInt64/es {
		return -1
	}
	return n * es
}

// Validate checks the layout: known dtype, non-negative dimensions, a size
// that does not overflow. Its error matches ErrBadMetadata.
func (m TensorMeta) Validate() error {
	if !m.DType.Valid() {
		return fmt.Errorf("%w: unknown dtype %q", ErrBadMetadata, m.DType)
	}
	if m.ByteSize() < 0 {
		return fmt.Errorf("%w: invalid shape %v", ErrBadMetadata, m.Shape)
	}
	return nil
}

// Equal reports whether two layouts are the same (an empty device equals "cpu").
func (m TensorMeta) Equal(o TensorMeta) bool {
	return m.DType == o.DType && slices.Equal(m.Shape, o.Shape) && normDevice(m.Device) == normDevice(o.Device)
}

// String formats the layout as "float32[2 3]@cpu".
func (m TensorMeta) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s%v@%s", m.DType, m.Shape, normDevice(m.Device))
	return b.String()
}

func normDevice(d string) string {
	if d == "" {
		return CPU
	}
	return d
}

// IsCPU reports whether the device is host memory.
func (m TensorMeta) IsCPU() bool { return normDevice(m.Device) == CPU }

// ByteSize returns the number of bytes the tensor's layout needs, or -1.
func (t Tensor) ByteSize() int64 { return t.Meta().ByteSize() }

// Validate checks the layout and that the buffer's length matches it and
// names a segment when it is not empty. It does not look at the segment.
// Its error matches ErrBadMetadata.
func (t Tensor) Validate() error {
	m := t.Meta()
	if err := m.Validate(); err != nil {
		return err
	}
	if size := m.ByteSize(); t.Buffer.Length != size {
		return fmt.Errorf("%w: %s needs %d bytes, buffer has %d", ErrBadMetadata, m, size, t.Buffer.Length)
	}
	if t.Buffer.Offset < 0 {
		return fmt.Errorf("%w: negative buffer offset %d", ErrBadMetadata, t.Buffer.Offset)
	}
	if t.Buffer.Length > 0 {
		if err := shmem.ValidName(t.Buffer.Segment); err != nil {
			return fmt.Errorf("%w: %v", ErrBadMetadata, err)
		}
	}
	return nil
}

// NewTensor allocates a zero-filled CPU tensor in a shared-memory segment
// named shmem.Prefix+random: a segment of the process's pool
// (shmem.DefaultPool; in a goray driver, worker or plugin, the node's)
// when it has a free one of the right size class, whose pages are then
// already in memory and usually already mapped here, else a fresh one.
// The caller owns the segment: it returns it with Free, or hands
// ownership to a transport with ExtractMetadataRequest.TransferOwnership.
// In a goray driver or worker, a segment the process still owns when it
// closes or dies is unlinked then (by the process, or by its raylet).
func NewTensor(dtype DType, shape ...int64) (Tensor, error) {
	return NewTensorIn(shmem.Prefix, dtype, shape...)
}

// NewTensorIn is NewTensor with a segment name prefix of the caller's
// choice (for example one per node session, so shmem.CleanupPrefix at node
// start cannot touch another node's segments on the same machine).
func NewTensorIn(prefix string, dtype DType, shape ...int64) (Tensor, error) {
	return newTensor(prefix, true, dtype, shape)
}

// NewUninitializedTensor is NewTensor without the zero fill: a segment
// reused from the pool holds what its last user wrote (only processes of
// the same OS user can map segments). Use it for a tensor the caller
// overwrites entirely, to save the fill (about a millisecond per 64 MiB
// on a reused segment; fresh segments are zero either way).
func NewUninitializedTensor(dtype DType, shape ...int64) (Tensor, error) {
	return newTensor(shmem.Prefix, false, dtype, shape)
}

func newTensor(prefix string, zero bool, dtype DType, shape []int64) (Tensor, error) {
	t := Tensor{DType: dtype, Shape: slices.Clone(shape), Device: CPU}
	size := t.ByteSize()
	if size < 0 {
		return Tensor{}, fmt.Errorf("transport: new tensor: %w", t.Meta().Validate())
	}
	t.Buffer = Buffer{Length: size}
	if size == 0 {
		// Still a segment, so the tensor has a name like any other.
		return newSegmentTensor(t, prefix, 0)
	}
	if pool := shmem.DefaultPool(); pool != nil && size >= shmem.MinPooled {
		name, zeroed, err := pool.Get(prefix, size)
		if err != nil {
			return Tensor{}, fmt.Errorf("transport: new tensor %s: %w", t.Meta(), err)
		}
		if name != "" {
			segtrack.Created(name) // a goray process unlinks it if it dies first
			t.Buffer.Segment = name
			if zero && !zeroed { // the node's scrubber did not get to it
				b, err := shmem.Default.Acquire(name, 0, size)
				if err != nil {
					segtrack.Freed(name)
					_ = shmem.Unlink(name)
					return Tensor{}, fmt.Errorf("transport: new tensor %s: %w", t.Meta(), err)
				}
				clear(b)
				shmem.Default.Release(name)
			}
			return t, nil
		}
		return newSegmentTensor(t, prefix, shmem.ClassSize(size))
	}
	return newSegmentTensor(t, prefix, size)
}

// newSegmentTensor puts t in a fresh segment of segSize bytes.
func newSegmentTensor(t Tensor, prefix string, segSize int64) (Tensor, error) {
	seg, err := shmem.Create(shmem.NewName(prefix), segSize)
	if err != nil {
		return Tensor{}, fmt.Errorf("transport: new tensor %s: %w", t.Meta(), err)
	}
	_ = seg.Close()
	segtrack.Created(seg.Name()) // a goray process unlinks it if it dies first
	t.Buffer.Segment = seg.Name()
	return t, nil
}

// Bytes maps the tensor's bytes into this process (through shmem.Default,
// which shares one mapping per segment) and returns them. Writes are seen by
// every process mapping the segment. Call Release once for every successful
// Bytes when done; the slice must not be used after that. A zero-length
// tensor returns an empty slice.
func (t Tensor) Bytes(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := shmem.Default.Acquire(t.Buffer.Segment, t.Buffer.Offset, t.Buffer.Length)
	if err != nil {
		return nil, fmt.Errorf("transport: map tensor %s: %w", t.Meta(), err)
	}
	return b, nil
}

// Release drops the mapping reference taken by one Bytes call.
func (t Tensor) Release() {
	if t.Buffer.Length == 0 {
		return
	}
	shmem.Default.Release(t.Buffer.Segment)
}

// Free gives the tensor's segment back: to the process's pool
// (shmem.DefaultPool) for reuse, or unlinked when there is none. Use it
// only for segments the caller owns (from NewTensor, or listed in
// ReceiveResponse.Allocated). Processes still reading the segment keep
// reading what it holds until they release it.
func (t Tensor) Free() error {
	if t.Buffer.Segment == "" {
		return nil
	}
	segtrack.Freed(t.Buffer.Segment)
	return shmem.Recycle(t.Buffer.Segment)
}
