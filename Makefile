# jmcluster — make targets are the team's memory. `make help` lists them.
SHELL := /bin/bash
GO ?= go
GOBIN := $(shell $(GO) env GOPATH)/bin
export PATH := $(GOBIN):$(PATH)
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
PKGS := ./...
# make test names its longest packages first: go test starts building and running packages in
# the order they are named, and two cores run two at a time, so a long package named last
# (alphabetically, jobmaster ran from minute 5 to 11) ends the run alone.
TEST_PKGS := ./jobmaster/ ./cmd/jmnode/ ./taskmanager/ ./reconcile/ ./operator/ ./wasmhost/ ./transport/ ./agent/ ./cluster/ ./...
TEST_TIMEOUT ?= 15m
FUZZTIME ?= 60s

.PHONY: demo-pipeline postgres wasm-examples cluster-up cluster-down test-docker test-ui help build test test-short demo proto proto-check lint fmt-check fuzz bench bench-short jepsen jepsen-short jepsen-short-tls jepsen-clean jepsen-root jepsen-selftest docker clean tools FORCE

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-14s %s\n", $$1, $$2}'

build: wasm-examples ## build bin/jmnode and the example user functions (-trimpath, as the image's: one compile serves both)
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/jmnode ./cmd/jmnode

wasm-examples: ## build the example user functions in WebAssembly: bin/wordsplit.wasm, bin/fraud.wasm, bin/ordinal.wasm (docs/user-functions.md)
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o bin/wordsplit.wasm ./examples/wasm/wordsplit
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o bin/fraud.wasm ./examples/wasm/fraud
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o bin/ordinal.wasm ./examples/wasm/ordinal

test: postgres ## run every test with -race, then the jobs at full size (100,000 executions, the default size limits) without -race
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_PKGS)
	$(GO) test -count=1 -timeout 15m -v -run 'TestReconcile100kExecutions|TestJobsAtTheDefaultLimits|TestNoLogLineGrowsWithTheJob' ./reconcile/ ./cmd/jmnode/

postgres: ## install Debian's PostgreSQL when initdb is not found (the postgres_sink tests start their own servers: testkit/pgtest)
	@./scripts/install-postgres.sh

test-short: ## the quick tier: pure logic and single-process clusters, -short
	$(GO) test -race -count=1 -short $(PKGS)

demo: build ## a local 3-JM + 3-TM cluster, a streaming job, a leader kill, the reconciliation step by step
	./bin/jmnode demo

demo-pipeline: build bin/nats-server postgres ## NATS, PostgreSQL and a cluster: clicks -> key by user -> 1-minute windows -> a table, through a TaskManager kill and a leader kill; totals compared
	./bin/jmnode demo-pipeline

