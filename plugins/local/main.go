package main

import (
	"github.com/goray-dev/goray/plugins/local/localprovider"
	"github.com/goray-dev/goray/sdk/provider"
)

func main() {
	provider.Serve(localprovider.New())
}
