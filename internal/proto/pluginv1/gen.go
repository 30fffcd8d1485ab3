// Package pluginv1 holds the generated protobuf and gRPC code of the
// PluginInfo service that every goray plugin serves (see sdk/proto/goray/plugin/v1/plugin.proto).
// Regenerate with `go generate ./...`.
package pluginv1

//go:generate sh -c "PATH=\"$(cd ../../.. && pwd)/.tools:$PATH\" protoc -I ../../../sdk/proto --go_out=../../.. --go_opt=module=github.com/goray-dev/goray --go-grpc_out=../../.. --go-grpc_opt=module=github.com/goray-dev/goray goray/plugin/v1/plugin.proto"
