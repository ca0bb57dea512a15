# TimerKit: `make test` (lint, build, every test, a bench smoke run, the repository used by URL as
# an app would (with no trait, and with each trait), the README's tour built and run as such an
# app, the examples built and run, a backend outside the repository run through
# TimerKitConformance, and the public API against its baseline) and
# `make demo` (the backend comparison, written to BENCHMARKS.md). Both do their own set-up on a
# fresh Debian/Ubuntu machine. The packages here: the library (.), whose TimerKitNIO and
# TimerKitObservability products are behind the package traits NIO and Observability, the
# comparison tool (Bench/), the microbenchmarks (Benchmarks/) and the examples (Examples/*);
# each target below names the one it uses.

SWIFT       ?= swift
STRICT      := -Xswiftc -warnings-as-errors
# Every trait on: TimerKitNIO and TimerKitObservability build and test with the rest.
TRAITS      := --traits NIO,Observability
BENCH_PKG   := --package-path Bench
# The bench's smoke run builds in the folder IdleTimeoutServer and the NIO consumer check build in,
# so SwiftNIO and TimerKit with the trait NIO are built once for all three (scripts/consumer-common.sh).
OUTSIDE     := --scratch-path .build-nio
BENCH        = Bench/.build/release/timerkit-bench
EXAMPLES    := IdleTimeoutServer Debounce FrameLoop TestingWithVirtualTime
FORMATTED   := Sources Tests Bench/Sources Bench/Tests Benchmarks/Benchmarks Benchmarks/StatisticsCost Benchmarks/StoreProfile Benchmarks/StoreFigures Package.swift Bench/Package.swift Benchmarks/Package.swift \
	$(foreach example,$(EXAMPLES),Examples/$(example)/Package.swift Examples/$(example)/Sources $(wildcard Examples/$(example)/Tests))
DOCS_OUT    := .build/docs
MODULES     := TimerKit TimerKitEpoll TimerKitLibevent TimerKitURing TimerKitConformance TimerKitNIO TimerKitObservability

.PHONY: all setup setup-valgrind build lint format test check-conformance check-consumers check-readme-tour examples api-check tsan asan bench-quick bench-check check-dependencies demo docs benchmarks clean

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

