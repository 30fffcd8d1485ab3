// Package transportv1 holds the generated protobuf and gRPC code of the tensor
// transport plugin protocol (sdk/proto/goray/transport/v1/transport.proto). Plugin authors use
// sdk/transport instead. Regenerate with `go generate ./...`.
package transportv1

//go:generate sh -c "PATH=\"$(cd ../../.. && pwd)/.tools:$PATH\" protoc -I ../../../sdk/proto --go_out=../../.. --go_opt=module=github.com/goray-dev/goray --go-grpc_out=../../.. --go-grpc_opt=module=github.com/goray-dev/goray goray/transport/v1/transport.proto"
