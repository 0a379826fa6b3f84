# Lazaret. The README's two set-up commands are `make run` and `make test`;
# both install what is missing first (scripts/setup.sh, idempotent).

GO ?= go
SHELL := /bin/bash
TAGS := containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/lazaret/lazaret/pkg/release.Version=$(VERSION)
GOBUILD := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'
# The lazaret front is built without urfave/cli's man page and Markdown
# renderer (that library's build tag urfave_cli_no_docs): the renderer's
# package initialisation (blackfriday compiling its regular expressions)
# cost every `lazaret run` about 2 ms before it did anything. `lazaret man`
# and the completions run in lazaret-cli, which keeps it.
FRONT_TAGS := urfave_cli_no_docs
# tags_for,BINARY: the build tags of one binary.
tags_for = $(TAGS)$(if $(filter lazaret,$(1)), $(FRONT_TAGS))
RUNSC_VERSION := v0.0.0-20260905035102-160fafc42237
DEPS_DIR ?= /var/cache/lazaret
# scripts/setup.sh builds it (RUNSC_RECIPE there names the build recipe).
RUNSC := $(DEPS_DIR)/runsc/$(RUNSC_VERSION)-precompiled/runsc
# make run: the workspace (default: where make was invoked from) and command.
DIR ?= $(PWD)
CMD ?=
DEMO_USER ?= lazaret-demo
TEST_USER ?= lazaret-test
BINS := lazaret lazaret-cli lazaret-hc lazaret-rs lazaret-gitroute lazaret-escalate lazaret-init

# make install: lazaret in $(PREFIX)/bin; lazaret-cli (the full CLI the
# lazaret front execs for every verb but run), lazaret-hc, lazaret-rs,
# lazaret-gitroute, lazaret-escalate, lazaret-init (and the pinned runsc,
# when built) in
# $(PREFIX)/libexec/lazaret, where lazaret finds them (README, "Install";
# pkg/locate); the man page and bash/zsh/fish completions.
PREFIX ?= /usr/local
DESTDIR ?=
INSTALL_RUNSC ?= 1
BINDIR = $(PREFIX)/bin
LIBEXECDIR = $(PREFIX)/libexec/lazaret
DATADIR = $(PREFIX)/share
DIST_DIR ?= dist
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: all build build-failpoints install install-files uninstall dist dist-files test-debian setup run test unit check integration bench proto proto-check vet clean qualify-kernel kernel-qualified

all: build

build:
	@mkdir -p bin
	@$(foreach b,$(BINS),$(GOBUILD) -tags '$(call tags_for,$(b))' -o bin/$(b) ./cmd/$(b) && ) true
	@if [ -x $(RUNSC) ]; then ln -sfn $(RUNSC) bin/runsc; fi

install: build
	@$(MAKE) --no-print-directory install-files

# install-files installs binaries already built in $(BIN) (packagers, tests).
BIN ?= bin
install-files:
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(DATADIR)/man/man1 \
		$(DESTDIR)$(DATADIR)/bash-completion/completions $(DESTDIR)$(DATADIR)/zsh/site-functions $(DESTDIR)$(DATADIR)/fish/vendor_completions.d
	install -m 0755 $(BIN)/lazaret $(DESTDIR)$(BINDIR)/lazaret
	for b in lazaret-cli lazaret-hc lazaret-rs lazaret-gitroute lazaret-escalate lazaret-init; do install -m 0755 $(BIN)/$$b $(DESTDIR)$(LIBEXECDIR)/$$b || exit 1; done
	if [ "$(INSTALL_RUNSC)" = 1 ] && [ -x $(RUNSC) ]; then install -m 0755 $(RUNSC) $(DESTDIR)$(LIBEXECDIR)/runsc; fi
	$(BIN)/lazaret man > $(DESTDIR)$(DATADIR)/man/man1/lazaret.1
	$(BIN)/lazaret completion bash > $(DESTDIR)$(DATADIR)/bash-completion/completions/lazaret
	$(BIN)/lazaret completion zsh > $(DESTDIR)$(DATADIR)/zsh/site-functions/_lazaret
	$(BIN)/lazaret completion fish > $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/lazaret.fish
	chmod 0644 $(DESTDIR)$(DATADIR)/man/man1/lazaret.1 $(DESTDIR)$(DATADIR)/bash-completion/completions/lazaret \
		$(DESTDIR)$(DATADIR)/zsh/site-functions/_lazaret $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/lazaret.fish

