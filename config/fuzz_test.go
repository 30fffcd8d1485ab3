package config

import (
	"os"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/limits"
	"github.com/goray-dev/goray/internal/resources"
)

// FuzzParse loads arbitrary bytes as an HCL (and JSON) config, applies
// Validate and renders the diagnostics. Beyond not crashing: Parse always
// returns a Node; every diagnostic that points into the file names it and
// a line that exists; the source kept for FormatDiagnostics (secrets
// masked) is as long as the file; and a config Validate accepts keeps the
// bounds the runtime relies on (resource amounts convert to fixed point,
// sizes and counts are in range, the gcs block's storage is known), so no
// setting overflows later.
//
// The seed corpus is in testdata/fuzz/FuzzParse, plus the example files.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/full.hcl", "testdata/errors.hcl"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
	}
	f.Add([]byte(`{"head": {}, "resources": {"CPU": 1e18}}`), true)
	f.Add([]byte("resources {\n  CPU = 1e18\n  custom = { a = 1 }\n}\nobject_store {\n  inline_limit = \"1GiB\"\n}\n"), false)
	f.Add([]byte("head {}\ngcs {\n  storage = \"redis\"\n  reconnect_timeout = \"5s\"\n  redis { password = \"pw\" }\n}\ndata_dir = \"d\"\n"), false)
	f.Add([]byte(`{"gcs": {"storage": "bolt", "redis": [{"address": "h:1", "db": -1}, {"passwd": 1}]}}`), true)
	f.Fuzz(func(t *testing.T, src []byte, json bool) {
		name := "fuzz.hcl"
		if json {
			name = "fuzz.json"
		}
		n, diags := Parse(src, name)
		if n == nil {
			t.Fatal("Parse returned a nil Node")
		}
		lines := 1
		for _, c := range src {
			if c == '\n' {
				lines++
			}
		}
		if !diags.HasErrors() {
			diags = append(diags, n.Validate()...)
		}
		for _, d := range diags {
			if d.Subject == nil {
				continue
			}
			if d.Subject.Filename != name || d.Subject.Start.Line < 1 || d.Subject.Start.Line > lines {
				t.Fatalf("diagnostic %q points at %s; the file %s has %d lines", d.Summary, d.Subject, name, lines)
			}
		}
		_ = FormatDiagnostics(diags, n.Files(), 80, false)
		for name, f := range n.Files() {
			if f != nil && len(f.Bytes) != len(src) {
				t.Fatalf("the masked source of %s has %d bytes, the file %d", name, len(f.Bytes), len(src))
			}
		}
		if diags.HasErrors() {
			return
		}
		// Validate accepted it: the runtime's conversions must succeed.
		r := n.Resources
		amounts := map[string]float64{}
		for k, v := range r.Custom {
			amounts[k] = v
		}
		if r.CPU != nil {
			amounts[resources.CPU] = *r.CPU
		}
		if r.GPU != nil {
			amounts[resources.GPU] = *r.GPU
		}
		if r.Memory != nil {
			amounts[resources.Memory] = float64(*r.Memory)
		}
		amounts[resources.ObjectStoreMemory] = float64(n.ObjectStore.Memory)
		if _, err := resources.FromFloats(amounts); err != nil {
			t.Fatalf("accepted config has amounts the runtime refuses: %v", err)
		}
		for _, nt := range n.NodeTypes {
			if _, err := resources.FromFloats(nt.Resources); err != nil {
				t.Fatalf("accepted node type %q: %v", nt.Name, err)
			}
		}
		if st := n.ObjectStore; st.InlineLimit < 0 || st.InlineLimit > limits.MaxInlineLimit {
			t.Fatalf("accepted inline_limit %d", st.InlineLimit)
		}
		if p := n.WorkerPool.Prestart; p != nil && (*p < 0 || *p > MaxWorkersPerJob) {
			t.Fatalf("accepted prestart %d", *p)
		}
		if hc := n.HealthCheck; hc.Period <= 0 || hc.FailureThreshold < 1 || time.Duration(hc.FailureThreshold) > MaxNodeTimeout/hc.Period {
			t.Fatalf("accepted health check %s × %d", hc.Period, hc.FailureThreshold)
		}
		if g := n.GCS; g.ReconnectTimeout <= 0 || (g.Storage != "" && g.Storage != GCSStorageBolt && g.Storage != GCSStorageRedis && g.Storage != GCSStorageMemory) || g.Redis.DB < 0 {
			t.Fatalf("accepted gcs block %+v", g)
		}
		if len(n.Labels) > limits.MaxLabels {
			t.Fatalf("accepted %d labels", len(n.Labels))
		}
	})
}
