package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// hclBlock matches a fenced hcl block of a markdown file.
var hclBlock = regexp.MustCompile("(?s)```hcl\n(.*?)```")

// clusterBlock tells a cluster file (goray up) from a node file: it has a
// head_node_type or a provider block.
var clusterBlock = regexp.MustCompile(`(?m)^(head_node_type\s*=|provider\s+")`)

// TestDocHCLBlocksParse: every hcl block of the README and docs is a node
// config that loads without errors, or a cluster file that loads and
// validates (ParseCluster), so no documented setting is misspelt or out of
// date.
func TestDocHCLBlocksParse(t *testing.T) {
	files, _ := filepath.Glob("../docs/*.md")
	more, _ := filepath.Glob("../examples/*/README.md")
	files = append(append([]string{"../README.md"}, files...), more...)
	n := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range hclBlock.FindAllSubmatch(src, -1) {
			n++
			name := fmt.Sprintf("%s#%d", filepath.Base(f), i+1)
			if clusterBlock.Match(m[1]) {
				c, diags := ParseCluster(m[1], name)
				if diags.HasErrors() {
					t.Errorf("%s: cluster file in hcl block %d does not load:\n%s\n%s", f, i+1, m[1], FormatDiagnostics(diags, c.Files(), 0, false))
				}
				continue
			}
			node, diags := Parse(m[1], name)
			if diags.HasErrors() {
				t.Errorf("%s: hcl block %d does not load:\n%s\n%s", f, i+1, m[1], FormatDiagnostics(diags, node.Files(), 0, false))
			}
		}
	}
	if n == 0 {
		t.Fatal("no hcl block found in the docs")
	}
	t.Logf("%d hcl blocks parsed", n)
}
