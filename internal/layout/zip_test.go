package layout

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
)

// TestModuleZipPaths: every file git tracks has a path the Go module zip
// format accepts, so that a module proxy can serve the repository and
// `go install <module>/plugins/...@version` (goray plugins install) works.
// A name such as "nul" or "aux" (reserved on Windows) fails it.
func TestModuleZipPaths(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 100 {
		t.Fatalf("git ls-files listed %d files; want the whole repository", len(files))
	}
	for _, f := range files {
		if err := module.CheckFilePath(f); err != nil {
			t.Errorf("%s: a module proxy could not serve the repository: %v", f, err)
		}
	}
}
