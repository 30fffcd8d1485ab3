package codec

import (
	"bytes"
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzDecode decodes arbitrary bytes into each of decodeTargets. Beyond
// not crashing: input CheckMsgpack refuses is refused by DecodeInto too;
// whatever decodes into an interface re-encodes (with Encode) into bytes
// CheckMsgpack accepts (the check never refuses what Encode writes); and
// no decode
// allocates more than a fixed multiple of the input's size (before the
// check, 24 bytes could claim 2.47e9 elements and allocate 39 GB), nor
// does DecodeRef on its own (7 bytes once claimed a 4 GiB field).
//
// The seed corpus is in testdata/fuzz/FuzzDecode; make fuzz-smoke runs it
// for a few seconds, make fuzz for longer.
func FuzzDecode(f *testing.F) {
	small := record{ID: 7, Name: "r", Score: 0.5, Tags: []string{"t"}, Values: []float64{1, 2}, Attrs: map[string]int{"k": 1}}
	for _, v := range []any{nil, 1, "s", []int{1, 2}, map[string]any{"a": []any{1.5, "x"}}, small} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(hugeArray)
	f.Add(hugeRef)
	f.Fuzz(func(t *testing.T, data []byte) {
		// DecodeRef on its own, as a reference type's DecodeMsgpack runs
		// it on a decoder DecodeInto did not pre-scan.
		before := heapAllocs()
		_, _ = DecodeRef(msgpack.NewDecoder(bytes.NewReader(data)))
		if allocated, limit := heapAllocs()-before, 16<<20+256*uint64(len(data)); allocated > limit {
			t.Fatalf("DecodeRef of %d bytes allocated %d bytes (limit %d)", len(data), allocated, limit)
		}
		checkErr := CheckMsgpack(data)
		for _, tt := range decodeTargets {
			ptr := tt.new()
			before := heapAllocs()
			err := DecodeInto(FormatMsgpack, data, ptr, false)
			allocated := heapAllocs() - before
			// Generous: a []record element is 100 bytes and may be one
			// byte of input (nil); maps and interfaces cost less. The
			// runtime counts allocations when a cached span is retired,
			// so the counter moves in lumps of up to a few MiB (a GC
			// retires them all); 16 MiB covers that and still catches a
			// claimed length being allocated.
			if limit := 16<<20 + 256*uint64(len(data)); allocated > limit {
				t.Fatalf("decoding %d bytes into %s allocated %d bytes (limit %d)", len(data), tt.name, allocated, limit)
			}
			if checkErr != nil && !errors.As(err, new(*MalformedError)) {
				t.Fatalf("CheckMsgpack refused the input (%v) but decoding into %s returned %v", checkErr, tt.name, err)
			}
			if tt.name == "any" && err == nil {
				f, b, _, err := Encode(*ptr.(*any))
				if err != nil {
					t.Fatalf("re-encoding the decoded value: %v", err)
				}
				if err := CheckMsgpack(b); f == FormatMsgpack && err != nil {
					t.Fatalf("CheckMsgpack refuses Encode's output %x: %v", b, err)
				}
			}
		}
	})
}
