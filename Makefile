# xrnic build and test entry points. `make help` lists them.
GO       ?= go
PKGS     ?= ./...
FUZZTIME ?= 3s

.PHONY: help build demo test check fmt-check vet unit fuzz-short fuzz bench clean generate

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## compile every package and command
	$(GO) build $(PKGS)

demo: build ## the main job: today a tour of the iWARP wire layer checked by tshark
	$(GO) run ./wire/wiretest/tour

test: check unit fuzz-short ## what CI runs: format, vet, all tests with -race, a short fuzz pass

check: fmt-check vet

fmt-check: ## fail if any file is not gofmt-formatted
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet: ## go vet
	$(GO) vet $(PKGS)

unit: ## all tests under the race detector (privileged tests skip unless root)
	$(GO) test -race -count=1 $(PKGS)
	$(GO) test -race -count=1 -tags atomics_stress ./atomics

fuzz-short: ## run every fuzz target for FUZZTIME (default 3s)
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

fuzz: ## run every fuzz target for 2 minutes (override FUZZTIME)
	FUZZTIME=2m scripts/fuzz.sh

bench: ## every benchmark, 0-alloc report, 5 runs (feed to benchstat)
	$(GO) test -run='^$$' -bench=. -benchmem -count=5 $(PKGS)

generate: ## rebuild generated code (bpf/: needs clang, llvm-strip, libbpf-dev headers)
	$(GO) generate ./bpf/...

clean:
	$(GO) clean -testcache
