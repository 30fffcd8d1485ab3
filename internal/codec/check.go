package codec

import (
	"encoding/binary"
	"fmt"
)

// MaxDepth is how deeply arrays and maps may nest in a decoded value. The
// decoder recurses once per level, so without a bound a few megabytes of
// nested one-element arrays would exhaust the goroutine stack, which kills
// the process (no recover catches it).
const MaxDepth = 10000

// MalformedError reports MessagePack input that is refused before it is
// decoded: a length or count that claims more than the input holds, a
// truncated value, an unused code, nesting deeper than MaxDepth or an
// extension the decoder could read as a map (see CheckMsgpack).
type MalformedError struct {
	// Offset is where the offending value starts in the input.
	Offset int
	// Size is the length of the whole input.
	Size int
	// Problem says what is wrong, for example "array of 2470000000
	// elements, but only 19 bytes remain".
	Problem string
}

// Error names the problem and where it is.
func (e *MalformedError) Error() string {
	return fmt.Sprintf("codec: malformed msgpack at byte %d of %d bytes of input: %s", e.Offset, e.Size, e.Problem)
}

// CheckMsgpack walks the MessagePack values in data (usually one) without
// decoding or allocating, and refuses input the decoder must never see:
// every array, map, string, binary and extension length is checked against
// the bytes left (every element takes at least one byte), so a few bytes
// claiming billions of elements cannot make the decoder allocate gigabytes
// (vmihailenco/msgpack sizes some slices by the claimed count). It also
// refuses truncated values, the unused code 0xc1, nesting deeper than
// MaxDepth and extensions whose payload starts like a map or nil (the
// decoder would read such a payload as a map where it expects one: see
// checker.ext; Encode never writes one, but an extension type a program
// registers itself with msgpack.RegisterExt may, and is then refused).
// Once data passes, the values the decoder builds hold at most len(data)
// elements in all. The error is a *MalformedError. O(len(data)), no
// allocation.
func CheckMsgpack(data []byte) error {
	c := checker{b: data}
	for c.pos < len(c.b) {
		if err := c.value(0); err != nil {
			return err
		}
	}
	return nil
}

// checker walks MessagePack input; pos is the next byte to read.
type checker struct {
	b   []byte
	pos int
}

func (c *checker) fail(at int, format string, args ...any) error {
	return &MalformedError{Offset: at, Size: len(c.b), Problem: fmt.Sprintf(format, args...)}
}

// uint reads an n-byte big-endian length or count after the code at start.
func (c *checker) uint(start, n int, what string) (uint64, error) {
	if len(c.b)-c.pos < n {
		return 0, c.fail(start, "%s header needs %d more bytes, only %d remain", what, n, len(c.b)-c.pos)
	}
	var v uint64
	switch n {
	case 1:
		v = uint64(c.b[c.pos])
	case 2:
		v = uint64(binary.BigEndian.Uint16(c.b[c.pos:]))
	case 4:
		v = uint64(binary.BigEndian.Uint32(c.b[c.pos:]))
	}
	c.pos += n
	return v, nil
}

// skip steps over n payload bytes of the value at start.
func (c *checker) skip(start int, n uint64, what string) error {
	if left := uint64(len(c.b) - c.pos); n > left {
		return c.fail(start, "%s of %d bytes, but only %d bytes remain", what, n, left)
	}
	c.pos += int(n)
	return nil
}

// ext steps over an extension's type byte and n payload bytes. Where the
// decoder expects a map and finds an extension, vmihailenco/msgpack
// (DecodeMapLen) skips the extension's header and reads a map from its
// payload, and everything after from there: bytes this walk never checked
// as values. So a payload that starts like a map (or nil, a nil map) is
// refused; Encode never writes one (see timestampEncoder).
func (c *checker) ext(start int, n uint64) error {
	if err := c.skip(start, n+1, "extension"); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if p := c.b[c.pos-int(n)]; p >= 0x80 && p <= 0x8f || p == 0xc0 || p == 0xde || p == 0xdf {
		return c.fail(start, "extension of type %d whose payload starts with %#x, which the decoder would read as a map where one is expected",
			int8(c.b[c.pos-int(n)-1]), p)
	}
	return nil
}

