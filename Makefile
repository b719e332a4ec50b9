# zeish: `make run` installs what is missing, builds and runs zeishd;
# `make test` runs the whole suite.
export PATH := /usr/local/go/bin:$(PATH)
GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/zeish/zeish/internal/version.Version=$(VERSION)

.PHONY: all deps build console run test test-race test-ts test-python test-browser test-e2b vet bench bench-python fuzz crash clean proto

all: build

deps:
	@./scripts/deps.sh

# The web console (TypeScript + xterm.js, bundled by esbuild) goes into
# internal/console/dist, which zeishd embeds; without it zeishd serves a
# page saying to run make build.
console:
	cd internal/console/web && npm ci --no-audit --no-fund && npm run build

build: console
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -o bin/sandboxd ./cmd/sandboxd
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/zeishd ./cmd/zeishd
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/zeishctl ./cmd/zeishctl

run: deps build
	ZEISH_DEBIAN_TEMPLATE=$${ZEISH_DEBIAN_TEMPLATE:-on} ./bin/zeishd

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || (echo "gofmt needed:"; gofmt -l .; exit 1)

# VM_PACKAGES are the packages whose tests boot VMs (QEMU): they run without
# the race detector, which would slow each guest's host side several times
# over. Every other package runs with -race, and a race fails the run.
# A package whose tests start booting VMs goes here (test-race reports the
# wall time of each package it runs).
MODULE       := github.com/zeish/zeish
VM_PACKAGES  := ./e2e ./vmm/qemu ./template
RACE_PACKAGES = $(filter-out $(addprefix $(MODULE)/,$(VM_PACKAGES:./%=%)),$(shell $(GO) list ./...))

# VM tests share two cores: -p 2 keeps at most two test binaries at once.
# The console is bundled first: zeishd embeds it, and e2e tests drive it.
test: deps vet console test-race
	$(GO) test -p 2 -timeout 30m $(VM_PACKAGES)
	$(MAKE) test-ts
	$(MAKE) test-python
	$(MAKE) test-browser
	E2B_VERSIONS=$(E2B_DEFAULT_VERSIONS) $(MAKE) test-e2b

# Every package that boots no VM, under the race detector.
test-race:
	$(GO) test -p 2 -race -timeout 20m $(RACE_PACKAGES)

# The TypeScript SDK and its eval-farm example, against a real zeishd (bin/)
# and real VMs; the Go tests above fill the shared template cache first.
test-ts: build
	cd sdk/ts && npm ci --no-audit --no-fund && npm run build
	cd examples/eval-farm/ts && npm ci --no-audit --no-fund && npm run build
	cd sdk/ts && npm test

# The Python SDK (sdk/python) and its eval-farm example, with Debian's
# /usr/bin/python3 and python3-* packages (scripts/deps.sh), against a real
# zeishd (bin/) in network namespaces of the tests' own and real VMs; the
# debian template comes from the shared test cache (built here on a miss).
# mypy --strict checks the package and the example first.
PYTHON := /usr/bin/python3
test-python: build
	$(GO) test -count=1 -run '^TestBuildDebian$$' ./template
	cd sdk/python && $(PYTHON) -m mypy --strict zeish tools
	cd examples/eval-farm/python && MYPYPATH=$(CURDIR)/sdk/python $(PYTHON) -m mypy --strict farm.py demo_repo.py
	cd sdk/python && $(PYTHON) -m pytest -p no:cacheprovider -ra --durations=20 tests

# The console in real Chromium (Debian's /usr/bin/chromium, driven by
# playwright-core) against a real zeishd (bin/) and real VMs; screenshots go
# to internal/console/web/screenshots.
test-browser: build
	cd internal/console/web && npm test

# make test runs the E2B suite at the oldest and the newest pinned SDK (each
# version branch of the suite, atLeast, has one on either side); make
# test-e2b alone runs every pinned version.
E2B_DEFAULT_VERSIONS := 2.45.0,2.51.0

