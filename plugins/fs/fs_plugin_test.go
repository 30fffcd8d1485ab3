package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/plugins/fs/fsstore"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/storage"
	"github.com/goray-dev/goray/sdk/storage/storagetest"
)

// pluginBin is the plugin binary, built once by TestMain.
var pluginBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gfs")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if pluginBin, err = host.BuildPlugin(dir, ".", "goray-storage-fs"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func tempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gfs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// launch starts the plugin binary through a real host with the spill
// directory dir and returns a storage client of it and the plugin's pid.
func launch(t testing.TB, dir, extra string) (storage.Storage, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, v := host.Launch(ctx, t, pluginBin, "storage", "fs", fmt.Sprintf("directory = %q\n%s", dir, extra))
	if v != storage.APIVersion {
		t.Fatalf("negotiated API version %d, want %d", v, storage.APIVersion)
	}
	info, err := plugin.NewInfoClient(conn).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != plugin.KindStorage || info.Name != "fs" {
		t.Fatalf("plugin says it is %s %q", info.Kind, info.Name)
	}
	return storage.NewClient(conn, v), info.Pid
}

// TestConformancePlugin runs the conformance suite through real plugin
// processes, one per subtest (Broken removes its directory), with the
// default fsync = true.
func TestConformancePlugin(t *testing.T) {
	var mu sync.Mutex
	dirs := map[*testing.T]string{}
	dirOf := func(t *testing.T) string {
		mu.Lock()
		defer mu.Unlock()
		return dirs[t]
	}
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		dir := filepath.Join(tempDir(t), "spill")
		mu.Lock()
		dirs[t] = dir
		mu.Unlock()
		s, _ := launch(t, dir, "")
		return s
	}, storagetest.Options{
		CheckNoLeftovers: func(t *testing.T) error {
			left, err := fsstore.TempFiles(dirOf(t))
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("temporary files left: %v", left)
			}
			return err
		},
		Break: func(t *testing.T) {
			if err := os.RemoveAll(dirOf(t)); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// TestInfoLocation checks what the plugin reports about itself once
// configured.
func TestInfoLocation(t *testing.T) {
	dir := tempDir(t)
	s, _ := launch(t, dir, "fsync = false")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := s.Info(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "fs" || info.Location != dir {
		t.Errorf("Info %+v, want fs at %s", info, dir)
	}
}

// stallBody yields size random bytes, stalling after stall of them until
// release is closed.
type stallBody struct {
	size, stall, off int64
	release          <-chan struct{}
}

func (b *stallBody) Read(p []byte) (int, error) {
	if b.off == b.size {
		return 0, io.EOF
	}
	if b.off == b.stall {
		<-b.release
		b.stall = -1
	}
	end := b.size
	if b.stall > b.off {
		end = b.stall
	}
	p = p[:min(int64(len(p)), end-b.off)]
	_, _ = rand.Read(p)
	b.off += int64(len(p))
	return len(p), nil
}

// TestKillMidWrite kills the plugin (kill -9) in the middle of a write: the
// write fails with ErrUnavailable, the crash leaves a temporary file, and a
// fresh plugin's Configure removes it; the key never reads back.
func TestKillMidWrite(t *testing.T) {
	dir := tempDir(t)
	s, pid := launch(t, dir, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const key = "sess/node-a/000001.spill"
	release := make(chan struct{})
	var once sync.Once
	resume := func() { once.Do(func() { close(release) }) }
	defer resume()
	done := make(chan error, 1)
	go func() {
		_, err := s.Write(ctx, &storage.WriteRequest{Key: key, Size: 64 << 20, Body: &stallBody{size: 64 << 20, stall: 8 << 20, release: release}})
		done <- err
	}()
	// Wait until the plugin has written part of the object to its
	// temporary file.
	var tmp string
	for tmp == "" {
		left, _ := fsstore.TempFiles(dir)
		for _, p := range left {
			if st, err := os.Stat(p); err == nil && st.Size() >= 4<<20 {
				tmp = p
			}
		}
		select {
		case err := <-done:
			t.Fatalf("Write returned before the kill: %v", err)
		case <-ctx.Done():
			t.Fatal("no temporary file of 4 MiB appeared")
		case <-time.After(10 * time.Millisecond): // polling interval
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	resume() // the host keeps sending into the dead plugin's stream
	select {
	case err := <-done:
		if !errors.Is(err, storage.ErrUnavailable) {
			t.Errorf("Write to a killed plugin: %v, want ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Write did not return within 10s of the plugin's death")
	}
	// A fresh plugin on the same directory cleans up at Configure. (The
	// first host restarts its plugin too, which may clean up first.)
	s2, _ := launch(t, dir, "")
	if left, err := fsstore.TempFiles(dir); err != nil || len(left) > 0 {
		t.Errorf("temporary files after a fresh plugin's Configure: %v %v", left, err)
	}
	_, err := s2.Read(ctx, &storage.ReadRequest{Key: key, Length: storage.ToEnd})
	if !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Read of the interrupted key: %v, want ErrNotFound", err)
	}
	l, err := s2.List(ctx, &storage.ListRequest{Prefix: "sess/"})
	if err != nil || len(l.Objects) != 0 {
		t.Errorf("List after the crash: %v %v, want nothing", l, err)
	}
	// And the fresh plugin works.
	if _, err := s2.Write(ctx, &storage.WriteRequest{Key: key, Size: 3, Body: io.LimitReader(rand.Reader, 3)}); err != nil {
		t.Errorf("Write after the crash: %v", err)
	}
}

// benchSize is the object the benchmarks move through the plugin process.
const benchSize = 1 << 30

// BenchmarkPlugin measures writes and reads through a real plugin process
// (gRPC over go-plugin's unix socket), with fsync = false so that the page
// cache, not the disk, is behind it:
//
//	go test -run '^$' -bench Plugin ./plugins/fs
func BenchmarkPlugin(b *testing.B) {
	dir := tempDir(b)
	s, _ := launch(b, dir, "fsync = false")
	ctx := context.Background()
	block := make([]byte, storage.ChunkSize)
	_, _ = rand.Read(block)
	b.Run("Write", func(b *testing.B) {
		b.SetBytes(benchSize)
		for b.Loop() {
			if _, err := s.Write(ctx, &storage.WriteRequest{Key: "bench", Size: benchSize, Body: &repeatReader{block: block, left: benchSize}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Read", func(b *testing.B) {
		b.SetBytes(benchSize)
		for b.Loop() {
			r, err := s.Read(ctx, &storage.ReadRequest{Key: "bench", Length: storage.ToEnd})
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if err != nil || n != benchSize {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
	})
}

// repeatReader yields left bytes copied from block over and over.
type repeatReader struct {
	block []byte
	off   int
	left  int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n := copy(p, r.block[r.off:])
	r.off = (r.off + n) % len(r.block)
	r.left -= int64(n)
	return n, nil
}
