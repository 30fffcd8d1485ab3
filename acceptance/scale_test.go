package acceptance

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDocScale runs the small scale harness command of docs/scale.md,
// which writes its JSON report where it says: one result per size, no
// errors. Figures are not checked.
func TestDocScale(t *testing.T) {
	d := newDocRun(t, testCtxFor(t, 3*time.Minute))
	report := filepath.Join(d.root, "bin", "scale-quick.json")
	_ = os.Remove(report)
	t.Cleanup(func() { os.Remove(report) })
	d.runBlock("", "docs/scale.md", "goray scale --nodes 20 --duration 1s --events 2 --json bin/scale-quick.json", 0)
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("goray scale wrote no report: %v", err)
	}
	var rep struct {
		Results []struct {
			Nodes  int      `json:"nodes"`
			Errors []string `json:"errors"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Results) != 1 {
		t.Fatalf("%s: %d results, %v", report, len(rep.Results), err)
	}
	if r := rep.Results[0]; r.Nodes != 20 || len(r.Errors) > 0 {
		t.Errorf("result: %d nodes, errors %v", r.Nodes, r.Errors)
	}
	d.checkNothingLeft()
}
