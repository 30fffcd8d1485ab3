package main

import (
	"github.com/goray-dev/goray/plugins/aws/awsprovider"
	"github.com/goray-dev/goray/sdk/provider"
)

func main() {
	provider.Serve(awsprovider.New())
}
