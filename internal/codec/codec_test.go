package codec

import (
	"errors"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/vmihailenco/msgpack/v5"
)

type point struct {
	X, Y int
	Tag  string
}

// refBox holds a reference encoded with EncodeRef, like sdk/ray.Ref does.
type refBox struct{ r RefInfo }

func (b refBox) EncodeMsgpack(enc *msgpack.Encoder) error { return EncodeRef(enc, b.r) }
func (b *refBox) DecodeMsgpack(dec *msgpack.Decoder) error {
	r, err := DecodeRef(dec)
	b.r = r
	return err
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   any
		out  func() any
		fmt  Format
	}{
		{"int", 42, func() any { return new(int) }, FormatMsgpack},
		{"string", "ok", func() any { return new(string) }, FormatMsgpack},
		{"bytes", []byte("raw bytes"), func() any { return new([]byte) }, FormatRaw},
		{"empty bytes", []byte{}, func() any { return new([]byte) }, FormatRaw},
		{"struct", point{1, 2, "p"}, func() any { return new(point) }, FormatMsgpack},
		{"slice", []int{1, 2, 3}, func() any { return new([]int) }, FormatMsgpack},
		{"map", map[string]float64{"a": 1.5}, func() any { return new(map[string]float64) }, FormatMsgpack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, data, refs, err := Encode(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if f != tt.fmt {
				t.Fatalf("format %q, want %q", f, tt.fmt)
			}
			if len(refs) != 0 {
				t.Fatalf("refs %v, want none", refs)
			}
			out := tt.out()
			if err := DecodeInto(f, data, out, false); err != nil {
				t.Fatal(err)
			}
			got, _ := msgpack.Marshal(out)
			want, _ := msgpack.Marshal(tt.in)
			if string(got) != string(want) {
				t.Fatalf("round trip: got %x, want %x", got, want)
			}
		})
	}
}

func TestRawNoCopy(t *testing.T) {
	in := []byte("zero copy")
	var out []byte
	if err := DecodeInto(FormatRaw, in, &out, true); err != nil {
		t.Fatal(err)
	}
	if &out[0] != &in[0] {
		t.Fatal("noCopy decode copied the bytes")
	}
	if err := DecodeInto(FormatRaw, in, &out, false); err != nil {
		t.Fatal(err)
	}
	if &out[0] == &in[0] {
		t.Fatal("copying decode shares memory with the input")
	}
}

func TestTypeMismatch(t *testing.T) {
	f, data, _, _ := Encode("not a number")
	var n int
	err := DecodeInto(f, data, &n, false)
	var te *TypeError
	if !errors.As(err, &te) || te.Want != "int" {
		t.Fatalf("want TypeError for int, got %v", err)
	}
	var s string
	if err := DecodeInto(FormatRaw, []byte("x"), &s, false); !errors.As(err, &te) {
		t.Fatalf("raw into string: want TypeError, got %v", err)
	}
}

func TestRefsAreCollected(t *testing.T) {
	owner := &pb.Address{WorkerId: []byte("w1"), UnixPath: "/tmp/x.sock"}
	a := RefInfo{ID: ids.ObjectIDFor(ids.New(), 1), Owner: owner}
	b := RefInfo{ID: ids.ObjectIDFor(ids.New(), 2), Owner: owner}
	type holder struct {
		Name string
		Refs []refBox
	}
	f, data, refs, err := Encode(holder{"h", []refBox{{a}, {b}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 || refs[0].ID != a.ID || refs[1].ID != b.ID {
		t.Fatalf("collected refs %v, want [a b]", refs)
	}
	var out holder
	if err := DecodeInto(f, data, &out, false); err != nil {
		t.Fatal(err)
	}
	if out.Refs[1].r.ID != b.ID || out.Refs[1].r.Owner.UnixPath != "/tmp/x.sock" {
		t.Fatalf("decoded ref %+v", out.Refs[1].r)
	}
	// A second encode with the pooled encoder must not see the first refs.
	_, _, refs, _ = Encode(holder{Name: "none"})
	if len(refs) != 0 {
		t.Fatalf("stale refs leaked between encodes: %v", refs)
	}
}

func BenchmarkEncodeSmall(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, _, _, err := Encode("ok"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeSmall(b *testing.B) {
	f, data, _, _ := Encode(point{1, 2, "p"})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var p point
		if err := DecodeInto(f, data, &p, false); err != nil {
			b.Fatal(err)
		}
	}
}