// value checks one value, and the elements of an array or map.
func (c *checker) value(depth int) error {
	start := c.pos
	code := c.b[c.pos]
	c.pos++
	var n uint64 // elements of an array or map (a map counts keys and values)
	var what string
	var err error
	switch {
	case code <= 0x7f || code >= 0xe0 || code == 0xc0 || code == 0xc2 || code == 0xc3:
		return nil // fixint, nil, bool
	case code <= 0x8f:
		n, what = 2*uint64(code&0x0f), "map"
	case code <= 0x9f:
		n, what = uint64(code&0x0f), "array"
	case code <= 0xbf:
		return c.skip(start, uint64(code&0x1f), "string")
	}
	switch code {
	case 0xc1:
		return c.fail(start, "code 0xc1 is never used")
	case 0xc4, 0xc5, 0xc6: // bin 8/16/32
		if n, err = c.uint(start, 1<<(code-0xc4), "binary"); err != nil {
			return err
		}
		return c.skip(start, n, "binary")
	case 0xd9, 0xda, 0xdb: // str 8/16/32
		if n, err = c.uint(start, 1<<(code-0xd9), "string"); err != nil {
			return err
		}
		return c.skip(start, n, "string")
	case 0xc7, 0xc8, 0xc9: // ext 8/16/32: length, type, payload
		if n, err = c.uint(start, 1<<(code-0xc7), "extension"); err != nil {
			return err
		}
		return c.ext(start, n)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1/2/4/8/16: type, payload
		return c.ext(start, 1<<(code-0xd4))
	case 0xca, 0xcb: // float 32/64
		return c.skip(start, 4<<(code-0xca), "float")
	case 0xcc, 0xcd, 0xce, 0xcf: // uint 8..64
		return c.skip(start, 1<<(code-0xcc), "integer")
	case 0xd0, 0xd1, 0xd2, 0xd3: // int 8..64
		return c.skip(start, 1<<(code-0xd0), "integer")
	case 0xdc, 0xdd: // array 16/32
		if n, err = c.uint(start, 2<<(code-0xdc), "array"); err != nil {
			return err
		}
		what = "array"
	case 0xde, 0xdf: // map 16/32
		if n, err = c.uint(start, 2<<(code-0xde), "map"); err != nil {
			return err
		}
		n, what = 2*n, "map"
	}
	if n == 0 {
		return nil
	}
	if left := uint64(len(c.b) - c.pos); n > left {
		return c.fail(start, "%s, but only %d bytes remain", describe(what, n), left)
	}
	if depth >= MaxDepth {
		return c.fail(start, "%s nested more than %d levels deep", what, MaxDepth)
	}
	for i := range n {
		if c.pos == len(c.b) {
			return c.fail(start, "%s, but the input ends after %d of its %d values", describe(what, n), i, n)
		}
		// Fast path: numbers, nil, booleans and short strings are
		// stepped over here, without a call per element.
		if sz := int(fixedSize[c.b[c.pos]]); sz != 0 && sz <= len(c.b)-c.pos {
			c.pos += sz
			continue
		}
		if err := c.value(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// fixedSize is the whole size of a value whose first byte alone tells it
// (numbers, nil, booleans, fixstr), else 0.
var fixedSize = func() (t [256]uint8) {
	for c := range 256 {
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
			t[c] = 1
		case c >= 0xa0 && c <= 0xbf:
			t[c] = uint8(1 + c&0x1f)
		case c == 0xca || c == 0xcb:
			t[c] = 1 + 4<<(c-0xca)
		case c >= 0xcc && c <= 0xcf:
			t[c] = 1 + 1<<(c-0xcc)
		case c >= 0xd0 && c <= 0xd3:
			t[c] = 1 + 1<<(c-0xd0)
		}
	}
	return t
}()

// describe names a container of n elements (a map's n counts keys and
// values).
func describe(what string, n uint64) string {
	if what == "map" {
		return fmt.Sprintf("map of %d entries", n/2)
	}
	return fmt.Sprintf("array of %d elements", n)
}
