package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/host/node"
	"github.com/goray-dev/goray/internal/metrics"
)

// TestStopRemovesDeadNodesFiles: goray stop removes what the dead sessions
// of its temp dir left: the local spill files of a node that died without
// stopping (its node.json is still there), the head's gcs.json and
// Prometheus discovery file, sockets and node.json; logs stay, and so do
// the spill files a node that stopped kept (spilling.keep_files), a
// running node's files and everything of another temp dir. Before, the
// spill files (86 MB after one kill -9), gcs.json and prometheus_sd.json
// stayed for good.
func TestStopRemovesDeadNodesFiles(t *testing.T) {
	spillFile := filepath.Join(spillDir, "session_x", "node", "000001.spill")
	type layout struct {
		root                    string
		killed, stopped, living string
	}
	mk := func(name string) layout {
		root := filepath.Join(t.TempDir(), name)
		l := layout{root: root}
		l.killed = makeSession(t, root, "session_1_killed", &node.Info{NodeID: "11" + name, Head: true, Pid: deadPid})
		l.stopped = makeSession(t, root, "session_2_stopped", nil) // its node removed node.json
		live := startProc(t, nil, "sleep", "60")
		l.living = makeSession(t, root, "session_3_live", &node.Info{NodeID: "33" + name, Pid: live.Process.Pid})
		for _, dir := range []string{l.killed, l.stopped, l.living} {
			writeFile(t, filepath.Join(dir, spillFile), strings.Repeat("x", 3000))
			writeFile(t, filepath.Join(dir, "gcs.json"), "{}")
			writeFile(t, filepath.Join(dir, metrics.DiscoveryFile), "[]")
			writeFile(t, filepath.Join(dir, "logs", "node.log"), "log")
		}
		return l
	}
	a, b := mk("a"), mk("b")

	s := &stopper{proc: procFS{"/proc"}, root: a.root, log: hclog.NewNullLogger(), skip: []int{os.Getpid()}}
	var res stopResult
	if err := s.cleanDead(&res); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Spill, []string{a.killed}) || res.SpillBytes != 3000 {
		t.Errorf("removed the spill files of %v (%d bytes), want only %s's (3000 bytes)", res.Spill, res.SpillBytes, a.killed)
	}
	gone := []string{
		filepath.Join(a.killed, spillDir), filepath.Join(a.killed, "node.json"), filepath.Join(a.killed, "sockets"),
		filepath.Join(a.killed, "gcs.json"), filepath.Join(a.killed, "metrics"),
		filepath.Join(a.stopped, "gcs.json"), filepath.Join(a.stopped, "metrics"),
	}
	for _, p := range gone {
		if exists(p) {
			t.Errorf("stop left %s", p)
		}
	}
	kept := []string{
		filepath.Join(a.killed, "logs", "node.log"), filepath.Join(a.stopped, "logs", "node.log"),
		filepath.Join(a.stopped, spillFile), // kept on purpose by its node (keep_files)
	}
	for _, dir := range []string{a.living, b.killed, b.stopped, b.living} {
		for _, f := range []string{spillFile, "gcs.json", metrics.DiscoveryFile, "sockets"} {
			kept = append(kept, filepath.Join(dir, f))
		}
	}
	kept = append(kept, filepath.Join(b.killed, "node.json"))
	for _, p := range kept {
		if !exists(p) {
			t.Errorf("stop --temp-dir %s removed %s", a.root, p)
		}
	}
	var out bytes.Buffer
	writeCleanResult(&out, res)
	if want := "Removed the spill files (2.9 KiB) of 1 dead node: " + a.killed; !strings.Contains(out.String(), want) {
		t.Errorf("stop's output does not say %q:\n%s", want, out.String())
	}

	// A second stop finds nothing more to remove.
	res = stopResult{}
	if err := s.cleanDead(&res); err != nil || len(res.Spill) > 0 {
		t.Errorf("a second stop: spill %v, %v", res.Spill, err)
	}
}