# make uninstall (same PREFIX and DESTDIR as make install) removes exactly
# what install-files put in place, and libexec/lazaret when it is empty; it
# leaves the directories shared with other software. Each user's Lazaret
# data goes first, as that user: lazaret rm --all --images --yes (README,
# "Uninstalling").
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/lazaret
	for b in lazaret-cli lazaret-hc lazaret-rs lazaret-gitroute lazaret-escalate lazaret-init runsc; do rm -f $(DESTDIR)$(LIBEXECDIR)/$$b || exit 1; done
	if [ -d $(DESTDIR)$(LIBEXECDIR) ]; then rmdir --ignore-fail-on-non-empty $(DESTDIR)$(LIBEXECDIR); fi
	rm -f $(DESTDIR)$(DATADIR)/man/man1/lazaret.1 $(DESTDIR)$(DATADIR)/bash-completion/completions/lazaret \
		$(DESTDIR)$(DATADIR)/zsh/site-functions/_lazaret $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/lazaret.fish

# make dist: one reproducible tarball per binary (paths relative to PREFIX,
# so `tar -C /usr/local -xzf` installs it; lazaret's carries the man page and
# completions) and SHA256SUMS. runsc is not bundled: it is gVisor's.
dist: build
	@$(MAKE) --no-print-directory dist-files

# dist-files makes the tarballs of binaries already built in $(BIN).
dist-files:
	rm -rf $(DIST_DIR) && mkdir -p $(DIST_DIR)
	$(MAKE) --no-print-directory install-files DESTDIR=$(abspath $(DIST_DIR))/stage PREFIX= INSTALL_RUNSC=0
	@set -e; tarit() { name=$$1; shift; tar --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner \
		-C $(DIST_DIR)/stage -cf - "$$@" | gzip -n -9 > $(DIST_DIR)/$$name-$(VERSION)-linux-amd64.tar.gz; }; \
	tarit lazaret bin/lazaret share; \
	for b in lazaret-cli lazaret-hc lazaret-rs lazaret-gitroute lazaret-escalate lazaret-init; do tarit $$b libexec/lazaret/$$b; done
	rm -rf $(DIST_DIR)/stage
	cd $(DIST_DIR) && sha256sum *.tar.gz > SHA256SUMS && cat SHA256SUMS

# The same binaries with fault injection compiled in (integration tests only).
build-failpoints:
	@mkdir -p bin-fp
	@$(foreach b,$(BINS),$(GOBUILD) -tags '$(call tags_for,$(b)) lazaret_failpoints' -o bin-fp/$(b) ./cmd/$(b) && ) true

setup:
	scripts/setup.sh deps

DEMO_CMD := bash -c 'echo "Lazaret sandbox $$(hostname): $$(uname -sr) in $$PWD"; git status --short --branch 2>/dev/null | head -5; echo "(on a terminal, make run opens an interactive shell; make run CMD=... runs a command)"'
# On a terminal with no CMD, make run opens an interactive shell in the sandbox.
run: setup build kernel-qualified
	@interactive=; if [ -z "$(CMD)" ] && [ -t 0 ] && [ -t 1 ]; then interactive=1; fi; \
	if [ "$$(id -u)" = 0 ]; then \
		echo "make run: lazaret refuses to run as root; using the demo user $(DEMO_USER) and its demo Git workspace" >&2; \
		scripts/setup.sh user $(DEMO_USER); \
		scripts/setup.sh images $(DEMO_USER) debian; \
		ws=$$(scripts/setup.sh demo-workspace $(DEMO_USER)); \
		tools=$$(mktemp -d /tmp/lazaret-run.XXXXXX); chmod 755 $$tools; cp bin/lazaret bin/lazaret-cli bin/lazaret-hc bin/lazaret-rs bin/lazaret-gitroute bin/lazaret-escalate bin/lazaret-init $$tools/; \
		home=$$(getent passwd $(DEMO_USER) | cut -d: -f6); \
		as_demo="runuser -u $(DEMO_USER) -- env -i HOME=$$home USER=$(DEMO_USER) TERM=$${TERM:-xterm} LANG=$${LANG:-C.UTF-8} PATH=/usr/local/bin:/usr/bin:/bin LAZARET_RUNSC=$(RUNSC) $$tools/lazaret run -C $$ws"; \
		if [ -n "$$interactive" ]; then $$as_demo; else $$as_demo -- $(if $(CMD),$(CMD),$(DEMO_CMD)); fi; rc=$$?; rm -rf $$tools; exit $$rc; \
	else \
		scripts/setup.sh images $$(id -un) debian; \
		if [ -n "$$interactive" ]; then LAZARET_RUNSC=$(RUNSC) bin/lazaret run -C "$(DIR)"; \
		else LAZARET_RUNSC=$(RUNSC) bin/lazaret run -C "$(DIR)" -- $(if $(CMD),$(CMD),$(DEMO_CMD)); fi; \
	fi

# vet also fails on Go files gofmt would lay out differently.
vet:
	$(GO) vet -tags '$(TAGS)' ./...
	@unformatted=$$(gofmt -l api cmd pkg integration scripts); if [ -n "$$unformatted" ]; then echo "gofmt -w these files: $$unformatted" >&2; exit 1; fi

