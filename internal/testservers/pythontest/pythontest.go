// Package pythontest finds the Python plugin SDK's environment
// (sdk/python) for Go tests: the virtualenv `make pyplugin` creates under
// .tools/pyplugin, its interpreter and the example transport's plugin
// binary. The tests in sdk/python/pythontest run the Go conformance suite
// (sdk/transport/transporttest) against the Python shared-memory transport
// through a real host, and the SDK's own Python unit tests.
package pythontest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/goray-dev/goray/internal/testservers/testbin"
)

// VenvDir is the virtualenv `make pyplugin` creates, relative to the
// repository root.
const VenvDir = ".tools/pyplugin"

// PyshmBinary is the example transport's plugin binary in the virtualenv
// (a console script that runs the virtualenv's python on goray_pyshm).
const PyshmBinary = "goray-transport-pyshm"

// Install says how to create the virtualenv.
const Install = "run `make pyplugin` at the repository root (it needs python3 with venv: `apt-get install python3 python3-venv` on Debian)"

// Venv returns the absolute path of the virtualenv, failing t with how to
// create it when it (or python3 itself) is missing.
func Venv(t testing.TB) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatalf("pythontest: %v", err)
	}
	dir := filepath.Join(root, VenvDir)
	if _, err := os.Stat(filepath.Join(dir, "bin", "python")); err != nil {
		if _, perr := exec.LookPath("python3"); perr != nil {
			t.Fatalf("pythontest: python3 is not installed (%v): %s", perr, Install)
		}
		t.Fatalf("pythontest: the Python plugin SDK is not installed in %s: %s", dir, Install)
	}
	return dir
}

// Python returns the virtualenv's interpreter (see Venv).
func Python(t testing.TB) string {
	t.Helper()
	return filepath.Join(Venv(t), "bin", "python")
}

// Plugin returns the path of the Python example transport's plugin binary
// (see Venv).
func Plugin(t testing.TB) string {
	t.Helper()
	p := filepath.Join(Venv(t), "bin", PyshmBinary)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("pythontest: %v: %s", err, Install)
	}
	return p
}
