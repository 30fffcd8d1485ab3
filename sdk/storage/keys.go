package storage

import (
	"context"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, in bytes (S3's limit).
const MaxKeyLen = 1024

// ValidKey checks a key: a relative slash path of at most MaxKeyLen bytes
// of UTF-8, such as "session_x/node-ab12/000017.spill". It must not be
// empty, start or end with '/', contain a NUL byte or other control
// character, or have an empty, "." or ".." path element. The error matches
// ErrBadKey and names the key.
func ValidKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: the key is empty", ErrBadKey)
	}
	if strings.HasSuffix(key, "/") {
		return badKey(key, "it ends with '/'")
	}
	return validPath(key, false)
}

// ValidPrefix checks a List prefix: empty, or the start of a valid key (it
// may end with '/' or in the middle of a path element). The error matches
// ErrBadKey.
func ValidPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validPath(prefix, true)
}

func validPath(key string, prefix bool) error {
	if len(key) > MaxKeyLen {
		return badKey(key[:32]+"...", fmt.Sprintf("it is %d bytes long, more than %d", len(key), MaxKeyLen))
	}
	if !utf8.ValidString(key) {
		return badKey(key, "it is not valid UTF-8")
	}
	for _, r := range key {
		if r == 0 {
			return badKey(key, "it contains a NUL byte")
		}
		if r < 0x20 || r == 0x7f {
			return badKey(key, fmt.Sprintf("it contains the control character %U", r))
		}
	}
	if strings.HasPrefix(key, "/") {
		return badKey(key, "it starts with '/' (keys are relative paths)")
	}
	elems := strings.Split(key, "/")
	for i, e := range elems {
		last := i == len(elems)-1
		switch {
		case e == "" && !(prefix && last):
			return badKey(key, "it has an empty path element ('//')")
		case e == "..":
			return badKey(key, "it has a '..' path element")
		case e == "." && !(prefix && last):
			return badKey(key, "it has a '.' path element")
		}
	}
	return nil
}

func badKey(key, why string) error {
	return fmt.Errorf("%w %q: %s", ErrBadKey, key, why)
}

// CheckRange checks that the range (offset, length) of a Read fits inside an
// object of size bytes and returns the range's length (length itself, or
// size-offset for ToEnd). The error matches ErrInvalidRange.
func CheckRange(offset, length, size int64) (int64, error) {
	switch {
	case offset < 0:
		return 0, fmt.Errorf("%w: negative offset %d", ErrInvalidRange, offset)
	case length < 0 && length != ToEnd:
		return 0, fmt.Errorf("%w: negative length %d (use ToEnd, -1, to read to the end)", ErrInvalidRange, length)
	case offset > size:
		return 0, fmt.Errorf("%w: offset %d is past the end of the %d-byte object", ErrInvalidRange, offset, size)
	case length == ToEnd:
		return size - offset, nil
	case length > size-offset:
		return 0, fmt.Errorf("%w: %d bytes at offset %d run past the end of the %d-byte object", ErrInvalidRange, length, offset, size)
	}
	return length, nil
}

// ExactReader returns a reader that yields r's bytes as long as there are
// exactly size of them. It fails with an error matching ErrSizeMismatch when
// r ends early, or when r has more bytes than size: it reads one byte ahead
// before it hands out the last byte, so a consumer never sees a complete
// object from a body that is too long. Errors from r pass through. A nil r
// is an empty body.
func ExactReader(r io.Reader, size int64) io.Reader {
	if r == nil {
		r = eofReader{}
	}
	return &exactReader{r: r, left: size, size: size}
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

type exactReader struct {
	r    io.Reader
	size int64
	left int64
	err  error
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.size < 0 {
		e.err = fmt.Errorf("%w: size %d is negative; the exact size must be known", ErrSizeMismatch, e.size)
		return 0, e.err
	}
	if e.left == 0 {
		e.err = e.checkEnd()
		return 0, e.err
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	switch {
	case err == io.EOF && e.left > 0:
		e.err = fmt.Errorf("%w: the body ended after %d of %d bytes", ErrSizeMismatch, e.size-e.left, e.size)
		return 0, e.err
	case err != nil && err != io.EOF:
		e.err = err
		return 0, err
	case e.left == 0:
		// Before the last bytes go out, make sure there are no more.
		if err := e.checkEnd(); err != io.EOF {
			e.err = err
			return 0, err
		}
	}
	return n, nil
}

// checkEnd reads ahead once the size is reached: io.EOF if the body ends
// there, else an error.
func (e *exactReader) checkEnd() error {
	var b [1]byte
	for range 100 {
		n, err := e.r.Read(b[:])
		if n > 0 {
			return fmt.Errorf("%w: the body has more than %d bytes", ErrSizeMismatch, e.size)
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// ContextReader returns a reader that yields r's bytes until ctx is done
// and then fails with ctx's error, so that a copy from a body honours the
// caller's context between reads.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
