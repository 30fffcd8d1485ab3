package config_test

import (
	"fmt"

	"github.com/goray-dev/goray/config"
)

func ExampleParse() {
	src := []byte(`
address = "10.0.0.1:6380"
object_store {
  memory = "2GiB"
}
`)
	n, diags := config.Parse(src, "node.hcl")
	if err := config.NewDiagnosticsError(append(diags, n.Validate()...), n.Files()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(n.Address, n.ObjectStore.Memory)
	// Output: 10.0.0.1:6380 2147483648
}

func ExampleParse_diagnostics() {
	src := []byte(`
address = "10.0.0.1:6380"
objekt_store {
  memory = "2GiB"
}
`)
	_, diags := config.Parse(src, "goray.hcl")
	fmt.Println(config.NewDiagnosticsError(diags, nil))
	// Output: goray.hcl:3,1: Unsupported block type; Blocks of type "objekt_store" are not expected here. Did you mean "object_store"?
}
