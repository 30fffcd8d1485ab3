# goray build and test entry points. `make test` is what CI runs.
#
# Pinned tools are installed into ./.tools (git-ignored) on first use and
# reused afterwards.

SHELL := /bin/bash
GO ?= go
TOOLS := $(CURDIR)/.tools
export PATH := $(TOOLS):$(PATH)

PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
# The S3 server the storage tests run (internal/miniotest); about 3 minutes
# to build the first time, then reused from ./.tools.
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c

TEST_TIMEOUT ?= 25m
TEST_FLAGS ?=

.PHONY: all build test go-test bench-smoke vet fmt-check generate-check unit acceptance generate tools protoc clean bench plugins

all: build

build:
	$(GO) build ./...

## test: everything CI checks: formatting, vet, unit and acceptance tests, and a
## quick microbenchmark smoke run (fails only if a metric errors, never on figures).
test: fmt-check vet generate-check go-test bench-smoke

go-test: $(TOOLS)/minio
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...

bin/goray: FORCE
	@mkdir -p bin
	$(GO) build -ldflags "-X main.commitOverride=$$(git rev-parse --short HEAD 2>/dev/null)" -o bin/goray ./cmd/goray

bench-smoke: bin/goray
	bin/goray microbenchmark --quick

## bench: the full microbenchmark; rewrites the tables in docs/benchmarks.md.
bench: bin/goray
	bin/goray microbenchmark --doc docs/benchmarks.md --json bin/microbenchmark.json

FORCE:

unit: $(TOOLS)/minio
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $$($(GO) list ./... | grep -v /acceptance)

acceptance:
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v $(TEST_FLAGS) ./acceptance/...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.tools/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## generate: regenerate protobuf code and typed wrappers.
generate: tools
	$(GO) generate ./...

## generate-check: the committed generated code is what `go generate ./...` produces.
generate-check: generate
	@if ! git diff --quiet -- '*.go'; then \
		echo "generated code is out of date; run 'make generate' and commit:"; git diff --stat -- '*.go'; exit 1; fi

tools: protoc $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/minio

# protoc comes from Debian's protobuf-compiler package.
protoc:
	@command -v protoc >/dev/null || { \
		echo "installing protobuf-compiler (Debian)"; \
		{ [ "$$(id -u)" = 0 ] && SUDO= || SUDO=sudo; }; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq protobuf-compiler >/dev/null; }

$(TOOLS)/protoc-gen-go:
	@mkdir -p $(TOOLS)
	cd /tmp && GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(TOOLS)/protoc-gen-go-grpc:
	@mkdir -p $(TOOLS)
	cd /tmp && GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

$(TOOLS)/minio:
	@mkdir -p $(TOOLS)
	cd /tmp && GOBIN=$(TOOLS) $(GO) install github.com/minio/minio@$(MINIO_VERSION)

## plugins: the plugin binaries, where plugin_dir = "./bin/plugins" finds them.
plugins: bin/plugins/goray-transport-shm bin/plugins/goray-transport-collective bin/plugins/goray-transport-onesided bin/plugins/goray-storage-fs bin/plugins/goray-storage-s3
bin/plugins/goray-transport-%: FORCE
	@mkdir -p bin/plugins
	$(GO) build -o $@ ./plugins/$*
bin/plugins/goray-storage-%: FORCE
	@mkdir -p bin/plugins
	$(GO) build -o $@ ./plugins/$*

clean:
	rm -rf bin
