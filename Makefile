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
# The S3 server the storage tests run (internal/testservers/miniotest); about 3 minutes
# to build the first time, then reused from ./.tools.
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
# The EC2 API emulator the AWS provider's tests run (moto's server, from
# PyPI, in a virtualenv under ./.tools/moto; internal/testservers/mototest).
MOTO_VERSION := 5.2.5

# The pinned tools built or installed from source (MinIO, the protoc
# plugins, moto's virtualenv) are kept once per machine in TOOLS_CACHE,
# outside the clone and keyed by tool and version as Go's module cache is:
# a fresh clone on the same machine links them into ./.tools instead of
# building them again (MinIO takes several minutes on 2 cores). A version
# bump here builds the new one beside the old; delete the folder to reclaim
# the space.
TOOLS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/goray-tools

# cached-go-install installs Go command $(1) at version $(2) into
# TOOLS_CACHE/<name>/<version> unless it is there, then links it to $(3)
# (a hard link, or a copy across file systems). It builds into a private
# folder and renames it, so two clones building at once both end with a
# whole binary.
define cached-go-install
	@mkdir -p $(TOOLS)
	@c="$(TOOLS_CACHE)/$(notdir $(3))/$(2)"; \
	if [ ! -x "$$c/$(notdir $(3))" ]; then \
		echo "building $(1)@$(2) into $$c (once per machine)"; \
		tmp="$$c.tmp.$$$$"; rm -rf "$$tmp"; mkdir -p "$$tmp" && \
		(cd /tmp && GOBIN="$$tmp" $(GO) install $(1)@$(2)) || { rm -rf "$$tmp"; exit 1; }; \
		mv -T "$$tmp" "$$c" 2>/dev/null || rm -rf "$$tmp"; \
	fi; \
	rm -f "$(3)"; ln "$$c/$(notdir $(3))" "$(3)" 2>/dev/null || cp "$$c/$(notdir $(3))" "$(3)"
endef

# A test binary that runs longer is stopped with every goroutine printed. The
# acceptance package takes about 10 minutes on a quiet 2-core machine and 21
# beside two CPU hogs and other builds: the bound leaves room for a busy CI.
TEST_TIMEOUT ?= 40m
TEST_FLAGS ?=
# The packages go-test runs (a subset, say ./acceptance, still checks TMPDIR).
TEST_PKGS ?= ./...

# private-tmp runs the shell command $(1) with TMPDIR a fresh directory of
# its own, and fails when anything is left in it afterwards: every test and
# tool removes what it makes (a spill test once left 51 MB per run). Other
# programs' files in /tmp do not count. The name is short: unix socket
# paths under it are limited to 107 bytes.
private-tmp = tmp=$$(mktemp -d /tmp/gXXX) || exit 1; \
	TMPDIR=$$tmp $(1); rc=$$?; \
	if [ -n "$$(ls -A $$tmp)" ]; then \
		echo "FAIL: left behind in the tests' TMPDIR $$tmp:"; ls -lA $$tmp; rc=1; fi; \
	rm -rf $$tmp; exit $$rc

.PHONY: all build test go-test race redis sshd prometheus chromium moto pyplugin bench-smoke vet fmt-check generate-check unit acceptance generate tools protoc minio clean bench bench-compare plugins fuzz-smoke fuzz

all: build

build:
	$(GO) build ./...

## test: everything CI checks: formatting, vet, unit and acceptance tests, the
## raylet and core worker tests under -race, a
## quick microbenchmark smoke run (fails only if a metric errors, never on figures)
## and 10,000 executions of each fuzz target.
test: fmt-check vet generate-check go-test race bench-smoke fuzz-smoke

# The servers and tools the tests start: MinIO, Redis, sshd, Prometheus,
# Chromium, moto, the Python plugin SDK (pyplugin).
SERVERS := $(TOOLS)/minio redis sshd prometheus chromium $(TOOLS)/moto/bin/moto_server $(TOOLS)/pyplugin/bin/goray-transport-pyshm

go-test: $(SERVERS)
	$(call private-tmp,$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(TEST_PKGS))

# The packages with the most shared state (the raylet's components, the core
# worker and the application API over it, the GCS's placement groups and
# storage journal) also run under the race detector.
RACE_PKGS ?= ./raylet/... ./sdk/ray/... ./gcs/...

## race: the raylet, sdk/ray and GCS tests under -race (part of test).
race: redis
	$(call private-tmp,$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(RACE_PKGS))

