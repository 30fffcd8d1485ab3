package main

import (
	"os"
	"regexp"
	"testing"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/plugins/s3/s3store"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/plugin/hclspec"
)

// TestDocTwoBuckets: the two storage blocks of docs/plugins.md ("One
// binary, several blocks") load as a node config, both run the s3 plugin's
// binary, and their config blocks decode against its schema.
func TestDocTwoBuckets(t *testing.T) {
	src, err := os.ReadFile("../../docs/plugins.md")
	if err != nil {
		t.Fatal(err)
	}
	var block []byte
	for _, m := range regexp.MustCompile("(?s)```hcl\n(.*?)```").FindAllSubmatch(src, -1) {
		if regexp.MustCompile(`plugin "storage"`).Match(m[1]) {
			block = m[1]
		}
	}
	if block == nil {
		t.Fatal(`docs/plugins.md has no hcl block with a plugin "storage"`)
	}
	n, diags := config.Parse(block, "plugins.md")
	if diags.HasErrors() {
		t.Fatalf("the blocks:\n%s", diags.Error())
	}
	spec := s3store.New().ConfigSpec()
	buckets := map[string]bool{}
	for _, p := range n.Plugins {
		if p.Kind != "storage" || p.Command != "goray-storage-s3" {
			t.Errorf("plugin %q %q runs %q; want the s3 plugin's binary", p.Kind, p.Name, p.Command)
		}
		raw, diags := hclspec.Decode(p.Config, spec.Schema(), p.DeclRange)
		if diags.HasErrors() {
			t.Fatalf("config of %s:\n%s", p.Name, diags.Error())
		}
		c, err := plugin.DecodeConfig[s3store.Config](raw)
		if err != nil {
			t.Fatalf("config of %s: %v", p.Name, err)
		}
		buckets[c.Bucket] = true
	}
	if len(n.Plugins) != 2 || len(buckets) != 2 {
		t.Fatalf("%d blocks, buckets %v; want two blocks with a bucket each", len(n.Plugins), buckets)
	}
}
