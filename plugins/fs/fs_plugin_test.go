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
	"testing"
	"time"

	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/plugins/fs/fsstore"
	"github.com/goray-dev/goray/sdk/storage"
	"github.com/goray-dev/goray/sdk/storage/storagetest"
)

// pluginBin is the plugin binary, built once by TestMain.
var pluginBin string

func TestMain(m *testing.M) { os.Exit(host.RunWithPlugin(m, "goray-storage-fs", &pluginBin)) }

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
	return storagetest.PluginClient(ctx, t, conn, v, "fs")
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
	ctx, cancel := context.WithTimeout(context.Background(), waitfor.Generous)
	defer cancel()
	info, err := s.Info(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "fs" || info.Location != dir {
		t.Errorf("Info %+v, want fs at %s", info, dir)
	}
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
	storagetest.KillMidWrite(ctx, t, s, pid, key, storagetest.KillMidWriteOptions{
		Size:    64 << 20,
		StallAt: 8 << 20,
		// The plugin has written part of the object to its temporary file.
		InProgress: func(context.Context) bool {
			left, _ := fsstore.TempFiles(dir)
			for _, p := range left {
				if st, err := os.Stat(p); err == nil && st.Size() >= 4<<20 {
					return true
				}
			}
			return false
		},
		Awaited: "temporary file of 4 MiB",
	})
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
	storagetest.BenchmarkWriteRead(b, s, "bench", benchSize)
}
