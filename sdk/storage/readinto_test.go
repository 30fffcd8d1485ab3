package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	fd, err := unix.MemfdCreate(storage.ArenaName, unix.MFD_CLOEXEC)
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

// TestReadIntoOnlyIntoTheArena: ReadInto writes only into the object
// store's memory. A regular file, a /dev/shm file, a /proc link to either,
// or a memfd of another name is refused with ErrPermission, before
// anything is read or written: the target keeps its bytes.
func TestReadIntoOnlyIntoTheArena(t *testing.T) {
	ctx := context.Background()
	s := storagetest.OverGRPC(t, memstore.New())
	ri := s.(storage.ReaderInto)
	obj := bytes.Repeat([]byte("spilled!"), 512)
	if _, err := s.Write(ctx, &storage.WriteRequest{Key: "a/f.spill", Size: int64(len(obj)), Body: bytes.NewReader(obj)}); err != nil {
		t.Fatal(err)
	}
	orig := bytes.Repeat([]byte("do not overwrite "), 512)
	regular := filepath.Join(t.TempDir(), "authorized_keys")
	shm := "/dev/shm/goray-t-tt-readinto-" + fmt.Sprint(os.Getpid())
	t.Cleanup(func() { os.Remove(shm) })
	for _, p := range []string{regular, shm} {
		if err := os.WriteFile(p, orig, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(regular, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other, err := unix.MemfdCreate("not-the-store", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(other)
	if err := unix.Ftruncate(other, 1<<20); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"regular file":              regular,
		"/dev/shm file":             shm,
		"/proc link to a file":      fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()),
		"memfd of another name":     fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), other),
		"/proc/self link to a file": fmt.Sprintf("/proc/self/fd/%d", f.Fd()),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ri.ReadInto(ctx, &storage.ReadIntoRequest{Key: "a/f.spill", Length: int64(len(obj)), TargetPath: target})
			if !errors.Is(err, storage.ErrPermission) || !strings.Contains(err.Error(), storage.ArenaName) {
				t.Fatalf("ReadInto %s: %v, want ErrPermission naming %q", target, err, storage.ArenaName)
			}
		})
	}
	for _, p := range []string{regular, shm} {
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, orig) {
			t.Errorf("%s changed (%v)", p, err)
		}
	}
}
