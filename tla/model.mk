# Model checking of tla/*.tla through their Go transcriptions (pkg/model/...).
# Included by the top-level Makefile; defines `model`, `test-model`,
# `model-teeth` and `tlc`.
#
#   make model                 full tla/Lazaret.cfg and tla/PreparedLower.cfg fixtures:
#                              every invariant, every liveness property, state counts
#   make model MODEL_FLAGS='-max-states=5000000 -max-depth=40 -max-heap-mib=3072'
#                              bounded run (a bounded run is partial: liveness is skipped)
#   make test-model            vet + reduced configurations, mutation (teeth) tests,
#                              legal/illegal trace replay, trace vocabulary; then the
#                              full fixtures (each runs in seconds); hard bounds 3 minutes
#                              and 4 GiB

GO ?= go
MODEL_FLAGS ?=
MODEL_PKGS := ./pkg/model/lazaret ./pkg/model/preparedlower

.PHONY: model test-model

model:
	$(GO) test -count=1 -timeout 120m -run '^TestModel$$' -v $(MODEL_PKGS) -args -full $(MODEL_FLAGS)

# Hard bounds: 3 minutes wall clock and 4 GiB of address space for the whole
# recipe (vet, compile and tests); the checker's own heap bound is 3 GiB.
test-model:
	ulimit -v 4194304 && timeout 180 sh -c '\
	  $(GO) vet ./pkg/model/... && \
	  $(GO) test -count=1 -timeout 170s ./pkg/model/... && \
	  $(GO) test -count=1 -timeout 170s -run "^TestModel$$" $(MODEL_PKGS) -args -full -max-heap-mib=3072'

# Teeth: every property of tla/*.cfg replaced in turn by TRUE (in a private
# copy of the module) must make at least one model test fail. Slow (a build
# and the model package's tests per property); not part of test-model.
.PHONY: model-teeth
model-teeth:
	$(GO) run ./cmd/model-teeth

# TLC on tla/*.tla with tla/*.cfg, when a Java runtime and tla2tools.jar can
# be had (scripts/setup.sh tlc; TLA2TOOLS_JAR=/path/to/tla2tools.jar), and
# TLC's distinct-state counts compared with the Go checker's.
# TLC_MODE=safety checks the invariants only.
.PHONY: tlc
tlc:
	scripts/tlc.sh
