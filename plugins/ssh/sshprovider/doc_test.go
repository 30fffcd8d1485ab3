package sshprovider_test

import (
	"context"
	"os"
	"regexp"
	"testing"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/plugins/ssh/sshprovider"
	"github.com/goray-dev/goray/sdk/plugin"
	"github.com/goray-dev/goray/sdk/plugin/hclspec"
	"github.com/goray-dev/goray/sdk/provider"
)

// TestDocClusterFile: the cluster file of docs/ssh.md loads, and its
// provider config and every node_config decode against the schemas the
// plugin reports (config's own doc test checks the file, not the
// plugin's blocks).
func TestDocClusterFile(t *testing.T) {
	src, err := os.ReadFile("../../../docs/ssh.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```hcl\n(.*?)```").FindSubmatch(src)
	if m == nil {
		t.Fatal("docs/ssh.md has no hcl block")
	}
	c, diags := config.ParseCluster(m[1], "ssh.md")
	if diags.HasErrors() {
		t.Fatalf("the cluster file does not load:\n%s", config.FormatDiagnostics(diags, c.Files(), 0, false))
	}
	if c.Provider.Name != sshprovider.Name {
		t.Fatalf("the cluster file's provider is %q", c.Provider.Name)
	}
	p := sshprovider.New()
	defer p.Close()
	if _, d := hclspec.Decode(c.Provider.Config, p.ConfigSpec().Schema(), c.Provider.DeclRange); d.HasErrors() {
		t.Errorf("its provider config does not fit the plugin's schema:\n%s", config.FormatDiagnostics(d, c.Files(), 0, false))
	}
	rep, err := p.NodeConfigSchema(context.Background(), &provider.NodeConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, nt := range c.NodeTypes {
		if nt.Name == c.HeadNodeType {
			continue
		}
		n++
		v, d := hclspec.Decode(nt.NodeConfig, rep.Schema, nt.NodeConfigRange)
		if d.HasErrors() {
			t.Errorf("node_config of %q does not fit the plugin's schema:\n%s", nt.Name, config.FormatDiagnostics(d, c.Files(), 0, false))
			continue
		}
		if _, err := plugin.DecodeConfig[sshprovider.NodeConfig](v); err != nil {
			t.Errorf("node_config of %q: %v", nt.Name, err)
		}
	}
	if n == 0 {
		t.Error("the cluster file has no worker node type")
	}
}
