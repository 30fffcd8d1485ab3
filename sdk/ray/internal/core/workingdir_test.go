package core

import (
	"strings"
	"testing"

	"github.com/goray-dev/goray/internal/ids"
)

func TestParseWorkingDir(t *testing.T) {
	node := ids.New()
	sum := strings.Repeat("ab", 32)
	wd, err := ParseWorkingDir(sum + "@" + node.String())
	if err != nil || wd.SHA256 != sum || wd.Node != node {
		t.Fatalf("ParseWorkingDir = %+v, %v", wd, err)
	}
	for _, bad := range []string{"", sum, sum + "@", sum + "@nothex"} {
		if _, err := ParseWorkingDir(bad); err == nil || !strings.Contains(err.Error(), "working dir") {
			t.Errorf("ParseWorkingDir(%q) = %v; want an error", bad, err)
		}
	}
	var none *WorkingDir
	if none.key() != "" || wd.key() == "" {
		t.Errorf("scheduling key parts: none %q, some %q", none.key(), wd.key())
	}
}
