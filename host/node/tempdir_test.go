package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/config"
)

// otherUID owns directories of "another user" in these tests (they run as
// root in CI and in the sandbox; as another user, chown fails and the
// tests that need it say so).
const otherUID = 12345

func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "gn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func wantMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if got := st.Mode().Perm(); got != want {
		t.Errorf("%s has mode %o, want %o", path, got, want)
	}
}

func chownOther(t *testing.T, path string) {
	t.Helper()
	if err := os.Lchown(path, otherUID, otherUID); err != nil {
		t.Fatalf("making %s another user's (this test needs root): %v", path, err)
	}
}

func TestPrepareTempRoot(t *testing.T) {
	base := shortTempDir(t)

	t.Run("missing is created private", func(t *testing.T) {
		root := filepath.Join(base, "new", "goray")
		if err := PrepareTempRoot(root); err != nil {
			t.Fatal(err)
		}
		wantMode(t, root, 0o700)
	})

	t.Run("ours with looser modes is tightened", func(t *testing.T) {
		root := filepath.Join(base, "loose")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(root, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := PrepareTempRoot(root); err != nil {
			t.Fatal(err)
		}
		wantMode(t, root, 0o700)
	})

	refused := func(t *testing.T, root string, want ...string) {
		t.Helper()
		err := PrepareTempRoot(root)
		var te *TempRootError
		if !errors.As(err, &te) {
			t.Fatalf("PrepareTempRoot(%s) = %v, want a TempRootError", root, err)
		}
		for _, w := range append([]string{root}, want...) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not name %q", err, w)
			}
		}
	}

	t.Run("another user's is refused", func(t *testing.T) {
		root := filepath.Join(base, "theirs")
		if err := os.Mkdir(root, 0o700); err != nil {
			t.Fatal(err)
		}
		chownOther(t, root)
		refused(t, root, "uid "+strconv.Itoa(otherUID), "another user")
		if st, err := os.Stat(root); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("the refused dir was changed: %v %v", st.Mode(), err)
		}
	})

	t.Run("a link to another user's is refused", func(t *testing.T) {
		target := filepath.Join(base, "theirs2")
		if err := os.Mkdir(target, 0o700); err != nil {
			t.Fatal(err)
		}
		chownOther(t, target)
		link := filepath.Join(base, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		refused(t, link, "uid "+strconv.Itoa(otherUID))
	})

	t.Run("another user's link is refused", func(t *testing.T) {
		target := filepath.Join(base, "mine")
		if err := os.Mkdir(target, 0o700); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(base, "planted")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		chownOther(t, link)
		refused(t, link, "uid "+strconv.Itoa(otherUID))
	})

	t.Run("a shared one is refused, not changed", func(t *testing.T) {
		for _, mode := range []os.FileMode{0o777 | os.ModeSticky, 0o770} {
			root := filepath.Join(base, "shared"+strconv.Itoa(int(mode.Perm())))
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(root, mode); err != nil {
				t.Fatal(err)
			}
			refused(t, root, "other users")
			wantMode(t, root, mode.Perm())
		}
	})
}

// testConfig is a head node config under tempDir.
func testConfig(tempDir string) *config.Node {
	cfg := config.Default()
	cfg.Head = true
	cfg.Address = "127.0.0.1:0"
	cfg.TempDir = tempDir
	cpus := 1.0
	cfg.Resources.CPU = &cpus
	cfg.ObjectStore.Memory = 32 << 20
	return cfg
}

// TestSessionIsPrivate: a started node's temp root, session, sockets,
// logs and spill directories are 0700 and its files (node.json,
// node.log) 0600.
func TestSessionIsPrivate(t *testing.T) {
	root := filepath.Join(shortTempDir(t), "goray")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil { // as an older goray left it
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, Options{Config: testConfig(root)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := n.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	s := n.Info().SessionDir
	for _, d := range []string{root, s, filepath.Join(s, "sockets"), filepath.Join(s, "logs"), filepath.Join(s, "spill")} {
		wantMode(t, d, 0o700)
	}
	for _, f := range []string{filepath.Join(s, "node.json"), filepath.Join(s, "logs", "node.log")} {
		wantMode(t, f, 0o600)
	}
}

// TestStartRefusesAnotherUsersTempRoot: a node does not keep its session
// in a temp dir another user owns, and says whose it is.
func TestStartRefusesAnotherUsersTempRoot(t *testing.T) {
	root := filepath.Join(shortTempDir(t), "goray")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	chownOther(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, Options{Config: testConfig(root)})
	if err == nil {
		_ = n.Stop(context.Background())
		t.Fatal("the node started in another user's temp dir")
	}
	var te *TempRootError
	if !errors.As(err, &te) || te.Path != root || te.UID != otherUID {
		t.Fatalf("Start: %v, want a TempRootError for %s owned by %d", err, root, otherUID)
	}
	if left, _ := os.ReadDir(root); len(left) != 0 {
		t.Errorf("the refused node left %d entries in %s", len(left), root)
	}
}
