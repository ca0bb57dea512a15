# TimerKit: `make test` (lint, build, every test of every package, a bench smoke run, the no-dependency
# check, a backend outside the repository run through TimerKitConformance) and `make demo` (the
# backend comparison). Both do their own set-up on a fresh Debian/Ubuntu machine. Five packages
# live here: the library (.), TimerKitNIO (TimerKitNIO/, the backend on a SwiftNIO event loop),
# TimerKitObservability (its metrics and log adapters), the comparison tool (Bench/) and the
# microbenchmarks (Benchmarks/); each target below names the one it uses.

SWIFT       ?= swift
STRICT      := -Xswiftc -warnings-as-errors
BENCH_PKG   := --package-path Bench
NIO_PKG     := --package-path TimerKitNIO
OBS_PKG     := --package-path TimerKitObservability
BENCH        = Bench/.build/release/timerkit-bench
FORMATTED   := Sources Tests Bench/Sources Bench/Tests Benchmarks/Benchmarks Benchmarks/StatisticsCost Benchmarks/StoreProfile Package.swift Bench/Package.swift Benchmarks/Package.swift \
	TimerKitNIO/Package.swift TimerKitNIO/Sources TimerKitNIO/Tests \
	TimerKitObservability/Package.swift TimerKitObservability/Sources TimerKitObservability/Tests
DOCS_OUT    := .build/docs
MODULES     := TimerKit TimerKitEpoll TimerKitLibevent TimerKitURing TimerKitConformance

.PHONY: all setup build lint format test test-nio test-observability check-conformance docs-nio docs-observability tsan tsan-nio asan asan-nio bench-quick bench-check check-dependencies demo docs benchmarks clean

all: test

