// Package transportv1 holds the generated protobuf and gRPC code of the tensor
// transport plugin protocol (transport.proto). Plugin authors use
// sdk/transport instead. Regenerate with `go generate ./...`.
package transportv1

//go:generate sh -c "PATH=\"$(cd ../../.. && pwd)/.tools:$PATH\" protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative transport.proto"