# valgrind counts instructions per store operation for bench-check. Installed only when missing.
setup-valgrind:
	@if ! command -v valgrind >/dev/null 2>&1; then \
		echo "setup: installing valgrind"; \
		if [ "$$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; \
		else echo "setup: valgrind is missing and this user cannot install it (run as root or install valgrind)" >&2; exit 1; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq valgrind >/dev/null; \
	fi
	@command -v valgrind >/dev/null || { echo "setup: valgrind still not found" >&2; exit 1; }

build: setup
	$(SWIFT) build $(STRICT) $(TRAITS)

lint:
	$(SWIFT) format lint --strict --recursive $(FORMATTED)

# Rewrites the code in the checked-in style (.swift-format); `make lint` checks it.
format:
	$(SWIFT) format format --in-place --recursive $(FORMATTED)

# The test targets of the two traits' products run in a process of their own, as they did when
# those products were packages of their own: beside the library's suite, whose blocking tests can
# hold both threads of the cooperative pool, an async NIO test waited out its 20 s watchdog.
TRAIT_TESTS := 'TimerKitNIOTests|TimerKitNIOConformanceTests|TimerKitObservabilityTests'

# Every test of the library with both traits on (TimerKitNIO's own tests and every contract check
# on a SwiftNIO loop; the swift-metrics and swift-log adapters with those libraries' test
# handlers), then the checks from outside.
test: setup lint
	python3 scripts/check-spi-manifest.py
	$(SWIFT) build --build-tests $(STRICT) $(TRAITS)
	$(SWIFT) test --skip-build $(TRAITS) --skip $(TRAIT_TESTS)
	$(SWIFT) test --skip-build $(TRAITS) --filter $(TRAIT_TESTS)
	$(MAKE) --no-print-directory bench-quick
	$(MAKE) --no-print-directory examples
	$(MAKE) --no-print-directory check-dependencies
	$(MAKE) --no-print-directory check-consumers
	$(MAKE) --no-print-directory check-readme-tour
	$(MAKE) --no-print-directory check-conformance
	$(MAKE) --no-print-directory api-check

# The bench's statistics tests, then a smoke run: every backend appears, the JSON is well formed;
# and BENCHMARKS.md and the README's summary are what the saved run (BENCHMARKS.json) renders.
bench-quick: setup
	$(SWIFT) build --build-tests $(STRICT) $(BENCH_PKG) $(OUTSIDE)
	$(SWIFT) test --skip-build $(BENCH_PKG) $(OUTSIDE)
	.build-nio/debug/timerkit-bench --quick --json > .build-nio/bench-quick.json
	python3 scripts/check-bench-json.py .build-nio/bench-quick.json .build-nio/debug/timerkit-bench
	.build-nio/debug/timerkit-bench markdown BENCHMARKS.json --output BENCHMARKS.md --readme README.md --check

# A backend in a package outside the repository (the "Writing a backend" article's code) passes
# the contract through the TimerKitConformance product.
check-conformance: setup
	bash scripts/check-conformance-product.sh

# An app that depends on the repository by URL, with no trait, resolves TimerKit and nothing else.
check-dependencies: setup
	bash scripts/check-no-dependencies.sh

# The README's tour, verbatim, as the main.swift of an app that depends on the repository by URL:
# built with warnings as errors, and run to its end.
check-readme-tour: setup
	bash scripts/check-readme-tour.sh

# Apps that depend on the repository by URL with the trait NIO (a NIOBackend timer runs on an
# event loop) and with the trait Observability (a backend's figures reach swift-metrics).
check-consumers: setup
	bash scripts/check-trait-consumers.sh

# Each example built (warnings as errors) and run, with a check of what it prints.
examples: setup
	bash scripts/check-examples.sh $(EXAMPLES)

# The public API of the library products against the baseline .api-baseline names.
api-check: setup
	bash scripts/check-api.sh

# The whole suite, both traits on, under ThreadSanitizer, then AddressSanitizer, each in its own
# build folder (the traits' test targets in a process of their own, as in `make test`). Sanitized
# runs are several times slower: the watchdogs (30 s, for a hang) wait 4 times as long there, so a
# busy machine's queue is not taken for one. Under ThreadSanitizer the suite's blocking tests can
# hold both threads of the cooperative pool for a minute or more while async tests wait their
# turn (seen: a 97 s run, and watchdogs at 120 s in a fresh-clone CI run): its watchdogs wait 10
# times as long, still minutes, not CI's cut-off.
# The library's contract run through keys goes in a process of its own under the sanitizers: one
# process running both ways created about 20,000 threads (a thread per check and per harness loop)
# and ThreadSanitizer's runtime crashed in its own tracing at thread 19,964 in a CI run.
KEYED_CONTRACT := 'ConformanceTests/contractThroughKeys'
# Swift Testing starts every test case at once unless told a width: under ThreadSanitizer on two
# busy cores, some 730 cases in flight (a thread each, and their backends' loop threads) starved
# the epoll, epoll_pwait2 and io_uring wake-up tests' loops (0 wake-ups in 100 s) and stalled the
# task-timer checks for their 900 s watchdogs, in a CI run and beside CPU-spinning processes here.
# The sanitized runs take SANITIZER_WIDTH cases at a time.
SANITIZER_WIDTH ?= 8
TSAN_ENV := TSAN_OPTIONS=suppressions=$(CURDIR)/.ci/tsan.supp TIMERKIT_WATCHDOG_SCALE=10 SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$(SANITIZER_WIDTH)
ASAN_ENV := LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan.supp TIMERKIT_WATCHDOG_SCALE=4 SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$(SANITIZER_WIDTH)

tsan: setup
	$(TSAN_ENV) $(SWIFT) test --sanitize=thread $(TRAITS) --scratch-path .build-tsan --skip $(TRAIT_TESTS) --skip $(KEYED_CONTRACT)
	$(TSAN_ENV) $(SWIFT) test --sanitize=thread $(TRAITS) --scratch-path .build-tsan --filter $(KEYED_CONTRACT)
	$(TSAN_ENV) $(SWIFT) test --sanitize=thread $(TRAITS) --scratch-path .build-tsan --filter $(TRAIT_TESTS)

asan: setup
	$(ASAN_ENV) $(SWIFT) test --sanitize=address $(TRAITS) --scratch-path .build-asan --skip $(TRAIT_TESTS) --skip $(KEYED_CONTRACT)
	$(ASAN_ENV) $(SWIFT) test --sanitize=address $(TRAITS) --scratch-path .build-asan --filter $(KEYED_CONTRACT)
	$(ASAN_ENV) $(SWIFT) test --sanitize=address $(TRAITS) --scratch-path .build-asan --filter $(TRAIT_TESTS)

# The backend comparison with defaults: the tables on the terminal, charts in timerkit-report.html,
# and the run saved in BENCHMARKS.json, from which BENCHMARKS.md and the README's summary are
# rendered (`make test` checks that they are what it renders: no figure is copied by hand).
demo: setup
	$(SWIFT) build -c release $(STRICT) $(BENCH_PKG) --product timerkit-bench
	$(BENCH) --html timerkit-report.html --json > BENCHMARKS.json.new
	mv BENCHMARKS.json.new BENCHMARKS.json
	$(BENCH) markdown BENCHMARKS.json --output BENCHMARKS.md --readme README.md
	@sed -n '/^```text$$/,/^```$$/p' BENCHMARKS.md | sed '1d;$$d'
	@echo 'HTML report with charts: timerkit-report.html; findings and tables: BENCHMARKS.md (and the README'"'"'s summary)'

# `docc convert` of a catalog (1) for a module (2) whose symbol graphs are in
# .build-docs/graphs-MODULE: a static site in $(DOCS_OUT)/MODULE, warnings as errors.
docc_convert = docc convert $(1) --additional-symbol-graph-dir .build-docs/graphs-$(2) \
	--fallback-display-name $(2) --fallback-bundle-identifier org.timerkit.$(2) \
	--transform-for-static-hosting --hosting-base-path $(2) --warnings-as-errors --output-path $(DOCS_OUT)/$(2)

# DocC for each library module, both traits on, with the toolchain's own docc: symbol graphs of
# the public API, then `docc convert` with warnings as errors. Writes a static site per module.
docs: setup
	@rm -rf $(DOCS_OUT) && mkdir -p $(DOCS_OUT) .build-docs/graphs
	$(SWIFT) build --scratch-path .build-docs $(TRAITS) -Xswiftc -emit-symbol-graph \
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

# package-benchmark microbenchmarks with malloc counts (see Benchmarks/README.md).
benchmarks: setup
	cd Benchmarks && $(SWIFT) package --allow-writing-to-package-directory benchmark --target TimerKitBenchmarks

# The microbenchmarks against the limits that guard the fire path and the allocation counts
# (scripts/check-benchmarks.py): an allocation added per fire or per schedule fails CI.
bench-check: setup setup-valgrind
	rm -rf Benchmarks/.build/p90
	cd Benchmarks && $(SWIFT) package --allow-writing-to-package-directory benchmark --target TimerKitBenchmarks \
		--format metricP90AbsoluteThresholds --path .build/p90 --no-progress
	cd Benchmarks && $(SWIFT) build -c release --product statistics-cost && \
		for run in 1 2 3; do "$$($(SWIFT) build -c release --show-bin-path)/statistics-cost" || exit 1; done > .build/p90/statistics-cost.jsonl
	python3 scripts/check-benchmarks.py Benchmarks/.build/p90
	cd Benchmarks && $(SWIFT) build -c release --product store-profile
	python3 scripts/instruction-budget.py "$$(cd Benchmarks && $(SWIFT) build -c release --show-bin-path)/store-profile" \
		Benchmarks/instruction-budgets.json

clean:
	rm -rf .build .build-tsan .build-asan .build-docs .build-nio .build-plain .build-conformance \
		Bench/.build Benchmarks/.build $(foreach example,$(EXAMPLES),Examples/$(example)/.build)