# libevent-dev is needed by the libevent backend, liburing-dev by the io_uring backend. Each is
# installed only when pkg-config does not find it.
setup:
	@if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists libevent || ! pkg-config --exists liburing; then \
		echo "setup: installing libevent-dev, liburing-dev and pkg-config"; \
		if [ "$$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; \
		else echo "setup: libevent-dev or liburing-dev is missing and this user cannot install it (run as root or install both)" >&2; exit 1; fi; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libevent-dev liburing-dev pkg-config >/dev/null; \
	fi
	@pkg-config --exists libevent || { echo "setup: libevent still not found by pkg-config" >&2; exit 1; }
	@pkg-config --exists liburing || { echo "setup: liburing still not found by pkg-config" >&2; exit 1; }

build: setup
	$(SWIFT) build $(STRICT)

lint:
	$(SWIFT) format lint --strict --recursive $(FORMATTED)

# Rewrites the code in the checked-in style (.swift-format); `make lint` checks it.
format:
	$(SWIFT) format format --in-place --recursive $(FORMATTED)

test: setup lint
	$(SWIFT) build --build-tests $(STRICT)
	$(SWIFT) test --skip-build
	$(MAKE) --no-print-directory test-nio
	$(MAKE) --no-print-directory test-observability
	$(MAKE) --no-print-directory bench-quick
	$(MAKE) --no-print-directory check-dependencies
	$(MAKE) --no-print-directory check-conformance

# TimerKitNIO's own tests, and every contract check (TimerKitConformance) on a SwiftNIO loop.
test-nio: setup
	$(SWIFT) build --build-tests $(STRICT) $(NIO_PKG)
	$(SWIFT) test --skip-build $(NIO_PKG)

# The swift-metrics and swift-log adapters, with those libraries' test handlers.
test-observability: setup
	$(SWIFT) build --build-tests $(STRICT) $(OBS_PKG)
	$(SWIFT) test --skip-build $(OBS_PKG)

# The bench's statistics tests, then a smoke run: every backend appears, the JSON is well formed.
bench-quick: setup
	$(SWIFT) build --build-tests $(STRICT) $(BENCH_PKG)
	$(SWIFT) test --skip-build $(BENCH_PKG)
	Bench/.build/debug/timerkit-bench --quick --json > Bench/.build/bench-quick.json
	python3 scripts/check-bench-json.py Bench/.build/bench-quick.json Bench/.build/debug/timerkit-bench

# A backend in a package outside the repository (the "Writing a backend" article's code) passes
# the contract through the TimerKitConformance product.
check-conformance: setup
	bash scripts/check-conformance-product.sh

# An app that depends on TimerKit resolves no other package.
check-dependencies: setup
	bash scripts/check-no-dependencies.sh

# The whole suite under ThreadSanitizer, then AddressSanitizer, each in its own build folder:
# the library's tests, then TimerKitNIO's (its own tests and the contract checks on NIO).
# Sanitized runs are several times slower, and every test starts at once: the watchdogs
# (30 s, for a hang) wait 4 times as long there, so a busy machine's queue is not taken for one.
# Under ThreadSanitizer the suite's blocking tests can hold both threads of the cooperative pool
# for a minute or more while async tests wait their turn (seen: a 97 s run, and watchdogs at
# 120 s in a fresh-clone CI run): its watchdogs wait 10 times as long, still minutes, not CI's cut-off.
TSAN_ENV := TSAN_OPTIONS=suppressions=$(CURDIR)/.ci/tsan.supp TIMERKIT_WATCHDOG_SCALE=10
ASAN_ENV := LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan.supp TIMERKIT_WATCHDOG_SCALE=4

tsan: setup
	$(TSAN_ENV) $(SWIFT) test --sanitize=thread --scratch-path .build-tsan
	$(MAKE) --no-print-directory tsan-nio

tsan-nio: setup
	$(TSAN_ENV) $(SWIFT) test --sanitize=thread $(NIO_PKG) --scratch-path TimerKitNIO/.build-tsan

asan: setup
	$(ASAN_ENV) $(SWIFT) test --sanitize=address --scratch-path .build-asan
	$(MAKE) --no-print-directory asan-nio

asan-nio: setup
	$(ASAN_ENV) $(SWIFT) test --sanitize=address $(NIO_PKG) --scratch-path TimerKitNIO/.build-asan

demo: setup
	$(SWIFT) build -c release $(STRICT) $(BENCH_PKG) --product timerkit-bench
	$(BENCH) --html timerkit-report.html
	@echo 'HTML report with charts: timerkit-report.html'

# `docc convert` of a catalog (1) for a module (2) whose symbol graphs are in
# .build-docs/graphs-MODULE: a static site in $(DOCS_OUT)/MODULE, warnings as errors.
docc_convert = docc convert $(1) --additional-symbol-graph-dir .build-docs/graphs-$(2) \
	--fallback-display-name $(2) --fallback-bundle-identifier org.timerkit.$(2) \
	--transform-for-static-hosting --hosting-base-path $(2) --warnings-as-errors --output-path $(DOCS_OUT)/$(2)

# DocC for each library module, with the toolchain's own docc: symbol graphs of the public
# API, then `docc convert` with warnings as errors. Writes a static site per module.
docs: setup
	@rm -rf $(DOCS_OUT) && mkdir -p $(DOCS_OUT) .build-docs/graphs
	$(SWIFT) build --scratch-path .build-docs -Xswiftc -emit-symbol-graph \
		-Xswiftc -emit-symbol-graph-dir -Xswiftc $(CURDIR)/.build-docs/graphs \
		-Xswiftc -symbol-graph-minimum-access-level -Xswiftc public
	@set -e; for module in $(MODULES); do \
		mkdir -p .build-docs/graphs-$$module && rm -f .build-docs/graphs-$$module/*; \
		cp .build-docs/graphs/$$module.symbols.json .build-docs/graphs-$$module/; \
		for extension in .build-docs/graphs/$$module@*.symbols.json; do \
			[ -e "$$extension" ] && cp "$$extension" .build-docs/graphs-$$module/; \
		done; \
		$(call docc_convert,Sources/$$module/$$module.docc,$$module); \
		echo "docs: $(DOCS_OUT)/$$module"; \
	done
	$(MAKE) --no-print-directory docs-nio
	$(MAKE) --no-print-directory docs-observability

# DocC of a module (1) that lives in a package of its own in the folder of the same name, the
# same way. The module is compiled again each time (touch): an up-to-date build emits no
# symbol graph.
define package_docs
	@rm -rf .build-docs/graphs-$(1)-all .build-docs/graphs-$(1) $(DOCS_OUT)/$(1)
	@mkdir -p .build-docs/graphs-$(1)-all .build-docs/graphs-$(1)
	@touch $(1)/Sources/$(1)/*.swift
	$(SWIFT) build --package-path $(1) --scratch-path .build-docs-$(1) --target $(1) -Xswiftc -emit-symbol-graph \
		-Xswiftc -emit-symbol-graph-dir -Xswiftc $(CURDIR)/.build-docs/graphs-$(1)-all \
		-Xswiftc -symbol-graph-minimum-access-level -Xswiftc public
	cp .build-docs/graphs-$(1)-all/$(1)*.symbols.json .build-docs/graphs-$(1)/
	$(call docc_convert,$(1)/Sources/$(1)/$(1).docc,$(1))
	@echo "docs: $(DOCS_OUT)/$(1)"
endef

docs-nio: setup
	$(call package_docs,TimerKitNIO)

docs-observability: setup
	$(call package_docs,TimerKitObservability)

# package-benchmark microbenchmarks with malloc counts (see Benchmarks/README.md).
benchmarks: setup
	cd Benchmarks && $(SWIFT) package --allow-writing-to-package-directory benchmark --target TimerKitBenchmarks

# The microbenchmarks against the limits that guard the fire path and the allocation counts
# (scripts/check-benchmarks.py): an allocation added per fire or per schedule fails CI.
bench-check: setup
	rm -rf Benchmarks/.build/p90
	cd Benchmarks && $(SWIFT) package --allow-writing-to-package-directory benchmark --target TimerKitBenchmarks \
		--format metricP90AbsoluteThresholds --path .build/p90 --no-progress
	cd Benchmarks && $(SWIFT) build -c release --product statistics-cost && \
		for run in 1 2 3; do "$$($(SWIFT) build -c release --show-bin-path)/statistics-cost" || exit 1; done > .build/p90/statistics-cost.jsonl
	python3 scripts/check-benchmarks.py Benchmarks/.build/p90

clean:
	rm -rf .build .build-tsan .build-asan .build-docs .build-docs-TimerKitNIO .build-docs-TimerKitObservability .build-app .build-conformance Bench/.build Benchmarks/.build \
		TimerKitNIO/.build TimerKitObservability/.build \
		TimerKitNIO/.build-tsan TimerKitNIO/.build-asan
