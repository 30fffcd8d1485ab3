// Package providerv1 holds the generated protobuf and gRPC code of the
// provider plugin protocol (provider.proto). Plugin authors use sdk/provider
// instead. Regenerate with `go generate ./...`.
package providerv1

//go:generate sh -c "PATH=\"$(cd ../../.. && pwd)/.tools:$PATH\" protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative provider.proto"
