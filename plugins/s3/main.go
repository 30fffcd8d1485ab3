package main

import (
	"github.com/goray-dev/goray/plugins/s3/s3store"
	"github.com/goray-dev/goray/sdk/storage"
)

func main() {
	storage.Serve(s3store.New())
}
