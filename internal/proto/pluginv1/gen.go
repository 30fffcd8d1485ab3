// Package pluginv1 holds the generated protobuf and gRPC code of the
// PluginInfo service that every goray plugin serves (see plugin.proto).
// Regenerate with `go generate ./...`.
package pluginv1

//go:generate sh -c "PATH=\"$(cd ../../.. && pwd)/.tools:$PATH\" protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative plugin.proto"
