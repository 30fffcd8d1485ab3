package codec

import (
	"bytes"
	"errors"
	"strings"
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

// hugeRef is 7 bytes that claimed a 4 GiB object id: a 5-field array, then
// a bin32 header of 0xffffffff bytes and one byte. DecodeRef, called on its
// own (not behind DecodeInto's CheckMsgpack), allocated what it claimed.
var hugeRef = []byte{0x95, 0xc6, 0xff, 0xff, 0xff, 0xff, 0x00}

// TestDecodeRefBounded feeds DecodeRef references whose fields claim more
// than they can be: each is refused with ErrMalformedRef before anything
// of the claimed size is allocated.
func TestDecodeRefBounded(t *testing.T) {
	oid := ids.ObjectIDFor(ids.New(), 1)
	// valid is a reference's array header and object id, then rest.
	valid := func(rest ...byte) []byte {
		b := append([]byte{0x95, 0xc4, byte(len(oid))}, oid[:]...)
		return append(b, rest...)
	}
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"object id of 4 GiB (7 bytes)", hugeRef, "object id of 4294967295 bytes"},
		{"owner node id of 4 GiB", valid(0xc6, 0xff, 0xff, 0xff, 0xff, 0), "owner node id of 4294967295 bytes"},
		{"owner worker id of 1 GiB", valid(0xc0, 0xc6, 0x40, 0, 0, 0, 0), "owner worker id of 1073741824 bytes"},
		{"unix path of 4 GiB", valid(0xc0, 0xc0, 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'), "owner unix path of 4294967295 bytes"},
		{"TCP address of 64 KiB", valid(0xc0, 0xc0, 0xa0, 0xda, 0xff, 0xff), "owner TCP address of 65535 bytes"},
		{"truncated field", valid(0xc4, 0x10, 1, 2), "owner node id: unexpected EOF"},
		{"short object id", []byte{0x95, 0xc4, 2, 1, 2}, "object id"},
		{"not a field", valid(0x01), "owner node id"},
		{"four fields", []byte{0x94}, "4 fields, want 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := heapAllocs()
			_, err := DecodeRef(msgpack.NewDecoder(bytes.NewReader(tt.in)))
			allocated := heapAllocs() - before
			if !errors.Is(err, ErrMalformedRef) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("DecodeRef(%x) = %v, want ErrMalformedRef saying %q", tt.in, err, tt.want)
			}
			// The heap counter moves in lumps of a few MiB (see
			// FuzzDecode); a claimed length allocated is far above.
			if allocated > 16<<20 {
				t.Errorf("DecodeRef(%x) allocated %d bytes", tt.in, allocated)
			}
		})
	}
	// A real reference still decodes, nil fields and all.
	in := RefInfo{ID: oid, Owner: &pb.Address{NodeId: []byte("n"), TcpAddr: "127.0.0.1:1"}}
	_, b, _, err := Encode(refBox{in})
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRef(msgpack.NewDecoder(bytes.NewReader(b)))
	if err != nil || got.ID != oid || string(got.Owner.NodeId) != "n" || got.Owner.WorkerId != nil || got.Owner.UnixPath != "" || got.Owner.TcpAddr != "127.0.0.1:1" {
		t.Errorf("DecodeRef of a real reference = %+v, %v", got, err)
	}
}
