package raylet

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/raylet/internal/dataplane"
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
	f.Add(rawRequest(dataplane.Magic, oid, 0, math.MaxUint64), int64(100))
	f.Add(rawRequest(dataplane.Magic, oid, 1, math.MaxInt64), int64(100))
	f.Add(rawRequest(dataplane.Magic, oid, 5, 10), int64(8))
	f.Add([]byte("grd1"), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		req, err := dataplane.ParseRequest(b)
		if err != nil {
			if len(b) == dataplane.RequestSize && string(b[:4]) == "grd1" {
				t.Fatalf("well-formed request refused: %v", err)
			}
			return
		}
		if len(b) != dataplane.RequestSize || string(b[:4]) != "grd1" || !bytes.Equal(req.OID[:], b[4:4+ids.ObjectIDSize]) {
			t.Fatalf("parsed %x as %+v", b, req)
		}
		if size < 0 {
			if _, _, err := dataplane.Range(req.Off, req.Length, size); err == nil {
				t.Fatalf("negative size %d accepted", size)
			}
			size = -(size + 1)
		}
		off, n, err := dataplane.Range(req.Off, req.Length, size)
		if err != nil {
			if req.Off >= 0 && req.Off <= size && (req.Length == -1 || req.Length >= 0 && req.Length <= math.MaxInt64-req.Off) {
				t.Fatalf("range (%d, %d) of a %d-byte object refused: %v", req.Off, req.Length, size, err)
			}
			return
		}
		if off != req.Off || off < 0 || n < 0 || off > size || n > size-off {
			t.Fatalf("range (%d, %d) of a %d-byte object became [%d, %d+%d)", req.Off, req.Length, size, off, off, n)
		}
		switch {
		case req.Length == -1 || req.Length > size-off:
			if n != size-off {
				t.Fatalf("range (%d, %d) of a %d-byte object sends %d bytes, want the rest, %d", req.Off, req.Length, size, n, size-off)
			}
		case n != req.Length:
			t.Fatalf("range (%d, %d) of a %d-byte object sends %d bytes", req.Off, req.Length, size, n)
		}
	})
}

// FuzzResponseHeader reads arbitrary bytes as the response to a read at
// offset off, as the rangeReader does. Beyond not crashing: an accepted
// header announces a size in [off, dataplane.MaxObjectSize] and metadata that was
// in the input and at most dataplane.MaxMetadataLen bytes; a refusal's message is
// at most dataplane.MaxRefusalLen bytes and was in the input.
//
// The seed corpus is in testdata/fuzz/FuzzResponseHeader.
func FuzzResponseHeader(f *testing.F) {
	f.Add(append(okHeader(10, 1), 'M'), int64(0))
	f.Add(okHeader(1<<40, 0), int64(1<<39))
	f.Add(refusal(dataplane.StatusBadRange, 4, "nope"), int64(0))
	f.Add(okHeader(-1, 2), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, off int64) {
		size, meta, err := dataplane.ReadResponse(bufio.NewReader(bytes.NewReader(b)), off)
		var de *dataplane.Error
		switch {
		case errors.As(err, &de):
			if len(de.Msg) > dataplane.MaxRefusalLen || 17+len(de.Msg) > len(b) || b[0] == dataplane.StatusOK {
				t.Fatalf("refusal of %d message bytes from %d input bytes (status %d)", len(de.Msg), len(b), b[0])
			}
		case err == nil:
			if size < off || size > dataplane.MaxObjectSize || size < 0 {
				t.Fatalf("accepted size %d for a read at %d", size, off)
			}
			if len(meta) > dataplane.MaxMetadataLen || 13+len(meta) > len(b) || !bytes.Equal(meta, b[13:13+len(meta)]) {
				t.Fatalf("accepted %d bytes of metadata from %d input bytes", len(meta), len(b))
			}
		}
	})
}

// okHeader is a response header saying ok, size, metadata length n.
func okHeader(size int64, n uint32) []byte {
	b := make([]byte, 13)
	binary.BigEndian.PutUint64(b[1:], uint64(size))
	binary.BigEndian.PutUint32(b[9:], n)
	return b
}

// refusal is a refusal with a message length field of l and msg.
func refusal(status byte, l uint32, msg string) []byte {
	b := make([]byte, 17)
	b[0] = status
	binary.BigEndian.PutUint32(b[13:], l)
	return append(b, msg...)
}
