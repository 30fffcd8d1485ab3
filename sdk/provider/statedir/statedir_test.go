package statedir_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goray-dev/goray/internal/waitfor"
	"github.com/goray-dev/goray/sdk/provider/statedir"
)

func open(t *testing.T, path string) *statedir.Dir {
	t.Helper()
	d, err := statedir.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "state")
	d := open(t, path+"/")
	if d.Path() != path {
		t.Errorf("Path() = %q, want %q", d.Path(), path)
	}
	for name, want := range map[string]fs.FileMode{path: 0o700 | fs.ModeDir, filepath.Join(path, statedir.LockFile): 0o600} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want {
			t.Errorf("%s has mode %v, want %v", name, st.Mode(), want)
		}
	}
	if _, err := statedir.Open(filepath.Join(path, statedir.LockFile, "x")); err == nil {
		t.Error("Open under a file: no error")
	}
}

// TestLockContext: Lock waits while another holder has the lock and gives
// up with the context's error.
func TestLockContext(t *testing.T) {
	path := t.TempDir()
	d := open(t, path)
	other := open(t, path)
	// holders take the lock in the ways another holder can: another Dir on
	// the path, another goroutine of the same Dir, another *os.File of the
	// lock file flock'ed directly.
	holders := []struct {
		name string
		hold func(t *testing.T) (release func())
	}{
		{"another Dir", func(t *testing.T) func() {
			unlock, err := other.Lock(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return unlock
		}},
		{"the same Dir", func(t *testing.T) func() {
			unlock, err := d.Lock(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return unlock
		}},
		{"another file", func(t *testing.T) func() {
			f, err := os.Open(filepath.Join(path, statedir.LockFile))
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			return func() { _ = f.Close() }
		}},
	}
	contexts := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
	}
	for _, h := range holders {
		for _, c := range contexts {
			t.Run(h.name+"/"+c.name, func(t *testing.T) {
				release := h.hold(t)
				ctx, cancel := c.ctx()
				defer cancel()
				// (A Lock that ignored ctx would wait for release, which
				// comes after: the test would hang, not pass.)
				unlock, err := d.Lock(ctx)
				if !errors.Is(err, c.want) {
					if unlock != nil {
						unlock()
					}
					t.Fatalf("Lock while %s holds it: %v, want %v", h.name, err, c.want)
				}
				release()
				// Free again: it is taken at once.
				ctx, cancel = context.WithTimeout(context.Background(), waitfor.Generous)
				defer cancel()
				unlock, err = d.Lock(ctx)
				if err != nil {
					t.Fatalf("Lock once %s released it: %v", h.name, err)
				}
				unlock()
				unlock() // a second call does nothing
			})
		}
	}
}

// counter is the state Update changes in TestUpdate.
type counter struct {
	path string
	N    int `json:"n"`
}

func loadCounter(dir string) (*counter, error) {
	c := &counter{path: filepath.Join(dir, "c", "counter.json")}
	if err := statedir.ReadJSON(c.path, c); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return c, nil
}

func (c *counter) save() error { return statedir.WriteJSON(c.path, c, 0o600) }

// TestUpdate: updates from goroutines sharing a Dir and from other Dirs
// on the same path are serialised; a failing fn's changes are saved.
func TestUpdate(t *testing.T) {
	path := t.TempDir()
	dirs := []*statedir.Dir{open(t, path), open(t, path)}
	const perDir, each = 4, 10
	var wg sync.WaitGroup
	for _, d := range dirs {
		for range perDir {
			wg.Go(func() {
				for range each {
					err := statedir.Update(context.Background(), d, loadCounter, (*counter).save, func(c *counter) error {
						c.N++
						return nil
					})
					if err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	c, err := loadCounter(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(dirs) * perDir * each; c.N != want {
		t.Errorf("counter is %d after %d updates", c.N, want)
	}

	failed := errors.New("fn failed")
	err = statedir.Update(context.Background(), dirs[0], loadCounter, (*counter).save, func(c *counter) error {
		c.N = -1
		return failed
	})
	if !errors.Is(err, failed) {
		t.Errorf("Update returned %v, want fn's error", err)
	}
	if c, _ := loadCounter(path); c.N != -1 {
		t.Errorf("the change of a failing fn was not saved: %d", c.N)
	}

	saveFailed := errors.New("save failed")
	err = statedir.Update(context.Background(), dirs[0], loadCounter, func(*counter) error { return saveFailed }, func(*counter) error { return failed })
	if !errors.Is(err, failed) || !errors.Is(err, saveFailed) {
		t.Errorf("Update returned %v, want fn's and save's errors", err)
	}

	called := false
	loadFailed := errors.New("load failed")
	err = statedir.Update(context.Background(), dirs[0], func(string) (*counter, error) { return nil, loadFailed }, (*counter).save,
		func(*counter) error { called = true; return nil })
	if !errors.Is(err, loadFailed) || called {
		t.Errorf("Update with a failing load: %v, fn called: %v", err, called)
	}
}

func TestWriteFile(t *testing.T) {
	tests := []struct {
		name string
		// setup prepares root and returns the path to write.
		setup   func(t *testing.T, root string) string
		perm    fs.FileMode
		wantErr bool
	}{
		{"new file, missing dir", func(t *testing.T, root string) string { return filepath.Join(root, "a", "b", "f.json") }, 0o600, false},
		{"replaces a file", func(t *testing.T, root string) string {
			p := filepath.Join(root, "f")
			if err := os.WriteFile(p, []byte("old content, longer than the new"), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, 0o640, false},
		{"rename fails: a directory is in the way", func(t *testing.T, root string) string {
			p := filepath.Join(root, "f")
			if err := os.MkdirAll(filepath.Join(p, "child"), 0o700); err != nil {
				t.Fatal(err)
			}
			return p
		}, 0o600, true},
		{"the dir is a file", func(t *testing.T, root string) string {
			p := filepath.Join(root, "file")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(p, "f")
		}, 0o600, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			path := tt.setup(t, root)
			data := []byte("new\n")
			err := statedir.WriteFile(path, data, tt.perm)
			if (err != nil) != tt.wantErr {
				t.Fatalf("WriteFile: %v, want error: %v", err, tt.wantErr)
			}
			// No temporary file is left, whatever happened.
			_ = filepath.WalkDir(root, func(p string, _ fs.DirEntry, _ error) error {
				if strings.Contains(filepath.Base(p), ".tmp-") {
					t.Errorf("temporary file left: %s", p)
				}
				return nil
			})
			if tt.wantErr {
				return
			}
			b, err := os.ReadFile(path)
			if err != nil || string(b) != string(data) {
				t.Errorf("read back %q, %v; want %q", b, err, data)
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != tt.perm {
				t.Errorf("mode %v, %v; want %v", st.Mode().Perm(), err, tt.perm)
			}
			if st, err := os.Stat(filepath.Dir(path)); err != nil || (filepath.Dir(path) != root && st.Mode().Perm() != 0o700) {
				t.Errorf("the created dir has mode %v, %v; want 0700", st.Mode().Perm(), err)
			}
		})
	}
}

func TestReadJSON(t *testing.T) {
	root := t.TempDir()
	type rec struct {
		A string `json:"a"`
	}
	good := filepath.Join(root, "good.json")
	if err := statedir.WriteJSON(good, rec{A: "x"}, 0o600); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(root, "corrupt.json")
	if err := os.WriteFile(corrupt, []byte(`{"a": `), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongType := filepath.Join(root, "wrong.json")
	if err := os.WriteFile(wrongType, []byte(`{"a": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		want    rec
		check   func(error) bool
		wantMsg string
	}{
		{"good", good, rec{A: "x"}, func(err error) bool { return err == nil }, ""},
		{"missing", filepath.Join(root, "none.json"), rec{}, func(err error) bool { return errors.Is(err, fs.ErrNotExist) }, "no such file"},
		{"corrupt", corrupt, rec{}, func(err error) bool { var c *statedir.CorruptError; return errors.As(err, &c) && c.Path == corrupt },
			fmt.Sprintf("the state file %s is corrupt: ", corrupt)},
		{"wrong type", wrongType, rec{}, func(err error) bool { var c *statedir.CorruptError; return errors.As(err, &c) }, "is corrupt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got rec
			err := statedir.ReadJSON(tt.path, &got)
			if !tt.check(err) || (err != nil && !strings.Contains(err.Error(), tt.wantMsg)) {
				t.Fatalf("ReadJSON: %v", err)
			}
			if err == nil && got != tt.want {
				t.Errorf("read %+v, want %+v", got, tt.want)
			}
		})
	}
	if err := statedir.WriteJSON(filepath.Join(root, "bad.json"), func() {}, 0o600); err == nil {
		t.Error("WriteJSON of a func: no error")
	}
}

func TestReadSubdirs(t *testing.T) {
	type rec struct {
		A string `json:"a"`
	}
	write := func(t *testing.T, path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		setup   func(t *testing.T, root string)
		want    map[string]rec
		wantErr func(error) bool
	}{
		{"empty", func(*testing.T, string) {}, map[string]rec{}, nil},
		{"some subdirs have the file", func(t *testing.T, root string) {
			write(t, filepath.Join(root, "c1", "s.json"), `{"a": "1"}`)
			write(t, filepath.Join(root, "c2", "s.json"), `{"a": "2"}`)
			write(t, filepath.Join(root, "_1", "other"), `x`)
			write(t, filepath.Join(root, "s.json"), `{"a": "top"}`)
		}, map[string]rec{"c1": {A: "1"}, "c2": {A: "2"}}, nil},
		{"a corrupt file", func(t *testing.T, root string) {
			write(t, filepath.Join(root, "c1", "s.json"), `{"a": "1"}`)
			write(t, filepath.Join(root, "c2", "s.json"), `{`)
		}, nil, func(err error) bool {
			var c *statedir.CorruptError
			return errors.As(err, &c) && strings.Contains(c.Path, "c2")
		}},
		{"no dir", func(t *testing.T, root string) { _ = os.Remove(root) }, nil, func(err error) bool { return errors.Is(err, fs.ErrNotExist) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, root)
			got, err := statedir.ReadSubdirs[rec](root, "s.json")
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("ReadSubdirs: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("ReadSubdirs = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] == nil || *got[k] != v {
					t.Errorf("ReadSubdirs[%q] = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}
