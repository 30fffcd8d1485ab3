package storagetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/goray-dev/goray/sdk/storage"
)

// The suite's objects are pseudo-random bytes generated from a seed: byte i
// of an object is byte i%8 of mix(seed + i/8·φ), so any range of any object
// can be regenerated on its own (at several GB/s), and objects of any size
// are written and checked as they stream, never held in memory.

const golden = 0x9E3779B97F4A7C15

// mix is SplitMix64's finaliser.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// fill writes the bytes [off, off+len(p)) of the object with seed.
func fill(p []byte, seed uint64, off int64) {
	i := 0
	// A leading partial word.
	if r := off % 8; r != 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix(seed+uint64(off/8)*golden))
		i = copy(p, w[r:])
	}
	word := uint64((off + int64(i)) / 8)
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], mix(seed+word*golden))
		word++
	}
	if i < len(p) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix(seed+word*golden))
		copy(p[i:], w[:])
	}
}

// content returns the bytes [off, off+n) of the object with seed.
func content(seed uint64, off, n int64) []byte {
	b := make([]byte, n)
	fill(b, seed, off)
	return b
}

// patternReader yields the bytes [off, end) of the object with seed.
type patternReader struct {
	seed     uint64
	off, end int64
}

func newPattern(seed uint64, size int64) *patternReader {
	return &patternReader{seed: seed, end: size}
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.end {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), r.end-r.off))
	fill(p[:n], r.seed, r.off)
	r.off += int64(n)
	return n, nil
}

// verify reads body to its end and checks that it holds exactly the bytes
// [off, off+n) of the object with seed. The error names the first
// difference.
func verify(body io.Reader, seed uint64, off, n int64) error {
	const chunk = 1 << 20
	got := make([]byte, chunk)
	want := make([]byte, chunk)
	var pos int64
	for {
		m, err := io.ReadFull(body, got)
		if m > 0 {
			if pos+int64(m) > n {
				return fmt.Errorf("read more than the %d bytes expected", n)
			}
			fill(want[:m], seed, off+pos)
			if !bytes.Equal(got[:m], want[:m]) {
				for i := range m {
					if got[i] != want[i] {
						return fmt.Errorf("byte %d of the range (object offset %d) is %#02x, want %#02x", pos+int64(i), off+pos+int64(i), got[i], want[i])
					}
				}
			}
			pos += int64(m)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading after %d of %d bytes: %w", pos, n, err)
		}
	}
	if pos != n {
		return fmt.Errorf("read %d bytes, want %d", pos, n)
	}
	return nil
}

// write stores size bytes of the object with seed under key.
func (e *env) write(ctx context.Context, key string, seed uint64, size int64) (*storage.WriteResponse, error) {
	return e.s.Write(ctx, &storage.WriteRequest{Key: key, Size: size, Body: newPattern(seed, size)})
}

// mustWrite stores the object or fails the test.
func (e *env) mustWrite(ctx context.Context, key string, seed uint64, size int64) *storage.WriteResponse {
	e.t.Helper()
	r, err := e.write(ctx, key, seed, size)
	if err != nil {
		e.t.Fatalf("Write %q (%d bytes): %v", key, size, err)
	}
	if r == nil {
		e.t.Fatalf("Write %q: nil response", key)
	}
	return r
}

// check reads the range (off, length) of key and verifies it against the
// object with seed and total size; it returns the first problem.
func (e *env) check(ctx context.Context, key string, seed uint64, size, off, length int64) error {
	r, err := e.s.Read(ctx, &storage.ReadRequest{Key: key, Offset: off, Length: length})
	if err != nil {
		return fmt.Errorf("Read %q %s: %w", key, rangeString(off, length), err)
	}
	if r == nil || r.Body == nil {
		return fmt.Errorf("Read %q: nil response or body", key)
	}
	defer r.Body.Close()
	want := length
	if length == storage.ToEnd {
		want = size - off
	}
	if r.Size != want {
		return fmt.Errorf("Read %q %s: Size %d, want %d", key, rangeString(off, length), r.Size, want)
	}
	if err := verify(r.Body, seed, off, want); err != nil {
		return fmt.Errorf("Read %q %s: %w", key, rangeString(off, length), err)
	}
	return nil
}

// rangeString shows a Read's range as [start, end).
func rangeString(off, length int64) string {
	if length == storage.ToEnd {
		return fmt.Sprintf("[%d, end)", off)
	}
	return fmt.Sprintf("[%d, %d)", off, off+length)
}

// mustCheck is check failing the test.
func (e *env) mustCheck(ctx context.Context, key string, seed uint64, size, off, length int64) {
	e.t.Helper()
	if err := e.check(ctx, key, seed, size, off, length); err != nil {
		e.t.Error(err)
	}
}

// absent checks that nothing is readable or listed under key.
func (e *env) absent(ctx context.Context, key, why string) {
	e.t.Helper()
	r, err := e.s.Read(ctx, &storage.ReadRequest{Key: key, Length: storage.ToEnd})
	if err == nil {
		n, _ := io.Copy(io.Discard, r.Body)
		r.Body.Close()
		e.t.Errorf("%s: %q is readable (%d bytes); want ErrNotFound", why, key, n)
	} else {
		wantErr(e.t, why+": Read", err, storage.ErrNotFound)
	}
	l, err := e.s.List(ctx, &storage.ListRequest{Prefix: key})
	if err != nil {
		e.t.Errorf("%s: List %q: %v", why, key, err)
		return
	}
	for _, o := range l.Objects {
		if o.Key == key {
			e.t.Errorf("%s: List shows %q (%d bytes)", why, key, o.Size)
		}
	}
}

// failingBody yields the first n bytes of an object, then fails with err.
type failingBody struct {
	r   io.Reader
	n   int64
	err error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, b.err
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	m, err := b.r.Read(p)
	b.n -= int64(m)
	return m, err
}

// hookBody yields an object and calls hook once, after n bytes.
type hookBody struct {
	r    io.Reader
	n    int64
	hook func()
}

func (b *hookBody) Read(p []byte) (int, error) {
	if b.hook != nil && b.n <= 0 {
		h := b.hook
		b.hook = nil
		h()
	}
	if b.hook != nil && int64(len(p)) > b.n {
		p = p[:b.n]
	}
	m, err := b.r.Read(p)
	b.n -= int64(m)
	return m, err
}
