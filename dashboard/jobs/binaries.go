package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/goray-dev/goray/internal/digest"
	"github.com/hashicorp/go-hclog"
)

// DefaultMaxBinaryBytes bounds an uploaded binary unless
// Options.MaxBinaryBytes says otherwise.
const DefaultMaxBinaryBytes = 2 << 30

// MaxUploads bounds the uploads in progress at once: each may write up to
// the largest binary accepted to the disk before its hash is checked.
const MaxUploads = 4

// ErrBadSHA256 says a sha256 in a request is not 64 lowercase hex digits.
var ErrBadSHA256 = errors.New("not a sha256 (want 64 lowercase hexadecimal digits)")

// ErrUnknownBinary says the head has no binary with the sha256 named.
var ErrUnknownBinary = errors.New("no binary with this sha256 on the head (upload it first: PUT /api/binaries/{sha256})")

// ErrTooManyUploads says MaxUploads uploads are in progress already; the
// upload may be tried again later.
var ErrTooManyUploads = fmt.Errorf("the head is receiving binary uploads already, as many as it takes at once (%d); try again shortly", MaxUploads)

// HashMismatchError says an upload's bytes do not hash to the sha256 its
// URL names.
type HashMismatchError struct {
	Want, Got string
}

// Error names both hashes.
func (e *HashMismatchError) Error() string {
	return fmt.Sprintf("the uploaded bytes hash to sha256 %s, not %s as the URL says; nothing was stored", e.Got, e.Want)
}

// TooLargeError says an upload is larger than the head accepts.
type TooLargeError struct {
	Limit int64
}

// Error names the limit.
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("binary larger than the head accepts (%d bytes; the dashboard's max_binary_size)", e.Limit)
}

// Binaries stores job binaries by sha256 in one directory. It has no lock:
// each upload goes to its own temporary file, renamed into place once its
// hash is checked, so concurrent uploads of the same binary both succeed
// and a reader never sees a partial file.
type Binaries struct {
	dir string
	max int64
	log hclog.Logger
	// slots holds a token per upload in progress (MaxUploads).
	slots chan struct{}

	uploads, bytes atomic.Int64
}

// NewBinaries returns the store in dir (created 0700), refusing binaries
// above max bytes (0: DefaultMaxBinaryBytes). Temporary files a crashed
// upload left behind are removed.
func NewBinaries(dir string, max int64, log hclog.Logger) (*Binaries, error) {
	if max <= 0 {
		max = DefaultMaxBinaryBytes
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("job binaries: creating %s: %w", dir, err)
	}
	if old, err := filepath.Glob(filepath.Join(dir, ".upload-*")); err == nil {
		for _, p := range old {
			_ = os.Remove(p)
		}
	}
	return &Binaries{dir: dir, max: max, log: log, slots: make(chan struct{}, MaxUploads)}, nil
}

// Max is the largest binary accepted, in bytes.
func (b *Binaries) Max() int64 { return b.max }

// Path is where the binary sha would be stored.
func (b *Binaries) Path(sha string) string { return filepath.Join(b.dir, sha) }

// Has reports whether the binary is stored, and its size.
func (b *Binaries) Has(sha string) (int64, bool, error) {
	if !digest.ValidSHA256(sha) {
		return 0, false, fmt.Errorf("%q: %w", sha, ErrBadSHA256)
	}
	st, err := os.Stat(b.Path(sha))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return st.Size(), true, nil
}

// Put stores the binary sha read from r unless it is stored already
// (then nothing is read and uploaded is false). The bytes are hashed as
// they are written; a mismatch (*HashMismatchError), more than Max bytes
// (*TooLargeError) or a read error stores nothing. With MaxUploads
// uploads in progress it reads nothing and returns ErrTooManyUploads.
func (b *Binaries) Put(sha string, r io.Reader) (size int64, uploaded bool, err error) {
	if size, ok, err := b.Has(sha); err != nil || ok {
		return size, false, err
	}
	select {
	case b.slots <- struct{}{}:
		defer func() { <-b.slots }()
	default:
		return 0, false, ErrTooManyUploads
	}
	f, err := os.CreateTemp(b.dir, ".upload-*")
	if err != nil {
		return 0, false, fmt.Errorf("job binaries: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, b.max+1))
	if err != nil {
		return 0, false, fmt.Errorf("reading the upload after %d bytes: %w", n, err)
	}
	if n > b.max {
		return 0, false, &TooLargeError{Limit: b.max}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		return 0, false, &HashMismatchError{Want: sha, Got: got}
	}
	if err = f.Chmod(0o700); err != nil {
		return 0, false, err
	}
	if err = f.Close(); err != nil {
		return 0, false, err
	}
	if err = os.Rename(tmp, b.Path(sha)); err != nil {
		return 0, false, err
	}
	b.uploads.Add(1)
	b.bytes.Add(n)
	b.log.Info("job binary uploaded", "sha256", sha, "bytes", n)
	return n, true, nil
}

// Stats returns how many binaries were written since the store opened and
// their bytes.
func (b *Binaries) Stats() StatsResponse {
	return StatsResponse{Uploads: b.uploads.Load(), Bytes: b.bytes.Load()}
}
