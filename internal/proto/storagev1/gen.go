// Package storagev1 holds the generated protobuf and gRPC code of the
// storage plugin protocol (storage.proto). Plugin authors use sdk/storage
// instead. Regenerate with `go generate ./...`.
package storagev1

//go:generate sh -c "PATH=\"$(cd ../../.. && pwd)/.tools:$PATH\" protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative storage.proto"
