// Package collectivev1 holds the generated protobuf and gRPC code of the
// collective protocol (sdk/proto/goray/collective/v1/collective.proto), the optional service a transport
// plugin serves next to Transport when it implements transport.Collective.
// Plugin authors use sdk/transport instead. Regenerate with
// `go generate ./...`.
package collectivev1

//go:generate sh -c "PATH=\"$(cd ../../.. && pwd)/.tools:$PATH\" protoc -I ../../../sdk/proto --go_out=../../.. --go_opt=module=github.com/goray-dev/goray --go-grpc_out=../../.. --go-grpc_opt=module=github.com/goray-dev/goray goray/collective/v1/collective.proto"
