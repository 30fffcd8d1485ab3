package collective

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/goray-dev/goray/sdk/transport"
)

func TestFloat16Conversions(t *testing.T) {
	cases := []struct {
		f float32
		h uint16
	}{
		{0, 0x0000}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800},
		{65504, 0x7bff},                  // largest finite
		{65520, 0x7c00},                  // rounds up to infinity
		{float32(math.Inf(1)), 0x7c00},   // infinity
		{6.103515625e-05, 0x0400},        // smallest normal
		{5.960464477539063e-08, 0x0001},  // smallest subnormal
		{2.9802322387695312e-08, 0x0000}, // half of it: ties to even (0)
		{8.940696716308594e-08, 0x0002},  // 1.5 × smallest: ties to even (2)
		{1.0009765625, 0x3c01},           // 1 + 2^-10
		{1.00048828125, 0x3c00},          // 1 + 2^-11: tie, to even
		{1.00146484375, 0x3c02},          // 1 + 3·2^-11: tie, to even
		{3.0517578125e-05, 0x0200},       // a subnormal
	}
	for _, c := range cases {
		if got := f32ToF16(c.f); got != c.h {
			t.Errorf("f32ToF16(%g) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	// Every finite binary16 value converts to float32 and back unchanged.
	for h := range uint32(0x10000) {
		v := f16ToF32(uint16(h))
		if v != v {
			if back := f32ToF16(v); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back := f32ToF16(v); back != uint16(h) {
			t.Fatalf("%#04x → %g → %#04x", h, v, back)
		}
	}
}

func TestBFloat16Conversions(t *testing.T) {
	for h := range uint32(0x10000) {
		v := bf16ToF32(uint16(h))
		if v != v {
			continue
		}
		if back := f32ToBF16(v); back != uint16(h) {
			t.Fatalf("%#04x → %g → %#04x", h, v, back)
		}
	}
	if got := f32ToBF16(1 + 1.0/256); got != 0x3f80 { // tie, to even
		t.Errorf("f32ToBF16(1+2^-8) = %#04x, want 0x3f80", got)
	}
	if got := f32ToBF16(float32(math.NaN())); bf16ToF32(got) == bf16ToF32(got) {
		t.Errorf("NaN became %#04x", got)
	}
}

func TestReducers(t *testing.T) {
	f32 := func(vs ...float32) []byte {
		b := make([]byte, 4*len(vs))
		for i, v := range vs {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	}
	nan := float32(math.NaN())
	for _, tc := range []struct {
		op   transport.ReduceOp
		want []float32
	}{
		{transport.ReduceSum, []float32{5, -1, nan}},
		{transport.ReduceProduct, []float32{6, -6, nan}},
		{transport.ReduceMin, []float32{2, -3, nan}},
		{transport.ReduceMax, []float32{3, 2, nan}},
	} {
		f, err := reducer(transport.Float32, tc.op)
		if err != nil {
			t.Fatal(err)
		}
		// dst at an odd offset: reduced through an aligned copy.
		buf := append([]byte{0xee}, f32(2, -3, nan)...)
		dst := buf[1:]
		f(dst, f32(3, 2, 1))
		if buf[0] != 0xee {
			t.Errorf("%s wrote outside dst", tc.op)
		}
		for i, w := range tc.want {
			got := math.Float32frombits(binary.LittleEndian.Uint32(dst[4*i:]))
			if got != w && !(got != got && w != w) {
				t.Errorf("%s: element %d = %v, want %v", tc.op, i, got, w)
			}
		}
	}
	f16, _ := reducer(transport.Float16, transport.ReduceSum)
	d := []byte{0x00, 0x3c}                      // 1.0
	f16(d, []byte{0x00, 0x40})                   // + 2.0
	if binary.LittleEndian.Uint16(d) != 0x4200 { // 3.0
		t.Errorf("float16 1+2 = %#04x", binary.LittleEndian.Uint16(d))
	}
	if _, err := reducer(transport.Float32, "avg"); !errors.Is(err, transport.ErrBadMetadata) {
		t.Errorf("unknown op: %v", err)
	}
	if _, err := reducer("complex64", transport.ReduceSum); !errors.Is(err, transport.ErrNotSupported) {
		t.Errorf("unknown dtype: %v", err)
	}
}
