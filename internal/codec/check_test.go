package codec

import (
	"bytes"
	"errors"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/vmihailenco/msgpack/v5"
)

// heapAllocs returns the bytes allocated on the heap since the process
// started (a cumulative counter, cheap to read).
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// hugeArray is the input fuzzing found: 24 bytes claiming an array of
// 2,470,000,000 elements. Decoding it into an interface made
// vmihailenco/msgpack allocate 2.47e9 × 16 bytes (39 GB) up front and the
// process died of OOM.
var hugeArray = append([]byte{0xdd, 0x93, 0x39, 0x35, 0x80}, make([]byte, 19)...)

// decodeTargets are the types the fuzz target and the regression tests
// decode into.
var decodeTargets = []struct {
	name string
	new  func() any
}{
	{"any", func() any { return new(any) }},
	{"[]any", func() any { return new([]any) }},
	{"[]int", func() any { return new([]int) }},
	{"[]string", func() any { return new([]string) }},
	{"[][]byte", func() any { return new([][]byte) }},
	{"map[string]any", func() any { return new(map[string]any) }},
	{"map[string]string", func() any { return new(map[string]string) }},
	{"[]record", func() any { return new([]record) }},
	{"record", func() any { return new(record) }},
	{"point", func() any { return new(point) }},
	{"refBox", func() any { return new(refBox) }},
	{"time", func() any { return new(time.Time) }},
}

