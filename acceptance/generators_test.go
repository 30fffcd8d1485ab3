package acceptance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// generatorsOutput is what examples/generators prints, as
// docs/generators.md shows it.
var generatorsOutput = strings.Join([]string{
	"partition: evens [2 4 6 8 10]; the results are 2 objects: true",
	"sum of the odds (the second result alone as an argument): 25",
	"before the first was taken: 4 chunks buffered, the generator waits (Backpressure(4))",
	"received 5/20 chunks, 5120 bytes",
	"received 10/20 chunks, 10240 bytes",
	"received 15/20 chunks, 15360 bytes",
	"received 20/20 chunks, 20480 bytes",
	"most chunks buffered at once: 4 (never above the bound)",
	`parse: [10 20 30], then the error: line 4: "x" is not a number`,
	"after the error: EOF",
	`ticks: took 3 with 4 more waiting, then Close: the generator stopped after 7 ticks, its yield returned "ray.Cancel of task main.ticks"`,
	"OK",
}, "\n") + "\n"

// TestDocGenerators runs the multiple returns and streaming generators
// example as its doc and docs/generators.md show it, on an embedded node
// and on a started head: the second of a task's two results is another
// task's argument after the first was released; 20 chunks stream in order
// with never more than Backpressure(4) of them buffered (and 4 before the
// first is taken); a generator's error comes after the items yielded
// before it, then io.EOF; Close stops an endless generator, whose yield
// returns the cancellation, after exactly the 3 items taken and the 4 of
// the bound. The doc shows the output the example prints.
func TestDocGenerators(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs/generators.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```\n"+generatorsOutput+"```\n") {
		t.Errorf("docs/generators.md does not show the example's output as a block:\n%s", generatorsOutput)
	}
	wantRun := func(t *testing.T, r cliResult) {
		t.Helper()
		if r.stdout != generatorsOutput {
			t.Errorf("the example printed\n%s\nwant (as the doc shows)\n%s", r.stdout, generatorsOutput)
		}
	}
	for _, c := range []struct{ name, file string }{
		{"example", "examples/generators/main.go"},
		{"doc", "docs/generators.md"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDocRun(t, testCtxFor(t, 3*time.Minute))
			out := d.runBlock("", c.file, "go run ./examples/generators", 0)
			wantRun(t, out[0])
			d.checkNothingLeft()
		})
	}
	t.Run("cluster", func(t *testing.T) {
		d := newDocRun(t, testCtxFor(t, 3*time.Minute))
		out := d.runBlock("", "docs/generators.md", "goray start --head --port 6379", 0)
		wantLines(t, out[0].stdout, "Started goray head node")
		wantRun(t, out[1])
		wantLines(t, out[2].stdout, "Stopped goray head node")
		d.checkNothingLeft()
	})
}