bin/nats-server: go.mod go.sum ## the NATS server demo-pipeline starts, built from the Go module github.com/nats-io/nats-server/v2
	CGO_ENABLED=0 $(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2

docker: deploy/tls/gossip.key ## build the FROM-scratch image jmcluster/jmnode from a static jmnode, and the compose file's development TLS files
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o deploy/jmnode ./cmd/jmnode
	docker build -t jmcluster/jmnode:dev deploy
	rm -f deploy/jmnode

cluster-up: docker ## start the compose cluster (deploy/docker-compose.yml): 3 JMs + 3 TMs, mutual TLS, data volumes, health checks
	docker-compose -f deploy/docker-compose.yml up -d
	@echo "operate it: export JMNODE_TLS_CA=deploy/tls/jmcluster-ca.pem JMNODE_TLS_CERT=deploy/tls/operator-admin.pem JMNODE_TLS_KEY=deploy/tls/operator-admin-key.pem; bin/jmnode status"

cluster-down: ## stop the compose cluster and delete its volumes
	docker-compose -f deploy/docker-compose.yml down -v --remove-orphans

test-ui: build ## the web UI in headless Chromium (chromedp; installs Debian's chromium when missing); UPDATE_SCREENSHOTS=1 writes docs/ui-*.png
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { echo "installing chromium"; apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
	$(GO) test -tags browser -count=1 -timeout 5m -v -run TestWebUI ./cmd/jmnode/

test-docker: docker ## the compose cluster for real: up, a streaming job, docker kill of the leader, a network cut, down (always)
	$(GO) test -tags dockertest -count=1 -timeout 10m -v -run TestComposeCluster ./deploy/

# The compose file's development CA, a certificate per container (named for its host name), an
# operator certificate for the host's CLI and a gossip key, made once (delete deploy/tls to
# start over). The CA key is kept beside them: this is a development setup (docs/security.md).
deploy/tls/gossip.key: | build
	mkdir -p deploy/tls.new
	./bin/jmnode tls ca create --dir deploy/tls.new
	for n in jm1 jm2 jm3; do ./bin/jmnode tls cert create --dir deploy/tls.new --role jobmaster --name $$n --dns $$n || exit 1; done
	for n in tm1 tm2 tm3; do ./bin/jmnode tls cert create --dir deploy/tls.new --role taskmanager --name $$n --dns $$n || exit 1; done
	./bin/jmnode tls cert create --dir deploy/tls.new --role operator --name admin
	(umask 077 && ./bin/jmnode gossip keygen > deploy/tls.new/gossip.key)
	rm -rf deploy/tls && mv deploy/tls.new deploy/tls

tools: ## install protoc (Debian) and the Go protoc plugins at pinned versions
	@command -v protoc >/dev/null || { echo "installing protobuf-compiler"; apt-get update -qq && apt-get install -y -qq protobuf-compiler >/dev/null; }
	@test -x $(GOBIN)/protoc-gen-go || $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@test -x $(GOBIN)/protoc-gen-go-grpc || $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

proto: tools ## regenerate transport/pb from transport/proto
	protoc -I transport/proto \
		--go_out=. --go_opt=module=github.com/jmcluster/jmcluster \
		--go-grpc_out=. --go-grpc_opt=module=github.com/jmcluster/jmcluster \
		transport/proto/jmcluster/v1/*.proto

proto-check: proto ## fail when the committed generated code is stale
	@git diff --exit-code -- transport/pb || { echo "generated protobuf code is stale: run 'make proto' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- transport/pb)" || { echo "untracked generated files in transport/pb: run 'make proto' and commit"; git status --porcelain -- transport/pb; exit 1; }

fmt-check: ## fail when gofmt is not clean
	@out=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$out" || { echo "gofmt needed:"; echo "$$out"; exit 1; }

lint: fmt-check ## gofmt, go vet, no hand-written Go file over 500 lines (.lint/long-files), the import rules of docs/architecture.md, each DESIGN.md opening with its files
	$(GO) vet $(PKGS)
	./scripts/long-files.sh --self-check
	./scripts/long-files.sh
	$(GO) test -count=1 ./docs/

fuzz: ## run every fuzz target for FUZZTIME each (default 60s) from its seed corpus in testdata/fuzz
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

bench-short: build ## the benchmark goals, under ten minutes on two cores: ends with one GOAL line per goal (docs/benchmarks.md)
	@JMC_GOALS=1 $(GO) test -count=1 -p 1 -timeout 20m -run '^TestGoal' -v ./fsm/ ./reconcile/ ./agent/ ./dataplane/ ./operator/ ./cmd/jmnode/ > bench-short.out 2>&1; rc=$$?; \
		grep -E '^\s+[a-z_]+_test\.go:[0-9]+: ' bench-short.out | grep -v '^\s*helpers_test'; \
		[ $$rc -eq 0 ] || { tail -40 bench-short.out; echo "bench-short: the goal tests failed (bench-short.out)"; exit 1; }; \
		echo; grep '^GOAL' bench-short.out

bench: build ## every benchmark, then every goal at full trials (JMC_GOALS=full): reproduces docs/benchmarks.md; bench.out keeps the log
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $(PKGS) | tee bench.out
	@JMC_GOALS=full JMC_FAILOVER_TRIALS=10 $(GO) test -count=1 -p 1 -timeout 90m -run '^TestGoal' -v ./fsm/ ./reconcile/ ./agent/ ./dataplane/ ./operator/ ./cmd/jmnode/ >> bench.out 2>&1; rc=$$?; \
		grep -E '^\s+[a-z_]+_test\.go:[0-9]+: ' bench.out | grep -v '^\s*helpers_test'; \
		[ $$rc -eq 0 ] || { tail -40 bench.out; echo "bench: the goal tests failed (bench.out)"; exit 1; }; \
		echo; grep '^GOAL' bench.out

bin/jepsen: FORCE
	$(GO) build -o bin/jepsen ./jepsen-style/cmd/jepsen

jepsen-root:
	@test "$$(id -u)" = 0 || { echo "jepsen needs root: it creates network namespaces, veth pairs and iptables rules (inside its own namespaces only)"; exit 1; }

jepsen-short: jepsen-root build bin/jepsen bin/nats-server postgres ## the short fault suite (kill, pause, isolate the leader; majority/minority), under 5 minutes, root
	./bin/jepsen short --jmnode ./bin/jmnode

jepsen-short-tls: jepsen-root build bin/jepsen bin/nats-server postgres ## the short fault suite with mutual TLS on every connection and encrypted gossip (SCENARIOS=a,b: only those), root
	./bin/jepsen short --tls --jmnode ./bin/jmnode $(if $(SCENARIOS),--scenarios $(SCENARIOS))

jepsen-selftest: jepsen-root build bin/jepsen bin/nats-server postgres ## deliberately broken builds, each caught by its checker, root
	./bin/jepsen selftest --jmnode ./bin/jmnode

jepsen: jepsen-root build bin/jepsen bin/nats-server postgres ## every fault scenario with seeds 1, 2, 3 and the report, root
	./bin/jepsen matrix --seeds 1,2,3 --jmnode ./bin/jmnode

jepsen-clean: bin/jepsen ## remove namespaces and processes a crashed fault run left behind, root
	./bin/jepsen clean

FORCE:

clean: ## remove build output
	rm -rf bin dist .demo
