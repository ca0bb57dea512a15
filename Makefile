# TimerKit: `make test` (build + every test) and `make demo` (the backend comparison).
# Both do their own set-up on a fresh Debian/Ubuntu machine.

SWIFT       ?= swift
STRICT      := -Xswiftc -warnings-as-errors
BENCH        = .build/release/timerkit-bench

.PHONY: all setup build test tsan asan demo bench-quick clean

all: test

# libevent-dev is needed by the libevent backend. Installed only when missing.
setup:
	@if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists libevent; then \
		echo "setup: installing libevent-dev and pkg-config"; \
		if [ "$$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; \
		else echo "setup: libevent-dev is missing and this user cannot install it (run as root or install libevent-dev)" >&2; exit 1; fi; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libevent-dev pkg-config >/dev/null; \
	fi
	@pkg-config --exists libevent || { echo "setup: libevent still not found by pkg-config" >&2; exit 1; }

build: setup
	$(SWIFT) build $(STRICT)

test: setup
	$(SWIFT) build --build-tests $(STRICT)
	$(SWIFT) test --skip-build
	$(MAKE) --no-print-directory bench-quick

# A smoke run of the bench: every backend appears, the JSON is well formed.
bench-quick:
	$(SWIFT) build $(STRICT) --product timerkit-bench
	.build/debug/timerkit-bench --quick --json > .build/bench-quick.json
	python3 scripts/check-bench-json.py .build/bench-quick.json

# The whole suite under ThreadSanitizer, then AddressSanitizer, each in its own build folder.
tsan: setup
	$(SWIFT) test --sanitize=thread --scratch-path .build-tsan

asan: setup
	LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan.supp $(SWIFT) test --sanitize=address --scratch-path .build-asan

demo: setup
	$(SWIFT) build -c release $(STRICT) --product timerkit-bench
	$(BENCH) --html timerkit-report.html
	@echo 'HTML report with charts: timerkit-report.html'

clean:
	rm -rf .build .build-tsan .build-asan
