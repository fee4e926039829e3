# xrnic build and test entry points. `make help` lists them.
GO       ?= go
PKGS     ?= ./...
FUZZTIME ?= 3s

.PHONY: help build bin abi abi-libs demo test interop mutants check fmt-check vet staticcheck unit fuzz-short fuzz bench bench-quick microbench soak idleqps long clean generate

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## compile every package and command
	$(GO) build $(PKGS)

bin: ## build xrnicd, xrnicctl and xrnic-perf into bin/
	$(GO) build -o bin/ ./cmd/xrnicd ./cmd/xrnicctl ./cmd/xrnic-perf

abi: ## the libibverbs.so.1 / librdmacm.so.1 ABI (engine in the process) into bin/lib (docs/VERBS-ABI.md)
	$(MAKE) -C abi OUT=$(CURDIR)/bin/lib

# make test builds bin/lib first when the rdma-core headers are there, so
# the ABI tests (abi/test, interop/siw TestABI*) run; without them those
# tests skip with the apt-get line (CI installs them and fails instead).
abi-libs:
	@if [ -e /usr/include/infiniband/verbs.h ] && [ -e /usr/include/rdma/rdma_cma.h ]; then \
	  $(MAKE) --no-print-directory abi; \
	elif [ "$$CI" = true ]; then \
	  echo "abi: rdma-core headers missing: apt-get install libibverbs-dev librdmacm-dev" >&2; exit 1; \
	else \
	  echo "abi: rdma-core headers missing (apt-get install libibverbs-dev librdmacm-dev): the ABI tests will skip"; \
	fi

demo: bin ## the main job: xrnicd on afxdp in a netns pair, a tour and a perf comparison (root; loopback otherwise)
	bin/xrnic-perf demo

test: ## what CI runs: gofmt, vet, staticcheck, all tests with -race, the siw interop matrix, a short fuzz pass; every step runs and each failure is listed (scripts/test.sh)
	MAKE='$(MAKE)' scripts/test.sh

check: fmt-check vet staticcheck ## gofmt, go vet and staticcheck

fmt-check: ## fail if any file is not gofmt-formatted
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet: ## go vet
	$(GO) vet $(PKGS)

# staticcheck at a pinned version, fetched through the module proxy.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
staticcheck: ## staticcheck (honnef.co/go/tools)
	$(STATICCHECK) $(PKGS)

unit: ## all tests under the race detector (privileged tests skip unless root), the ones -race skips without it, as root the unprivileged ones as uid 65534: every step runs, failures and the slowest packages are listed (scripts/unit.sh)
	GO=$(GO) PKGS='$(PKGS)' scripts/unit.sh

interop: ## the Linux siw interop matrix: Debian's kernel + siw.ko under QEMU (root; docs/INTEROP.md)
	GO=$(GO) INTEROP_RUN='$(INTEROP_RUN)' scripts/interop.sh

mutants: ## the mutation check: each bound of SECURITY.md, removed, must fail its test (root; ~12 min; scripts/mutants.sh -l lists them)
	scripts/mutants.sh

fuzz-short: ## run every fuzz target for FUZZTIME (default 3s)
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

fuzz: ## run every fuzz target for 2 minutes (override FUZZTIME)
	FUZZTIME=2m scripts/fuzz.sh

bench: bin ## the full xrnic-perf sweep (~10-15 min), then the goal table of issue 16 at MTU 1500 and 9000 (3 interleaved repetitions): results/ and docs/PERFORMANCE.md
	bin/xrnic-perf bench

bench-quick: bin ## a short sweep into results/ (docs untouched; no goal table: bin/xrnic-perf bench --goals makes that)
	bin/xrnic-perf bench --quick --doc ""

# Hot paths: FPDU build/parse (mpa, ddp, rdmap, crc32c), placement checks
# (mem), atomics, TCP segment processing (wire/tcp, tcpstack) and ring
# operations (afxdp). Integration benchmarks (netns, XDP) are excluded.
MICROBENCH ?= ^Benchmark([^I]|I[^n])
MICROPKGS  ?= ./wire/... ./atomics ./mem ./tcpstack ./afxdp
COUNT      ?= 6
microbench: ## hot-path Go benchmarks, COUNT runs each, benchstat-ready (make microbench > new.txt; benchstat old.txt new.txt)
	$(GO) test -run='^$$' -bench='$(MICROBENCH)' -benchmem -count=$(COUNT) $(MICROPKGS)

soak: ## 60 s soak: one xrnicd, 4 client processes x 250 QPs (CI runs 8 s, 4 x 50)
	XRNIC_SOAK=1 $(GO) test -count=1 -run TestIntegrationSoak -v -timeout 10m ./reliability

idleqps: ## RSS per idle QP: one xrnicd with 4 x 1,024 QPs that moved 64 KiB each (root: in a netns whose loopback has MTU 1500); results/idleqps.json
	mkdir -p results
	XRNIC_IDLE_QPS=4096 XRNIC_IDLE_OUT=$(CURDIR)/results/idleqps.json $(GO) test -count=1 -run TestIntegrationIdleQPs -v -timeout 10m ./reliability

long: ## long forms of the reliability tests: 1M STag guesses, 4 x 25,000 FetchAdds per fault level
	XRNIC_LONG=1 $(GO) test -count=1 -run 'TestSTagGuessing|TestIntegrationDaemonGuessing|TestIntegrationWireFaults' -v -timeout 60m ./reliability

generate: ## rebuild generated code (bpf/: needs clang, llvm-strip, libbpf-dev headers)
	$(GO) generate ./bpf/...

clean:
	$(GO) clean -testcache
