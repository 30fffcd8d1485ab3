package acceptance

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/goray-dev/goray/internal/testservers/pythontest"
)

// TestPythonTransportMovesTensors runs a node whose transport is the
// Python shared-memory transport (sdk/python/examples/pyshm, served by the
// Python plugin SDK, installed by `make pyplugin`): an actor's tensor
// result moves to another actor through it without a copy, the driver
// reads it too, and nothing is left in /dev/shm after the node stops.
func TestPythonTransportMovesTensors(t *testing.T) {
	ctx := testCtx(t)
	before := watchShm(t)
	dir := shortTempDir(t)
	plugins := filepath.Join(dir, "plugins")
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(pythontest.Plugin(t), filepath.Join(plugins, "goray-transport-pyshm")); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, fmt.Sprintf("plugin_dir = %q\nplugin \"transport\" \"pyshm\" {\n  config {\n    max_poll = \"5ms\"\n  }\n}\n", plugins))
	h := startHead(t, ctx, "--config", cfg)
	if ps := h.plugins(t); len(ps) != 1 || ps[0].Name != "pyshm" || ps[0].State != "running" || ps[0].Pid == 0 {
		t.Fatalf("want the pyshm plugin running, got %+v", ps)
	}
	j := startJob(t, jobOptions{addr: h.addr}, testjobBin, "tensors-pyshm")
	code, out := j.wait(ctx)
	if code != 0 {
		t.Fatalf("tensors-pyshm job failed (exit %d):\n%s", code, out)
	}
	wantLines(t, out, "pyshm actor-to-actor: ok, zero copy, 3 rounds")
	if r := runGoray(t, ctx, "stop", "--temp-dir", h.tempDir); r.code != 0 {
		t.Fatalf("goray stop: %s", r)
	}
	checkNoNewShm(t, before)
}
