// Package storagev1 holds the generated protobuf and gRPC code of the
// storage plugin protocol (sdk/proto/goray/storage/v1/storage.proto). Plugin authors use sdk/storage
// instead. Regenerate with `go generate ./...`.
package storagev1

//go:generate sh -c "PATH=\"$(cd ../../.. && pwd)/.tools:$PATH\" protoc -I ../../../sdk/proto --go_out=../../.. --go_opt=module=github.com/goray-dev/goray --go-grpc_out=../../.. --go-grpc_opt=module=github.com/goray-dev/goray goray/storage/v1/storage.proto"
