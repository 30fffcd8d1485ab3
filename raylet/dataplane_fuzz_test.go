package raylet

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
)

// FuzzDataRequest parses arbitrary request bytes and checks the range
// against an arbitrary object size, as serveDataConn and serveRange do.
// Beyond not crashing: only well-sized requests with the magic parse, and
// an accepted range always lies inside the object (0 <= off <= off+n <=
// size), is the requested one when that fits, and the rest of the object
// for length -1 or a length past the end.
//
// The seed corpus is in testdata/fuzz/FuzzDataRequest.
func FuzzDataRequest(f *testing.F) {
	oid := ids.ObjectIDFor(ids.New(), 1)
	f.Add(rawRequest(dataMagic, oid, 0, math.MaxUint64), int64(100))
	f.Add(rawRequest(dataMagic, oid, 1, math.MaxInt64), int64(100))
	f.Add(rawRequest(dataMagic, oid, 5, 10), int64(8))
	f.Add([]byte("grd1"), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		req, err := parseDataRequest(b)
		if err != nil {
			if len(b) == dataRequestSize && string(b[:4]) == "grd1" {
				t.Fatalf("well-formed request refused: %v", err)
			}
			return
		}
		if len(b) != dataRequestSize || string(b[:4]) != "grd1" || !bytes.Equal(req.oid[:], b[4:4+ids.ObjectIDSize]) {
			t.Fatalf("parsed %x as %+v", b, req)
		}
		if size < 0 {
			if _, _, err := dataRange(req.off, req.length, size); err == nil {
				t.Fatalf("negative size %d accepted", size)
			}
			size = -(size + 1)
		}
		off, n, err := dataRange(req.off, req.length, size)
		if err != nil {
			if req.off >= 0 && req.off <= size && (req.length == -1 || req.length >= 0 && req.length <= math.MaxInt64-req.off) {
				t.Fatalf("range (%d, %d) of a %d-byte object refused: %v", req.off, req.length, size, err)
			}
			return
		}
		if off != req.off || off < 0 || n < 0 || off > size || n > size-off {
			t.Fatalf("range (%d, %d) of a %d-byte object became [%d, %d+%d)", req.off, req.length, size, off, off, n)
		}
		switch {
		case req.length == -1 || req.length > size-off:
			if n != size-off {
				t.Fatalf("range (%d, %d) of a %d-byte object sends %d bytes, want the rest, %d", req.off, req.length, size, n, size-off)
			}
		case n != req.length:
			t.Fatalf("range (%d, %d) of a %d-byte object sends %d bytes", req.off, req.length, size, n)
		}
	})
}

// FuzzResponseHeader reads arbitrary bytes as the response to a read at
// offset off, as the rangeReader does. Beyond not crashing: an accepted
// header announces a size in [off, maxObjectSize] and metadata that was
// in the input and at most maxMetadataLen bytes; a refusal's message is
// at most maxRefusalLen bytes and was in the input.
//
// The seed corpus is in testdata/fuzz/FuzzResponseHeader.
func FuzzResponseHeader(f *testing.F) {
	f.Add(append(okHeader(10, 1), 'M'), int64(0))
	f.Add(okHeader(1<<40, 0), int64(1<<39))
	f.Add(refusal(dataBadRange, 4, "nope"), int64(0))
	f.Add(okHeader(-1, 2), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, off int64) {
		size, meta, err := readResponse(bufio.NewReader(bytes.NewReader(b)), off)
		var de *dataError
		switch {
		case errors.As(err, &de):
			if len(de.msg) > maxRefusalLen || 17+len(de.msg) > len(b) || b[0] == dataOK {
				t.Fatalf("refusal of %d message bytes from %d input bytes (status %d)", len(de.msg), len(b), b[0])
			}
		case err == nil:
			if size < off || size > maxObjectSize || size < 0 {
				t.Fatalf("accepted size %d for a read at %d", size, off)
			}
			if len(meta) > maxMetadataLen || 13+len(meta) > len(b) || !bytes.Equal(meta, b[13:13+len(meta)]) {
				t.Fatalf("accepted %d bytes of metadata from %d input bytes", len(meta), len(b))
			}
		}
	})
}
