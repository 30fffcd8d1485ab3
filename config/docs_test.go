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

// TestDocHCLBlocksParse: every hcl block of the README and docs is a node
// config that loads without errors, so no documented setting is misspelt
// or out of date.
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
