package spill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/goray-dev/goray/plugins/fs/fsstore"
	"github.com/goray-dev/goray/sdk/storage"
)

// TestReadRanges: a restore read assembles the right bytes whether it is
// one read or parallel ranged reads, at any offset in a fused file, and a
// failing storage is an error.
func TestReadRanges(t *testing.T) {
	ctx := context.Background()
	st, err := fsstore.Open(ctx, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	file := make([]byte, 5*restoreRange+12345)
	for i := range file {
		file[i] = byte(i*7 + i>>13)
	}
	if _, err := st.Write(ctx, &storage.WriteRequest{Key: "f.spill", Size: int64(len(file)), Body: bytes.NewReader(file)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ off, size int }{
		{0, 0},
		{0, 1},
		{3, restoreRange},             // one read
		{17, 2*restoreRange - 1},      // just below parallel
		{0, 2 * restoreRange},         // two ranges
		{1234, 4*restoreRange + 4097}, // four uneven ranges
		{len(file) - 5*restoreRange, 5 * restoreRange}, // capped at restoreStreams
	} {
		t.Run(fmt.Sprintf("%d+%d", c.off, c.size), func(t *testing.T) {
			dst := make([]byte, c.size)
			if err := readRanges(ctx, st, "f.spill", int64(c.off), dst); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, file[c.off:c.off+c.size]) {
				t.Fatal("the bytes read differ from the file's")
			}
		})
	}
	dst := make([]byte, 3*restoreRange)
	if err := readRanges(ctx, st, "missing.spill", 0, dst); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("reading a missing file: %v, want ErrNotFound", err)
	}
	if err := readRanges(ctx, st, "f.spill", int64(len(file)-restoreRange), dst); err == nil {
		t.Fatal("reading past the end of the file: no error")
	}
}