# Every test tier: unit tests, the bounded model check, and the integration
# tests that run the product as the non-root $(TEST_USER) against real runsc.
test: setup build kernel-qualified proto-check vet unit test-model integration

# Unit tests; the model packages run in test-model (its bounds apply).
UNIT_PKGS = ./api/... ./cmd/... $(shell $(GO) list -tags '$(TAGS)' ./pkg/... | grep -v '/pkg/model')

unit:
	$(GO) test -tags '$(TAGS)' -count=1 $(UNIT_PKGS) ./scripts/...
	$(GO) test -tags '$(TAGS) lazaret_failpoints' -count=1 ./pkg/failpoint

# The fast inner loop: vet and every unit test in -short mode (the long
# crash matrices, property runs and kernel suites are skipped; make unit
# and make test run them). No setup, no root-only integration tier.
check: vet
	$(GO) test -tags '$(TAGS)' -short -count=1 ./api/... ./pkg/... ./cmd/...

# The Debian image build and preparation as unit tests (network, minutes).
test-debian:
	LAZARET_TEST_DEBIAN_IMAGE=$(DEBIAN_IMAGE) $(GO) test -tags '$(TAGS) lazaret_debian' -count=1 -v -run 'Debian' ./pkg/imagebuild ./pkg/prepare

# Scenarios marked parallel (integration/scope_test.go) run this many at a
# time; the rest one by one.
IT_PARALLEL ?= 3
integration: build-failpoints
	scripts/setup.sh user $(TEST_USER)
	scripts/setup.sh images $(TEST_USER) busybox debian node claude codex
	scripts/setup.sh test-debs
	$(GO) test -tags '$(TAGS)' -count=1 -timeout 30m -parallel $(IT_PARALLEL) ./integration/ -args -user=$(TEST_USER) -runsc=$(RUNSC) -bin=$(CURDIR)/bin -bin-fp=$(CURDIR)/bin-fp

# make bench records each benchmark's report in
# bench/results/<date>-<commit>.json (pkg/benchresult; commit it) and renders
# docs/BENCHMARKS.md from the newest such file; figures are never written
# into prose.
bench: setup build
	scripts/setup.sh user $(TEST_USER)
	scripts/setup.sh images $(TEST_USER) busybox debian node claude
	@mkdir -p bench/results
	LAZARET_COMMIT=$(VERSION) $(GO) test -tags '$(TAGS) lazaret_bench' -count=1 -v -timeout 40m -run '^TestBench(Network|Egress|StateAnchors|GitRouting|NpmInstall|Escalation|Recipe|Scale|IgnoredBindWalk)?$$' ./integration/ -args -user=$(TEST_USER) -runsc=$(RUNSC) -bin=$(CURDIR)/bin -bench-out=$(CURDIR)/bench/results -srt=$$(scripts/setup.sh bench-deps) -npm-cache=$$(scripts/setup.sh bench-npm)
	$(GO) run ./scripts/benchtable

PROTOC_GEN_GO := $(DEPS_DIR)/bin/protoc-gen-go
$(PROTOC_GEN_GO):
	GOBIN=$(DEPS_DIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12

proto: $(PROTOC_GEN_GO)
	@command -v protoc >/dev/null || scripts/setup.sh protoc
	PATH=$(DEPS_DIR)/bin:$$PATH protoc --go_out=. --go_opt=module=github.com/lazaret/lazaret -I api api/lazaret/v1/*.proto

# Fails when the committed generated code is stale.
proto-check: $(PROTOC_GEN_GO)
	@command -v protoc >/dev/null || scripts/setup.sh protoc
	@tmp=$$(mktemp -d); PATH=$(DEPS_DIR)/bin:$$PATH protoc --go_out=$$tmp --go_opt=module=github.com/lazaret/lazaret -I api api/lazaret/v1/*.proto && \
	for f in $$tmp/api/lazaret/v1/*.pb.go; do cmp -s $$f api/lazaret/v1/$$(basename $$f) || { echo "api/lazaret/v1/$$(basename $$f) is stale: run make proto" >&2; rm -rf $$tmp; exit 1; }; done; rm -rf $$tmp

clean:
	rm -rf bin bin-fp $(DIST_DIR)

-include tla/model.mk

# Kernel qualification (spec §3.2). The product command runs the suite and,
# as root, writes the system-wide host qualification record
# (/etc/lazaret/kernels.d); `make run` and `make test` qualify only when the
# running build has no record yet, and stop with the suite's output if it
# fails.
qualify-kernel: build
	scripts/setup.sh kernel --force

kernel-qualified: build
	scripts/setup.sh kernel
