package codec

import "testing"

// record is a representative task argument or result: a few scalars, a
// string, a slice of numbers and a small map.
type record struct {
	ID     int64
	Name   string
	Score  float64
	Tags   []string
	Values []float64
	Attrs  map[string]int
}

func benchRecord() record {
	r := record{ID: 42, Name: "sample-0042", Score: 0.93, Tags: []string{"a", "bb", "ccc"}, Attrs: map[string]int{"x": 1, "y": 2, "z": 3}}
	for i := range 1000 {
		r.Values = append(r.Values, float64(i)*1.5)
	}
	return r
}

// BenchmarkDecodeRecord decodes a ~9 KB record into its struct type.
func BenchmarkDecodeRecord(b *testing.B) {
	f, data, _, err := Encode(benchRecord())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var r record
		if err := DecodeInto(f, data, &r, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeAny decodes the same record into an interface value
// (maps and slices of any).
func BenchmarkDecodeAny(b *testing.B) {
	f, data, _, err := Encode(benchRecord())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var v any
		if err := DecodeInto(f, data, &v, false); err != nil {
			b.Fatal(err)
		}
	}
}
