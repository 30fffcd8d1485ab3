package collective

// Element-wise reductions on raw little-endian bytes.

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/goray-dev/goray/sdk/transport"
)

// reduceFunc combines src into dst element-wise: dst[i] = dst[i] op src[i].
// Both hold the same whole number of elements.
type reduceFunc func(dst, src []byte)

type number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~float32 | ~float64
}

// reducer returns the reduction op on elements of type dt; its error
// matches ErrBadMetadata (unknown op or dtype) or ErrNotSupported.
func reducer(dt transport.DType, op transport.ReduceOp) (reduceFunc, error) {
	if !op.Valid() {
		return nil, fmt.Errorf("%w: unknown reduction %q (want sum, product, min or max)", transport.ErrBadMetadata, op)
	}
	op = op.OrSum()
	switch dt {
	case transport.Float32:
		return typed[float32](op), nil
	case transport.Float64:
		return typed[float64](op), nil
	case transport.Int8:
		return typed[int8](op), nil
	case transport.Int16:
		return typed[int16](op), nil
	case transport.Int32:
		return typed[int32](op), nil
	case transport.Int64:
		return typed[int64](op), nil
	case transport.Uint8:
		return typed[uint8](op), nil
	case transport.Bool:
		return boolean(op), nil
	case transport.BFloat16:
		return halves(op, bf16ToF32, f32ToBF16), nil
	case transport.Float16:
		return halves(op, f16ToF32, f32ToF16), nil
	}
	return nil, fmt.Errorf("%w: cannot reduce dtype %q", transport.ErrNotSupported, dt)
}

// typed returns op on elements of type T. Buffers whose start is not
// aligned for T (a tensor at an odd offset of its segment) are reduced
// through an aligned copy.
func typed[T number](op transport.ReduceOp) reduceFunc {
	var f func(d, s []T)
	switch op {
	case transport.ReduceSum:
		f = func(d, s []T) {
			s = s[:len(d)]
			// Unrolled: the loop's bounds checks and branch are paid once
			// per 8 elements.
			for len(d) >= 8 && len(s) >= 8 {
				d0, s0 := d[:8:8], s[:8:8]
				d0[0] += s0[0]
				d0[1] += s0[1]
				d0[2] += s0[2]
				d0[3] += s0[3]
				d0[4] += s0[4]
				d0[5] += s0[5]
				d0[6] += s0[6]
				d0[7] += s0[7]
				d, s = d[8:], s[8:]
			}
			for i := range d {
				d[i] += s[i]
			}
		}
	case transport.ReduceProduct:
		f = func(d, s []T) {
			s = s[:len(d)]
			for i := range d {
				d[i] *= s[i]
			}
		}
	case transport.ReduceMin:
		f = func(d, s []T) {
			s = s[:len(d)]
			for i := range d {
				d[i] = min(d[i], s[i])
			}
		}
	case transport.ReduceMax:
		f = func(d, s []T) {
			s = s[:len(d)]
			for i := range d {
				d[i] = max(d[i], s[i])
			}
		}
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	return func(dst, src []byte) {
		n := len(dst) / size
		if n == 0 {
			return
		}
		d, dcopy := view[T](dst, n)
		s, _ := view[T](src, n)
		f(d, s)
		if dcopy {
			copy(dst, unsafe.Slice((*byte)(unsafe.Pointer(&d[0])), n*size))
		}
	}
}

// view returns b as n elements of T, copying it when b is not aligned for
// T (copied is then true: write the result back).
func view[T number](b []byte, n int) (v []T, copied bool) {
	var zero T
	if uintptr(unsafe.Pointer(&b[0]))%unsafe.Alignof(zero) == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n), false
	}
	v = make([]T, n)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), n*int(unsafe.Sizeof(zero))), b)
	return v, true
}

// boolean reduces bytes holding 0 or 1: sum and max are or, product and min
// are and.
func boolean(op transport.ReduceOp) reduceFunc {
	if op == transport.ReduceSum || op == transport.ReduceMax {
		return func(d, s []byte) {
			s = s[:len(d)]
			for i := range d {
				d[i] = b2u(d[i] != 0 || s[i] != 0)
			}
		}
	}
	return func(d, s []byte) {
		s = s[:len(d)]
		for i := range d {
			d[i] = b2u(d[i] != 0 && s[i] != 0)
		}
	}
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// halves reduces 16-bit floats through float32, rounding each result back
// to the nearest 16-bit value.
func halves(op transport.ReduceOp, toF32 func(uint16) float32, fromF32 func(float32) uint16) reduceFunc {
	var f func(a, b float32) float32
	switch op {
	case transport.ReduceSum:
		f = func(a, b float32) float32 { return a + b }
	case transport.ReduceProduct:
		f = func(a, b float32) float32 { return a * b }
	case transport.ReduceMin:
		f = func(a, b float32) float32 { return min(a, b) }
	case transport.ReduceMax:
		f = func(a, b float32) float32 { return max(a, b) }
	}
	return func(d, s []byte) {
		for i := 0; i+1 < len(d); i += 2 {
			a := toF32(uint16(d[i]) | uint16(d[i+1])<<8)
			b := toF32(uint16(s[i]) | uint16(s[i+1])<<8)
			r := fromF32(f(a, b))
			d[i], d[i+1] = byte(r), byte(r>>8)
		}
	}
}

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToBF16 rounds to nearest, ties to even; NaN stays NaN.
func f32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if f != f {
		return uint16(u>>16) | 0x40 // quiet NaN
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// f16ToF32 converts an IEEE 754 binary16 value.
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: frac × 2^-24
		v := float32(frac) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}

// f32ToF16 converts to IEEE 754 binary16, rounding to nearest, ties to even.
func f32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	frac := u & 0x7fffff
	switch {
	case exp == 0xff: // inf or NaN
		if frac != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15: // overflow
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e <= 0 { // subnormal or zero in binary16
		if e < -10 {
			return sign
		}
		m := frac | 0x800000 // implicit bit
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rem := m & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | frac>>13
	rem := frac & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to infinity: correct
	}
	return sign | uint16(r)
}