# The unmodified npm `e2b` SDK, at each version package.json pins (2.45.0,
# 2.49.1, 2.51.0), against a real zeishd (bin/) and real VMs; a table of
# passed/failed tests by area and each run's wall time at the end.
# The debian template goes into the shared test cache first (a cache hit once
# built): the suite's zeishd runs in a network namespace and cannot build it.
test-e2b: build
	$(GO) test -count=1 -run '^TestBuildDebian$$' ./template
	cd sdk/e2b-compat && npm ci --no-audit --no-fund && npm test

# Go code for our envd-compatible .proto files (internal/e2b/proto) and the
# control plane ↔ node protocol (proto/zeish/node/v2 → internal/nodeapi): protoc
# from Debian (scripts/deps.sh), the plugins at the versions go.mod pins.
PROTO_PLUGINS := $(CURDIR)/bin/proto-plugins
proto:
	GOBIN=$(PROTO_PLUGINS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go
	GOBIN=$(PROTO_PLUGINS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go
	cd internal/e2b/proto && PATH=$(PROTO_PLUGINS):$$PATH protoc -I . -I /usr/include \
		--go_out=../envdpb --go_opt=module=github.com/zeish/zeish/internal/e2b/envdpb \
		--connect-go_out=../envdpb --connect-go_opt=module=github.com/zeish/zeish/internal/e2b/envdpb \
		process/process.proto filesystem/filesystem.proto
	cd proto && PATH=$(PROTO_PLUGINS):$$PATH protoc -I . -I /usr/include \
		--go_out=../internal/nodeapi --go_opt=module=github.com/zeish/zeish/internal/nodeapi \
		--connect-go_out=../internal/nodeapi --connect-go_opt=module=github.com/zeish/zeish/internal/nodeapi \
		zeish/node/v2/node.proto

# Fuzz targets run their seed corpus in `make test`; this runs each one for
# FUZZTIME (new inputs that fail land in the package's testdata/fuzz).
FUZZTIME ?= 2m
FUZZ_TARGETS := ./guest:FuzzFrameReader ./guest:FuzzReadChunk ./internal/server:FuzzRequestDecoders \
	./internal/server:FuzzSnapshotName ./sandbox:FuzzCheckName ./sandbox:FuzzCheckID \
	./internal/network:FuzzServeDNS ./sandbox:FuzzParseRule ./guest:FuzzListReplies \
	./internal/guestports:FuzzParse ./internal/server:FuzzTermControl \
	./internal/server:FuzzRewriteDevToolsJSON ./internal/server:FuzzHostPort ./internal/control:FuzzTokenVerify \
	./internal/e2b:FuzzHostRoute ./guest:FuzzParseCredential \
	./template:FuzzUnpackContained ./template:FuzzEntry ./template:FuzzCheckSymlink ./template/inroot:FuzzResolve \
	./template/ocisource:FuzzIndexArchive ./template/ocisource:FuzzDecompress ./template/ocisource:FuzzParseManifest \
	./internal/server:FuzzTemplateUpload ./internal/control:FuzzBuildRequest
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "== $$t ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; \
	done

# The crash campaign at length: CRASH_ROUNDS kills of zeishd at random points
# (the suite runs 3).
CRASH_ROUNDS ?= 30
crash:
	$(GO) test -p 1 -count=1 -timeout 0 ./e2e -run '^TestCrashRecovery$$' -v -args -crash.rounds $(CRASH_ROUNDS)

# BENCHFLAGS, e.g. make bench BENCHFLAGS='-runs 3 -only cold'
bench: deps build
	$(GO) run ./bench -bin bin $(BENCHFLAGS)

# The Python eval farm, forked against naive, at N = 4 and 8 (BENCH_FARM_N):
# the numbers of docs/fork.md's Python farm table.
BENCH_FARM_N ?= 4 8
bench-python: deps build
	$(GO) test -count=1 -run '^TestBuildDebian$$' ./template
	cd sdk/python && $(PYTHON) tests/bench_farm.py $(BENCH_FARM_N)

clean:
	rm -rf bin
