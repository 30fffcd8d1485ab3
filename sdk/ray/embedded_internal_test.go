package ray

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goray-dev/goray/config"
)

// TestEmbeddedConfigNeedsNoHead: an embedded node is its cluster's head, so
// a config file without a head block (examples/spill-s3/spill-s3.hcl) is
// valid for it, while a mistake in the file is still reported at its
// file:line.
func TestEmbeddedConfigNeedsNoHead(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "node.hcl")
	if err := os.WriteFile(good, []byte("object_store {\n  memory = \"64MiB\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := embeddedConfig(&initOptions{configPath: good})
	if err != nil {
		t.Fatalf("embeddedConfig(%s) without a head block: %v", good, err)
	}
	if !cfg.Head || cfg.ObjectStore.Memory != 64<<20 {
		t.Errorf("embeddedConfig: head %v, store %d bytes; want a head with 64 MiB", cfg.Head, cfg.ObjectStore.Memory)
	}

	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("object_store {\n  memory = \"lots\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = embeddedConfig(&initOptions{configPath: bad})
	var de *config.DiagnosticsError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), bad+":2,") {
		t.Fatalf("embeddedConfig(%s) = %v; want a *config.DiagnosticsError at %s:2", bad, err, bad)
	}
}
