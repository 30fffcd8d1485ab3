package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	pb "github.com/goray-dev/goray/internal/proto/storagev1"
	"github.com/goray-dev/goray/sdk/storage"
	"github.com/goray-dev/goray/sdk/storage/internal/memstore"
	"github.com/goray-dev/goray/sdk/storage/storagetest"
)

// memfdTarget makes a size-byte memfd and returns its /proc path and its
// mapping (what a raylet's arena looks like to a plugin).
func memfdTarget(t *testing.T, size int) (string, []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("readinto-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(m) })
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd), m
}

// TestReadInto: the plugin writes ranges of an object straight into the
// caller's memfd at unaligned offsets; errors keep their identity; a bad
// target is an error and writes nothing.
func TestReadInto(t *testing.T) {
	ctx := context.Background()
	s := storagetest.OverGRPC(t, memstore.New())
	ri, ok := s.(storage.ReaderInto)
	if !ok {
		t.Fatalf("the gRPC client %T does not implement ReaderInto", s)
	}
	obj := make([]byte, 3<<20+77)
	for i := range obj {
		obj[i] = byte(i*31 + i>>9)
	}
	if _, err := s.Write(ctx, &storage.WriteRequest{Key: "a/f.spill", Size: int64(len(obj)), Body: bytes.NewReader(obj)}); err != nil {
		t.Fatal(err)
	}
	path, mem := memfdTarget(t, 8<<20)
	for _, c := range []struct{ off, length, at int64 }{
		{0, int64(len(obj)), 0},
		{12345, 1 << 20, 4097}, // unaligned source and target
		{int64(len(obj)) - 5, 5, 7<<20 + 3},
		{100, 0, 9},
	} {
		if _, err := ri.ReadInto(ctx, &storage.ReadIntoRequest{Key: "a/f.spill", Offset: c.off, Length: c.length, TargetPath: path, TargetOffset: c.at}); err != nil {
			t.Fatalf("ReadInto %+v: %v", c, err)
		}
		if !bytes.Equal(mem[c.at:c.at+c.length], obj[c.off:c.off+c.length]) {
			t.Fatalf("ReadInto %+v: the target holds other bytes", c)
		}
	}
	_, err := ri.ReadInto(ctx, &storage.ReadIntoRequest{Key: "a/missing", Length: 4, TargetPath: path})
	if !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("ReadInto of a missing key: %v, want ErrNotFound", err)
	}
	_, err = ri.ReadInto(ctx, &storage.ReadIntoRequest{Key: "a/f.spill", Offset: 0, Length: int64(len(obj)) + 1, TargetPath: path})
	if !errors.Is(err, storage.ErrInvalidRange) {
		t.Fatalf("ReadInto past the object's end: %v, want ErrInvalidRange", err)
	}
	before := bytes.Clone(mem[8<<20-10:])
	_, err = ri.ReadInto(ctx, &storage.ReadIntoRequest{Key: "a/f.spill", Length: 20, TargetPath: path, TargetOffset: 8<<20 - 10})
	if err == nil || !bytes.Equal(mem[8<<20-10:], before) {
		t.Fatalf("ReadInto past the target's end: %v (target changed: %v)", err, !bytes.Equal(mem[8<<20-10:], before))
	}
	if _, err = ri.ReadInto(ctx, &storage.ReadIntoRequest{Key: "a/f.spill", Length: 4, TargetPath: filepath.Join(t.TempDir(), "nope")}); err == nil {
		t.Fatal("ReadInto a missing target: no error")
	}
}

// oldPlugin serves the Storage protocol without ReadInto (a plugin built
// before it existed).
type oldPlugin struct{ pb.UnimplementedStorageServer }

func TestReadIntoOldPlugin(t *testing.T) {
	conn := serveOnUnix(t, func(srv *grpc.Server) { pb.RegisterStorageServer(srv, oldPlugin{}) })
	ri := storage.NewClient(conn, storage.APIVersion).(storage.ReaderInto)
	if _, err := ri.ReadInto(context.Background(), &storage.ReadIntoRequest{Key: "k", Length: 1, TargetPath: "/dev/null"}); !errors.Is(err, storage.ErrNotSupported) {
		t.Fatalf("ReadInto on a plugin without it: %v, want ErrNotSupported", err)
	}
}
