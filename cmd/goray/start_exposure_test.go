package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goray-dev/goray/host/node"
)

// TestStartRefusesWildcardNodeIP: `goray start --node-ip 0.0.0.0` (or ::)
// is refused, saying what it would expose and what node_ip must be, and
// starts nothing.
func TestStartRefusesWildcardNodeIP(t *testing.T) {
	for _, ip := range []string{"0.0.0.0", "::"} {
		t.Run(ip, func(t *testing.T) {
			tmp := t.TempDir()
			var stdout, stderr bytes.Buffer
			code := run([]string{"start", "--address", "10.0.0.1:6380", "--node-ip", ip, "--temp-dir", tmp}, &stdout, &stderr)
			if code != exitError {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitError, stderr.String())
			}
			for _, want := range []string{"Wildcard node_ip", "every interface", "GCS", "raylet", "data plane", "address other nodes reach"} {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("the refused start left %d entries in its temp dir", len(left))
			}
		})
	}
}

// TestStartRefusesAnotherUsersTempRoot: `goray start` does not use a temp
// dir owned by another user, and names it and its owner.
func TestStartRefusesAnotherUsersTempRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "goray")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(root, 12345, 12345); err != nil {
		t.Fatalf("chown (this test needs root): %v", err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"start", "--head", "--port", "1", "--temp-dir", root}, &stdout, &stderr)
	if code != exitError {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitError, stderr.String())
	}
	for _, want := range []string{root, "uid 12345", "another user"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if left, _ := os.ReadDir(root); len(left) != 0 {
		t.Errorf("the refused start left %d entries in %s", len(left), root)
	}
}

// TestReadyFileIsPrivate: the ready file (the node's addresses) is 0600.
func TestReadyFileIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ready")
	if err := writeReadyFile(path, node.Info{NodeID: "abcd"}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil {
		t.Fatal(err)
	} else if st.Mode().Perm() != 0o600 {
		t.Fatalf("ready file has mode %o, want 600", st.Mode().Perm())
	}
}