func TestHugeArrayIsRefused(t *testing.T) {
	if len(hugeArray) != 24 {
		t.Fatalf("the regression input has %d bytes, want 24", len(hugeArray))
	}
	for _, tt := range decodeTargets {
		t.Run(tt.name, func(t *testing.T) {
			before := heapAllocs()
			err := DecodeInto(FormatMsgpack, hugeArray, tt.new(), false)
			allocated := heapAllocs() - before
			var me *MalformedError
			if !errors.As(err, &me) {
				t.Fatalf("DecodeInto = %v, want a MalformedError", err)
			}
			var te *TypeError
			if !errors.As(err, &te) {
				t.Fatalf("DecodeInto = %v, want it wrapped in a TypeError", err)
			}
			for _, w := range []string{"array of 2470000000 elements", "only 19 bytes remain", "at byte 0 of 24 bytes"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if allocated > 64<<10 {
				t.Fatalf("refusing 24 bytes allocated %d bytes", allocated)
			}
		})
	}
	if err := Unmarshal(hugeArray, new(any)); !errors.As(err, new(*MalformedError)) {
		t.Fatalf("Unmarshal = %v, want a MalformedError", err)
	}
}

func TestCheckMsgpackAcceptsEncoderOutput(t *testing.T) {
	owner := &pb.Address{WorkerId: []byte("w1"), UnixPath: "/tmp/x.sock"}
	deep := any(1)
	for range MaxDepth {
		deep = []any{deep}
	}
	values := []any{
		nil, true, false, 0, 1, -1, 127, 128, -33, 255, 65535, 1 << 20, -1 << 40, uint64(1) << 63,
		1.5, float32(2.5), "", "x", strings.Repeat("s", 31), strings.Repeat("s", 32), strings.Repeat("s", 300), strings.Repeat("s", 70000),
		[]byte{}, []byte("b"), bytes.Repeat([]byte{1}, 300), bytes.Repeat([]byte{2}, 70000),
		[]int{}, []int{1, 2, 3}, make([]int, 20), make([]int, 70000), map[string]int{}, map[string]int{"a": 1},
		map[string]any{"nested": []any{map[string]any{"x": nil}}}, benchRecord(), point{1, 2, "p"},
		refBox{RefInfo{ID: ids.ObjectIDFor(ids.New(), 1), Owner: owner}},
		time.Unix(1, 2).UTC(), time.Unix(1<<33, 5).UTC(), time.Unix(5, 0).UTC(),
		deep,
	}
	for _, v := range values {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckMsgpack(b); err != nil {
			t.Errorf("CheckMsgpack(encoding of %T): %v", v, err)
		}
	}
	// Several values in a row are walked one after another.
	two, _ := msgpack.Marshal("a")
	two = append(two, two...)
	if err := CheckMsgpack(two); err != nil {
		t.Errorf("two values: %v", err)
	}
	if err := CheckMsgpack(nil); err != nil {
		t.Errorf("empty input: %v", err)
	}
}

func TestCheckMsgpackRefuses(t *testing.T) {
	nested := func(levels int) []byte { return append(bytes.Repeat([]byte{0x91}, levels), 0) }
	tests := []struct {
		name string
		in   []byte
		at   int
		want string
	}{
		{"huge array32", hugeArray, 0, "array of 2470000000 elements, but only 19 bytes remain"},
		{"array16 past the end", []byte{0xdc, 0x00, 0x05, 1, 2}, 0, "array of 5 elements, but only 2 bytes remain"},
		{"fixarray past the end", []byte{0x93, 1}, 0, "array of 3 elements, but only 1 bytes remain"},
		{"huge map32", []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0, 0}, 0, "map of 4294967295 entries"},
		{"fixmap missing its value", []byte{0x81, 0xa1, 'k'}, 0, "map of 1 entries, but the input ends after 1 of its 2 values"},
		{"fixmap past the end", []byte{0x82, 0xa0}, 0, "map of 2 entries, but only 1 bytes remain"},
		{"huge str32", []byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'}, 0, "string of 4294967295 bytes, but only 1 bytes remain"},
		{"huge bin32", []byte{0xc6, 0x7f, 0xff, 0xff, 0xff}, 0, "binary of 2147483647 bytes"},
		{"huge ext32", []byte{0xc9, 0x10, 0, 0, 0, 1}, 0, "extension of 268435457 bytes"},
		{"truncated fixext", []byte{0xd8, 0xff, 1, 2}, 0, "extension of 17 bytes, but only 3 bytes remain"},
		{"truncated str16 header", []byte{0xda, 0x01}, 0, "string header needs 2 more bytes, only 1 remain"},
		{"truncated float64", []byte{0xcb, 0, 0}, 0, "float of 8 bytes"},
		{"truncated int64", []byte{0xd3, 0}, 0, "integer of 8 bytes"},
		{"unused code", []byte{0xc1}, 0, "code 0xc1 is never used"},
		{"nested element past the end", []byte{0x92, 0x91, 0xdc, 0xff, 0xff}, 2, "array of 65535 elements, but only 0 bytes remain"},
		{"input ends inside an array", []byte{0x92, 0xa2, 'x', 'y'}, 0, "the input ends after 1 of its 2 values"},
		{"second value malformed", []byte{0x01, 0x92, 0x01}, 1, "array of 2 elements"},
		{"too deep", nested(MaxDepth + 1), MaxDepth, "nested more than 10000 levels deep"},
		// Found by FuzzDecode: decoding into map[string]any read a map32
		// header claiming 551 million entries from the extension's payload.
		{"fixext wrapping map32", []byte("\xd6\x00\xdf \xda0000"), 0, "extension of type 0 whose payload starts with 0xdf"},
		{"fixext wrapping fixmap", []byte{0xd4, 0x01, 0x85}, 0, "extension of type 1 whose payload starts with 0x85"},
		{"ext8 wrapping map16", []byte{0xc7, 0x03, 0x02, 0xde, 0xff, 0xff}, 0, "payload starts with 0xde"},
		{"time ext wrapping nil", []byte{0xd6, 0xff, 0xc0, 0, 0, 0}, 0, "extension of type -1 whose payload starts with 0xc0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckMsgpack(tt.in)
			var me *MalformedError
			if !errors.As(err, &me) {
				t.Fatalf("CheckMsgpack = %v, want a MalformedError", err)
			}
			if me.Offset != tt.at || me.Size != len(tt.in) {
				t.Errorf("error at byte %d of %d, want %d of %d", me.Offset, me.Size, tt.at, len(tt.in))
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if err := DecodeInto(FormatMsgpack, tt.in, new(any), false); !errors.As(err, &me) {
				t.Errorf("DecodeInto = %v, want the MalformedError", err)
			}
		})
	}
	// Exactly MaxDepth levels decode.
	var v any
	if err := DecodeInto(FormatMsgpack, nested(MaxDepth), &v, false); err != nil {
		t.Fatalf("%d levels: %v", MaxDepth, err)
	}
}

// Encode writes times in a form CheckMsgpack accepts, also those whose
// compact forms would start like a map (nanoseconds around 0.55 s or
// 0.93 s, seconds past 2038), and they round-trip.
func TestTimesRoundTrip(t *testing.T) {
	type event struct {
		At   time.Time
		Ptr  *time.Time
		Any  any
		Tags map[string]time.Time
	}
	for _, tm := range []time.Time{
		time.Unix(1, 0), time.Unix(0, 560_000_000), time.Unix(1_700_000_000, 935_000_000),
		time.Unix(1<<31+5, 0), time.Unix(0xdf<<24, 0), time.Unix(1<<40, 999_999_999), time.Unix(-5, 1), {},
	} {
		tm := tm.UTC()
		for _, v := range []any{tm, &tm, []any{tm}, event{At: tm, Ptr: &tm, Any: tm, Tags: map[string]time.Time{"k": tm}}} {
			f, data, _, err := Encode(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckMsgpack(data); err != nil {
				t.Fatalf("Encode(%T %v) = %x, refused: %v", v, tm, data, err)
			}
			switch v := v.(type) {
			case time.Time:
				var got time.Time
				if err := DecodeInto(f, data, &got, false); err != nil || !got.Equal(v) {
					t.Fatalf("%v decoded as %v, %v", v, got, err)
				}
			case event:
				var got event
				if err := DecodeInto(f, data, &got, false); err != nil {
					t.Fatal(err)
				}
				if !got.At.Equal(tm) || !got.Ptr.Equal(tm) || !got.Tags["k"].Equal(tm) || !got.Any.(time.Time).Equal(tm) {
					t.Fatalf("%v decoded as %+v", tm, got)
				}
			}
		}
	}
	// A compact timestamp from another encoder still decodes when its
	// first byte does not look like a map; one that does is refused.
	b, _ := msgpack.Marshal(time.Unix(5, 0))
	var got time.Time
	if err := DecodeInto(FormatMsgpack, b, &got, false); err != nil || got.Unix() != 5 {
		t.Fatalf("compact timestamp: %v, %v", got, err)
	}
	b, _ = msgpack.Marshal(time.Unix(0, 560_000_000))
	if err := DecodeInto(FormatMsgpack, b, &got, false); !errors.As(err, new(*MalformedError)) {
		t.Fatalf("compact timestamp %x starting like a map: %v, want a MalformedError", b, err)
	}
}

// BenchmarkCheckMsgpack measures the check alone on the record of
// BenchmarkDecodeRecord.
func BenchmarkCheckMsgpack(b *testing.B) {
	_, data, _, err := Encode(benchRecord())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := CheckMsgpack(data); err != nil {
			b.Fatal(err)
		}
	}
}
