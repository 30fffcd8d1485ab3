package collective_test

import (
	"context"
	"math/big"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/goray-dev/goray/plugins/collective/collective"
)

// TestREADMEConfig: the config block the plugin's README shows is a valid
// configuration, with every attribute the plugin has.
func TestREADMEConfig(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "```hcl\n")
	if start < 0 {
		t.Fatal("the README has no hcl block")
	}
	block := doc[start+len("```hcl\n"):]
	block = block[:strings.Index(block, "```")]
	f, diags := hclsyntax.ParseConfig([]byte(block), "README.md", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	plugin := f.Body.(*hclsyntax.Body).Blocks[0]
	config := plugin.Body.Blocks[0]
	values := map[string]any{}
	for name, attr := range config.Body.Attributes {
		v, diags := attr.Expr.Value(nil)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		switch v.Type() {
		case cty.String:
			values[name] = v.AsString()
		case cty.Bool:
			values[name] = v.True()
		case cty.Number:
			n, _ := v.AsBigFloat().Int(new(big.Int))
			values[name] = n.Int64()
		}
	}
	values["listen"] = "127.0.0.1:0" // the README's default, the node's IP, may not be this machine's
	for name := range collective.New().ConfigSpec().Schema().Attributes {
		if _, ok := values[name]; !ok {
			t.Errorf("the README's config block lacks %q", name)
		}
	}
	tr := collective.New()
	defer tr.Close()
	if err := tr.ConfigSpec().Configure(context.Background(), values); err != nil {
		t.Fatalf("the README's config block: %v", err)
	}
}
