# deepcode — build, test and package.
GO       ?= go
BIN      := bin
PREFIX   ?= $(HOME)/.local
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/deepcode-dev/deepcode/shared/buildinfo.Version=$(VERSION)
SERVICES := deepcode-manager deepcode-gateway deepcode-supervisor deepcode-agentd deepcode-termhost deepcode-scheduler
# LIBEXEC: what goes beside the services, out of PATH: the services and
# deepcode-tui, the TUI with its Markdown renderer, which deepcode runs.
LIBEXEC  := $(SERVICES) deepcode-tui

.PHONY: all build install uninstall test prepare fmt-check vet staticcheck unit bench fuzz cross clean web web-shots package chaos

all: build

## build: every binary into bin/, statically linked (no cgo: nothing needs
## it, and a static binary starts faster and maps less: fewer page faults)
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

## web: rebuild the web client (services/gateway/web/dist, committed and
## embedded by the gateway) reproducibly from the pinned npm packages
web:
	cd services/gateway/web && npm ci --ignore-scripts --no-audit --no-fund && npm run build

## web-shots: run the browser test and keep a screenshot of each view at
## 390 and 1280 px in web-shots/ (SHOTS=dir to choose another folder); they
## are for people to look at, not compared pixel by pixel. It also measures
## the 2,000-item thread (DEEPCODE_WEB_LONG_THREAD=1).
SHOTS ?= $(CURDIR)/web-shots
web-shots:
	DEEPCODE_WEB_LONG_THREAD=1 DEEPCODE_WEB_SHOTS=$(abspath $(SHOTS)) go test -count=1 -run '^TestBrowserWebClient$$' ./services/gateway
	@ls $(abspath $(SHOTS))

## install: deepcode into $(PREFIX)/bin, the services and deepcode-tui into
## $(PREFIX)/libexec/deepcode
install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/libexec/deepcode
	install -m 0755 $(BIN)/deepcode $(DESTDIR)$(PREFIX)/bin/deepcode
	for s in $(LIBEXEC); do install -m 0755 $(BIN)/$$s $(DESTDIR)$(PREFIX)/libexec/deepcode/$$s; done

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/deepcode
	rm -rf $(DESTDIR)$(PREFIX)/libexec/deepcode

## test: formatting, vet, staticcheck, and every test (unit and end-to-end) with
## the race detector. It first prepares what the test groups need
## (.ci/prepare-tests: the web client's npm packages, the pinned agent CLIs)
## and ends with the list of groups it had to skip, each with the command
## that enables it.
AGENT_BIN_DIR ?= $(or $(DEEPCODE_CI_NPM_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/deepcode-ci/npm)/node_modules/.bin
export DEEPCODE_TEST_AGENT_BIN_DIR ?= $(AGENT_BIN_DIR)
test: prepare fmt-check vet staticcheck unit
	@if [ -s .test-skipped ]; then echo "make test: passed; these groups were skipped:"; cat .test-skipped; else echo "make test: passed; nothing was skipped"; fi

prepare:
	@.ci/prepare-tests

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) tool staticcheck ./...

unit:
	$(GO) test -race -count=1 -timeout 25m ./...

## chaos: the chaos suite (shared/testkit/chaos): CHAOS_TRIALS trials (40) of
## every kind of fault (CHAOS_KINDS, default all) under a mixed workload,
## checking the invariants after each; its short form (5 trials) runs in `make
## test`. CHAOS_FLAGS adds go test flags (e.g. -race); DEEPCODE_CHAOS_SEED
## replays a run.
CHAOS_TRIALS ?= 40
CHAOS_KINDS  ?= all
CHAOS_FLAGS  ?=
chaos:
	DEEPCODE_CHAOS_TRIALS=$(CHAOS_TRIALS) DEEPCODE_CHAOS_KINDS=$(CHAOS_KINDS) \
	$(GO) test $(CHAOS_FLAGS) -count=1 -v -timeout 90m -run '^TestChaos$$' ./shared/testkit/chaos

## bench: the benchmarks, with the figures the issues ask for
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 -timeout 30m ./...

## fuzz: each fuzz target for a short while (FUZZTIME, default 15s)
FUZZTIME ?= 15s
# A run that ends only with the fuzzing coordinator's "context deadline
# exceeded" (its workers stalled at the deadline; no failing input was
# written) is run once more; a real failure fails at once.
fuzz_one = out=$$($(GO) test -run '^$$' -fuzz '^$(1)$$' -fuzztime $(FUZZTIME) $(2) 2>&1); rc=$$?; echo "$$out"; \
	if [ $$rc -ne 0 ] && echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
	echo "$(1): the fuzzing coordinator timed out with no failing input; running it once more"; \
	$(GO) test -run '^$$' -fuzz '^$(1)$$' -fuzztime $(FUZZTIME) $(2); else exit $$rc; fi
fuzz:
	@$(call fuzz_one,FuzzDecode,./shared/rpc)
	@$(call fuzz_one,FuzzExchangeBody,./services/gateway)
	@$(call fuzz_one,FuzzDecoder,./services/termhost)
	@$(call fuzz_one,FuzzOCSkip,./services/agentd/runtime/opencode)

## cross: the binaries for macOS and Windows must compile
cross:
	GOOS=darwin GOARCH=arm64 $(GO) build ./...
	GOOS=darwin GOARCH=amd64 $(GO) build ./...
	GOOS=windows GOARCH=amd64 $(GO) build ./...

## package: the .deb and .rpm into dist/ (nfpm, run with go run; see packaging/)
package:
	VERSION="$(VERSION)" GO="$(GO)" DIST=dist packaging/build.sh

clean:
	rm -rf $(BIN) dist
