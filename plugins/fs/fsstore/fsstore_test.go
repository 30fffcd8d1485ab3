package fsstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goray-dev/goray/plugins/fs/fsstore"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/storage"
	"github.com/goray-dev/goray/sdk/storage/storagetest"
)

func tempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gfs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func open(t testing.TB, dir string, fsync bool) *fsstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := fsstore.Open(ctx, dir, fsync)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// suite runs the conformance suite on a fresh spill directory per subtest;
// wrap turns the store into what the suite talks to.
func suite(t *testing.T, fsync bool, wrap func(*testing.T, storage.Storage) storage.Storage) {
	var mu sync.Mutex
	dirs := map[*testing.T]string{}
	dirOf := func(t *testing.T) string {
		mu.Lock()
		defer mu.Unlock()
		return dirs[t]
	}
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		dir := filepath.Join(tempDir(t), "spill") // created by Configure
		mu.Lock()
		dirs[t] = dir
		mu.Unlock()
		return wrap(t, open(t, dir, fsync))
	}, storagetest.Options{
		CheckNoLeftovers: func(t *testing.T) error { return noTempFiles(dirOf(t)) },
		Break: func(t *testing.T) {
			if err := os.RemoveAll(dirOf(t)); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func noTempFiles(dir string) error {
	left, err := fsstore.TempFiles(dir)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("temporary files left: %v", left)
	}
	return nil
}

func TestConformance(t *testing.T) {
	suite(t, true, func(_ *testing.T, s storage.Storage) storage.Storage { return s })
}

func TestConformanceOverGRPC(t *testing.T) {
	suite(t, false, func(t *testing.T, s storage.Storage) storage.Storage { return storagetest.OverGRPC(t, s) })
}

func TestConfigureErrors(t *testing.T) {
	ctx := context.Background()
	dir := tempDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cfg  fsstore.Config
		want string
	}{
		{fsstore.Config{}, "directory: the directory to spill objects to is required"},
		{fsstore.Config{Directory: "relative/spill"}, `"relative/spill" is not an absolute path`},
		{fsstore.Config{Directory: file}, "is not a directory"},
		{fsstore.Config{Directory: filepath.Join(file, "sub")}, "creating " + filepath.Join(file, "sub")},
	}
	for _, tc := range tests {
		err := fsstore.New().Configure(ctx, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Configure(%v): %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
	// The schema makes directory required and fsync default to true.
	if err := fsstore.New().ConfigSpec().Configure(ctx, map[string]any{}); !errors.Is(err, plugin.ErrInvalidConfig) || !strings.Contains(err.Error(), `"directory" is required`) {
		t.Errorf("a block without directory: %v", err)
	}
	sch := fsstore.New().ConfigSpec().Schema()
	if a := sch.Attributes["directory"]; !a.Required {
		t.Error("directory is not required")
	}
	if a := sch.Attributes["fsync"]; a.Default != true {
		t.Errorf("fsync default %v, want true", a.Default)
	}
	if err := sch.Validate(); err != nil {
		t.Error(err)
	}
}

func TestNotConfigured(t *testing.T) {
	s := fsstore.New()
	ctx := context.Background()
	_, err := s.Write(ctx, &storage.WriteRequest{Key: "a", Size: 1, Body: strings.NewReader("x")})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Write before Configure: %v, want ErrUnavailable", err)
	}
	_, err = s.Read(ctx, &storage.ReadRequest{Key: "a"})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Read before Configure: %v, want ErrUnavailable", err)
	}
	if err := s.Health(ctx); !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Health before Configure: %v, want ErrUnavailable", err)
	}
	info, err := s.Info(ctx, nil)
	if err != nil || info.Name != "fs" {
		t.Errorf("Info: %+v %v", info, err)
	}
}

