package main

import (
	"github.com/goray-dev/goray/plugins/ssh/sshprovider"
	"github.com/goray-dev/goray/sdk/provider"
)

func main() {
	provider.Serve(sshprovider.New())
}
