// Package providerv1 holds the generated protobuf and gRPC code of the
// provider plugin protocol (sdk/proto/goray/provider/v1/provider.proto). Plugin authors use sdk/provider
// instead. Regenerate with `go generate ./...`.
package providerv1

//go:generate sh -c "PATH=\"$(cd ../../.. && pwd)/.tools:$PATH\" protoc -I ../../../sdk/proto --go_out=../../.. --go_opt=module=github.com/goray-dev/goray --go-grpc_out=../../.. --go-grpc_opt=module=github.com/goray-dev/goray goray/provider/v1/provider.proto"