bin/goray: FORCE
	@mkdir -p bin
	$(GO) build -ldflags "-X main.commitOverride=$$(git rev-parse --short HEAD 2>/dev/null)" -o bin/goray ./cmd/goray

bench-smoke: bin/goray
	$(call private-tmp,bin/goray microbenchmark --quick)

# Fuzz targets as package:FuzzName. `go test -fuzz` takes one target of one
# package per run. A crasher is written to the package's testdata/fuzz/ and
# fails the run; commit it with the fix as a regression seed.
FUZZ_TARGETS := ./internal/codec:FuzzDecode ./raylet:FuzzDataRequest ./raylet:FuzzResponseHeader ./config:FuzzParse ./config:FuzzParseCluster ./sdk/storage:FuzzValidKey
FUZZTIME ?= 2m
# The smoke run counts executions rather than time: with a duration, Go
# 1.26's fuzz coordinator can fail a target with a bare "context deadline
# exceeded" when a starved worker misses the deadline (golang/go#75804,
# fixed in Go 1.27); a count has no deadline to race.
FUZZ_SMOKE_TIME ?= 10000x
# run-fuzz runs every target for $(1), minimizing new inputs for at most $(2).
run-fuzz = for t in $(FUZZ_TARGETS); do \
		echo "fuzzing $${t\#*:} in $${t%%:*} for $(1)"; \
		$(GO) test -run '^$$' -fuzz "^$${t\#*:}$$" -fuzztime $(1) -fuzzminimizetime $(2) "$${t%%:*}" || exit 1; \
	done

## fuzz-smoke: each fuzz target for FUZZ_SMOKE_TIME (part of test).
fuzz-smoke:
	@$(call run-fuzz,$(FUZZ_SMOKE_TIME),1s)

## fuzz: each fuzz target for FUZZTIME (default 2m).
fuzz:
	@$(call run-fuzz,$(FUZZTIME),30s)

## bench: the full microbenchmark; rewrites the tables in docs/benchmarks.md.
bench: bin/goray
	bin/goray microbenchmark --doc docs/benchmarks.md --json bin/microbenchmark.json

## bench-compare BASE=<rev> [RUNS=3] [FILTER=regex] [QUICK=1]: the microbenchmark
## of BASE and of the working tree, alternating in one session; prints each
## metric's change with its spread (cmd/benchcompare; reports in bin/bench-compare).
bench-compare:
	@test -n "$(BASE)" || { echo "bench-compare: say BASE=<rev>, the revision to compare with"; exit 2; }
	$(call private-tmp,$(GO) run ./cmd/benchcompare -base '$(BASE)' -runs $(or $(RUNS),3) $(if $(FILTER),-filter '$(FILTER)') $(if $(QUICK),-quick))

FORCE:

unit: $(SERVERS)
	$(call private-tmp,$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $$($(GO) list ./... | grep -v /acceptance))

acceptance: $(SERVERS)
	$(call private-tmp,$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v $(TEST_FLAGS) ./acceptance/...)

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

tools: protoc $(SERVERS) $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc

# redis-server comes from Debian's redis-server package: the GCS storage
# tests run a real one on loopback (internal/testservers/redistest).
redis:
	@command -v redis-server >/dev/null || { \
		echo "installing redis-server (Debian)"; \
		{ [ "$$(id -u)" = 0 ] && SUDO= || SUDO=sudo; }; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; \
		$$SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true; }
# (The tests start their own servers; the package's system service, where
# systemd starts one, is stopped so that nothing answers on port 6379.)

# sshd comes from Debian's openssh-server package: the SSH provider's tests
# run their own on loopback ports, with their own host and user keys
# (internal/testservers/sshdtest); the package's system service is stopped.
sshd:
	@test -x /usr/sbin/sshd || { \
		echo "installing openssh-server (Debian)"; \
		{ [ "$$(id -u)" = 0 ] && SUDO= || SUDO=sudo; }; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openssh-server >/dev/null; \
		$$SUDO systemctl disable --now ssh >/dev/null 2>&1 || true; }

# prometheus comes from Debian's prometheus package (without the node
# exporter it recommends): the metrics tests run their own on a loopback
# port with a temp dir (internal/testservers/promtest); the package's
# system service is stopped.
prometheus:
	@command -v prometheus >/dev/null || { \
		echo "installing prometheus (Debian)"; \
		{ [ "$$(id -u)" = 0 ] && SUDO= || SUDO=sudo; }; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
		$$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true; }

