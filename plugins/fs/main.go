package main

import (
	"github.com/goray-dev/goray/plugins/fs/fsstore"
	"github.com/goray-dev/goray/sdk/storage"
)

func main() {
	storage.Serve(fsstore.New())
}
