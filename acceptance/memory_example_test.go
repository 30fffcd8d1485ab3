package acceptance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// memoryExampleOutput is what examples/memory prints on stdout, as
// docs/memory.md shows it.
var memoryExampleOutput = strings.Join([]string{
	"memory monitor: usage threshold 1024 MiB above this machine's use, read every 50ms",
	"hog: allocating 32 MiB at a time, MaxOOMRetries(1); the tracker actor answers meanwhile",
	"hog: killed by the memory monitor on each of its 2 attempts (OutOfMemoryError)",
	"hog: the error names this node and its memory use, above the threshold",
	"the other work kept running: the tracker actor answered every call, while the hog grew and after the kills",
	"the node still runs tasks: square(7) = 49",
	"OK",
}, "\n") + "\n"

// TestDocMemoryExample runs the memory protection example as its doc and
// docs/memory.md show it, on an embedded node whose memory monitor's
// threshold the example sets 1 GiB above the machine's use (its hog gives
// up after 3 GiB): the hog task is killed by the monitor on both of its
// attempts and fails with *ray.OutOfMemoryError naming the node, the
// machine's total as the example read it and a use above the threshold
// (the example checks these fields); the tracker actor next to it answers
// every call and keeps its state; the node runs a task afterwards. The
// example exits non-zero, saying why, when the machine has less than
// 4 GiB available. The doc shows the output the example prints, and
// nothing is left running or in $TMPDIR.
func TestDocMemoryExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs/memory.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```\n"+memoryExampleOutput+"```\n") {
		t.Errorf("docs/memory.md does not show the example's output as a block:\n%s", memoryExampleOutput)
	}
	for _, c := range []struct{ name, file string }{
		{"example", "examples/memory/main.go"},
		{"doc", "docs/memory.md"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDocRun(t, testCtxFor(t, 3*time.Minute))
			out := d.runBlock("", c.file, "go run ./examples/memory", 0)
			t.Logf("stderr:\n%s", out[0].stderr)
			if out[0].stdout != memoryExampleOutput {
				t.Errorf("the example printed\n%s\nwant (as the doc shows)\n%s", out[0].stdout, memoryExampleOutput)
			}
			// The monitor's account of the last kill, on stderr.
			wantLines(t, out[0].stderr, "ran out of memory on its last of 2 attempts: killed by the memory monitor",
				"was killed because it was the most recently started retriable task")
			d.checkNothingLeft()
		})
	}
}