# chromium comes from Debian's chromium package: the dashboard's browser
# test (acceptance/dashboard_test.go) drives it headless with chromedp,
# with its own temp profile.
chromium:
	@command -v chromium >/dev/null || { \
		echo "installing chromium (Debian)"; \
		{ [ "$$(id -u)" = 0 ] && SUDO= || SUDO=sudo; }; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

## moto: the pinned EC2 API emulator, into .tools/moto (a Python virtualenv).
moto: $(TOOLS)/moto/bin/moto_server

# PYTHON_VENV_CHECK installs Debian's python3 and python3-venv unless
# python3 can already make a virtualenv (moto and pyplugin use one each).
PYTHON_VENV_CHECK = python3 -c 'import venv, ensurepip' 2>/dev/null || { \
		echo "installing python3-venv (Debian)"; \
		{ [ "$$(id -u)" = 0 ] && SUDO= || SUDO=sudo; }; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq python3 python3-venv >/dev/null; }

# The virtualenv lives in TOOLS_CACHE (a virtualenv cannot be moved, so it
# is made in place; .complete marks a whole one) and .tools/moto links to it.
$(TOOLS)/moto/bin/moto_server:
	@mkdir -p $(TOOLS)
	@c="$(TOOLS_CACHE)/moto/$(MOTO_VERSION)"; \
	if [ ! -e "$$c/.complete" ]; then \
		$(PYTHON_VENV_CHECK); \
		echo "installing moto $(MOTO_VERSION) into $$c (once per machine)"; \
		rm -rf "$$c" && python3 -m venv "$$c" && \
		"$$c/bin/pip" install -q 'moto[server]==$(MOTO_VERSION)' && touch "$$c/.complete" || { rm -rf "$$c"; exit 1; }; \
	fi; \
	rm -rf $(TOOLS)/moto; ln -s "$$c" $(TOOLS)/moto

## pyplugin: the Python plugin SDK (sdk/python) and its example transport,
## installed editable with their pinned dependencies (sdk/python/requirements.txt)
## into .tools/pyplugin (a Python virtualenv, as for moto); its tests are
## sdk/python/pythontest and acceptance's TestPythonTransportMovesTensors.
PYPLUGIN := $(TOOLS)/pyplugin/bin/goray-transport-pyshm
pyplugin: $(PYPLUGIN)

$(PYPLUGIN): sdk/python/pyproject.toml sdk/python/examples/pyshm/pyproject.toml sdk/python/requirements.txt
	@mkdir -p $(TOOLS)
	@$(PYTHON_VENV_CHECK)
	python3 -m venv $(TOOLS)/pyplugin
	$(TOOLS)/pyplugin/bin/pip install -q -c sdk/python/requirements.txt -e 'sdk/python[dev]' -e sdk/python/examples/pyshm
	@touch $@

# protoc comes from Debian's protobuf-compiler package.
protoc:
	@command -v protoc >/dev/null || { \
		echo "installing protobuf-compiler (Debian)"; \
		{ [ "$$(id -u)" = 0 ] && SUDO= || SUDO=sudo; }; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq protobuf-compiler >/dev/null; }

$(TOOLS)/protoc-gen-go:
	$(call cached-go-install,google.golang.org/protobuf/cmd/protoc-gen-go,$(PROTOC_GEN_GO_VERSION),$@)

$(TOOLS)/protoc-gen-go-grpc:
	$(call cached-go-install,google.golang.org/grpc/cmd/protoc-gen-go-grpc,$(PROTOC_GEN_GO_GRPC_VERSION),$@)

## minio: the pinned MinIO server, into .tools (examples/spill-s3 in README.md);
## built once per machine into TOOLS_CACHE.
minio: $(TOOLS)/minio

$(TOOLS)/minio:
	$(call cached-go-install,github.com/minio/minio,$(MINIO_VERSION),$@)

## plugins: the plugin binaries, where plugin_dir = "./bin/plugins" finds them.
plugins: bin/plugins/goray-transport-shm bin/plugins/goray-transport-collective bin/plugins/goray-transport-onesided bin/plugins/goray-storage-fs bin/plugins/goray-storage-s3 bin/plugins/goray-provider-local bin/plugins/goray-provider-aws bin/plugins/goray-provider-ssh
bin/plugins/goray-transport-%: FORCE
	@mkdir -p bin/plugins
	$(GO) build -o $@ ./plugins/$*
bin/plugins/goray-storage-%: FORCE
	@mkdir -p bin/plugins
	$(GO) build -o $@ ./plugins/$*
bin/plugins/goray-provider-%: FORCE
	@mkdir -p bin/plugins
	$(GO) build -o $@ ./plugins/$*

clean:
	rm -rf bin
