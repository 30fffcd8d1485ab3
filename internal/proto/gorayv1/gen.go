// Package gorayv1 holds the generated protobuf and gRPC code of goray's
// internal control plane. Regenerate with `go generate ./...`.
package gorayv1

//go:generate sh -c "PATH=\"$(cd ../../.. && pwd)/.tools:$PATH\" protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative *.proto"
