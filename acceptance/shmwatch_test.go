package acceptance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/goray-dev/goray/sdk/transport/shmem"
)

// TestShmWatch: a segment pool left by a process of this test counts as
// its leak, whether the process carried the test's marker or ran under one
// of its directories, and so does one whose maker was never seen running;
// a pool left by another test's process does not.
func TestShmWatch(t *testing.T) {
	dir := shortTempDir(t)
	w := watchShm(t)

	// poolMaker runs a shell that makes a pool named after its own pid and
	// waits; the returned func ends it and returns the pool's name.
	poolMaker := func(env []string, args ...string) (string, func()) {
		t.Helper()
		cmd := exec.Command("sh", append([]string{"-c", `mkdir "/dev/shm/` + shmem.PoolPrefix + `$$-shmwatch" && read x`}, args...)...)
		cmd.Env = env
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s%d-shmwatch", shmem.PoolPrefix, cmd.Process.Pid)
		t.Cleanup(func() { _ = os.Remove(filepath.Join("/dev/shm", name)) })
		waitFor(t, 10*time.Second, "the watch to see "+name, func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			_, seen := w.pools[name]
			return seen
		})
		return name, func() { _ = in.Close(); _ = cmd.Wait() }
	}
	mine, end1 := poolMaker(append(baseEnv(), testMarkerEnv+"="+testMarker(t)))
	underDir, end2 := poolMaker(baseEnv(), "sh", dir) // its $1 names the test's directory
	other, end3 := poolMaker(append(baseEnv(), testMarkerEnv+"="+testMarker(t)+"-other"))
	end1()
	end2()
	end3()
	// A pool whose maker died before the watch could see it.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	unseen := fmt.Sprintf("%s%d-shmwatch", shmem.PoolPrefix, gone.Process.Pid)
	if err := os.Mkdir(filepath.Join("/dev/shm", unseen), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(filepath.Join("/dev/shm", unseen)) })

	left := w.stays(t, 0)
	for _, want := range []string{mine, underDir, unseen} {
		if !slices.Contains(left, want) {
			t.Errorf("the watch does not count %s as this test's leak: %v", want, left)
		}
	}
	if slices.Contains(left, other) {
		t.Errorf("the watch counts another test's pool %s as this test's leak", other)
	}
}