// TestStaleTempFiles checks that Configure removes the temporary files of
// dead writers and keeps those a live writer holds.
func TestStaleTempFiles(t *testing.T) {
	dir := tempDir(t)
	stale := filepath.Join(dir, "a", "b", fsstore.TempPrefix+"dead")
	live := filepath.Join(dir, "a", fsstore.TempPrefix+"live")
	other := filepath.Join(dir, "a", "keep.spill")
	if err := os.MkdirAll(filepath.Dir(stale), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{stale, live, other} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A live writer (here: this process, through its own descriptor) holds
	// its file locked.
	f, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	s := open(t, dir, true)
	left, err := fsstore.TempFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != live {
		t.Errorf("temporary files after Configure: %v, want only the live writer's %s", left, live)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("an object was removed: %v", err)
	}
	// Temporary files are never listed.
	l, err := s.List(context.Background(), &storage.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Objects) != 1 || l.Objects[0].Key != "a/keep.spill" {
		t.Errorf("List: %v, want only a/keep.spill", l.Objects)
	}
}

func TestReservedAndConflictingKeys(t *testing.T) {
	s := open(t, tempDir(t), false)
	ctx := context.Background()
	write := func(key string) error {
		_, err := s.Write(ctx, &storage.WriteRequest{Key: key, Size: 1, Body: strings.NewReader("x")})
		return err
	}
	if err := write("x/" + fsstore.TempPrefix + "y"); !errors.Is(err, storage.ErrBadKey) || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("a key with a temporary-file name: %v, want ErrBadKey saying it is reserved", err)
	}
	if err := write("a"); err != nil {
		t.Fatal(err)
	}
	err := write("a/b")
	if !errors.Is(err, storage.ErrBadKey) || !strings.Contains(err.Error(), `"a" is an object`) {
		t.Errorf("a key below an object: %v, want ErrBadKey", err)
	}
	if err := write("d/e"); err != nil {
		t.Fatal(err)
	}
	if err := write("d"); !errors.Is(err, storage.ErrBadKey) || !strings.Contains(err.Error(), "directory") {
		t.Errorf("a key naming a directory of keys: %v, want ErrBadKey", err)
	}
	if left, _ := fsstore.TempFiles(s.Location()); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	// Deleting a directory's name is a no-op: it is not an object.
	if _, err := s.Delete(ctx, &storage.DeleteRequest{Keys: []string{"d"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx, &storage.ReadRequest{Key: "d/e", Length: storage.ToEnd}); err != nil {
		t.Errorf("d/e after deleting d: %v", err)
	}
}

// TestDeletePrunesDirectories checks that deleting a session's objects
// leaves no empty directories behind, and keeps the spill directory.
func TestDeletePrunesDirectories(t *testing.T) {
	dir := tempDir(t)
	s := open(t, dir, false)
	ctx := context.Background()
	keys := []string{"sess/node-a/1.spill", "sess/node-a/2.spill", "sess/node-b/deep/3.spill"}
	for _, k := range keys {
		if _, err := s.Write(ctx, &storage.WriteRequest{Key: k, Size: 2, Body: strings.NewReader("xy")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Delete(ctx, &storage.DeleteRequest{Keys: keys}); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("the spill directory itself is gone: %v", err)
	}
	if len(ents) != 0 {
		t.Errorf("left in the spill directory: %v", ents)
	}
}

// TestWriteDeleteRace writes into directories that concurrent deletes keep
// emptying and removing.
func TestWriteDeleteRace(t *testing.T) {
	s := open(t, tempDir(t), false)
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 100 {
				k := fmt.Sprintf("r/d%d/%d", i%3, w)
				if _, err := s.Write(ctx, &storage.WriteRequest{Key: k, Size: 1, Body: strings.NewReader("x")}); err != nil {
					t.Errorf("Write %s: %v", k, err)
					return
				}
				if _, err := s.Delete(ctx, &storage.DeleteRequest{Keys: []string{k}}); err != nil {
					t.Errorf("Delete %s: %v", k, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestReadDuringOverwrite checks that a reader that opened an object keeps
// reading it whole while it is replaced.
func TestReadDuringOverwrite(t *testing.T) {
	s := open(t, tempDir(t), false)
	ctx := context.Background()
	old := strings.Repeat("o", 3<<20)
	if _, err := s.Write(ctx, &storage.WriteRequest{Key: "k", Size: int64(len(old)), Body: strings.NewReader(old)}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Read(ctx, &storage.ReadRequest{Key: "k", Length: storage.ToEnd})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	head := make([]byte, 1000)
	if _, err := io.ReadFull(r.Body, head); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, &storage.WriteRequest{Key: "k", Size: 3, Body: strings.NewReader("new")}); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(head) + string(rest); got != old {
		t.Errorf("a read across an overwrite got %d bytes, not the old object whole", len(got))
	}
}

func TestURLAndLocation(t *testing.T) {
	dir := tempDir(t)
	s := open(t, dir, true)
	ctx := context.Background()
	w, err := s.Write(ctx, &storage.WriteRequest{Key: "a b/c.spill", Size: 1, Body: strings.NewReader("x")})
	if err != nil {
		t.Fatal(err)
	}
	if want := "file://" + dir + "/a%20b/c.spill"; w.URL != want {
		t.Errorf("URL %q, want %q", w.URL, want)
	}
	info, _ := s.Info(ctx, nil)
	if info.Location != dir || s.Location() != dir {
		t.Errorf("Location %q / %q, want %q", info.Location, s.Location(), dir)
	}
}
